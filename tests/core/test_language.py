"""The runbook language's new constructs: markers with tolerances, prerequisites, loader rules."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from orchestrator.engine.rules.prerequisites import unmet
from orchestrator.engine.steps.markers import judge_markers
from orchestrator.language.runbook import RUNBOOK_DIR, LogValue, Prerequisite, parse_runbook
from orchestrator.util.user_errors import UserError

RAW = yaml.safe_load((RUNBOOK_DIR / "gpu02-glm53-w4afp8-long-context.yaml").read_text())
NOW = datetime(2026, 9, 30, 12, tzinfo=UTC)


def test_markers_required_forbidden_unknown_and_numeric_tolerance():
    lines = ["[TP0] rank_budget_bytes=108984795136", "[TP1] rank_budget_bytes=108984795100", "loaded W4AFP8"]
    markers = {"loader": "loaded W4AFP8", "marlin": None, "xid": "Xid"}
    v = LogValue(pattern=r"rank_budget_bytes=(\d+)", equals=108984795136, tolerance=100, at_least=2)
    assert judge_markers(lines, markers, ["loader"], ["marlin", "xid"], [v], lines) == ([], ["marlin"])
    tight = LogValue(pattern=r"rank_budget_bytes=(\d+)", equals=108984795136, at_least=2)
    problems, _ = judge_markers(lines, markers, ["loader"], [], [tight], lines)
    assert problems == ["rank_budget_bytes=108984795100 is outside /rank_budget_bytes=(\\d+)/ = 1.08985e+11 on every line (at least 2)"]
    more = lines + ["Xid 79"]
    problems, _ = judge_markers(more, markers, [], ["xid"], [LogValue(pattern=r"ranks=(\d+)", min=1)], more)
    assert problems == ["forbidden marker xid: Xid 79", "/ranks=(\\d+)/ matched 0 line(s), at least 1 needed"]
    with pytest.raises(ValueError, match="exactly one group"):
        LogValue(pattern=r"a(\d)(\d)", min=0)


@dataclass
class Run:
    run_id: str
    kind: str
    runbook: str
    outcome: str | None
    updated_at: datetime


def test_prerequisites_latest_rollout_done_and_soaked_overridden_only_by_name():
    p = [Prerequisite(host="gpu02", runbook="gpu02-lc", soaked="2h")]
    runs = {"gpu02": [Run("b", "rollout", "gpu02-lc", "DONE", NOW - timedelta(hours=3))]}
    assert unmet(p, lambda h: runs.get(h, []), NOW) == []
    assert "less than the 2h" in unmet(p, lambda h: [Run("b", "rollout", "gpu02-lc", "DONE", NOW - timedelta(minutes=5))], NOW)[0]
    newest_failed = [Run("c", "rollout", "gpu02-lc", "ROLLED_BACK", NOW), *runs["gpu02"]]
    assert "is ROLLED_BACK, not DONE" in unmet(p, lambda h: newest_failed, NOW)[0]
    assert "no gpu02-lc rollout" in unmet(p, lambda h: [], NOW)[0]
    assert unmet(p, lambda h: [], NOW, overrides=["gpu02"]) == []
    with pytest.raises(UserError, match="gpu2: not a prerequisite"):
        unmet(p, lambda h: [], NOW, overrides=["gpu2"])


def _mutated(fn):
    data = copy.deepcopy(RAW)
    fn(data)
    return data


@pytest.mark.parametrize(
    "mutate, needle",
    [
        (lambda d: d.pop("budget"), "a budget check needs the runbook's budget: block"),
        (lambda d: d["preflight"].append({"id": "pre", "say": "x", "check": "prerequisites"}), "needs a prerequisites: list"),
        (lambda d: d["phases"][0]["steps"].append({"id": "m", "say": "x", "markers": {"service": "a", "require": ["nope"]}}),
         "marker 'nope' is not in log_markers"),
        (lambda d: d["phases"][0]["steps"].append({"id": "p", "say": "x", "presence": {"absent": ["edge"], "within": "5m"}}),
         "domain role 'edge' is not one of long, base"),
        (lambda d: d["phases"][0]["steps"].append({"id": "p", "say": "x", "presence": {"listed": ["base"], "absent": ["base"], "within": "5m"}}),
         "both listed and absent"),
        (lambda d: d["phases"][0]["steps"].append({"id": "c", "say": "x", "capture": {"services": []}}), "capture.services"),
    ],
)
def test_loader_refuses_bad_language_fields(mutate, needle):
    with pytest.raises(UserError) as exc:
        parse_runbook(_mutated(mutate), source="t.yaml")
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_base_tier_runbook_loads_with_unknown_markers_left_null():
    from orchestrator.language.runbook import load_runbook

    rb = load_runbook("base-glm53-w4afp8")
    assert rb.budget is None and rb.hosts == ["gpu03", "gpu04", "gpu23"]
    assert rb.log_markers["w4afp8_loader"] is None and rb.log_markers["marlin_fallback"] is None
    assert rb.prerequisites[0].host == "gpu02"
    switch = rb.phase("switch")
    ids = [s.id for s in switch.steps]
    # the drain (its own phase, before the switch) precedes the stop of both FP8 engines, which
    # precedes any up of the W4AFP8 file
    assert rb.phase_names().index("drain") < rb.phase_names().index("switch")
    assert "drained" in [s.id for s in rb.phase("drain").steps]
    assert ids.index("stop-fp8") < ids.index("apply")
    assert switch.rollback.steps[[s.id for s in switch.rollback.steps].index("stop-new")].down.file == "new"


def test_a_runbook_may_name_more_domain_roles_and_a_presence_gate_may_use_them():
    """Domains are roles: `long` and `base` always, more where a runbook needs them."""
    def add_role(d):
        d["domains"]["canary"] = "glm-5-3-flash-canary.completions.near.ai"
        d["phases"][0]["steps"].insert(0, {"id": "canary-absent", "say": "not in the canary pool",
                                           "presence": {"absent": ["canary"], "within": "1m"}})
    rb = parse_runbook(_mutated(add_role))
    assert rb.domains.of("canary") == "glm-5-3-flash-canary.completions.near.ai"
    assert set(rb.domains.roles()) == {"long", "base", "canary"}

    def unknown_role(d):
        d["phases"][0]["steps"].insert(0, {"id": "x", "say": "x", "presence": {"absent": ["canary"], "within": "1m"}})
    with pytest.raises(UserError, match="domain role 'canary' is not one of long, base"):
        parse_runbook(_mutated(unknown_role), source="t.yaml")


@pytest.mark.parametrize(
    "entry, needle",
    [
        ({"services": ["replica:r9"], "argv": {"--x": "1"}, "why": "w"}, "'replica:r9' names no replica"),
        ({"services": ["replica:r1"], "argv": {"--chunked-prefill-size": 8192}, "why": "w"}, "quote the value"),
        ({"services": ["replica:r1"], "argv": {"chunked-prefill-size": "8192"}, "why": "w"}, "is not a flag"),
        ({"services": ["x"], "environment": {"A": 1}, "why": "w"}, "the environment is text"),
        ({"services": ["x"], "why": "w"}, "it would check nothing"),
        ({"services": ["x"], "distinct": ["--port"], "why": "w"}, "list more than one"),
        ({"services": ["x"], "image": "i", "why": ""}, "expects[1].why"),
    ],
)
def test_loader_refuses_bad_expects(entry, needle):
    with pytest.raises(UserError) as exc:
        parse_runbook(_mutated(lambda d: d.__setitem__("expects", [entry])), source="t.yaml")
    assert needle in str(exc.value)


def test_expects_loads_as_written_in_the_shipped_runbook():
    rb = parse_runbook(copy.deepcopy(RAW), source="t.yaml")
    first = rb.expects[0]
    assert first.services == ["replica:r1", "replica:r2"] and first.distinct == ["--dist-init-addr"]
    assert first.argv["--chunked-prefill-size"] == "8192" and first.argv["--revision"] is False
    assert rb.expects[2].environment_absent == ["SGLANG_*ADMISSION_RESERVE*"] and rb.expects[3].relied_on_by == "verify"
