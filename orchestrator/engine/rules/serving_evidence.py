"""Whether an engine serves: ONE model, pure, three-valued (serving / not serving / unknown).

Every guard (the stop guard before any down), the soak, the cold-start gate's "already serving"
shortcut and every `host now` line judge an engine through `judge` below; `Runtime` only gathers
the evidence (docker/ps, the log window, the model-proxy peers).

Evidence, in order (the first that decides wins):
1. docker/ps: not listed, not `running`, `restarting`, or docker's health `unhealthy` /
   `starting` -> NOT SERVING. Docker's health `healthy` (an engine whose file defines a
   healthcheck) -> SERVING.
2. The log window (docker's log rotation keeps only the last N lines, so the window may hold
   neither the start nor the ready line of a long-running engine):
   - a startup line with no ready line after it (a cold start, or a restart inside the same
     container) -> NOT SERVING: both lines fall in the window once the start does;
   - a ready line after the last startup line -> SERVING;
   - neither line: SERVING only for an engine whose cold start passed in this run in this very
     container (`ran_here`: its ready line was seen by this run, nothing started since);
     for any other engine the log decides nothing. Never "not serving" for want of a line.
   A log that could not be read decides nothing either.
3. Live evidence for an engine the log could not decide: the soak relay, where it runs, answers
   /health on the port of this engine's replica (the only engine of that replica running) ->
   SERVING; the soak relay did so earlier in this run, for this very container, right before a
   step stopped the relay (`relay_word`: the relay is the only live evidence per replica, and a
   rollback stops it before its stop guards ask) -> SERVING, the log having shown no start since;
   else both model-proxy peers route to the host (list it healthy under a runbook
   domain), and either
   - no other engine of the host serves (each is known NOT SERVING): the peers' health can only
     come from this engine; or
   - docker says it has run longer than a whole cold start may take (the runbook's cold-start
     limit) and its log window (read) holds no startup line but shows it working (health checks
     answered, batches run): it is past its start, has not started again, and the host it
     belongs to is routed to.
4. Otherwise UNKNOWN, with every reason. UNKNOWN never permits a stop (see `stop_refusal`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

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


def serving(why: str) -> Verdict:
    return Verdict(State.SERVING, why)


def not_serving(why: str) -> Verdict:
    return Verdict(State.NOT_SERVING, why)


def unknown(why: str) -> Verdict:
    return Verdict(State.UNKNOWN, why)


@dataclass(frozen=True)
class LogWindow:
    """What a read of an engine's log gave: its lines, or why it could not be read. `asked`: the
    number of lines the read asked for; fewer back means these are all the lines docker still
    keeps (`whole`). That is not the log since the start: docker's rotation drops the oldest
    files, so a start missing from a whole window was either not logged yet (a container up
    only seconds) or rotated out (`judge` tells them apart by the container's up time)."""

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
    """The model-proxy peers' view of the host: `routed` True when every peer lists it healthy
    under one of the runbook's domains, False when a peer does not, None when a peer could not
    be asked. `why` says which."""

    routed: bool | None
    why: str


#: Lines SGLang logs only once its start is over: it answers /health, serves a request, runs a
#: prefill or decode batch. A window holding one (and no startup line) saw the engine past its start.
ACTIVITY_MARKS = ('"GET /health HTTP/1.1" 200', '"POST /v1/chat/completions HTTP/1.1" 200', '"POST /generate HTTP/1.1" 200',
                  "Prefill batch", "Decode batch")


def past_its_start(lines: Sequence[str]) -> bool:
    """The window shows the engine working (ACTIVITY_MARKS): its start was over by then."""
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
    """The verdict on one engine from every piece of evidence (module docstring).

    `others`: the verdicts on the host's other running engines from docker and the log alone
    (`base_verdict`); `peers`: None when not asked (the caller asks only when needed); `relay`:
    set (to what it saw) when the soak relay's port of this engine's replica answered /health
    while this engine is the only one of its replica running (live, per engine)."""
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


#: The run context's `extra` key of the soak relay's word taken before it was stopped:
#: service -> {"id": container ID, "said": what the relay answered}.
RELAY_SEEN = "relay_seen"


def relay_word(seen: Mapping[str, Mapping[str, str]] | None, service: str, c: Container) -> str | None:
    """What the soak relay said of `service` before a step stopped it, if said of this very
    container (None: nothing, or of another container)."""
    word = (seen or {}).get(service)
    if not word or word.get("id") != c.id:
        return None
    return f"{word.get('said')} (asked right before the relay was stopped in this run; the same container since)"


def base_verdict(service: str, c: Container | None, log: LogWindow, *, ready_marks: Sequence[str], startup: str,
                 ran_here: bool) -> Verdict:
    """docker/ps and the log alone (no live evidence): what `judge` weighs the other engines by."""
    return (from_docker(service, c) or from_log(service, log, ready_marks=ready_marks, startup=startup, ran_here=ran_here)
            or unknown(f"{service}: not decided by docker/ps or its log"))


def stop_refusal(stopping: str, mine: Verdict, others: Mapping[str, Verdict], host: str) -> str | None:
    """The stop guard's rule (non-fleet capacity): stopping `stopping` is allowed only when it is
    known NOT to serve, or an engine of another replica is known to serve. Unknown never allows
    it. None: allowed; else the one-line reason."""
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
