"""Text of the simulated SGLang engine log, in the format of samples/sglang-startup.log: rank lines
`[YYYY-MM-DD HH:MM:SS TP<n>] ...`, unprefixed-rank lines `[YYYY-MM-DD HH:MM:SS] ...`, and a few
raw lines (progress bars with carriage returns, traceback bodies).

The simulator's engine goes through these milestones, at these fractions of its cold start.
"""

from __future__ import annotations

import random
import re
from datetime import datetime

RANKS = (0, 1, 2, 3)  # a TP4 engine's; a TP2 engine (`--tp-size 2`) logs TP0 and TP1 only


def ranks_of(command: str) -> tuple[int, ...]:
    """The engine's TP ranks, from its `--tp-size` (4 when the flag is absent)."""
    m = re.search(r"--tp-size[ =](\d+)", command)
    return tuple(range(int(m.group(1)))) if m else RANKS

# (step, fraction of the cold start at which its lines are printed)
MILESTONES: tuple[tuple[str, float], ...] = (
    ("args", 0.0),
    ("dist", 0.02),
    ("load_begin", 0.04),
    ("load_end", 0.55),
    ("kv", 0.58),
    ("hicache", 0.60),
    ("graph_begin", 0.65),
    ("graph_end", 0.96),
    ("uvicorn", 0.98),
    ("ready", 1.0),
)


def stamp(ts: datetime, rank: int | None = None) -> str:
    base = ts.strftime("%Y-%m-%d %H:%M:%S")
    return f"[{base} TP{rank}]" if rank is not None else f"[{base}]"


def ranked(ts: datetime, text: str, ranks: tuple[int, ...] = RANKS) -> list[str]:
    return [f"{stamp(ts, r)} {text}" for r in ranks]


def args_lines(ts: datetime, served_model: str, model_path: str, dist_addr: str,
               chunked_prefill_size: str | None = None, ranks: tuple[int, ...] = RANKS) -> list[str]:
    """SGLang's `server_args=ServerArgs(...)` line (trimmed to the fields the simulator models);
    `chunked_prefill_size` is the command's `--chunked-prefill-size` (None when it has none)."""
    return [
        f"{stamp(ts)} server_args=ServerArgs(model_path='{model_path}', tokenizer_mode='auto', "
        f"served_model_name='{served_model}', host='0.0.0.0', port=8000, tp_size={len(ranks)}, ep_size={len(ranks)}, "
        f"chunked_prefill_size={chunked_prefill_size or 'None'}, "
        f"dist_init_addr='{dist_addr}', enable_metrics=True, enable_cache_report=True)",
    ]


def dist_lines(ts: datetime, rng: random.Random, ranks: tuple[int, ...] = RANKS) -> list[str]:
    out = ranked(ts, "Init torch distributed begin.", ranks)
    for r in ranks:
        out.append(
            f"{stamp(ts, r)} Init torch distributed ends. mem usage={1.70 + 0.02 * r + rng.random() * 0.05:.2f} GB"
        )
    out.append(f"{stamp(ts, 0)} MOE_RUNNER_BACKEND is not initialized, the backend will be automatically selected")
    return out


def load_begin_lines(ts: datetime, rng: random.Random, ranks: tuple[int, ...] = RANKS) -> list[str]:
    out = [f"{stamp(ts, r)} Load weight begin. avail mem={137.25 + rng.random() * 0.1:.2f} GB" for r in ranks]
    out.append(f"{stamp(ts, 0)} Using model weights format ['*.safetensors']")
    bar = "\r".join(
        f"Loading safetensors checkpoint shards: {p:>3}% Completed | {n}/30 [{m:02d}:{s:02d}<{'?' if n == 0 else '00:00'}, "
        f"{'?' if n == 0 else f'{0.9 + rng.random() * 0.2:.2f}'}it/s]"
        for p, n, m, s in ((0, 0, 0, 0), (50, 15, 7, 41), (100, 30, 15, 12))
    )
    out.append(bar)
    return out


def load_end_lines(ts: datetime, rng: random.Random, ranks: tuple[int, ...] = RANKS) -> list[str]:
    return [
        f"{stamp(ts, r)} Load weight end. type=GlmMoeDsaForCausalLM, dtype=torch.bfloat16, "
        f"avail mem={61.05 + rng.random() * 0.1:.2f} GB, mem usage={76.20 + rng.random() * 0.05:.2f} GB."
        for r in ranks
    ]


def kv_lines(ts: datetime, ranks: tuple[int, ...] = RANKS) -> list[str]:
    out = ranked(
        ts, "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1106304, K size: 25.32 GB, V size: 25.32 GB", ranks
    )
    out += ranked(ts, "Memory pool end. avail mem=8.71 GB", ranks)
    return out


def hicache_budget_lines(ts: datetime, budget_text: str, rank_bytes: int, ranks: tuple[int, ...] = RANKS) -> list[str]:
    return ranked(ts, f"HiCache startup RAM: budget={budget_text} ranks={len(ranks)} rank_budget_bytes={rank_bytes}", ranks)


def hicache_allocated_lines(ts: datetime, ranks: tuple[int, ...] = RANKS) -> list[str]:
    return ranked(ts, "HiCache startup RAM allocated", ranks)


def graph_begin_lines(ts: datetime, ranks: tuple[int, ...] = RANKS) -> list[str]:
    out = ranked(ts, "Capture cuda graph begin. This can take up to several minutes. avail mem=8.69 GB", ranks)
    out.append(
        "Capturing batches (bs=32 avail_mem=8.12 GB): 100%|██████████████████████████████| 36/36 [01:12<00:00,  2.01s/it]"
    )
    return out


def graph_end_lines(ts: datetime, rng: random.Random, ranks: tuple[int, ...] = RANKS) -> list[str]:
    return [
        f"{stamp(ts, r)} Capture cuda graph end. Time elapsed: {74 + rng.random() * 8:.2f} s. "
        f"mem usage=1.04 GB. avail mem=7.65 GB."
        for r in ranks
    ]


def uvicorn_lines(ts: datetime) -> list[str]:
    return [
        f"{stamp(ts)} INFO:     Started server process [1]",
        f"{stamp(ts)} INFO:     Waiting for application startup.",
        f"{stamp(ts)} INFO:     Application startup complete.",
        f"{stamp(ts)} INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)",
    ]


def ready_lines(ts: datetime) -> list[str]:
    return [
        f'{stamp(ts)} INFO:     127.0.0.1:41716 - "GET /model_info HTTP/1.1" 200 OK',
        f'{stamp(ts)} INFO:     127.0.0.1:41730 - "POST /generate HTTP/1.1" 200 OK',
        f"{stamp(ts)} The server is fired up and ready to roll!",
    ]


def noise_lines(ts: datetime, rng: random.Random) -> list[str]:
    """Steady-state chatter; identical lines repeat, as they do in real logs."""
    running = rng.randint(0, 6)
    line = (
        f"{stamp(ts, 0)} Decode batch, #running-req: {running}, #token: {running * 30511}, "
        f"token usage: {running * 0.03:.2f}, cuda graph: True, gen throughput (token/s): "
        f"{running * 41.7:.2f}, #queue-req: 0, "
    )
    health = f'{stamp(ts)} INFO:     127.0.0.1:53826 - "GET /health HTTP/1.1" 200 OK'
    out = [health, health]
    if running:
        out += [line, line]
    return out


def prefill_line(ts: datetime, new_tokens: int, cached_tokens: int) -> str:
    return (
        f"{stamp(ts, 0)} Prefill batch, #new-seq: 1, #new-token: {new_tokens}, "
        f"#cached-token: {cached_tokens}, token usage: 0.01, #running-req: 0, #queue-req: 0, "
    )


def _traceback(ts: datetime, rank: int, frames: list[str], error: str) -> list[str]:
    return [f"{stamp(ts, rank)} Scheduler hit an exception: Traceback (most recent call last):", *frames, error]


def oom_lines(ts: datetime, rank: int = 2) -> list[str]:
    return _traceback(
        ts,
        rank,
        [
            '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 4546, in run_scheduler_process',
            "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)",
            '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", line 412, in capture',
            "    self.capture_one_batch_size(bs, forward)",
        ],
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {rank} has a total "
        f"capacity of 139.81 GiB of which 1.12 GiB is free. Process 1 has 138.68 GiB memory in use.",
    ) + [
        f"{stamp(ts)} Received sigquit from a child process. It usually means the child failed.",
    ]


def gpu_busy_oom_lines(ts: datetime, rank: int = 0) -> list[str]:
    return _traceback(
        ts,
        rank,
        [
            '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", line 811, in load_model',
            "    self.model = get_model(model_config=self.model_config, load_config=self.load_config)",
        ],
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.75 GiB. GPU {rank} has a total "
        f"capacity of 139.81 GiB of which 512.00 MiB is free. Process 4127 has 139.29 GiB memory in use.",
    ) + [
        f"{stamp(ts)} Received sigquit from a child process. It usually means the child failed.",
    ]


def cuda_801_lines(ts: datetime) -> list[str]:
    return _traceback(
        ts,
        0,
        [
            '  File "/sgl-workspace/sglang/python/sglang/srt/mem_cache/memory_pool_host.py", line 118, in __init__',
            "    self.kv_buffer = self.init_kv_buffer()",
            '  File "/sgl-workspace/sglang/python/sglang/srt/mem_cache/memory_pool_host.py", line 203, in init_kv_buffer',
            "    torch.cuda.cudart().cudaHostRegister(ptr, size, 0)",
        ],
        "RuntimeError: CUDA error 801: operation not supported (cudaHostRegister)",
    ) + [
        f"{stamp(ts)} Received sigquit from a child process. It usually means the child failed.",
    ]


def nccl_error_lines(ts: datetime) -> list[str]:
    return _traceback(
        ts,
        1,
        [
            '  File "/sgl-workspace/sglang/python/sglang/srt/distributed/parallel_state.py", line 1278, in init_distributed_environment',
            "    torch.distributed.barrier()",
        ],
        "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, unhandled "
        "system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.3",
    ) + [
        f"{stamp(ts)} Received sigquit from a child process. It usually means the child failed.",
    ]


def dist_store_error_lines(ts: datetime, dist_addr: str, rank: int = 2) -> list[str]:
    """A rank whose TCPStore rendezvous at --dist-init-addr fails (the base doc's DistStoreError).
    Unlike the NCCL error the process does not exit: the other ranks wait in the rendezvous."""
    return _traceback(
        ts,
        rank,
        [
            '  File "/sgl-workspace/sglang/python/sglang/srt/distributed/parallel_state.py", line 1262, in init_distributed_environment',
            "    torch.distributed.init_process_group(",
            '  File "/usr/local/lib/python3.12/dist-packages/torch/distributed/rendezvous.py", line 189, in _create_c10d_store',
            "    return TCPStore(",
        ],
        f"torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. 3/4 clients "
        f"joined. (store at tcp://{dist_addr or '127.0.0.1:29510'})",
    )


def budget_no_fit_lines(ts: datetime, replica_bytes: int, available_bytes: int, reserve_bytes: int) -> list[str]:
    return _traceback(
        ts,
        0,
        [
            '  File "/sgl-workspace/sglang/python/sglang/srt/mem_cache/memory_pool_host.py", line 96, in resolve_startup_budget',
            "    raise RuntimeError(msg)",
        ],
        f"RuntimeError: HiCache startup RAM budget does not fit: budget_bytes={replica_bytes} "
        f"available_bytes={available_bytes} reserve_bytes={reserve_bytes}",
    ) + [
        f"{stamp(ts)} Received sigquit from a child process. It usually means the child failed.",
    ]


def budget_invalid_lines(ts: datetime, text: str) -> list[str]:
    return _traceback(
        ts,
        0,
        [
            '  File "/sgl-workspace/sglang/python/sglang/srt/mem_cache/memory_pool_host.py", line 81, in parse_budget',
            "    raise ValueError(msg)",
        ],
        f"ValueError: invalid SGLANG_HICACHE_RAM_BUDGET {text!r}",
    )


def sigterm_lines(ts: datetime) -> list[str]:
    return [f"{stamp(ts)} INFO:     Shutting down", f"{stamp(ts)} INFO:     Waiting for application shutdown."]
