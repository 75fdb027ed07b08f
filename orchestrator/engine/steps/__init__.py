"""Step kinds as handlers, one per kind, registered in one table (`HANDLERS`).

Each handler has `describe(step, runbook)` (what `plan` prints: the gate checked after the step,
and a precondition; its text lives in `orchestrator.engine.step_descriptions`, which `plan` reads
without loading the handlers) and `async run(rt, node, step)` (the effect and the gate, through the
executor's `Runtime`). Adding a step kind is one new module that registers its handler, and its
description.

This package is pure at import time: it imports no HTTP client, no journal and no event loop, so
the offline `plan` can read the same table the executor runs. Effects happen only through `rt`.
"""

from orchestrator.engine.steps.base import HANDLERS, Description, Handler, StepOutcome, handler_for
from orchestrator.engine.steps import checks, compose, evidence, gates, language, logs, oneshot, telemetry  # noqa: F401  (register the handlers)
from orchestrator.engine.steps import canary, quiet  # noqa: F401,E402  (issue 23: the analysis and quiet handlers)
from orchestrator.engine.steps import envchecks, external  # noqa: F401,E402  (issue 23: env, manual and external gates)

__all__ = ["HANDLERS", "Description", "Handler", "StepOutcome", "handler_for"]
