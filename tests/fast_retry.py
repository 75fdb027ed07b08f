"""A retry policy with (almost) no waiting, for the client tests (imported as a module)."""

from __future__ import annotations

from typing import Any

from orchestrator.hosts.clients.retry import RetryPolicy


def immediate_retry(**overrides: Any) -> RetryPolicy:
    values: dict[str, Any] = dict(initial_backoff_s=0.001, max_backoff_s=0.002, busy_wait_s=0.001, tag_not_found_wait_s=0.001)
    return RetryPolicy(**(values | overrides))
