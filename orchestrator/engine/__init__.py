"""Running a run: `executor/` drives the compiled machine one step handler at a time; `steps/` holds
the handlers by runbook key; `rules/` the pure rules they apply; `context.py` the run's persisted
context; `fleet.py` and `leave_pool.py` the runs over a tier."""
