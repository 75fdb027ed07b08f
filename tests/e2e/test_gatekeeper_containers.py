"""Issue 21, cases 6 and 9, against the simulator: a rollback stops only containers its run
created (by container ID, never by service name), and is judged by what its target needs.

Judged on the simulator's own record (its calls and containers), never on what the orchestrator
says about itself.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.progress import RecordingProgress
from orchestrator.runbook import DEFAULT_RUNBOOK

pytestmark = pytest.mark.e2e

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
R1 = "model-sg-glm53-w4afp8-tp4-r1"
R2_NEW = "model-sg-glm53-w4afp8-tp4-r2"
R2_OLD = "model-sg-glm53-fp8-tp4-r2"
NEW_FILE = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml"
OLD_FILE = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-Canary.yaml"
BUDGET = "GLM53_HICACHE_RAM_BUDGET"


def running(fleet, host=None):
    h = fleet.hosts[host] if host else fleet.host
    return {c.service: c for c in h.containers() if c.state in ("running", "restarting")}


def downs_of(fleet, service):
    return [c for c in fleet.calls if c.is_compose_down and c.body["services"] == [service]]


# -- case 6 ---------------------------------------------------------------------------------------
def test_a_refused_down_of_the_old_r1_never_lets_the_rollback_stop_it(e2e_factory):
    """r1's step-7 down of the old r1 is answered 409 busy six times (the client's retries spent):
    the gate fails and r1's rollback runs. Its `stop-new` names the same service as the old r1, but
    the running container is not one this run created: it is left running (same container ID,
    serving), the run halts with both replicas serving and says what it left running."""
    from orchestrator.runner import execute, new_rollout

    e = e2e_factory("down-busy:r1")
    old_r1 = running(e.fleet)[R1]
    assert old_r1.file == OLD_FILE
    run, rb, table = new_rollout(e.session, "gpu02", "v0.0.300", DEFAULT_RUNBOOK)
    final = asyncio.run(execute(e.session, run, rb, table, progress=RecordingProgress(), yes=True))

    assert final.outcome == "HALTED", final.message
    assert final.message.startswith("r1.stop-old failed: compose-manager did not run the down"), final.message
    # the simulator's record: every down of r1 was refused, none reached docker
    r1_downs = downs_of(e.fleet, R1)
    assert len(r1_downs) == 6 and all(c.status == 409 for c in r1_downs), [(c.status, c.outcome) for c in r1_downs]
    now = running(e.fleet)
    assert now[R1].id == old_r1.id and now[R1].state == "running" and now[R1].file == OLD_FILE
    assert now[R1].ready and now[R1].restart_count == old_r1.restart_count
    assert not [c for c in e.fleet.timeline.changes() if c.slot == "r1"]  # r1 served at every moment
    assert now[R2_NEW].file == NEW_FILE
    # what was left running, and why, is in the final message
    assert "NOT stopped" in final.message and old_r1.id[:12] in final.message, final.message
    # the journal's ledger: the new r2 is the run's, the old r1 never was
    ctx = e.session.journal.get_run(run.run_id).context
    assert now[R2_NEW].id in ctx["created"] and old_r1.id not in ctx["created"]
    assert old_r1.id not in ctx["stopped"]
    assert e.fleet.check_invariants() == []
