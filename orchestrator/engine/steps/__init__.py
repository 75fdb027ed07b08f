"""Step kinds as handlers, one per runbook key, each registered in one table (`HANDLERS`).

Where each key's handler is (`MODULES`, read like pip's `commands_dict`): a module is named after
the key it serves, or holds a few keys of one concern (`checks`: every `check:`; `compose`: the
dry run, the up and the down; `gates`: the relay, the completion check and the soak; `logs`: the cold start).

Each handler has `async run(rt, node, step)` (the effect and the gate, through the operations of
`activities.Activities`); what `plan` prints of a step (the gate checked after it, and a
precondition) lives in `orchestrator.engine.step_descriptions`, which `plan` reads without loading
the handlers. Adding a step kind is one new module that registers its handler, its line here, and
its description.

This package is pure at import time: it imports no HTTP client, no journal and no event loop, so
the offline `plan` can read the same table the executor runs. Effects happen only through `rt`.
"""

from orchestrator.engine.steps.base import HANDLERS, Handler, StepOutcome, handler_for

#: runbook key (`check.<name>` for a preflight check) -> the module of `orchestrator.engine.steps` that serves it
MODULES: dict[str, str] = {
    "check.env_map": "checks", "check.budget": "checks", "check.rollback_targets": "checks",
    "check.before_state": "checks", "check.host_state": "checks", "check.tag_age": "checks",
    "check.model_cache": "checks", "check.prerequisites": "checks", "cache": "checks",
    "dry_run": "compose", "up": "compose", "down": "compose",
    "logs": "logs", "relay": "gates", "verify": "gates", "soak": "gates",
    "markers": "markers", "presence": "presence", "capture": "capture",
    "oneshot": "oneshot", "metrics": "metrics", "labels": "labels",
    "analysis": "analysis", "quiet": "quiet",
    "env": "env", "manual": "manual",
    "proxy_pool": "external", "pull_request": "external", "http_json": "external", "attestation": "external",
    "image": "external", "query": "query",
}

# importing a module registers its handlers (tests/executor/test_runtime_parts.py: the table says where each is)
from orchestrator.engine.steps import (  # noqa: E402,F401 - imported for their registration, after MODULES
    analysis,
    capture,
    checks,
    compose,
    env,
    external,
    gates,
    labels,
    logs,
    manual,
    markers,
    metrics,
    oneshot,
    presence,
    query,
    quiet,
)

__all__ = ["HANDLERS", "MODULES", "Handler", "StepOutcome", "handler_for"]
