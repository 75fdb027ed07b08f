"""`orchestrate`, except that the process SIGKILLs itself right after its Nth journal write.

Used by the crash tests: ORCHESTRATOR_TEST_KILL_AFTER=N (ORCHESTRATOR_TEST_WRITE_LOG=path logs each
write). The journal write that triggers the kill has been committed; everything after it (the
HTTP call, the next write) never happens. The same wrapper serves the schedule explorer, so it
lives once, in orchestrator_sim/explore/crash.py.
"""

import runpy

runpy.run_module("orchestrator_sim.explore.crash", run_name="__main__", alter_sys=True)
