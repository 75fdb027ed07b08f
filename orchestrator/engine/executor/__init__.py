"""The executor: runs a compiled table to a terminal state, one handler per step kind.

- `loop.Executor`: the run loop (look up the state's handler, run it, journal the transition);
- `runtime.Runtime`: the live services handlers act through (the only place effects happen);
- `context.RunContext`: the run's persisted, typed context;
- `heartbeat.run_with_heartbeat`: the lease renewal around a run.

The rules themselves live with the step handlers in `orchestrator/engine/steps/` and in `runtime`.
"""

from orchestrator.engine.executor.context import DryRunRecord, RunContext, same_request
from orchestrator.engine.executor.heartbeat import run_with_heartbeat
from orchestrator.engine.executor.loop import Executor, RunnerFenced

__all__ = ["Executor", "RunnerFenced", "run_with_heartbeat", "RunContext", "DryRunRecord", "same_request"]
