"""Running a run: `executor/` drives the compiled machine one step handler at a time through the
runtime's parts; `steps/` holds the handlers by runbook key (`steps.MODULES`); `rules/` the pure
rules they apply (serving evidence, ownership, foreign changes, placement, prerequisites);
`context.py` the run's persisted context; `fleet.py` and `leave_pool.py` the runs over a tier."""
