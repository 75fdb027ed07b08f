# Two entry points for a fresh machine; each installs what it needs into .venv itself.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-short-logs bench server-load explore explore-ci install clean diagram crash-all lock

# Every dependency pinned by requirements.lock (as the image and CI install them).
$(STAMP): pyproject.toml requirements.lock
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --constraint requirements.lock -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

## The main job: a full gpu02 rollout against the built-in simulated gpu02.
demo: $(STAMP)
	$(BIN)/orchestrate demo

## The whole test suite (unit, property, end-to-end over loopback, PostgreSQL journal). 8 workers on
## 2 cores: most end-to-end tests wait on simulated time more than they compute (the suite's CPU is
## about half of two cores' time at 4 workers), so more of them overlap; work stealing keeps a
## worker that drew the long end-to-end tests from finishing last alone.
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 8 --dist worksteal

## Issue 21: the whole suite, then the demo's fault cases, with every simulated engine keeping only its
## last LOG_LINES log lines (docker's log rotation), in chunks of JOBS workers (docs/explorer.md, "Short logs").
LOG_LINES ?= 500
SHORT_LOG_CHUNKS ?= tests/e2e tests/sim tests/server tests/executor tests/core tests/journal tests/clients tests/contract tests/parsers tests/explore
test-short-logs: $(STAMP)
	@rc=0; for chunk in $(SHORT_LOG_CHUNKS); do \
	  echo "== $$chunk (logs keep $(LOG_LINES) lines)"; \
	  $(BIN)/python -m pytest -q -n $(JOBS) --sim-log-lines $(LOG_LINES) $$chunk || rc=1; done; \
	$(BIN)/python scripts/short_logs_demo.py --lines $(LOG_LINES) --jobs $(JOBS) || rc=1; \
	exit $$rc

## docs/design.md's state diagram, regenerated from the gpu02 runbook's transition table.
diagram: $(STAMP)
	$(BIN)/python scripts/update_readme_diagram.py

## Benchmarks against the simulator (not part of the test suite).
bench: $(STAMP)
	$(BIN)/python -m bench

## orchestrate serve under a crowd: 200 clients, 100 slow connections, one address (docs/team-mode.md).
server-load: $(STAMP)
	$(BIN)/python -m bench.server_load

## The seeded schedule explorer (docs/explorer.md): SEEDS schedules from SEED, then the full crash
## sweep (every journal write and every mutating call in flight). JOBS in parallel; FAST=1: the CI (fast) form;
## SWEEP=none: the seeds only (the 1000-seed run of docs/explorer.md: make explore SEEDS=1000 FAST=1 SWEEP=none).
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

## The explorer's 100+ seed CI set (fast-form seeds 0-99 and 181, the holes, two sweep points):
## tests/explore/test_explore.py with EXPLORE_FULL=1; `make test` runs its fixed set of 18 seeds.
explore-ci: $(STAMP)
	EXPLORE_FULL=1 $(BIN)/python -m pytest -q -n $(JOBS) -p no:randomly tests/explore/test_explore.py

## Crash at every journal write of gpu02's and a base host's rollout, then resume (tests/e2e/test_crash_resume.py).
crash-all: $(STAMP)
	ORCHESTRATOR_CRASH_ALL=1 $(BIN)/python -m pytest -q -n $(JOBS) tests/e2e/test_crash_resume.py

## Re-pin every dependency (runtime and test) in requirements.lock after a change to pyproject.toml.
## pip-tools' pip-compile: maintained, and it resolves through pip itself, so it reads the same
## index configuration (pip.conf) as every `pip install` here; kept out of .venv (a tool, not a dependency).
lock:
	$(PY) -m venv .state/pip-tools
	.state/pip-tools/bin/pip install --quiet pip-tools
	.state/pip-tools/bin/pip-compile --quiet --strip-extras --extra test --no-emit-index-url --no-emit-find-links \
	  --output-file requirements.lock pyproject.toml

clean:
	rm -rf $(VENV) .state .pytest_cache .hypothesis
