"""The executor: runs a compiled table to a terminal state, one handler per step kind.

- `loop.Executor`: the run loop (look up the state's handler, run it, journal the transition);
- `runtime.Runtime`: the live services handlers act through (the only place effects happen), built
  from parts that each receive what they use;
- `heartbeat.run_with_heartbeat`: the lease renewal around a run;
- `pause`, `watch`, `placement`, `rollback_summary`: what the loop does around a step.

The run's persisted context is `orchestrator/engine/context.py`; the handlers are in
`orchestrator/engine/steps/`, the rules they apply in `orchestrator/engine/rules/`.
"""

from orchestrator.engine.context import RunContext
from orchestrator.engine.executor.heartbeat import run_with_heartbeat
from orchestrator.engine.executor.loop import Executor, RunnerFenced

__all__ = ["Executor", "RunnerFenced", "RunContext", "run_with_heartbeat"]
