"""Running a run: the executor drives the compiled machine one step handler at a time, with the
rules the handlers share (serving evidence, placement, ownership, prerequisites, fleets)."""
