"""DCGM's exporter on the simulated host (dcgm-glm53, :9400/metrics; issue 23's device-memory gate).

Per GPU, `DCGM_FI_DEV_FB_FREE` and `DCGM_FI_DEV_FB_USED` (MiB, DCGM's unit) and
`DCGM_FI_DEV_XID_ERRORS` (the last XID code, always 0 here) with DCGM's labels
(`gpu`, `UUID`, `device`, `modelName`, `Hostname`). The values follow the engine that reserves the
GPU (its compose `device_ids`) and its configuration, as the lab measured them on H200s:

- no engine running on the GPU: the whole framebuffer free but the driver's reservation;
- an engine at 8192-token prefill chunks (the #294 configuration): 3.7 GB free on its tightest rank;
- `--chunked-prefill-size 16384` with `SGLANG_DSA_INDEXER_QSPLIT=1` (#302): 9.3 GB;
- 16384-token chunks without the split: 0.4 GB (what OOMed on 2026-09-25);
- the `memory-squeeze` fault on the new engine: 1.5 GB.

Each further rank of an engine has a little more free (0.2 GB per rank), so the replica's minimum
is its first rank's. Deterministic, no clock: an engine's memory is taken once it runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from orchestrator_sim.host.containers import Container

DCGM_SERVICE = "dcgm-glm53"
TOTAL_MIB = 143771  # an H200's framebuffer as DCGM reports it
DRIVER_MIB = 530  # what the driver keeps on an idle GPU
GB = 1024.0  # MiB per GB as DCGM's consumers (and nvidia-smi) print them
FREE_GB = {"c8192": 3.7, "c16384-qsplit": 9.3, "c16384": 0.4, "squeeze": 1.5}
PER_RANK_GB = 0.2


def _flag(command: str, name: str) -> str | None:
    m = re.search(rf"--{name}[ =](\S+)", command)
    return m.group(1) if m else None


def engine_free_gb(c: Container, *, squeezed: bool) -> float:
    """The engine's tightest rank's free device memory (GB)."""
    if squeezed:
        return FREE_GB["squeeze"]
    if _flag(c.command, "chunked-prefill-size") == "16384":
        return FREE_GB["c16384-qsplit" if c.env.get("SGLANG_DSA_INDEXER_QSPLIT") == "1" else "c16384"]
    return FREE_GB["c8192"]


def free_mib(containers: Iterable[Container], gpus: int = 8) -> dict[int, int]:
    """GPU index -> free MiB, from the engines running now."""
    out = {i: TOTAL_MIB - DRIVER_MIB for i in range(gpus)}
    for c in containers:
        if c.engine is None or c.state != "running" or not c.gpus:
            continue
        base = engine_free_gb(c, squeezed=c.engine.fault == "memory-squeeze")
        for rank, g in enumerate(sorted(c.gpus, key=int)):
            if g.isdigit() and int(g) in out:
                out[int(g)] = int(round((base + PER_RANK_GB * rank) * GB))
    return out


def dcgm_text(containers: Iterable[Container], hostname: str, gpus: int = 8) -> str:
    """The exporter's /metrics text (the two framebuffer fields of the H200 collector's CSV)."""
    free = free_mib(containers, gpus)
    out: list[str] = []
    for field, help_text in (("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
                             ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).")):
        out += [f"# HELP {field} {help_text}", f"# TYPE {field} gauge"]
        for i in range(gpus):
            v = free[i] if field.endswith("FREE") else TOTAL_MIB - free[i]
            out.append(f'{field}{{gpu="{i}",UUID="GPU-sim-{hostname}-{i}",device="nvidia{i}",'
                       f'modelName="NVIDIA H200",Hostname="{hostname}"}} {v}')
    # dcgm-exporter's default counters carry the last XID error code per GPU (0: none since the
    # driver loaded); the simulated GPUs never raise one
    out += ["# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.", "# TYPE DCGM_FI_DEV_XID_ERRORS gauge"]
    out += [f'DCGM_FI_DEV_XID_ERRORS{{gpu="{i}",UUID="GPU-sim-{hostname}-{i}",device="nvidia{i}",'
            f'modelName="NVIDIA H200",Hostname="{hostname}"}} 0' for i in range(gpus)]
    return "\n".join(out) + "\n"
