"""`orchestrate`, with the hooks the gatekeeper's end-to-end tests need to act as an on-call team
does at the worst moment (tests/e2e/test_gatekeeper_admission.py, through
tests/e2e/gatekeeper_orchestrate.py). Each hook is off unless its variable is set:

- ORCHESTRATOR_TEST_SIGNAL_AT=HOST:STATE:SIGNAL - right after the journal committed a transition of a
  run of HOST into STATE (a prefix: `preflight.` is any preflight step), send SIGNAL (SIGINT: a
  Ctrl-C, handled as the CLI handles one; SIGKILL: a crash) to this process.
- ORCHESTRATOR_TEST_JOURNAL_SHIFT_S=-3600 - the journal's wall clock is this many seconds off (a
  clock stepped back one hour, as NTP or a VM restore does).
- ORCHESTRATOR_TEST_STALL_FILE=PATH - a rollback stalls right before it checks its rollback
  targets (a slow dry run, Ctrl-Z): it writes PATH.waiting and goes on only once PATH exists.
"""

import asyncio
import os
import signal
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from orchestrator.journal.sql import SqlJournal

SIGNAL_AT = os.environ.get("ORCHESTRATOR_TEST_SIGNAL_AT")
if SIGNAL_AT:
    _host, _state, _sig = SIGNAL_AT.split(":")
    _record = SqlJournal.record_transition

    def record_transition(self, lease, run_id, from_state, event, to_state, **kw):
        result = _record(self, lease, run_id, from_state, event, to_state, **kw)
        if run_id.startswith(f"{_host}-") and to_state.startswith(_state):
            os.kill(os.getpid(), getattr(signal, _sig))
        return result

    SqlJournal.record_transition = record_transition

SHIFT = float(os.environ.get("ORCHESTRATOR_TEST_JOURNAL_SHIFT_S", "0") or 0)
if SHIFT:
    SqlJournal._db_now = lambda self, tx: datetime.now(UTC) + timedelta(seconds=SHIFT)

STALL = os.environ.get("ORCHESTRATOR_TEST_STALL_FILE")
if STALL:
    import orchestrator.service.admission as _admission

    _validate = _admission.validate_rollback_targets

    async def validate_rollback_targets(*args, **kwargs):
        Path(STALL + ".waiting").write_text("stalled")
        while not Path(STALL).exists():
            await asyncio.sleep(0.05)
        return await _validate(*args, **kwargs)

    _admission.validate_rollback_targets = validate_rollback_targets

from orchestrator.cli import main  # noqa: E402 - imported after the hooks above are installed

sys.argv[0] = "orchestrate"
main()
