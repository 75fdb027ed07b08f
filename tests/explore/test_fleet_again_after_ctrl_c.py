"""Explorer seed 423: the base fleet Ctrl-C'd while gpu23's run waits on model-downloader, then the
fleet command again. It started a new gpu23 run that sent the model-downloader up again (I3: a
repeated call the journal knew was effective) and left the first run unfinished. The fleet now
resumes the host's own interrupted rollout (orchestrator/service/runs.py `_own_interrupted_run`)."""

from __future__ import annotations

import pytest

from orchestrator_sim import explore


@pytest.mark.e2e
def test_the_fleet_again_resumes_the_interrupted_host_run_and_sends_nothing_twice(tmp_path) -> None:
    r = explore.run_hole("fleet-again-after-ctrl-c", tmp_path)
    assert any(c.endswith("-> 130") or "-> 130 " in c for c in r.commands), r.commands  # the first fleet was Ctrl-C'd
    assert not r.violations, r.violations
