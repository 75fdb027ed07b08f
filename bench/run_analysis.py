"""Reading one instrumented run: its mandatory waits, its gates' detection latencies, and the split
of its wall time. Everything is on the simulation time axis (seconds); divide by the speed for
real seconds.

Definitions (the simulator's record is the reference, never the orchestrator's own view):

Mandatory waits (M), the union of:
- compose-manager operations: from the moment a `compose/up` (dry runs included) or
  `compose/down` request reached the simulator to the moment the simulated docker finished it
  (pulls, the 5-minute stop grace of an engine, orphan stops, one-shot dependencies);
- engine cold starts: from the engine's process start to its ready line (or to its exit, when it
  fails during the cold start);
- discovery: from the registrar's start to its registration, one discovery cycle later;
- soaks: the runbook's soak duration (or the override) from the start of the soak step.

Detection latency of a gate: from the simulator event that decides it (an engine's ready line,
an engine's failing exit, the registrar's registration) to the executor's transition out of the
gate's state. This is the polling latency (up to one poll interval plus the poll's own calls).

Split of a run's wall time T (all parts disjoint, summing to T):
- M: mandatory waits;
- P: polling latency (detection-latency intervals outside M);
- H: waiting for HTTP answers (client side: from handing a request to httpx to reading its answer,
  outside M and P): the simulator's handling, loopback transport, and the event loop getting
  round to the answer;
- R: the rest: the orchestrator's own work (building and parsing requests, journal writes, client
  setup, state machine), plus any wait for the event loop or the GIL between requests.
"Orchestrator time" O = T - M = P + H + R. For reference, S is the part of O spent inside the
simulator's request handlers by its own record (arrival to response end).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.language.machine import Table

from bench.harness import RunOutcome
from bench.intervals import clip, measure, subtract, union

ENGINE_PREFIX = "model-sg-"


@dataclass
class Detection:
    run_id: str
    gate: str  # the executor state, e.g. r2.cold-start
    kind: str  # ready | failure | discovery
    subject: str  # the container
    event_at: float  # simulation seconds
    transition_at: float
    to: str
    detecting_call_at: float | None = None  # when the poll that saw it reached the simulator (not before the event)

    @property
    def latency(self) -> float:
        return self.transition_at - self.event_at

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"latency": self.latency}


@dataclass
class RollbackReaction:
    run_id: str
    failed_gate: str
    failure_at: float
    fail_transition_at: float
    first_rollback_call_at: float | None  # any call the rollback makes
    first_rollback_effect_at: float | None  # its first compose/up or compose/down

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["to_first_call"] = None if self.first_rollback_call_at is None else self.first_rollback_call_at - self.failure_at
        d["to_first_effect"] = None if self.first_rollback_effect_at is None else self.first_rollback_effect_at - self.failure_at
        return d


def _service_of(state_step: Any) -> str | None:
    logs = getattr(state_step, "logs", None)
    return logs.service if logs is not None else None


def detections(out: RunOutcome, table: Table) -> list[Detection]:
    """One entry per gate whose deciding simulator event happened while the gate was waited on."""
    found: list[Detection] = []
    progress = out.progress.events
    starts = [e for e in progress if e.kind == "step_started"]
    for st in starts:
        state = st.fields["state"]
        node = table.nodes.get(state)
        if node is None or node.step is None:
            continue
        tr = next((e for e in progress if e.kind == "transition" and e.fields.get("state") == state and e.sim >= st.sim), None)
        if tr is None:
            continue
        kind = node.step.kind
        decisive = None
        if kind == "logs":
            service = _service_of(node.step)
            cands = [e for e in out.events if e.name == service and st.sim - 1e-6 <= e.at <= tr.sim
                     and (e.kind == "ready" or (e.kind == "exited" and e.detail.get("code") not in (0, None)
                                                 and not e.detail.get("stopped")))]
            if cands:
                decisive = cands[0]
        elif kind == "verify":
            cands = [e for e in out.events if e.kind == "registered" and st.sim <= e.at <= tr.sim]
            if cands:
                decisive = cands[-1]
        if decisive is None:
            continue
        label = {"ready": "ready", "exited": "failure", "registered": "discovery"}[decisive.kind]
        # The poll that saw it: the first call answered after the event. A call may reach the
        # simulator just before the event and still see it (the handler runs due events first).
        seen_by = [c for c in out.calls if c.at <= tr.sim
                   and (c.finished_at if c.finished_at is not None else c.at) >= decisive.at]
        found.append(Detection(out.final.run_id, state, label, decisive.name, decisive.at, tr.sim, tr.fields.get("to", ""),
                               max(seen_by[0].at, decisive.at) if seen_by else None))
    return found


def rollback_reactions(out: RunOutcome, table: Table) -> list[RollbackReaction]:
    """For a gate that failed on an engine failure: failure -> FAIL transition -> first rollback call."""
    res = []
    for d in detections(out, table):
        if d.kind != "failure":
            continue
        later = [c for c in out.calls if c.at >= d.transition_at]
        effects = [c for c in later if c.is_compose_down or (c.is_compose_up and not c.dry_run)]
        res.append(RollbackReaction(out.final.run_id, d.gate, d.event_at, d.transition_at,
                                    later[0].at if later else None, effects[0].at if effects else None))
    return res


def mandatory_intervals(out: RunOutcome, table: Table, soak_override: float | None = None) -> dict[str, list[tuple[float, float]]]:
    parts: dict[str, list[tuple[float, float]]] = {"compose": [], "cold_start": [], "discovery": [], "soak": [],
                                                   "oneshot": []}
    by_seq = {c.seq: c for c in out.calls}
    for e in out.events:
        if e.kind == "op_finished" and e.detail.get("seq") in by_seq:
            parts["compose"].append((by_seq[e.detail["seq"]].at, e.at))
    started: dict[str, float] = {}
    for e in out.events:
        if e.kind == "started" and e.detail.get("kind") == "engine":
            started[e.name] = e.at
        # a one-shot's run (the perception check's 120 s, a downloader): the step that waits for
        # its verdict cannot end before it exits
        if e.kind == "started" and e.detail.get("kind") == "oneshot":
            started["@oneshot:" + e.name] = e.at
        elif e.kind == "exited" and "@oneshot:" + e.name in started:
            parts["oneshot"].append((started.pop("@oneshot:" + e.name), e.at))
        elif e.name in started and (e.kind == "ready" or e.kind == "exited"):
            parts["cold_start"].append((started.pop(e.name), e.at))
        if e.kind == "started" and e.name == "model-proxy-registrar":
            started["@registrar"] = e.at
        elif e.kind == "registered" and "@registrar" in started:
            parts["discovery"].append((started.pop("@registrar"), e.at))
    for name, t0 in started.items():  # still cold-starting when the run ended
        if not name.startswith("@"):
            parts["cold_start"].append((t0, out.sim_end))
    for st in out.progress.events:
        if st.kind != "step_started":
            continue
        node = table.nodes.get(st.fields["state"])
        if node is not None and node.step is not None and node.step.soak is not None:
            duration = soak_override if soak_override is not None else node.step.soak.duration
            parts["soak"].append((st.sim, st.sim + duration))
    return {k: clip(v, out.sim_start, out.sim_end) for k, v in parts.items()}


@dataclass
class Split:
    speed: float
    total_real: float
    mandatory_real: float
    polling_real: float
    http_wait_real: float
    rest_real: float
    simulator_real: float
    by_kind_real: dict[str, float]
    replicas: int
    thread_cpu_s: float

    @property
    def orchestrator_real(self) -> float:
        return self.total_real - self.mandatory_real

    @property
    def ratio(self) -> float:
        return self.total_real / self.mandatory_real if self.mandatory_real else float("inf")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {
            "orchestrator_real": self.orchestrator_real,
            "orchestrator_per_replica_real": self.orchestrator_real / max(1, self.replicas),
            "ratio": self.ratio,
            "ratio_without_polling": (self.total_real - self.polling_real) / self.mandatory_real if self.mandatory_real else None,
            "http_wait_per_replica_real": self.http_wait_real / max(1, self.replicas),
            "own_work_per_replica_real": self.rest_real / max(1, self.replicas),
        }


def split(out: RunOutcome, table: Table, speed: float, *, replicas: int = 2, soak_override: float | None = None) -> Split:
    lo, hi = out.sim_start, out.sim_end
    parts = mandatory_intervals(out, table, soak_override)
    mandatory = union(x for v in parts.values() for x in v)
    polls = clip(((d.event_at, d.transition_at) for d in detections(out, table)), lo, hi)
    polling = subtract(polls, mandatory)
    calls = clip(((c.at, c.finished_at) for c in out.calls if c.finished_at is not None), lo, hi)
    simulator = subtract(subtract(calls, mandatory), polling)
    total = hi - lo
    # client-side request intervals, real -> simulation time (the run's clock is linear in real time)
    rate = total / out.real_s if out.real_s else speed
    http = clip(((lo + (h.start - out.real_start) * rate, lo + (h.end - out.real_start) * rate) for h in out.http), lo, hi)
    http_wait = subtract(subtract(http, mandatory), polling)
    m, p, h, s = measure(mandatory), measure(polling), measure(http_wait), measure(simulator)
    # Each kind alone (they overlap a little: an engine starts at the end of its up).
    by_kind = {k: measure(v) / speed for k, v in parts.items()}
    # Real seconds: the run's wall time is measured directly; the sim-time parts convert by speed.
    total_real = out.real_s
    scale = total_real / total if total else 1.0 / speed  # == 1/speed up to clock read jitter
    return Split(speed, total_real, m * scale, p * scale, h * scale, (total - m - p - h) * scale, s * scale, by_kind,
                 replicas, out.thread_cpu_s)


def per_state(out: RunOutcome, table: Table, speed: float, *, soak_override: float | None = None) -> list[dict[str, Any]]:
    """Orchestrator (non-mandatory) time by executor step, in real seconds, largest first.

    `(setup)` is from the start of `runner.execute` to the first step (lease, run log, clients);
    `(teardown)` from the last transition to the return (lease release, clients closed)."""
    parts = mandatory_intervals(out, table, soak_override)
    mandatory = union(x for v in parts.values() for x in v)
    started = [e for e in out.progress.events if e.kind == "step_started"]
    marks: list[tuple[float, str]] = [(e.sim, e.fields["state"]) for e in started]
    # the executor thread's CPU in each step (from the step's start to the next one's), waits included
    cpus = [e.cpu for e in started] + [max((e.cpu for e in out.progress.events), default=0.0)]
    step_cpu = [max(0.0, cpus[i + 1] - cpus[i]) for i in range(len(started))]
    rows = []
    bounds = [(out.sim_start, "(setup)")] + marks + [(max(e.sim for e in out.progress.events), "(teardown)")]
    for i, (t0, name) in enumerate(bounds):
        t1 = bounds[i + 1][0] if i + 1 < len(bounds) else out.sim_end
        if t1 <= t0:
            continue
        own = measure(subtract([(t0, t1)], mandatory))
        calls = sum(1 for c in out.calls if t0 <= c.at < t1)
        rows.append({"state": name, "orchestrator_real_s": own / speed, "wall_real_s": (t1 - t0) / speed, "calls": calls,
                     "cpu_s": step_cpu[i - 1] if 1 <= i <= len(step_cpu) else None})
    rows.sort(key=lambda r: -r["orchestrator_real_s"])
    return rows
