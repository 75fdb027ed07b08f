"""`orchestrate` with the gatekeeper hooks (Ctrl-C or crash at a state, a journal clock stepped, a
rollback stalled between its checks and its run): ORCHESTRATOR_TEST_SIGNAL_AT, _JOURNAL_SHIFT_S,
_STALL_FILE. The same wrapper serves the schedule explorer's doors, so it lives once, in
orchestrator_sim/explore/hooks.py."""

import runpy

runpy.run_module("orchestrator_sim.explore.hooks", run_name="__main__", alter_sys=True)
