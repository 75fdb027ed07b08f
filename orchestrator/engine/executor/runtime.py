"""The live services a step handler acts through: the one place effects happen.

`Runtime` holds the run's clients, journal, clock and typed context, and offers handlers small,
named operations (Temporal's activities): read the env map, list containers, send a dry run, send a
journaled mutating call, settle an unknown outcome, judge whether an engine serves, guard a stop,
wait. Handlers (`orchestrator/engine/steps/`) hold the rules; this module and its parts hold the I/O.

This module holds the run's state (`__init__`), the env map and the small helpers; the operations
come from one part per concern, each a sibling module (issue 26):
- runtime_clock.py     polls, log probes, heartbeats, abort checks;
- runtime_reads.py     docker/ps, compose-manager, the peers, an engine's log: reads only;
- runtime_preflight.py the rollback targets and the tag check, before a run acts;
- runtime_serving.py   whether an engine serves (the evidence), the soak's engine watches, `host now`;
- runtime_guards.py    the stop guard, the pool checks, rollback ownership;
- runtime_compose.py   compose requests, dry runs, journaled mutating calls, the ledgers they update;
- runtime_journal.py   this run's effects in the journal, the foreign-change checks;
- runtime_waits.py     settling an unknown up, following a down until it is gone.
Every name handlers and tests import from here (the exceptions, DryRunCall, the constants) still is.

Rules kept here (each pinned by a test in tests/executor/):
- every mutating call is journaled as an intent before it is sent and an outcome after; on resume
  an intent without an outcome is settled by observation (compose-manager's `GET /status`, the
  action log and docker/ps), never sent again;
- whether an engine *serves* is the one three-valued model of orchestrator/engine/serving_evidence.py
  (docker/ps, the log window, the model-proxy peers; never "not serving" for a ready line that
  docker's log rotation dropped); `stop_guard` allows stopping an engine only while it is known
  not to serve or an engine of another replica is known to serve: "unknown" never permits it;
- a dry run that changed docker/ps halts the run (docker/compose#14029).
"""

from __future__ import annotations

from typing import Any

import structlog

from orchestrator.util.clock import Clock
from orchestrator.hosts.envmap import EnvMap
from orchestrator.engine.executor.context import RunContext
from orchestrator.engine.executor.runtime_clock import HEARTBEAT_S, MIN_PROBE_REAL_S, AbortRequested, RuntimeClock
from orchestrator.engine.executor.runtime_compose import DryRunCall, RuntimeCompose
from orchestrator.engine.executor.runtime_guards import RuntimeGuards
from orchestrator.engine.executor.runtime_journal import ForeignChange, RuntimeJournal
from orchestrator.engine.executor.runtime_preflight import RuntimePreflight
from orchestrator.engine.executor.runtime_reads import COLD_START_WINDOW, RuntimeReads
from orchestrator.engine.executor.runtime_serving import SERVING_WINDOW, RuntimeServing
from orchestrator.engine.executor.runtime_waits import MAX_DOWN_RESENDS, SETTLE_S, RuntimeWaits
from orchestrator.hosts.host_clients import HostClients
from orchestrator.hosts.inventory import HostEntry
from orchestrator.journal.base import Journal, Lease, RunRecord
from orchestrator.language.machine import Node, Table
from orchestrator.engine.progress import Progress
from orchestrator.hosts.redaction import Redactor
from orchestrator.language.runbook import Runbook
from orchestrator.engine.serving_evidence import Verdict

__all__ = [
    "COLD_START_WINDOW", "HEARTBEAT_S", "MAX_DOWN_RESENDS", "MIN_PROBE_REAL_S", "SERVING_WINDOW", "SETTLE_S",
    "AbortRequested", "DryRunCall", "ForeignChange", "MaskedEnv", "Runtime", "ServingVerdict",
]

log = structlog.get_logger("orchestrator.executor")

#: The one serving model (orchestrator/engine/serving_evidence.py): three-valued, "unknown" never
#: permits a stop. `ServingVerdict` is its verdict (`serving`, `not_serving`, `unknown`, `why`).
ServingVerdict = Verdict


class MaskedEnv(Exception):
    """The env map read mid-run holds masked credentials: halt, send nothing."""


class Runtime(RuntimeClock, RuntimeReads, RuntimePreflight, RuntimeServing, RuntimeGuards, RuntimeCompose,
              RuntimeJournal, RuntimeWaits):
    def __init__(self, *, run: RunRecord, runbook: Runbook, table: Table, journal: Journal, lease: Lease,
                 clients: HostClients, entry: HostEntry, clock: Clock, poll_interval: float, redactor: Redactor,
                 progress: Progress, ctx: RunContext, yes: bool, soak_override: float | None) -> None:
        self.run = run
        self.rb = runbook
        self.table = table
        self.journal = journal
        self.lease = lease
        self.clients = clients
        self.entry = entry
        self.clock = clock
        self.poll = poll_interval
        self.redactor = redactor
        self.progress = progress
        self.ctx = ctx
        self.yes = yes
        self.soak_override = soak_override
        self.env: EnvMap | None = None
        self.node: Node | None = None
        self.visit_key = ""
        self.log = log.bind(run_id=run.run_id, host=run.host)
        self._hb_next = 0.0
        self._previous_ref_of = runbook.previous_ref_of()  # read on every log poll: once per run
        self._files_by_action_log: dict[str, str] | None = None  # service -> file of its newest up (log_window)

    # -- small helpers ------------------------------------------------------------------------
    def scrub(self, text: str) -> str:
        return self.redactor.scrub(text or "")

    def emit(self, kind: str, **fields: Any) -> None:
        self.progress.event(kind, clock=self.clock.monotonic(), **fields)

    def save_context(self) -> None:
        self.journal.update_context(self.lease, self.run.run_id, self.redactor.scrub_obj(self.ctx.to_json()))

    def approvals(self) -> set[str]:
        from orchestrator.engine.approval_scope import effective  # a `*` from before a resume/adoption is not read

        return effective(self.journal, self.run.run_id)

    def approve(self, gate: str, by: str) -> None:
        self.journal.approve(self.run.run_id, gate, by=by)

    # -- env map ---------------------------------------------------------------------------------
    async def read_env(self) -> EnvMap:
        env = await self.clients.dashboard.env_map(name=self.entry.instance_name)
        self.redactor.add(*env.redaction_values())
        fp = env.keys_fingerprint()
        if self.ctx.env_keys_fingerprint and self.ctx.env_keys_fingerprint != fp:
            self.log.warning("env_map_keys_changed", keys=len(env))
            self.emit("note", text="the host's env map keys changed since the run started; the map as read now is passed whole")
        self.ctx.env_keys_fingerprint = fp
        self.ctx.env_keys = len(env)
        self.env = env
        return env

    async def ensure_env(self) -> EnvMap:
        if self.env is None:
            env = await self.read_env()
            masked = env.masked_credentials()
            if masked:
                raise MaskedEnv(f"the env map of {self.entry.instance_name} now holds masked or placeholder values for "
                                f"{', '.join(masked)}: nothing more is sent; fix them in the dashboard, then resume")
        assert self.env is not None
        return self.env
