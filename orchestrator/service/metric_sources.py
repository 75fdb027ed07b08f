"""Run-start refusals about where a runbook's analyses read their metrics: an analysis
with `source: prometheus` on a host whose inventory entry names no `prometheus_url` would only
fail half-way through the canary, after r2 was already recreated; it is refused before the run
starts (one line, exit 2)."""

from __future__ import annotations

from orchestrator.hosts.inventory import HostEntry
from orchestrator.language.runbook import Runbook
from orchestrator.util.user_errors import UserError


def prometheus_steps(rb: Runbook) -> list[str]:
    """`list.steps[i] (id)` of every analysis step that reads a Prometheus query API."""
    return [f"{where}.steps[{i}] ({st.id})" for where, steps in rb._named_step_lists()
            for i, st in enumerate(steps) if st.analysis is not None and st.analysis.source == "prometheus"]


def refuse_missing_sources(entry: HostEntry, host: str, rb: Runbook) -> None:
    needing = prometheus_steps(rb)
    if needing and entry.prometheus_url is None:
        raise UserError(f"runbook {rb.name}'s {needing[0]} reads metrics with source: prometheus, but the inventory "
                        f"names no prometheus_url for {host}: add it to the host's entry or use source: relay")
