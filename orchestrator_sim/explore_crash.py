"""`orchestrate`, except that the process SIGKILLs itself right after its Nth journal write
(the approach of tests/e2e/crashing_orchestrate.py, for the schedule explorer).

ORCHESTRATOR_TEST_KILL_AFTER=N (0: never), ORCHESTRATOR_TEST_WRITE_LOG=path (one line per write:
`count method kind mutating`). The write that triggers the kill has been committed; the HTTP call
or the next write after it never happens.

ORCHESTRATOR_TEST_KILL_AT_CONTEXT=KEY[:N]: right after a context write that carries KEY (below).

ORCHESTRATOR_TEST_CLOCK_OFFSET_S=S (test-only, the explorer's `clock` door): the orchestrator's wall
clock reads S seconds off (a host whose clock was stepped), see explore_entry.clock_offset_hook.
"""

import os
import signal
import sys

from orchestrator.journal.sql import SqlJournal

KILL_AFTER = int(os.environ.get("ORCHESTRATOR_TEST_KILL_AFTER", "0"))
LOG = os.environ.get("ORCHESTRATOR_TEST_WRITE_LOG")
count = 0


def _wrap(cls, name):
    original = getattr(cls, name)

    def wrapped(self, *args, **kwargs):
        global count
        result = original(self, *args, **kwargs)
        count += 1
        if LOG:
            with open(LOG, "a") as fh:
                kind = args[3] if name == "record_intent" and len(args) > 3 else ""
                fh.write(f"{count} {name} {kind} {kwargs.get('mutating', '')}\n")
        if count == KILL_AFTER:
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    setattr(cls, name, wrapped)


for _n in ("record_transition", "record_intent", "record_outcome"):
    _wrap(SqlJournal, _n)


#: ORCHESTRATOR_TEST_KILL_AT_CONTEXT=KEY[:N]: SIGKILL right after the Nth (default 1st) context write
#: whose KEY is non-empty (e.g. `milestones`: mid cold start, after the gate journaled what it saw).
#: Context writes are not counted in KILL_AFTER's numbering (the sweep's write points stay as they were).
_AT_CONTEXT = os.environ.get("ORCHESTRATOR_TEST_KILL_AT_CONTEXT", "")
if _AT_CONTEXT:
    _key, _, _nth = _AT_CONTEXT.partition(":")
    _left = [int(_nth or "1")]
    _update = SqlJournal.update_context

    def _update_then_kill(self, lease, run_id, context):
        _update(self, lease, run_id, context)
        if (context or {}).get(_key):
            _left[0] -= 1
            if _left[0] == 0:
                os.kill(os.getpid(), signal.SIGKILL)

    SqlJournal.update_context = _update_then_kill

from orchestrator.cli import main  # noqa: E402
from orchestrator_sim.explore_entry import clock_offset_hook  # noqa: E402

clock_offset_hook()

sys.argv[0] = "orchestrate"
main()
