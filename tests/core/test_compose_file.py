"""orchestrator.hosts.compose_file: the real compose files of gpu02's rollout, plus synthetic edge cases."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.hosts.budget import GIB, check_fit, parse_budget
from orchestrator.hosts.compose_file import (
    BudgetExpr,
    ComposeFile,
    ComposeFileError,
    InterpolationError,
    ServiceDef,
    interpolate,
    parse_duration,
)

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "reference" / "compose"
CANARY_PATH = REFERENCE / "GLM-5.3-Flash-SGL-TP4-W4AFP8-Canary.yaml"
LONG_PATH = REFERENCE / "GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml"
GLM52_PATH = REFERENCE / "GLM-5.2-W4AFP8-SGL-2xTP4.yaml"

R1 = "model-sg-glm53-w4afp8-tp4-r1"
OLD_R2 = "model-sg-glm53-fp8-tp4-r2"
NEW_R2 = "model-sg-glm53-w4afp8-tp4-r2"
ENGINES_CANARY = (R1, OLD_R2)
ENGINES_LONG = (R1, NEW_R2, "model-sg-glm53-w4afp8-tp2-r2a", "model-sg-glm53-w4afp8-tp2-r2b")


def _load(path: Path) -> ComposeFile:
    return ComposeFile.load(path)


@pytest.fixture(scope="module")
def canary() -> ComposeFile:
    return _load(CANARY_PATH)


@pytest.fixture(scope="module")
def long_context() -> ComposeFile:
    return _load(LONG_PATH)


@pytest.fixture(scope="module")
def glm52() -> ComposeFile:
    return _load(GLM52_PATH)


def _running_after_canary(canary: ComposeFile) -> set[str]:
    """What a normal apply of the canary starts: its `w4afp8-long-context` profile."""
    return {name for name, svc in canary.services.items() if "w4afp8-long-context" in svc.profiles}


# --- the canary file (what deployed gpu02's current engines) -------------------------------------


def test_canary_services(canary: ComposeFile) -> None:
    assert list(canary.services) == [
        "model-downloader", "hf-cleanup", "nginx", "model-proxy-registrar", "proxy-glm53",
        R1, OLD_R2, "glm53-perception-check", "glm53-soak-relay", "dcgm-glm53", "otelcol-contrib",
    ]
    assert canary.path == str(CANARY_PATH)
    assert OLD_R2 in canary.services
    assert NEW_R2 not in canary.services


def test_canary_old_r2_budget_is_80_percent(canary: ComposeFile) -> None:
    expr = canary.budget_of(OLD_R2)
    assert expr == BudgetExpr(
        variable="GLM53_HICACHE_RAM_BUDGET", default="80%", raw="${GLM53_HICACHE_RAM_BUDGET:-80%}"
    )
    assert parse_budget(interpolate(expr.raw, {})).percent == Decimal(80)
    assert interpolate(expr.raw, {"GLM53_HICACHE_RAM_BUDGET": "406GiB"}) == "406GiB"


def test_canary_r1_has_no_hicache_and_inherits_the_anchor_environment(canary: ComposeFile) -> None:
    r1 = canary.services[R1]
    assert canary.budget_of(R1) is None
    # r1 sets no `environment:` of its own: these come from the x-sg-glm53-flash-common anchor.
    assert r1.environment["SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_IDLE"] == "1"
    assert r1.environment["HF_TOKEN"] == "${HUGGING_FACE_HUB_TOKEN}"
    # r1 overrides the anchor's image (an explicit key wins over a merged one).
    assert r1.image == "docker.io/nearaidev/sglang@sha256:8bce6a7cc872a80faded3bd1ef0a64873a1d7abae34c94e5358775ca21f133cc"


def test_canary_engines(canary: ComposeFile) -> None:
    for engine in ENGINES_CANARY:
        svc = canary.services[engine]
        assert svc.stop_grace_period_s == 300.0  # `5m`, merged from the anchor
        assert svc.depends_on == {"model-downloader": "service_completed_successfully"}
        assert svc.profiles == ("w4afp8-long-context",)


def test_canary_container_name_is_the_key_everywhere(canary: ComposeFile) -> None:
    for name, svc in canary.services.items():
        assert svc.container_name == name


def test_canary_closure_and_dependencies(canary: ComposeFile) -> None:
    assert canary.closure([R1]) == ["model-downloader", R1]
    assert canary.dependencies_of([R1]) == {"model-downloader"}
    assert canary.closure(["nginx", R1]) == ["proxy-glm53", "nginx", "model-downloader", R1]
    assert canary.dependencies_of(["proxy-glm53", "otelcol-contrib", "dcgm-glm53"]) == set()


def test_canary_nginx_depends_on_the_proxy_in_list_form(canary: ComposeFile) -> None:
    assert canary.services["nginx"].depends_on == {"proxy-glm53": "service_started"}


def test_canary_profiles(canary: ComposeFile) -> None:
    assert canary.services["glm53-soak-relay"].profiles == ("verification",)
    assert canary.services["hf-cleanup"].profiles == ("maintenance",)
    assert canary.services["glm53-soak-relay"].stop_grace_period_s == 300.0
    assert canary.services["nginx"].stop_grace_period_s is None


# --- the later LongContext revision -------------------------------------------------------------


def test_long_context_budgets(long_context: ComposeFile) -> None:
    # r1 inherits its budget from the anchor's environment list...
    assert long_context.budget_of(R1) == BudgetExpr(
        "GLM53_HICACHE_RAM_BUDGET", "406GiB", "${GLM53_HICACHE_RAM_BUDGET:-406GiB}"
    )
    # ...while r2 replaces that whole list and sets its own variable and default.
    assert long_context.budget_of(NEW_R2) == BudgetExpr(
        "GLM53_R2_HICACHE_RAM_BUDGET", "650GiB", "${GLM53_R2_HICACHE_RAM_BUDGET:-650GiB}"
    )
    # Setting the seed's single variable leaves this revision's r2 at 650 GiB: the mismatch a plan
    # for the seed's runbook must flag.
    env = {"GLM53_HICACHE_RAM_BUDGET": "406GiB"}
    assert interpolate(long_context.budget_of(NEW_R2).raw, env) == "650GiB"


def test_long_context_engines_and_tp2(long_context: ComposeFile) -> None:
    assert "model-sg-glm53-w4afp8-tp2-r2a" in long_context.services
    assert "model-sg-glm53-w4afp8-tp2-r2b" in long_context.services
    for engine in ENGINES_LONG:
        svc = long_context.services[engine]
        assert svc.stop_grace_period_s == 300.0
        assert svc.depends_on == {"model-downloader": "service_completed_successfully"}
        assert svc.profiles == ()
        assert long_context.closure([engine]) == ["model-downloader", engine]
    for name, svc in long_context.services.items():
        assert svc.container_name == name


def test_long_context_budgets_fit_gpu02(long_context: ComposeFile) -> None:
    budgets = [parse_budget(interpolate(long_context.budget_of(e).raw, {})) for e in (R1, NEW_R2)]
    assert [b.bytes for b in budgets] == [406 * GIB, 650 * GIB]
    report = check_fit(budgets, 1223 * GIB, 10 * GIB)
    assert report.ok
    assert report.page_cache_headroom_bytes == 157 * GIB


def _orphans(compose: ComposeFile, running: set[str]) -> set[str]:
    """What `up --remove-orphans` of `compose` removes: the running services it does not define."""
    return {s for s in running if s not in compose.services}


def test_orphans_of_the_new_file_relative_to_the_canary(canary: ComposeFile, long_context: ComposeFile) -> None:
    running = _running_after_canary(canary)
    assert OLD_R2 in running and R1 in running
    assert _orphans(long_context, running) == {OLD_R2}
    # A soak relay left over from the canary is defined by the new file too: not an orphan.
    assert _orphans(long_context, running | {"glm53-soak-relay"}) == {OLD_R2}


def test_orphans_of_the_canary_once_the_new_r2_runs(canary: ComposeFile, long_context: ComposeFile) -> None:
    # After step 2 the old r2 is gone and the new r2 runs: "restore r1 from the previous file"
    # would remove the new r2 (the runbook's hazard).
    running = (_running_after_canary(canary) - {OLD_R2}) | {NEW_R2}
    orphans = _orphans(canary, running)
    assert NEW_R2 in orphans
    assert orphans == {NEW_R2}


def test_glm52_file_loads(glm52: ComposeFile) -> None:
    assert glm52.services["model-sg-glm52-w4a-tp4-r2"].stop_grace_period_s == 300.0
    assert glm52.closure(["nginx"]) == ["proxy-glm52", "nginx"]
    assert all(svc.container_name == name for name, svc in glm52.services.items())


# --- synthetic files: errors --------------------------------------------------------------------


def test_invalid_yaml_names_file_and_line() -> None:
    text = "services:\n  a:\n    image: x\n  b: [unclosed\n  c:\n    image: y\n"
    with pytest.raises(ComposeFileError) as error:
        ComposeFile.from_text(text, "broken.yaml")
    message = str(error.value)
    assert message.startswith("compose file broken.yaml is invalid YAML at line ")
    line = int(message.split(" at line ")[1].split(",")[0])
    assert 4 <= line <= 6


def test_bad_indentation_reports_its_line() -> None:
    text = "services:\n  a:\n    image: x\n   bad: 1\n"
    with pytest.raises(ComposeFileError, match=r"compose file t\.yaml is invalid YAML at line 4,"):
        ComposeFile.from_text(text, "t.yaml")


def test_duplicate_key_is_refused_with_its_line() -> None:
    text = "services:\n  a:\n    image: x\n    image: y\n"
    with pytest.raises(ComposeFileError, match=r"at line 4, column 5: found duplicate key 'image'"):
        ComposeFile.from_text(text, "dup.yaml")


def test_merge_overrides_are_not_duplicates() -> None:
    text = (
        "x-a: &a\n  image: base\n  stop_grace_period: 1m\n"
        "x-b: &b\n  <<: *a\n  image: mid\n"
        "services:\n  s:\n    <<: *b\n    image: top\n  t:\n    <<: [*a]\n"
    )
    compose = ComposeFile.from_text(text, "merge.yaml")
    assert compose.services["s"].image == "top"
    assert compose.services["s"].stop_grace_period_s == 60.0
    assert compose.services["t"].image == "base"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "is empty"),
        ("- a\n- b\n", "not a mapping at the top level"),
        ("version: '3'\n", "has no `services` mapping"),
        ("services: []\n", "has no `services` mapping"),
        ("services: {}\n", "has no `services` mapping"),
        ("services:\n  a: 3\n", "service a: the service is not a mapping"),
        ("services:\n  a:\n    depends_on: b\n", "depends_on must be a list or a mapping"),
        ("services:\n  a:\n    depends_on:\n      b:\n        condition: service_done\n", "condition 'service_done'"),
        ("services:\n  a:\n    stop_grace_period: 30\n", "needs a unit"),
        ("services:\n  a:\n    stop_grace_period: 5 minutes\n", "duration '5 minutes' is not understood"),
        ("services:\n  a:\n    environment: FOO=1\n", "environment must be a list or a mapping"),
    ],
)
def test_structural_errors_name_the_file(text: str, fragment: str) -> None:
    with pytest.raises(ComposeFileError) as error:
        ComposeFile.from_text(text, "s.yaml")
    assert "compose file s.yaml" in str(error.value)
    assert fragment in str(error.value)


def test_unreadable_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ComposeFileError, match=rf"compose file {missing} is unreadable: No such file"):
        ComposeFile.load(missing)
    with pytest.raises(ComposeFileError, match="is unreadable"):
        ComposeFile.load(tmp_path)


def test_load_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("services:\n  a:\n    image: x\n")
    compose = ComposeFile.load(path)
    assert compose.path == str(path)
    assert compose.services["a"] == ServiceDef(None, (), {}, None, {}, "x")


# --- synthetic files: forms ---------------------------------------------------------------------


def test_environment_list_and_mapping_forms_agree() -> None:
    listed = ComposeFile.from_text(
        "services:\n  a:\n    environment:\n      - A=1\n      - B=${X:-406GiB}\n      - C=\n      - D\n      - E=x=y\n",
    )
    mapped = ComposeFile.from_text(
        "services:\n  a:\n    environment:\n      A: 1\n      B: ${X:-406GiB}\n      C: ''\n      D:\n      E: x=y\n",
    )
    expected = {"A": "1", "B": "${X:-406GiB}", "C": "", "D": None, "E": "x=y"}
    assert listed.services["a"].environment == expected
    assert mapped.services["a"].environment == expected


def test_environment_mapping_scalars_become_strings() -> None:
    compose = ComposeFile.from_text("services:\n  a:\n    environment:\n      T: true\n      F: 1.5\n")
    assert compose.services["a"].environment == {"T": "true", "F": "1.5"}


def test_depends_on_forms() -> None:
    compose = ComposeFile.from_text(
        "services:\n"
        "  a:\n    depends_on: [b, c]\n"
        "  b:\n    depends_on:\n      c:\n        condition: service_healthy\n      d: {}\n"
        "  c: {}\n  d:\n    image: d\n"
    )
    assert compose.services["a"].depends_on == {"b": "service_started", "c": "service_started"}
    assert compose.services["b"].depends_on == {"c": "service_healthy", "d": "service_started"}
    assert compose.closure(["a"]) == ["c", "d", "b", "a"]
    assert compose.dependencies_of(["a"]) == {"b", "c", "d"}
    assert compose.closure(["a", "a", "c"]) == ["c", "d", "b", "a"]


def test_closure_errors() -> None:
    compose = ComposeFile.from_text(
        "services:\n  a:\n    depends_on: [b]\n  b:\n    depends_on: [a]\n  c:\n    depends_on: [ghost]\n",
        "cyc.yaml",
    )
    with pytest.raises(ComposeFileError, match="dependency cycle"):
        compose.closure(["a"])
    with pytest.raises(ComposeFileError, match=r"cyc\.yaml does not define ghost \(a dependency of c\)"):
        compose.closure(["c"])
    with pytest.raises(ComposeFileError, match="does not define nope"):
        compose.closure(["nope"])


def test_orphans_ignore_profiles() -> None:
    compose = ComposeFile.from_text("services:\n  a:\n    profiles: [x]\n  b: {}\n")
    assert _orphans(compose, {"a", "b", "c"}) == {"c"}
    assert _orphans(compose, set()) == set()


def test_budget_of_forms() -> None:
    compose = ComposeFile.from_text(
        "services:\n  a:\n    environment:\n"
        "      - SGLANG_HICACHE_RAM_BUDGET=406GiB\n      - OTHER=${V-40%}\n"
        "  b:\n    environment:\n      - SGLANG_HICACHE_RAM_BUDGET\n"
        "  c:\n    environment:\n      - SGLANG_HICACHE_RAM_BUDGET=${A}${B}\n",
        "f.yaml",
    )
    assert compose.budget_of("a") == BudgetExpr(None, "406GiB", "406GiB")
    assert compose.budget_of("a", "OTHER") == BudgetExpr("V", "40%", "${V-40%}")
    assert compose.budget_of("a", "MISSING") is None
    assert compose.budget_of("b") == BudgetExpr(
        "SGLANG_HICACHE_RAM_BUDGET", None, "${SGLANG_HICACHE_RAM_BUDGET}"
    )
    with pytest.raises(InterpolationError, match=r"f\.yaml, c, SGLANG_HICACHE_RAM_BUDGET: .*not a single"):
        compose.budget_of("c")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("${VAR:-406GiB}", BudgetExpr("VAR", "406GiB", "${VAR:-406GiB}")),
        ("${VAR-406GiB}", BudgetExpr("VAR", "406GiB", "${VAR-406GiB}")),
        ("${VAR:-}", BudgetExpr("VAR", "", "${VAR:-}")),
        ("${VAR}", BudgetExpr("VAR", None, "${VAR}")),
        ("$VAR", BudgetExpr("VAR", None, "$VAR")),
        ("40%", BudgetExpr(None, "40%", "40%")),
        ("a$$b", BudgetExpr(None, "a$b", "a$$b")),
        ("${A:-${B:-1GiB}}", BudgetExpr("A", "${B:-1GiB}", "${A:-${B:-1GiB}}")),
    ],
)
def test_budget_expr_parse(raw: str, expected: BudgetExpr) -> None:
    assert BudgetExpr.parse(raw) == expected


@pytest.mark.parametrize("raw", ["${A:?x}", "${A:+x}", "x${A}", "${A}${B}", "${A:-1}GiB"])
def test_budget_expr_refuses_compound_expressions(raw: str) -> None:
    with pytest.raises(InterpolationError, match="not a single"):
        BudgetExpr.parse(raw)


# --- interpolation ------------------------------------------------------------------------------

UNSET: dict[str, str] = {}
EMPTY = {"V": ""}
SET = {"V": "406GiB"}


@pytest.mark.parametrize(
    ("raw", "env", "expected"),
    [
        ("${V:-d}", UNSET, "d"),
        ("${V:-d}", EMPTY, "d"),
        ("${V:-d}", SET, "406GiB"),
        ("${V-d}", UNSET, "d"),
        ("${V-d}", EMPTY, ""),
        ("${V-d}", SET, "406GiB"),
        ("${V}", UNSET, ""),
        ("${V}", SET, "406GiB"),
        ("$V", SET, "406GiB"),
        ("x$V.y", SET, "x406GiB.y"),
        ("${V:+r}", UNSET, ""),
        ("${V:+r}", EMPTY, ""),
        ("${V:+r}", SET, "r"),
        ("${V+r}", EMPTY, "r"),
        ("${V?e}", EMPTY, ""),
        ("$$V", SET, "$V"),
        ("$${V:-d}", SET, "${V:-d}"),
        ("a$$$V", SET, "a$406GiB"),
        ("100$", SET, "100$"),
        ("$ 1", SET, "$ 1"),
        ("${V:-${W:-inner}}", UNSET, "inner"),
        ("${V:-${W}}", {"W": "w"}, "w"),
        ("${V:-a}}", UNSET, "a}"),
        ("plain", SET, "plain"),
        ("${V:-$${X}}", UNSET, "${X}"),
    ],
)
def test_interpolate_string(raw: str, env: dict[str, str], expected: str) -> None:
    assert interpolate(raw, env) == expected


def test_required_variables_read_as_written_when_missing_and_errors_leak_no_value() -> None:
    assert interpolate("${V:?set V}", EMPTY) == "${V}"
    assert interpolate("${V?set V}", UNSET) == "${V}"
    assert interpolate("${V?set V}", EMPTY) == ""
    assert interpolate("${V:?x}", SET) == "406GiB"
    with pytest.raises(InterpolationError) as error:
        interpolate("${TOKEN:?no token} ${BAD", {"TOKEN": "s3cr3t"})
    assert "s3cr3t" not in str(error.value)


@pytest.mark.parametrize("raw", ["${", "${V", "${}", "${1V}", "${V:x}", "${V/a/b}"])
def test_malformed_interpolation(raw: str) -> None:
    with pytest.raises(InterpolationError):
        interpolate(raw, SET)


# --- durations ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5m", 300.0), ("30s", 30.0), ("1h30m", 5400.0), ("1m30s", 90.0), ("500ms", 0.5), ("0", 0.0),
     ("1.5h", 5400.0), ("2h0m0s", 7200.0), ("10us", 1e-5), ("10µs", 1e-5), ("1500ns", 1.5e-6)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5", "-5m", "+5m", "5 m", "5min", "m", "1d", "5m 30s"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not understood"):
        parse_duration(text)


@given(
    hours=st.integers(0, 48), minutes=st.integers(0, 59), seconds=st.integers(0, 59), millis=st.integers(0, 999)
)
def test_duration_round_trip(hours: int, minutes: int, seconds: int, millis: int) -> None:
    parts = [(hours, "h"), (minutes, "m"), (seconds, "s"), (millis, "ms")]
    text = "".join(f"{n}{unit}" for n, unit in parts if n) or "0s"
    total_ms = ((hours * 60 + minutes) * 60 + seconds) * 1000 + millis
    assert parse_duration(text) == float(Decimal(total_ms) / 1000)
    grace = ComposeFile.from_text(f"services:\n  a:\n    stop_grace_period: {text}\n").services["a"]
    assert grace.stop_grace_period_s == float(Decimal(total_ms) / 1000)


# --- a service as compose would run it (orchestrator.previews.compose_reading) ------------------

READ_TEXT = """
x-common: &common
  image: reg/engine@sha256:abcdef123456ffff
  command: >
    serve --model-path ${MODEL:-/m/models--org--name/snapshots/1}
    --limit '{"image": 64}'
    --price $$5 --port ${PORT-8000}
services:
  e:
    <<: *common
    labels:
      nearai.otel.engine_image: "${IMAGE_TAG:-abcdef123456}"
      plain: x
    ports: ["8008:8008", "127.0.0.1:9000:9001/tcp", {target: 80, published: "8080"}, "3000"]
    deploy: {resources: {reservations: {devices: [{driver: nvidia, device_ids: ["4", "5"], capabilities: [gpu]}]}}}
    environment: ["A=${A:-1}", PASS]
    configs: [relay]
  f:
    image: x
    command: ["a", "${B:?B is required}"]
    labels: ["k=v", "empty="]
configs:
  relay:
    content: |
      server { listen 8009; set $$backend http://e:8000; token ${TOKEN:?required}; }
  external_one:
    file: ./x.conf
"""


def test_interpolate_applies_compose_rules_to_any_tree() -> None:
    tree = {"a": ["${X:-d}", "$$lit", {"b": "${Y-unset}"}], "n": 3}
    assert interpolate(tree, {"Y": ""}) == {"a": ["d", "$lit", {"b": ""}], "n": 3}
    assert interpolate("${R:?needed}", {}) == "${R}"  # a missing required variable reads as written
    assert interpolate("${R:-${S:?x}}", {}) == "${S}"


def test_a_service_is_read_as_compose_would_run_it() -> None:
    from orchestrator.previews import compose_reading as reading

    cf = ComposeFile.from_text(READ_TEXT, "read.yaml")
    assert reading.argv(cf, "e", {}) == ["serve", "--model-path", "/m/models--org--name/snapshots/1", "--limit",
                                         '{"image": 64}', "--price", "$5", "--port", "8000"]
    other = reading.argv(cf, "e", {"MODEL": "/other", "PORT": ""})
    assert other[2] == "/other" and other[-1] == "--port"  # PORT set but empty: `-` keeps it empty
    assert reading.argv(cf, "f", {}) == ["a", "${B}"] and reading.argv(cf, "f", {"B": "b"}) == ["a", "b"]
    assert reading.labels(cf, "e", {"IMAGE_TAG": "0123"}) == {"nearai.otel.engine_image": "0123", "plain": "x"}
    assert reading.labels(cf, "f", {}) == {"k": "v", "empty": ""}
    assert reading.published_ports(cf, "e", {}) == {8008, 9000, 8080}
    assert reading.device_ids(cf, "e") == ["4", "5"] and reading.device_ids(cf, "f") is None
    assert reading.env_value(cf, "e", "A", {}) == "1" and reading.env_value(cf, "e", "PASS", {"PASS": "p"}) == "p"
    assert reading.env_value(cf, "e", "NONE", {}) is None
    assert reading.config_text(cf, "e", {}).strip() == "server { listen 8009; set $backend http://e:8000; token ${TOKEN}; }"
    assert cf.configs["external_one"] is None and reading.config_text(cf, "f", {}) == ""
