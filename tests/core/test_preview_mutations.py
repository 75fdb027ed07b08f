"""The compose-file preview against one change at a time to gpu02's LongContext file (the seed's
#294 revision): every kind of mutation the seed's validator pinned, and the ones that planned clean
before the preview checked the facts its runbook states. Each fails the preview with a message of
its own that names the file, the service, the key, both values and the runbook line relying on
it; the unmutated file passes. Each mutation replaces an exact, counted occurrence: a fixture edit
that moves the text fails here instead of silently mutating nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator.language.runbook import load_runbook
from orchestrator.previews.compose_check import check_against_compose_file, read_env_file
from orchestrator.previews.compose_facts import FROM_ENV
from orchestrator.util.user_errors import UserError

ROOT = Path(__file__).resolve().parents[2]
NAME = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml"
SEED = ROOT / "orchestrator_sim" / "compose" / NAME
RUNBOOK = "gpu02-glm53-w4afp8-long-context"
CITED = re.compile(rf"relied on by runbooks/{RUNBOOK}\.yaml:\d+ ")
R1, R2 = "model-sg-glm53-w4afp8-tp4-r1", "model-sg-glm53-w4afp8-tp4-r2"
VARIANT = ("fc91d24-long-context-w4afp8-c8192-hicache-cuda-host-pooled-v1-admission-reserve-disabled-pool-clamp-pdi1"
           "-h200-tp4-ep4-eagle-adaptive-5-1-6-strict-budget8192")


def mutate(text: str, old: str, new: str, nth: int, count: int) -> str:
    """`text` with the `nth` (1-based) of exactly `count` occurrences of `old` replaced."""
    assert text.count(old) == count, f"{old!r} occurs {text.count(old)} times in the fixture, not {count}"
    at = -1
    for _ in range(nth):
        at = text.index(old, at + 1)
    return text[:at] + new + text[at + len(old):]


def preview(text: str, tmp_path: Path, env: dict[str, str] | None = None) -> tuple[list[str], list[str]]:
    path = tmp_path / NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    checks, problems, _ = check_against_compose_file(load_runbook(RUNBOOK), path, env=env, display=NAME)
    return checks, problems


# (id, old, new, which occurrence, how many there are, what the one problem line must say)
MUTATIONS = [
    # the seed validator's argv kinds
    ("argv-chunk", "--chunked-prefill-size 8192", "--chunked-prefill-size 16384", 2, 2,
     f"{NAME}: {R2}: --chunked-prefill-size: found 16384, expected 8192"),
    ("dist-init-addr", "--dist-init-addr 127.0.0.1:29511", "--dist-init-addr 127.0.0.1:29510", 1, 1,
     f"{NAME}: {R2}: --dist-init-addr: found 127.0.0.1:29510, as {R1}, expected a value of its own"),
    ("hicache-io-backend", "--hicache-io-backend direct", "--hicache-io-backend kernel", 1, 2,
     f"{NAME}: {R1}: --hicache-io-backend: found kernel, expected direct"),
    ("revision-re-added", "--tp-size 4", "--revision fp8 --tp-size 4", 2, 2,
     f"{NAME}: {R2}: --revision: found fp8, expected absent"),
    ("queue-size", "--max-queued-requests 8", "--max-queued-requests 64", 1, 2,
     f"{NAME}: {R1}: --max-queued-requests: found 64, expected 8"),
    # image, environment, devices
    ("image-digest", "sglang@sha256:fde25985aea3ebabf1eb", "sglang@sha256:47aff7910900ebabf1eb", 1, 1,
     f"{NAME}: {R1}: image: found docker.io/nearaidev/sglang@sha256:47aff7910900"),
    ("cuda-host-memory-0", "${GLM53_HICACHE_CUDA_HOST_MEMORY:-1}", "${GLM53_HICACHE_CUDA_HOST_MEMORY:-0}", 1, 1,
     f"{NAME}: {R1}: environment SGLANG_HICACHE_CUDA_HOST_MEMORY: found 0, expected 1"),
    ("admission-reserve", "    - SGLANG_HICACHE_STAGING_PAGES=64\n",
     "    - SGLANG_HICACHE_STAGING_PAGES=64\n    - SGLANG_CHUNKED_PREFILL_ADMISSION_RESERVE=4096\n", 1, 1,
     f"{NAME}: {R1}: environment SGLANG_CHUNKED_PREFILL_ADMISSION_RESERVE: found 4096, expected unset"),
    ("device-ids", 'device_ids: ["4","5","6","7"]', 'device_ids: ["0","1","2","3"]', 1, 1,
     f"{NAME}: {R2}: device_ids: found 0,1,2,3, expected 4,5,6,7"),
    # routing
    ("long-tier-only", "LONG_TIER_ONLY=${LONG_TIER_ONLY:-true}", "LONG_TIER_ONLY=${LONG_TIER_ONLY:-false}", 1, 1,
     f"{NAME}: model-proxy-registrar: environment LONG_TIER_ONLY: found false, expected true"),
    ("synthetic-discovery-id", 'register_model "z-ai/glm-5.3-flash-long"', 'register_model "z-ai/glm-5.3-flash-lc"', 1, 1,
     f"{NAME}: model-proxy-registrar: configs content: found without it, expected to contain "
     "'register_model \"z-ai/glm-5.3-flash-long\""),
    ("soak-relay-routing", "set $$backend http://model-sg-glm53-w4afp8-tp4-r2:8000;",
     "set $$backend http://model-sg-glm53-w4afp8-tp4-r1:8000;", 1, 1,
     f"{NAME}: glm53-soak-relay: route of :8009: found {R1}, expected {R2} (replica r2)"),
    ("soak-relay-port", '      - "8009:8009"\n', "", 1, 1,
     f"{NAME}: (any service): ports :8009: found not published, expected a service publishing :8009"),
    ("proxy-pooling", f"VLLM_BACKEND_URLS=http://{R1}:8000,http://{R2}:8000", f"VLLM_BACKEND_URLS=http://{R1}:8000", 1, 1,
     f"{NAME}: proxy-glm53: environment VLLM_BACKEND_URLS: found http://{R1}:8000, expected"),
    # telemetry
    ("config-variant-label", f'nearai.otel.config_variant: "{VARIANT}', f'nearai.otel.config_variant: "{VARIANT.replace("pdi1", "pdi9")}', 2, 2,
     f"{NAME}: {R2}: label nearai.otel.config_variant: found {VARIANT.replace('pdi1', 'pdi9')}, expected {VARIANT}"),
    ("config-variant-log-tag", f"config_variant:{VARIANT}", f"config_variant:{VARIANT.replace('pdi1', 'pdi9')}", 2, 2,
     f"{NAME}: {R2}: log tag config_variant: found {VARIANT.replace('pdi1', 'pdi9')}, expected {VARIANT}"),
    ("engine-image-label", 'nearai.otel.engine_image: "fde25985aea3"', 'nearai.otel.engine_image: "47aff7910900"', 1, 2,
     f"{NAME}: {R1}: label nearai.otel.engine_image: found 47aff7910900, expected fde25985aea3"),
    ("engine-image-scrape-label", ' ' * 22 + 'engine_image: "fde25985aea3"', ' ' * 22 + 'engine_image: "47aff7910900"', 1, 2,
     f"{NAME}: {R1}: scrape label engine_image (collector job sglang-{R1}): found 47aff7910900, expected fde25985aea3"),
    ("precision", "precision:int4-weights-fp8-activations-bf16-kv", "precision:fp8-bf16-kv", 1, 2,
     f"{NAME}: {R1}: log tag precision: found fp8-bf16-kv, expected int4-weights-fp8-activations-bf16-kv"),
    ("dcgm-model-path", 'nearai.otel.model_path: "graphistry/GLM-5.3-Flash-W4AFP8"', 'nearai.otel.model_path: "zai-org/GLM-5.3-Flash"', 3, 3,
     f"{NAME}: dcgm-glm53: label nearai.otel.model_path: found zai-org/GLM-5.3-Flash, expected graphistry/GLM-5.3-Flash-W4AFP8"),
    ("engine-model-path-label", 'nearai.otel.model_path: "graphistry/GLM-5.3-Flash-W4AFP8"', 'nearai.otel.model_path: "zai-org/GLM-5.3-Flash"', 1, 3,
     f"{NAME}: {R1}: label nearai.otel.model_path: found zai-org/GLM-5.3-Flash, expected graphistry/GLM-5.3-Flash-W4AFP8"),
    # the facts that planned clean before the preview derived them from the runbook
    ("model-path-checkpoint", "models--graphistry--GLM-5.3-Flash-W4AFP8/snapshots", "models--zai-org--GLM-5.3-Flash/snapshots", 2, 2,
     f"{NAME}: {R2}: --model-path: found /root/.cache/huggingface/hub/models--zai-org--GLM-5.3-Flash/snapshots/"),
    ("downloader-drops-weights", "hf download graphistry/GLM-5.3-Flash-W4AFP8", "hf download graphistry/GLM-5.3-Flash-FP8", 1, 1,
     f"{NAME}: model-downloader: command: found no download of it, expected a download of graphistry/GLM-5.3-Flash-W4AFP8"),
    ("enable-metrics-dropped", "--enable-metrics\n", "", 2, 2,
     f"{NAME}: {R2}: --enable-metrics: found (absent), expected present (a gate reads this engine's metrics)"),
    ("host-budget-80-percent", "- SGLANG_HICACHE_RAM_BUDGET=${GLM53_HICACHE_RAM_BUDGET:-406GiB}",
     "- SGLANG_HICACHE_RAM_BUDGET=${GLM53_HICACHE_RAM_BUDGET:-80%}", 1, 1,
     f"{R1}: budget default 80% in the file, the runbook expects 406GiB"),
    ("one-shot-profile", '    profiles: ["verification"]\n    runtime: runc\n    user: "65534:65534"\n', '    runtime: runc\n    user: "65534:65534"\n', 1, 1,
     f"{NAME}: glm53-perception-check: profiles: found (none), expected a profile"),
]

#: Changes the seed's validator rejected that no shipped runbook relies on: the preview lets them
#: through, and says here why (a runbook that comes to rely on one states it in `expects:`).
OUTSIDE = [
    ("runtime-drift", "    profiles: [\"verification\"]\n    runtime: runc\n    user:", "    profiles: [\"verification\"]\n    runtime: nvidia\n    user:", 1, 1,
     "no gate reads a container's runtime: the perception check's result (its ok event) is what the runbook relies on"),
    ("dcgm-image", "dcgm-exporter@sha256:613ab03c", "dcgm-exporter@sha256:0000aaaa", 1, 1,
     "the DCGM exporter is not an engine and no gpu02 gate reads its metrics (only the canaries' readouts, "
     "through their own relay route, which their runbooks check)"),
]


@pytest.fixture(scope="module")
def seed_text() -> str:
    return SEED.read_text()


def test_the_unmutated_file_passes_with_every_fact_checked(seed_text, tmp_path):
    checks, problems = preview(seed_text, tmp_path)
    assert problems == []
    joined = "\n".join(checks)
    for needle in ("replica_values", "weights:", "replica_gpus", "relay ports :8008, :8009", "--enable-metrics",
                   "long domain", "expects[1] holds", "expects[6] holds"):
        assert needle in joined


@pytest.mark.parametrize("kind, old, new, nth, count, needle", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_each_mutation_fails_the_preview_with_its_own_message(seed_text, tmp_path, kind, old, new, nth, count, needle):
    _, problems = preview(mutate(seed_text, old, new, nth, count), tmp_path)
    assert problems, f"{kind} planned clean"
    assert any(needle in p for p in problems), "\n".join(problems)
    assert not [o[0] for o in MUTATIONS if o[0] != kind and any(o[5] in p for p in problems)], "\n".join(problems)
    for p in problems:
        if p.startswith(NAME):
            assert CITED.search(p), p  # names the runbook line that relies on the value


def test_two_replicas_on_the_same_gpus_are_named(seed_text, tmp_path):
    _, problems = preview(mutate(seed_text, 'device_ids: ["4","5","6","7"]', 'device_ids: ["0","1","2","3"]', 1, 1), tmp_path)
    assert any(f"{R2}: device_ids: found GPU 0, also reserved by {R1}, expected no GPU shared between replicas" in p for p in problems)


def test_the_image_digest_changed_while_the_label_stays(seed_text, tmp_path):
    _, problems = preview(mutate(seed_text, "sglang@sha256:fde25985aea3ebabf1eb", "sglang@sha256:47aff7910900ebabf1eb", 1, 1), tmp_path)
    assert [p.split(": image: ")[0] for p in problems if ": image: " in p] == [f"{NAME}: {R1}", f"{NAME}: {R2}"]
    assert all("expected a digest starting fde25985aea3 (engine_image)" in p for p in problems if ": image: " in p)


@pytest.mark.parametrize("kind, old, new, nth, count, why", OUTSIDE, ids=[m[0] for m in OUTSIDE])
def test_what_no_shipped_runbook_relies_on_passes(seed_text, tmp_path, kind, old, new, nth, count, why):
    _, problems = preview(mutate(seed_text, old, new, nth, count), tmp_path)
    assert problems == [], why


def test_the_env_map_interpolates_and_its_values_are_never_shown(seed_text, tmp_path):
    env_file = tmp_path / "gpu02.env"
    env_file.write_text("# gpu02\nexport LONG_TIER_ONLY=false\nGLM53_HICACHE_CUDA_HOST_MEMORY='0'\nPROXY_TOKEN=s3cret-token\n")
    env = read_env_file(env_file)
    assert env == {"LONG_TIER_ONLY": "false", "GLM53_HICACHE_CUDA_HOST_MEMORY": "0", "PROXY_TOKEN": "s3cret-token"}
    _, problems = preview(seed_text, tmp_path, env=env)
    assert f"{NAME}: model-proxy-registrar: environment LONG_TIER_ONLY: found {FROM_ENV}, expected true" in "\n".join(problems)
    assert f"{NAME}: {R1}: environment SGLANG_HICACHE_CUDA_HOST_MEMORY: found {FROM_ENV}, expected 1" in "\n".join(problems)
    assert not any("false" in p.split("expected")[0] or "s3cret" in p for p in problems)
    _, problems = preview(seed_text, tmp_path, env={"GLM53_HICACHE_CUDA_HOST_MEMORY": "1", "PROXY_TOKEN": "x"})
    assert problems == []  # an env map that agrees with the defaults passes


def test_an_env_file_line_that_is_not_name_value_is_refused_without_its_value(tmp_path):
    env_file = tmp_path / "bad.env"
    env_file.write_text("GOOD=1\nthis is s3cret\n")
    with pytest.raises(UserError) as error:
        read_env_file(env_file)
    assert "line 2" in str(error.value) and "s3cret" not in str(error.value)


def test_the_base_tier_file_must_never_set_the_reserve_gates_its_runbook_forbids(tmp_path):
    base = ROOT / "orchestrator_sim" / "compose" / "prod" / "GLM-5.3-Flash-SGL-TP4-W4AFP8.yaml"
    text = base.read_text()
    path = tmp_path / "base.yaml"
    path.write_text(text)
    rb = load_runbook("base-glm53-w4afp8")
    assert check_against_compose_file(rb, path)[1] == []
    path.write_text(mutate(text, "    - SGLANG_ADMISSION_RESERVE_MAX_FRACTION=0.75\n",
                           "    - SGLANG_ADMISSION_RESERVE_MAX_FRACTION=0.75\n    - SGLANG_ADMISSION_RESERVE_MIN_WAIT_S=2\n", 1, 1))
    problems = check_against_compose_file(rb, path, display="base.yaml")[1]
    assert any(p.startswith(f"base.yaml: {R1}: environment SGLANG_ADMISSION_RESERVE_MIN_WAIT_S: found 2, expected unset "
                            "(nothing matching SGLANG_ADMISSION_RESERVE_MIN_WAIT_S) (admission-reserve v10") for p in problems), problems


def test_a_label_the_env_map_fills_is_compared_but_never_shown(seed_text, tmp_path):
    text = mutate(seed_text, 'nearai.otel.engine_image: "fde25985aea3"', 'nearai.otel.engine_image: "${IMAGE_TAG:-fde25985aea3}"', 1, 2)
    assert preview(text, tmp_path)[1] == []  # the default agrees
    _, problems = preview(text, tmp_path, env={"IMAGE_TAG": "0badc0ffee00", "GLM53_HICACHE_CUDA_HOST_MEMORY": "1"})
    assert f"{NAME}: {R1}: label nearai.otel.engine_image: found {FROM_ENV}, expected fde25985aea3" in "\n".join(problems)
    assert not any("0badc0ffee00" in p for p in problems)


def test_the_quiet_wait_and_the_watch_read_r1s_metrics_so_r1_needs_them_enabled(tmp_path):
    qsplit = ROOT / "orchestrator_sim" / "compose" / "tags" / "v0.0.305" / NAME
    path = tmp_path / "qsplit.yaml"
    path.write_text(mutate(qsplit.read_text(), "\n      --enable-metrics\n", "\n", 1, 1))  # the anchor's: r1 (r2 has its own argv)
    problems = check_against_compose_file(load_runbook("gpu02-glm53-w4afp8-qsplit-canary"), path, display="q.yaml")[1]
    assert [p for p in problems if "--enable-metrics" in p] == [
        f"q.yaml: {R1}: --enable-metrics: found (absent), expected present (a gate reads this engine's metrics) (relied on by "
        f"runbooks/gpu02-glm53-w4afp8-qsplit-canary.yaml:{_first_line('gpu02-glm53-w4afp8-qsplit-canary', '          relay: {token_variable: PROXY_TOKEN, ports: {r1: 8008, r2: 8009}}') - 1} canary/wait-for-quiet quiet)"]


def _first_line(runbook: str, text: str) -> int:
    lines = (ROOT / "runbooks" / f"{runbook}.yaml").read_text().splitlines()
    return lines.index(text) + 1


@pytest.mark.parametrize("fmt, shown", [("text", "MISMATCH: "), ("markdown", "- **mismatch**: ")])
def test_plan_with_the_compose_file_exits_1_and_prints_each_line_where_the_reviewer_reads(seed_text, tmp_path, fmt, shown):
    import subprocess
    import sys

    path = tmp_path / "LongContext.yaml"
    path.write_text(mutate(seed_text, 'device_ids: ["4","5","6","7"]', 'device_ids: ["0","1","2","3"]', 1, 1))
    r = subprocess.run([sys.executable, "-m", "orchestrator.cli", "plan", "gpu02", "--tag", "v0.0.300", "--format", fmt,
                        "--compose-file", str(path)], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 1, r.stderr
    line = f"{path}: {R2}: device_ids: found 0,1,2,3, expected 4,5,6,7 (relied on by runbooks/{RUNBOOK}.yaml:"
    assert " ".join(f"mismatch: {line}".split()) in " ".join(r.stderr.split())  # the terminal may wrap it
    assert shown + line in r.stdout


def test_an_expectation_citing_no_step_is_a_problem_of_the_preview_not_of_loading(seed_text, tmp_path):
    import yaml

    from orchestrator.language.runbook import RUNBOOK_DIR, parse_runbook

    raw = yaml.safe_load((RUNBOOK_DIR / f"{RUNBOOK}.yaml").read_text())
    raw["expects"][1]["relied_on_by"] = "host-restor"
    rb = parse_runbook(raw, source="t.yaml")  # loads: a runbook derived with fewer steps must
    path = tmp_path / "f.yaml"
    path.write_text(seed_text)
    problems = check_against_compose_file(rb, path, display="f.yaml")[1]
    assert [p.split(" (relied")[0] for p in problems] == [
        "f.yaml: (runbook): expects[2].relied_on_by: found host-restor, expected the id of a forward step"]
