"""Step kinds as handlers, one per runbook key (`check.<name>` for a preflight check), registered in
`HANDLERS`. A module is named after the key it serves, or holds a few keys of one concern (`checks`,
`compose`: dry run, up, down; `gates`: relay, verify, soak; `external`). Each handler is
`async run(rt, node, step)`, acting only through `activities.Activities`; what `plan` prints of a
step lives in `orchestrator.engine.step_descriptions`. Pure at import time: no HTTP client, no
journal, no event loop, so the offline `plan` reads the same table the executor runs.
"""

import importlib
import pkgutil

from orchestrator.engine.steps.base import HANDLERS, Handler, StepOutcome, handler_for

for _module in pkgutil.iter_modules(__path__):  # every module of this package, each registering its handlers
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["HANDLERS", "Handler", "StepOutcome", "handler_for"]
