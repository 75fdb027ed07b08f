"""`quiet:` (issue 23, the seed's low-traffic window): load-time validation, the time window and
the rate over the last `over`."""

from __future__ import annotations

import copy

import pytest
import yaml

from orchestrator.analysis.metric_defs import REQUESTS
from orchestrator.analysis.quiet_spec import inside
from orchestrator.analysis.window import Scrape
from orchestrator.engine.steps.quiet import rate_per_min
from orchestrator.language.runbook import RUNBOOK_DIR, parse_runbook
from orchestrator.util.user_errors import UserError

RAW = yaml.safe_load((RUNBOOK_DIR / "gpu02-glm53-w4afp8-qsplit-canary.yaml").read_text())


def _bad(mutate) -> str:
    raw = copy.deepcopy(RAW)
    mutate(next(s for s in raw["phases"][0]["steps"] if s["id"] == "wait-for-quiet")["quiet"])
    with pytest.raises(UserError) as ei:
        parse_runbook(raw, source="rb")
    assert "\n" not in str(ei.value)
    return str(ei.value)


def test_the_shipped_quiet_wait_loads_and_plan_says_its_bounds():
    from orchestrator.engine.step_descriptions import describe_step

    rb = parse_runbook(copy.deepcopy(RAW))
    st = next(s for s in rb.phases[0].steps if s.id == "wait-for-quiet")
    assert st.kind == "quiet" and st.quiet is not None and st.quiet.wait_at_most == 7200
    gate = describe_step(st, rb).gate
    assert "below 10 requests/min over 10m, or the UTC clock inside 01:00-05:00" in gate
    assert "after 2h an operator runs `orchestrate approve RUN_ID`" in gate


def test_quiet_refusals_are_one_line():
    assert "quiet.over (30s) is shorter than quiet.poll (1m)" in _bad(lambda q: q.update(over="30s"))
    assert "quiet.wait_at_most (5m) is shorter than quiet.over (10m)" in _bad(lambda q: q.update(wait_at_most="5m"))
    assert "'25:00' is not a time of day" in _bad(lambda q: q.update(or_between="25:00-05:00"))
    assert "is empty" in _bad(lambda q: q.update(or_between="03:00-03:00"))
    assert "not a replica of the runbook" in _bad(lambda q: q["relay"]["ports"].update(r3=8011))
    assert "greater than 0" in _bad(lambda q: q.update(below_per_min=0))


def test_a_window_may_wrap_midnight():
    assert inside("01:00-05:00", 60) and inside("01:00-05:00", 299) and not inside("01:00-05:00", 300)
    assert inside("22:00-04:00", 23 * 60) and inside("22:00-04:00", 30) and not inside("22:00-04:00", 12 * 60)
    assert inside("00:00-24:00", 0) and inside("00:00-24:00", 1439)


def _s(t: float, n: float) -> Scrape:
    return Scrape(t, counters={REQUESTS: n})


def test_the_rate_sums_the_replicas_over_the_last_window_only():
    series = {"r1": [_s(0, 0), _s(600, 1000), _s(1200, 1050)], "r2": [_s(600, 0), _s(1200, 30)]}
    rate, covered = rate_per_min(series, 600)  # type: ignore[misc]
    assert covered == 600 and rate == pytest.approx(5 + 3)  # the busy first 10 minutes are out of the window
    assert rate_per_min({"r1": [_s(0, 5)], "r2": []}, 600) is None  # one scrape: no rate yet
    # r2 down (its route does not answer: no scrapes): the domain's rate is r1's
    assert rate_per_min({"r1": [_s(0, 0), _s(600, 60)], "r2": []}, 600) == (6.0, 600)
