"""What a runbook needs of the inventory (another host's env map, a `prometheus_url`, the hosts a
`prometheus.replicas` matcher names), checked before anything reads a host: an offline `plan` and a
run's start say it in one line (exit 2) instead of a gate failing half-way through a run.
"""

from __future__ import annotations

from collections.abc import Collection

from orchestrator.language.runbook_model import Runbook
from orchestrator.language.steps import step_at


def inventory_problem(rb: Runbook, host: str, inventory_hosts: Collection[str], has_prometheus: bool) -> str | None:
    """The first thing `rb` needs of the inventory that it lacks for a run of `host`, in one line
    naming what to fix; None: nothing."""
    for where, steps in rb._named_step_lists():
        for i, st in enumerate(steps):
            env = st.manual.verify.env if st.manual is not None else st.env
            if env is not None and env.host != "this" and env.host not in inventory_hosts:
                return (f"runbook {rb.name}'s {step_at(where, i, st.id)} reads the env map of host {env.host!r}, which the "
                        f"inventory does not list ({', '.join(sorted(inventory_hosts)) or 'none'}): fix env.host or add "
                        f"the host to the inventory")
            # with source: prometheus, the analysis always has its query (defaulted when not written)
            q = st.analysis.prometheus if st.analysis is not None and st.analysis.source == "prometheus" else None
            reads = "a query: gate" if st.query is not None else "metrics with source: prometheus" if q is not None else None
            for other in (q.hosts() if q is not None else []):
                if other not in inventory_hosts:
                    return (f"runbook {rb.name}'s {step_at(where, i, st.id)} reads a replica on host {other!r} "
                            f"(prometheus.replicas' host=\"{other}\"), which the inventory does not list "
                            f"({', '.join(sorted(inventory_hosts)) or 'none'}): fix the matcher or add the host")
            if reads is not None and not has_prometheus:
                return (f"runbook {rb.name}'s {step_at(where, i, st.id)} reads {reads}, but the inventory names no "
                        f"prometheus_url for {host}: add it to the host's entry"
                        + (" or use source: relay" if st.analysis is not None else ""))
    return None
