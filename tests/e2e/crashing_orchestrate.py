"""`orchestrate`, except that the process SIGKILLs itself right after its Nth journal write.

Used by the crash tests: ORCHESTRATOR_TEST_KILL_AFTER=N. The journal write that triggers the kill
has been committed; everything after it (the HTTP call, the next write) never happens.
"""

import os
import signal
import sys

from orchestrator.journal.sql import SqlJournal  # the shared implementation of both backends

KILL_AFTER = int(os.environ["ORCHESTRATOR_TEST_KILL_AFTER"])
LOG = os.environ.get("ORCHESTRATOR_TEST_WRITE_LOG")
count = 0


def wrap(cls, name):
    original = getattr(cls, name)

    def wrapped(self, *args, **kwargs):
        global count
        result = original(self, *args, **kwargs)
        count += 1
        if LOG:
            with open(LOG, "a") as fh:
                kind = args[3] if name == "record_intent" and len(args) > 3 else ""
                mut = kwargs.get("mutating", "")
                fh.write(f"{count} {name} {kind} {mut}\n")
        if count == KILL_AFTER:
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    setattr(cls, name, wrapped)


for n in ("record_transition", "record_intent", "record_outcome"):
    wrap(SqlJournal, n)

from orchestrator.cli import main  # noqa: E402

sys.argv[0] = "orchestrate"
main()
