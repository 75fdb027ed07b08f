"""The runtime handlers receive: built from parts, offering exactly the `Activities` operations.

Rules (orchestrator/engine/executor/runtime.py, orchestrator/engine/steps/activities.py):
- every operation the protocol names is offered by the `Runtime` a handler receives (a name
  renamed or dropped on one side fails here, before a handler fails mid-run);
- each operation is done by a part, not by `Runtime` itself: `Runtime` only builds the parts;
- no handler can reach a client: the runtime holds none (`rt.clients` does not exist).
"""

from __future__ import annotations

import inspect

from fakes import Rig
from orchestrator.engine.executor import runtime as runtime_module
from orchestrator.engine.steps.activities import Activities


def _operations() -> set[str]:
    names = {n for n in getattr(Activities, "__annotations__", {})}
    names |= {n for n, v in vars(Activities).items() if not n.startswith("_") and (callable(v) or isinstance(v, property))}
    return names


def test_the_runtime_offers_every_activity():
    rt = Rig().ex.rt
    missing = sorted(n for n in _operations() if not hasattr(rt, n))
    assert not missing, f"Runtime lacks the activities {missing}"


def test_each_operation_is_done_by_a_part():
    rt = Rig().ex.rt
    parts = tuple(cls for _, cls in inspect.getmembers(runtime_module, inspect.isclass)
                  if cls.__module__ == runtime_module.__name__ and cls is not runtime_module.Runtime)
    methods = [n for n in _operations() if inspect.ismethod(getattr(rt, n, None))]
    assert len(methods) > 40
    not_parts = sorted(n for n in methods if not isinstance(getattr(rt, n).__self__, parts))
    assert not not_parts, f"done by Runtime itself, not by a part: {not_parts}"


def test_no_handler_can_reach_a_client():
    rt = Rig().ex.rt
    assert not hasattr(rt, "clients")
