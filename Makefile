# Two entry points for a fresh machine; each installs what it needs into .venv itself.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench explore install clean diagram crash-all

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

## The main job: a full gpu02 rollout against the built-in simulated gpu02.
demo: $(STAMP)
	$(BIN)/orchestrate demo

## The whole test suite (unit, property, end-to-end over loopback, PostgreSQL journal).
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 4

## The README's state diagram, regenerated from the gpu02 runbook's transition table.
diagram: $(STAMP)
	$(BIN)/python scripts/update_readme_diagram.py

## Benchmarks against the simulator (not part of the test suite).
bench: $(STAMP)
	$(BIN)/python -m bench

## The seeded schedule explorer (docs/explorer.md): SEEDS schedules from SEED, then the full crash
## sweep (every journal write and every mutating call in flight). JOBS in parallel; FAST=1: the CI (fast) form.
SEEDS ?= 100
SEED ?= 0
JOBS ?= 2
SWEEP ?= all
explore: $(STAMP)
	@rc=0; $(BIN)/python -m orchestrator_sim.explore --seed $(SEED) --seeds $(SEEDS) --jobs $(JOBS) $(if $(FAST),--fast,) \
	  --report .state/explore/seeds.md || rc=1; \
	if [ "$(SEEDS)" != "1" ] && [ "$(SWEEP)" != "none" ]; then \
	  $(BIN)/python -m orchestrator_sim.explore --sweep $(SWEEP) --jobs $(JOBS) --report .state/explore/sweep.md || rc=1; fi; \
	exit $$rc

## Crash at every journal write of gpu02's and a base host's rollout, then resume (tests/e2e/test_crash_resume.py).
crash-all: $(STAMP)
	ORCHESTRATOR_CRASH_ALL=1 $(BIN)/python -m pytest -q -n $(JOBS) tests/e2e/test_crash_resume.py

clean:
	rm -rf $(VENV) .state .pytest_cache .hypothesis
