"""The #302 canary end to end (issue 23): r2 alone on the v2 image 8ff1a487b98a with
SGLANG_DSA_INDEXER_QSPLIT=1 and 16384-token chunks against r1, the untouched #294 control; device
memory read from the simulator's DCGM exporter through the relay's :8010 route.

- the simulator's #302 engine (TTFT and TPOT 0.7x, 9.3 GB free vs r1's 3.7 GB) is promoted;
- a memory squeeze (`memory-squeeze:r2`: 1.5 GB free) fails the device-memory gate: r2 goes back
  to the #294 file and tag, r1 the same container throughout;
- a watch on r1 during r2's cold start (`serving-errors:r1`: r1 aborts 20 %) fails the phase;
- the change itself is checked on the running r2 before any readout: run at the pdi-2 tag (whose r2
  is not #302), r2's startup line says chunked_prefill_size=8192 and its image is fde25985: the
  phase fails into its rollback, never a readout of something else;
- a candidate that aborts requests (`candidate-errors:r2`) fails completion against r1's.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import yaml
from recording import RecordingProgress
from waiting import wait_until_async

pytestmark = pytest.mark.e2e

SPEED = 3000.0
RUNBOOK = "gpu02-glm53-w4afp8-qsplit-canary"
CANARY_TAG = "v0.0.305"
R1 = "model-sg-glm53-w4afp8-tp4-r1"
R2 = "model-sg-glm53-w4afp8-tp4-r2"


NOON = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)  # outside the runbook's 01:00-05:00 quiet window
NIGHT = datetime(2026, 12, 2, 2, 30, tzinfo=UTC)  # inside it: no wait


@pytest.fixture
def canary(rehearsals):
    def make(*faults: str, wall: datetime = NOON, yes: bool = True, human=None, cold_start_s: float = 1200,
             tag: str = CANARY_TAG, runbook: str = RUNBOOK):
        r = rehearsals.run(*faults, runbook=runbook, tag=tag, r1=R1, speed=SPEED, wall=wall, yes=yes, human=human,
                           cold_start_s=cold_start_s)
        return r.fleet, r.final, r.r1_before, r.progress, r.session

    return make


def _notes(progress: RecordingProgress) -> list[str]:
    return [f.get("note") or "" for k, f in progress.events if k == "transition"]


def _readout(progress: RecordingProgress) -> str:
    found = [n for n in _notes(progress) if "canary readout:" in n]
    assert found, _notes(progress)
    return found[-1][found[-1].index("canary readout:"):]


def _r1_untouched(fleet, r1_before) -> None:
    r1 = fleet.host.container(R1)
    assert r1 is not None and r1.id == r1_before.id and r1.state == "running" and r1.tag == "v0.0.300"
    for c in fleet.calls:
        if (c.is_compose_up and not (c.body or {}).get("dry_run")) or c.is_compose_down:
            assert R1 not in (c.body or {}).get("services", []), c.body


def test_the_302_candidate_is_promoted_on_latency_and_device_memory(canary):
    fleet, final, r1_before, progress, _ = canary()
    assert final.outcome == "DONE", final.message
    # live traffic (40 requests/min on the long domain) never got quiet at noon: after 2 h, --yes went on
    quiet = [n for n in _notes(progress) if n.startswith("not quiet after 2h")]
    assert quiet and "requests/min, not below 10); a human approved going on" in quiet[0], _notes(progress)
    text = _readout(progress)
    assert text.startswith("canary readout: PASS"), text
    assert text.endswith("=> PROMOTE: r2 stays on the candidate"), text
    row = next(line for line in text.splitlines() if line.startswith("min_free_device_memory_gb") and "r2/r1" in line)
    assert "9.3 GB" in row and "3.7 GB" in row, text
    r2 = fleet.host.container(R2)
    assert r2.tag == CANARY_TAG and r2.state == "running"
    assert "8ff1a487b98a" in r2.image
    notes = _notes(progress)
    assert "model-sg-glm53-w4afp8-tp4-r2: log markers hold" in notes, notes  # chunked_prefill_size=16384
    assert any(n.startswith("model-sg-glm53-w4afp8-tp4-r2") and "8ff1a487b98a" in n for n in notes), notes
    completion = next(line for line in text.splitlines() if line.startswith("completion_rate") and "r2/r1" in line)
    assert completion.split()[-1] == "PASS", text
    _r1_untouched(fleet, r1_before)
    assert fleet.check_invariants() == []


def test_a_memory_squeeze_fails_the_canary_and_rolls_r2_back_with_r1_untouched(canary):
    fleet, final, r1_before, progress, _ = canary("memory-squeeze:r2")
    assert final.outcome == "ROLLED_BACK", final.message
    text = _readout(progress)
    assert text.startswith("canary readout: FAIL"), text
    assert text.endswith("=> REJECT: r2 goes back to what it ran before (the phase's rollback)"), text
    assert "FAIL: min_free_device_memory_gb of r2 >= 6: r2 min_free_device_memory_gb = 1.5 GB, not >= 6" in text, text
    # the latency gates still passed: the readout says which gate failed, not only that one did
    assert "FAIL: tpot_p50" not in text
    r2 = fleet.host.container(R2)
    assert r2.tag == "v0.0.300" and r2.state == "running" and "fde25985" in r2.image
    _r1_untouched(fleet, r1_before)
    assert fleet.check_invariants() == []


def test_a_watch_on_r1_during_r2s_cold_start_fails_the_phase(canary):
    """`serving-errors:r1`: the control aborts 20 % of its requests. The watch on r1 during r2's cold
    start breaches its 2 % bound before r2 is ready: the cold start is stopped and fails, the phase
    rolls r2 back to #294; r1 itself is never touched (the orchestrator reports, a human judges r1)."""
    # a 45-minute cold start (the runbook allows 50): a loaded machine's slow scrapes still get two
    # polls of r1 in before r2 is ready
    fleet, final, r1_before, progress, _ = canary("serving-errors:r1", cold_start_s=2700)
    assert final.outcome == "ROLLED_BACK", final.message
    notes = _notes(progress)
    hit = [n for n in notes if n.startswith("watch on r1 during cold-start: r1 error_rate = ")]
    assert hit and "not <= 0.02" in hit[0], notes
    assert not any("canary readout:" in n for n in notes)  # the phase never reached its readout
    r2 = fleet.host.container(R2)
    assert r2.tag == "v0.0.300" and r2.state == "running"
    _r1_untouched(fleet, r1_before)


def test_the_swap_waits_for_a_quiet_long_domain_or_the_night_window(canary):
    """`low-traffic` (1 request/min per engine): quiet within its 10-minute rate window, no human asked
    (the analysis then halts for too little traffic, as it must). At 02:30 UTC: inside the window at once."""
    fleet, final, _, progress, _ = canary("low-traffic")
    quiet = [n for n in _notes(progress) if n.startswith("the long domain is quiet: ")]
    assert quiet and "(below 10)" in quiet[0], _notes(progress)
    assert final.outcome == "HALTED", final.message
    fleet, final, _, progress, _ = canary("memory-squeeze:r2", wall=datetime(2026, 12, 2, 2, 30, tzinfo=UTC))
    assert any(n.startswith("inside the 01:00-05:00 UTC window after 0s") for n in _notes(progress)), _notes(progress)
    assert final.outcome == "ROLLED_BACK"


def test_without_yes_the_quiet_wait_asks_a_human_and_r2_stays_up_until_approved(canary):
    """At noon, on full traffic, nothing ends the wait but a human: after 2 h the run says what to run
    and waits; r2 is not stopped before `orchestrate approve` (here the journal's approve)."""
    seen: dict = {}

    def heartbeats(progress) -> int:
        return sum(1 for k, _ in progress.events if k == "heartbeat")

    async def human(session, run_id, progress, fleet):
        await wait_until_async(lambda: any(k == "waiting" and "go on anyway with `orchestrate approve" in str(f.get("gate"))
                                           for k, f in progress.events), "the quiet wait to ask a human")
        # three heartbeats of the wait later (15 simulated minutes of its polls): the run still waits
        asked = heartbeats(progress)
        await wait_until_async(lambda: heartbeats(progress) >= asked + 3, "three more heartbeats of the quiet wait")
        seen["r2_at_ask"] = fleet.host.container(R2).tag
        seen["downs_at_ask"] = sum(1 for c in fleet.calls if c.is_compose_down and R2 in (c.body or {}).get("services", []))
        session.journal.approve(run_id, "*", by="alice")

    fleet, final, r1_before, progress, _ = canary("memory-squeeze:r2", yes=False, human=human)
    assert seen == {"r2_at_ask": "v0.0.300", "downs_at_ask": 0}
    assert any(n.startswith("not quiet after 2h") and "a human approved going on" in n for n in _notes(progress))
    assert final.outcome == "ROLLED_BACK"  # then the canary ran (and its memory squeeze failed it)
    _r1_untouched(fleet, r1_before)


def test_at_a_tag_whose_r2_is_not_302_the_change_check_fails_before_any_readout(canary):
    """The pdi-2 tag v0.0.304 deploys an r2 at 8192-token chunks on fde25985: its startup line says
    so, the check of the change fails, r2 goes back to #294 and nothing is read out as #302."""
    fleet, final, r1_before, progress, _ = canary(wall=NIGHT, tag="v0.0.304")
    assert final.outcome == "ROLLED_BACK", final.message
    [note] = [n for n in _notes(progress) if "chunked_prefill_size=" in n]
    assert note.startswith("model-sg-glm53-w4afp8-tp4-r2: ") and "chunked_prefill_size=8192 is outside" in note, note
    assert "16384" in note, note
    assert not any("canary readout:" in n for n in _notes(progress))
    assert fleet.host.container(R2).tag == "v0.0.300"
    _r1_untouched(fleet, r1_before)


def test_the_image_check_fails_on_an_r2_not_pinned_by_the_v2_digest(canary, tmp_path):
    """The image gate alone (the args check left out): at v0.0.304 r2 runs fde25985, not 8ff1a487b98a."""
    from orchestrator.language.runbook import RUNBOOK_DIR

    raw = yaml.safe_load((RUNBOOK_DIR / f"{RUNBOOK}.yaml").read_text())
    raw["phases"][0]["steps"] = [s for s in raw["phases"][0]["steps"] if s["id"] != "change-args"]
    path = tmp_path / "qsplit-image-only.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    fleet, final, r1_before, progress, _ = canary(wall=NIGHT, tag="v0.0.304", runbook=str(path))
    assert final.outcome == "ROLLED_BACK", final.message
    assert any("8ff1a487b98a" in n and "fde25985" in n for n in _notes(progress)), _notes(progress)
    assert not any("canary readout:" in n for n in _notes(progress))
    _r1_untouched(fleet, r1_before)


def test_a_candidate_that_aborts_requests_fails_completion_against_r1(canary):
    """`candidate-errors:r2`: r2 completes 95 % where r1 completes all: r2/r1 wholly under 0.99."""
    fleet, final, r1_before, progress, _ = canary("candidate-errors:r2", wall=NIGHT)
    assert final.outcome == "ROLLED_BACK", final.message
    text = _readout(progress)
    row = next(line for line in text.splitlines() if line.startswith("completion_rate") and "r2/r1" in line)
    assert row.split()[-1] == "FAIL", text
    assert "FAIL: completion_rate r2/r1 >= 0.99: r2/r1 = " in text and "wholly outside >= 0.99" in text, text
    _r1_untouched(fleet, r1_before)
