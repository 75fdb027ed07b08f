"""The executor: runs a compiled table to a terminal state (`loop`), through the live services
handlers act on (`runtime`), under a renewed lease (`heartbeat`). Handlers are in engine/steps/."""

from orchestrator.engine.context import RunContext
from orchestrator.engine.executor.heartbeat import run_with_heartbeat
from orchestrator.engine.executor.loop import Executor, RunnerFenced

__all__ = ["Executor", "RunnerFenced", "RunContext", "run_with_heartbeat"]
