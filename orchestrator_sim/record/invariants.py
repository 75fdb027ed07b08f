"""Rules every orchestrator run against the simulator must keep, checked on the call record.

`check_invariants` returns the violations as sentences (an empty list means none). Env maps are
compared key by key and reported by key only: no value ever appears in a message.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from orchestrator_sim.record.calls import RecordedCall, fingerprint
from orchestrator_sim.record.timeline import ServingTimeline, SlotChange, intervals_with_no_slot_serving

DEFAULT_PROJECT = "work"


def _label(call: RecordedCall) -> str:
    kind = call.path.rsplit("/", 1)[-1]
    if call.is_compose_up:
        kind = "dry-run compose/up" if call.dry_run else "compose/up"
    elif call.is_compose_down:
        kind = "compose/down"
    return f"call #{call.seq} ({kind} at t={call.at:.0f}s)"


def _body(call: RecordedCall) -> dict[str, Any]:
    return call.body if isinstance(call.body, dict) else {}


def _env_value_matches(sent: object, expected: str) -> bool:
    # calls.jsonl holds fingerprints instead of values
    return sent == expected or sent == fingerprint(expected)


def env_difference(sent: object, expected: Mapping[str, str]) -> str | None:
    """How an env map sent differs from the dashboard's, by key only; None when it is the same."""
    if not isinstance(sent, Mapping):
        return "no env map was sent"
    missing = sorted(set(expected) - set(sent))
    extra = sorted(set(sent) - set(expected))
    changed = sorted(k for k in set(sent) & set(expected) if not _env_value_matches(sent[k], expected[k]))
    if not (missing or extra or changed):
        return None
    parts = []
    if missing:
        parts.append("missing " + ", ".join(missing))
    if extra:
        parts.append("extra " + ", ".join(extra))
    if changed:
        parts.append("changed " + ", ".join(changed))
    return "; ".join(parts)


def _same_env(a: object, b: object) -> bool:
    if not isinstance(a, Mapping) or not isinstance(b, Mapping) or set(a) != set(b):
        return False
    return all(a[k] == b[k] for k in a)


def _request_key(call: RecordedCall) -> tuple[Any, ...]:
    b = _body(call)
    services = b.get("services") or []
    return (
        b.get("tag"),
        b.get("file"),
        b.get("project") or DEFAULT_PROJECT,
        tuple(sorted(services)) if isinstance(services, list) else repr(services),
        bool(b.get("force_recreate", False)),
    )


def _is_engine(service: str) -> bool:
    """An SGLang engine of the simulated files (model-sg-glm53-...)."""
    return service.startswith("model-sg-")


def _took_effect_maybe(call: RecordedCall) -> bool:
    """A mutating call whose docker command ran (or may have): anything answered 200."""
    return call.is_mutating and call.status == 200


def _dry_run_ok(call: RecordedCall) -> bool:
    return call.is_compose_up and call.dry_run and call.status == 200 and call.outcome == "done:ok"


def no_call_after(calls: Iterable[RecordedCall], t: float) -> list[str]:
    """Violations for every call received after simulation time `t`."""
    return _late_calls(calls, t)


def _late_calls(calls: Iterable[RecordedCall], t: float) -> list[str]:
    return [
        f"{_label(c)} to {c.server} {c.method} {c.path} arrived after t={t:.0f}s, when no call was expected any more"
        for c in calls
        if c.at > t
    ]


def check_invariants(
    calls: Sequence[RecordedCall],
    *,
    dashboard_env: Mapping[str, str] | Callable[[float], Mapping[str, str]] | None = None,
    timeline: ServingTimeline | tuple[Mapping[str, bool], Sequence[SlotChange]] | None = None,
    allow_outage: bool = False,
    no_call_after: float | None = None,
    after: float = 0.0,
) -> list[str]:
    """Check a call record (in arrival order) against the rollout rules.

    - every compose/up apply is preceded by a successful dry run of the same request (tag, file,
      project, services, env, force_recreate) with no other accepted mutating call in between;
    - `services` is never empty (or missing) on compose/up or compose/down;
    - `force_recreate` is true only on a request naming no engine (a scoped recreate of the
      services whose only change is inline `configs:` content, docker/compose#11900);
    - the env map is passed whole on every compose/up and compose/down: equal to `dashboard_env` (or, a
      function of the simulation time, the map as the dashboard served it when the call arrived);
    - after the initial state, the two replica slots are never both not serving (unless
      `allow_outage`), judged on `timeline`;
    - no container was ever removed as an orphan (each removal is listed);
    - no call arrived after simulation time `no_call_after`, if given.
    """
    calls = sorted(calls, key=lambda c: c.seq)
    out: list[str] = []
    compose = [c for c in calls if c.is_compose_up or c.is_compose_down]

    for c in compose:
        b = _body(c)
        services = b.get("services")
        if not isinstance(services, list) or not services:
            out.append(f"{_label(c)} had an empty services list (every service of the file)")
        if b.get("force_recreate"):
            engines = [s for s in services or [] if _is_engine(s)] if isinstance(services, list) else []
            if not isinstance(services, list) or not services or engines:
                out.append(f"{_label(c)} set force_recreate to true on {', '.join(engines) or 'every service'}")
        if dashboard_env is not None:  # the map as it was when the call arrived, if it changed mid-run
            diff = env_difference(b.get("env"), dashboard_env(c.at) if callable(dashboard_env) else dashboard_env)
            if diff:
                out.append(f"{_label(c)} did not pass the dashboard's env map whole ({diff})")

    for i, c in enumerate(calls):
        if not (c.is_compose_up and not c.dry_run):
            continue
        key = _request_key(c)
        env = _body(c).get("env")
        ok = False
        for prev in reversed(calls[:i]):
            if _dry_run_ok(prev) and _request_key(prev) == key and _same_env(_body(prev).get("env"), env):
                ok = True
                break
            if _took_effect_maybe(prev):
                break
        if not ok:
            out.append(
                f"{_label(c)} was not preceded by a successful dry run of the same request with no "
                f"other mutating call in between"
            )

    for c in calls:
        for effect in c.effects:
            if effect.startswith("orphan-removed:"):
                name = effect.split(":", 1)[1]
                out.append(
                    f"{_label(c)} removed the container {name} as an orphan (a plain 10 s stop, not its grace period)"
                )

    if timeline is not None and not allow_outage:
        if isinstance(timeline, ServingTimeline):
            initial, changes = timeline.initial, timeline.changes()
        else:
            initial, changes = dict(timeline[0]), list(timeline[1])
        for start, end in intervals_with_no_slot_serving(dict(initial), list(changes), after=after):
            until = f"t={end:.0f}s" if end is not None else "the end of the run"
            out.append(f"both replica slots were not serving from t={start:.0f}s to {until}")

    if no_call_after is not None:
        out.extend(_late_calls(calls, no_call_after))
    return out


def check_base_tier(
    serving: Mapping[str, Sequence[tuple[float, bool]]],
    stops_while_registered: Mapping[str, Sequence[tuple[float, str]]],
    *,
    allow_outage: bool = False,
) -> list[str]:
    """The base tier's rules, across its hosts (gpu03, gpu04, gpu23 as simulated):

    - drain before stop: no engine of a base host is stopped (down, recreate or orphan removal)
      while model-proxy still lists that host in its domain (`stops_while_registered`, per host:
      (time, engine));
    - capacity (unless `allow_outage`): at every moment at least n-1 of the n base hosts serve
      the base domain, i.e. are registered AND have a ready engine behind nginx and proxy-glm53
      (`serving`, per host: (time, serving) transitions, the first at t=0). The hosts move one
      at a time: a host that is out leaves the others to carry the whole domain. If fewer
      served at t=0 (a fault, e.g. `host-unhealthy` on every base host), the floor is that
      starting count: the run must not make it worse, but is not blamed for the start.
    """
    out: list[str] = []
    for host, stops in stops_while_registered.items():
        for at, engine in stops:
            out.append(
                f"[{host}] the engine {engine} was stopped at t={at:.0f}s while {host} was still registered "
                "in its domain (drain before stop)"
            )
    n = len(serving)
    if allow_outage or n < 2:
        return out
    events = sorted((at, host, up) for host, changes in serving.items() for at, up in changes)
    at_start = sum(1 for changes in serving.values() if changes and changes[0][1])
    floor = min(n - 1, at_start)
    state: dict[str, bool] = {}
    short_since: float | None = None
    fewest = n
    i = 0
    while i < len(events):
        at = events[i][0]
        while i < len(events) and events[i][0] == at:  # every change at this instant at once
            state[events[i][1]] = events[i][2]
            i += 1
        count = sum(1 for host in serving if state.get(host, False))
        if count < floor:
            if short_since is None:
                short_since, fewest = at, count
            fewest = min(fewest, count)
        elif short_since is not None:
            out.append(
                f"only {fewest} of {n} base hosts served the base domain from t={short_since:.0f}s to t={at:.0f}s "
                f"(at least {floor} must)"
            )
            short_since = None
    if short_since is not None:
        out.append(
            f"only {fewest} of {n} base hosts served the base domain from t={short_since:.0f}s to the end of the run "
            f"(at least {floor} must)"
        )
    return out
