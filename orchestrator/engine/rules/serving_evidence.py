"""Whether an engine serves: ONE model, pure, three-valued (serving / not serving / unknown). Every
guard, the soak, the cold-start gate's shortcut and every `host now` line judge through `judge`;
`Runtime` only gathers the evidence. The first piece of evidence that decides wins:
1. docker/ps: not listed, not `running`, `restarting`, health `unhealthy` / `starting` -> NOT
   SERVING; health `healthy` -> SERVING.
2. The log window (rotation may have dropped both the start and the ready line): a startup line
   with no ready line after it -> NOT SERVING; a ready line after the last startup line ->
   SERVING; neither: SERVING only when its cold start passed in this run in this very container
   (`ran_here`), else undecided. Never "not serving" for want of a line; an unreadable log decides
   nothing.
3. Live evidence: the soak relay answers /health on this engine's replica port (the only engine
   of that replica running), or did so for this very container right before a step stopped it
   (`relay_word`: a rollback stops the relay before its stop guards ask) -> SERVING; else both
   model-proxy peers route to the host and either no other engine of the host serves, or docker
   says it ran longer than a whole cold start and its window shows it working with no start.
4. Otherwise UNKNOWN, with every reason. UNKNOWN never permits a stop (`stop_refusal`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import partial

from orchestrator.hosts.parsers.docker_ps import Container


class State(StrEnum):
    SERVING = "serving"
    NOT_SERVING = "not serving"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Verdict:
    state: State
    why: str

    @property
    def serving(self) -> bool:
        return self.state is State.SERVING

    @property
    def not_serving(self) -> bool:
        return self.state is State.NOT_SERVING

    @property
    def unknown(self) -> bool:
        return self.state is State.UNKNOWN

    def phrase(self) -> str:
        """How a `host now` line says it: `serving`, `NOT serving (why)`, `unknown (why)`."""
        if self.serving:
            return "serving"
        return f"{'NOT serving' if self.not_serving else 'unknown'} ({self.why})"


#: A verdict by its state: `serving(why)`, `not_serving(why)`, `unknown(why)`.
serving = partial(Verdict, State.SERVING)
not_serving = partial(Verdict, State.NOT_SERVING)
unknown = partial(Verdict, State.UNKNOWN)


@dataclass(frozen=True)
class LogWindow:
    """A read of an engine's log: its lines, or why it could not be read. Fewer lines than `asked`
    are all docker still keeps (`whole`), not the log since the start: rotation drops the oldest."""

    lines: Sequence[str] | None
    error: str = ""
    asked: int | None = None

    @property
    def whole(self) -> bool:
        return self.lines is not None and self.asked is not None and len(self.lines) < self.asked

    @classmethod
    def unreadable(cls, error: str) -> LogWindow:
        return cls(None, error)


@dataclass(frozen=True)
class Peers:
    """`routed`: every peer lists the host healthy under a runbook domain (None: a peer could not be asked)."""

    routed: bool | None
    why: str


#: Lines SGLang logs only once its start is over (health checks, requests, batches).
ACTIVITY_MARKS = ('"GET /health HTTP/1.1" 200', '"POST /v1/chat/completions HTTP/1.1" 200', '"POST /generate HTTP/1.1" 200',
                  "Prefill batch", "Decode batch")


def past_its_start(lines: Sequence[str]) -> bool:
    return any(m in line for line in lines for m in ACTIVITY_MARKS)


_UP_RE = re.compile(r"^Up\s+(?:(?P<less>Less than a second)|(?P<about>About an? )?(?P<n>\d+|an?)?\s*(?P<unit>second|minute|hour|day|week|month|year)s?)", re.I)
_UNIT = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800, "month": 2592000, "year": 31536000}


def up_seconds(status: str) -> float | None:
    """Seconds since start from docker's `Up 5 minutes` (None when the status is not `Up ...`)."""
    m = _UP_RE.match(status.strip())
    if not m:
        return None
    if m.group("less"):
        return 0.0
    n = m.group("n")
    count = 1 if n in (None, "a", "an") else int(n)
    return float(count * _UNIT[m.group("unit").lower()])


def docker_health(c: Container) -> str:
    """docker's health of a container: `healthy`, `unhealthy`, `starting` or `` (no healthcheck)."""
    if c.health:
        return c.health.strip().lower()
    m = re.search(r"\((healthy|unhealthy|health: starting)\)", c.status or "")
    if not m:
        return ""
    return "starting" if m.group(1) == "health: starting" else m.group(1)


def from_docker(service: str, c: Container | None) -> Verdict | None:
    """What docker/ps alone decides (None: it does not)."""
    if c is None:
        return not_serving(f"{service} is not running")
    if c.state != "running" or c.restarting:
        return not_serving(f"{service} is {c.state} ({c.status})")
    health = docker_health(c)
    if health == "unhealthy":
        return not_serving(f"docker reports {service} unhealthy ({c.status})")
    if health == "starting":
        return not_serving(f"{service} is starting (docker: {c.status})")
    if health == "healthy":
        return serving(f"docker reports {service} healthy ({c.status})")
    return None


def from_log(service: str, log: LogWindow, *, ready_marks: Sequence[str], startup: str, ran_here: bool) -> Verdict | None:
    """What the log window decides (None: it does not). See the module docstring, rule 2."""
    if log.lines is None:
        return None
    last_ready = last_start = -1
    for i, line in enumerate(log.lines):
        if any(m in line for m in ready_marks):
            last_ready = i
        if startup in line:
            last_start = i
    if last_start > last_ready:
        if last_ready >= 0:
            return not_serving(f"{service} started again after its ready line (a restart inside its container)")
        return not_serving(f"{service} runs but has not logged its ready line since its start (cold start?)")
    if last_ready >= 0:
        return serving(f"{service} logged its ready line and has not started again since")
    if ran_here:
        return serving(f"{service} passed its cold start in this run (same container) and has not started again since")
    return None


#: A container up less than this whose whole log has no start line has not logged it yet (an
#: engine logs its start within seconds); one up longer lost it to docker's log rotation.
JUST_STARTED_S = 60.0


def judge(service: str, c: Container | None, log: LogWindow, *, ready_marks: Sequence[str], startup: str, ran_here: bool,
          peers: Peers | None, others: Mapping[str, Verdict], cold_start_s: float, relay: str | None = None) -> Verdict:
    """`others`: the other running engines' `base_verdict`s; `peers`: None when not asked; `relay`:
    what the soak relay said of this engine, when it answered /health (module doc, rule 3)."""
    decided = base_verdict(service, c, log, ready_marks=ready_marks, startup=startup, ran_here=ran_here)
    if not decided.unknown:
        return decided
    assert c is not None
    if relay:
        return serving(f"{service}: {relay}")
    if log.lines is None:
        gap = f"its log could not be read ({log.error})"
    elif log.whole and (up_seconds(c.status) or 0.0) < JUST_STARTED_S:
        gap = (f"neither its start nor its ready line is in its log, which holds {len(log.lines)} lines "
               f"(all of it) and is up only {c.status.removeprefix('Up ')}: it has not logged its start yet")
    elif log.whole:
        gap = (f"neither its start nor its ready line is in the {len(log.lines)} lines docker still keeps of its log "
               f"(fewer than the {log.asked} asked; up {c.status.removeprefix('Up ')}): its start rotated out")
    else:
        gap = f"neither its start nor its ready line is in its last {len(log.lines)} log lines (rotated)"
    if peers is None:
        return unknown(f"{service}: {gap}; the model-proxy peers were not asked")
    if not peers.routed:  # a peer does not list the host healthy, or could not be asked
        return unknown(f"{service}: {gap}; {peers.why}")
    if all(v.not_serving for v in others.values()):
        alone = "no other engine runs" if all("not running" in v.why for v in others.values()) else "no other engine serves"
        return serving(f"{service}: {gap}, but {peers.why} and {alone}")
    up = up_seconds(c.status)
    if log.lines is not None and up is not None and up >= cold_start_s and past_its_start(log.lines):
        return serving(f"{service} has run for {c.status.removeprefix('Up ')} (longer than a cold start) with no start in its "
                       f"last {len(log.lines)} log lines, which show it working, and {peers.why}")
    short = f" and it is up only {c.status.removeprefix('Up ')}" if up is not None and up < cold_start_s else ""
    return unknown(f"{service}: {gap}; {peers.why}, but another engine may be the one serving{short}")


#: The run context's `extra` key of the soak relay's word before it was stopped: service -> {id, said}.
RELAY_SEEN = "relay_seen"


def relay_word(seen: Mapping[str, Mapping[str, str]] | None, service: str, c: Container) -> str | None:
    """What the soak relay said of `service` before a step stopped it, if of this very container."""
    word = (seen or {}).get(service)
    if not word or word.get("id") != c.id:
        return None
    return f"{word.get('said')} (asked right before the relay was stopped in this run; the same container since)"


def base_verdict(service: str, c: Container | None, log: LogWindow, *, ready_marks: Sequence[str], startup: str,
                 ran_here: bool) -> Verdict:
    """docker/ps and the log alone (no live evidence)."""
    return (from_docker(service, c) or from_log(service, log, ready_marks=ready_marks, startup=startup, ran_here=ran_here)
            or unknown(f"{service}: not decided by docker/ps or its log"))


def stop_refusal(stopping: str, mine: Verdict, others: Mapping[str, Verdict], host: str) -> str | None:
    """The stop guard (non-fleet capacity): stop `stopping` only when it is known NOT to serve, or an
    engine of another replica is known to serve (None: allowed; else why not)."""
    if mine.not_serving:
        return None
    if any(v.serving for v in others.values()):
        return None
    whys = "; ".join(v.phrase() for v in others.values()) or "the runbook names no other replica"
    if mine.unknown:
        return (f"refusing to stop {stopping}: whether it serves is unknown ({mine.why}) and no other replica is known to "
                f"serve ({whys}); nothing was stopped. Judge the engines by hand, then resume")
    return (f"refusing to stop {stopping}: it serves, and no other replica does ({whys}); stopping it would leave "
            f"{host} with no serving replica. Nothing was stopped")


def publishes(c: Container, port: int) -> bool:
    """docker/ps `Ports` of `c` publish host port `port` (`0.0.0.0:8008-8009->8008-8009/tcp`)."""
    for part in str(c.raw.get("Ports") or "").split(","):
        host = part.strip().split("->", 1)[0]
        if "->" not in part or ":" not in host:
            continue
        span = host.rsplit(":", 1)[1]
        lo, _, hi = span.partition("-")
        try:
            if int(lo) <= port <= int(hi or lo):
                return True
        except ValueError:
            continue
    return False
