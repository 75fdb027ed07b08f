"""`orchestrate`, except that the process SIGKILLs itself right after its Nth journal write
(the approach of tests/e2e/crashing_orchestrate.py, for the schedule explorer).

ORCHESTRATOR_TEST_KILL_AFTER=N (0: never), ORCHESTRATOR_TEST_WRITE_LOG=path (one line per write:
`count method kind mutating`). The write that triggers the kill has been committed; the HTTP call
or the next write after it never happens.

ORCHESTRATOR_TEST_KILL_AT_CONTEXT=KEY[:N]: right after a context write that carries KEY (below).

ORCHESTRATOR_TEST_CLOCK_OFFSET_S=S (test-only, the explorer's `clock` door): the orchestrator's wall
clock reads S seconds off (a host whose clock was stepped), see doors.clock_offset_hook.

Run as `python -m orchestrator_sim.explore.crash ARGS`, or by the explorer's fork server
(fork.py): `install()` once in the warm interpreter, `configure()` and `run_cli()` in
each forked command.
"""

import os
import signal
import sys

KILL_AFTER = 0
LOG: str | None = None
count = 0
_installed = False


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


def install() -> None:
    """Wrap the journal's writes (once per interpreter)."""
    global _installed
    if _installed:
        return
    from orchestrator.journal.sql import SqlJournal

    for _n in ("record_transition", "record_intent", "record_outcome"):
        _wrap(SqlJournal, _n)
    _update = SqlJournal.update_context

    def _update_then_kill(self, lease, run_id, context):
        _update(self, lease, run_id, context)
        if _AT_CONTEXT[0] and (context or {}).get(_AT_CONTEXT[0]):
            _AT_CONTEXT[1] -= 1
            if _AT_CONTEXT[1] == 0:
                os.kill(os.getpid(), signal.SIGKILL)

    SqlJournal.update_context = _update_then_kill
    _installed = True


#: ORCHESTRATOR_TEST_KILL_AT_CONTEXT=KEY[:N]: SIGKILL right after the Nth (default 1st) context write
#: whose KEY is non-empty (e.g. `milestones`: mid cold start, after the gate journaled what it saw).
#: Context writes are not counted in KILL_AFTER's numbering (the sweep's write points stay as they were).
_AT_CONTEXT: list = ["", 0]


def configure() -> None:
    """Read this command's hooks from its environment (a forked command: after its env is set)."""
    global KILL_AFTER, LOG, count
    KILL_AFTER = int(os.environ.get("ORCHESTRATOR_TEST_KILL_AFTER", "0") or 0)
    LOG = os.environ.get("ORCHESTRATOR_TEST_WRITE_LOG")
    count = 0
    key, _, nth = os.environ.get("ORCHESTRATOR_TEST_KILL_AT_CONTEXT", "").partition(":")
    _AT_CONTEXT[:] = [key, int(nth or "1")]
    if os.environ.get("ORCHESTRATOR_TEST_BREAK"):
        from orchestrator_sim.explore.human import apply_breaks

        apply_breaks()


def run_cli() -> None:
    from orchestrator.cli import main
    from orchestrator_sim.explore.doors import clock_offset_hook

    clock_offset_hook()
    sys.argv[0] = "orchestrate"
    main()


if __name__ == "__main__":
    install()
    configure()
    run_cli()
