"""Fleet runs: one runbook over several hosts, one at a time (`rollout --hosts a,b,c`).
- each host is a normal rollout run of its own; the next starts only after the previous ended DONE
  (its soak passed and, where asked, approved); the fleet stops at the first that does not, and
  its final line names the hosts not touched and the command that continues;
- before any host is touched the runbook's prerequisites must hold; an override names its host
  (`--override-prerequisite gpu02`) and is journaled as an approval on every run it lets start;
- a host the runbook does not name, an empty or repeated host: one line, exit 2, before anything runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from orchestrator.engine.rules.prerequisites import HostWord, unmet_in
from orchestrator.language.runbook import Runbook, default_runbook, load_runbook, shipped_runbooks  # noqa: F401 - re-exported
from orchestrator.util.outcome import Outcome
from orchestrator.util.user_errors import Refused, UserError

if TYPE_CHECKING:
    from orchestrator.journal.base import RunRecord

#: the approval gate a prerequisite override is journaled as (read by `check: prerequisites`)
OVERRIDE_GATE = "prerequisite:{host}"


def parse_hosts(text: str) -> list[str]:
    """`gpu03,gpu04,gpu23` -> the hosts in order; empty names and repeats are refused."""
    hosts = [h.strip() for h in text.split(",")]
    if not text.strip() or any(not h for h in hosts) or any(len(h.split()) > 1 for h in hosts):
        raise UserError(f"--hosts {text!r}: give host names separated by commas (no spaces), e.g. --hosts gpu03,gpu04,gpu23")
    repeated = sorted({h for h in hosts if hosts.count(h) > 1})
    if repeated:
        raise UserError(f"--hosts names {', '.join(repeated)} more than once: each host runs once, in the order given")
    return hosts


def runbook_for(hosts: Sequence[str], name: str | None) -> Runbook:
    """The fleet's runbook: the one named, which must cover every host; else the one shipped
    runbook whose `hosts:` covers them all (none or several: name it with --runbook)."""
    if name is not None:
        rb = load_runbook(name)
        foreign = [h for h in hosts if h not in rb.hosts]
        if foreign:
            raise UserError(f"runbook {rb.name} is written for {', '.join(rb.hosts)}, not {', '.join(foreign)}: "
                            f"pick the hosts' runbook with --runbook")
        return rb
    fits = [rb for rb in shipped_runbooks() if all(h in rb.hosts for h in hosts)]
    if len(fits) != 1:
        which = ", ".join(rb.name for rb in fits) if fits else "none of the shipped runbooks"
        raise UserError(f"--hosts {','.join(hosts)}: {which} covers these hosts; name the runbook with --runbook")
    return fits[0]


def refuse_unmet_prerequisites(rb: Runbook, journal: Any, overrides: Iterable[str], now: datetime | None = None,
                               words: Mapping[str, HostWord] | None = None) -> None:
    """Refuse while a prerequisite does not hold; `words`: what the prerequisite hosts say of themselves."""
    problems = unmet_in(journal, rb.prerequisites, now or datetime.now(UTC), overrides, words)
    if problems:
        names = " ".join(f"--override-prerequisite {p.host}" for p in rb.prerequisites)
        raise Refused(f"prerequisite not met: {'; '.join(problems)}. Nothing was started; run the prerequisite first, "
                      f"or override it by name ({names})")


def journal_overrides(journal: Any, run: RunRecord, overrides: Iterable[str], by: str, rb: Runbook | None = None) -> list[str]:
    """Journal each named override as an approval of the run; with `rb`, only those of prerequisites
    that do not hold now (an override that changes nothing is not put on record). The hosts journaled."""
    wanted = list(overrides)
    if rb is not None:
        now = datetime.now(UTC)
        wanted = [h for h in wanted if unmet_in(journal, [p for p in rb.prerequisites if p.host == h], now)]
    for host in wanted:
        journal.approve(run.run_id, OVERRIDE_GATE.format(host=host), by=f"--override-prerequisite ({by})")
    return wanted


class Interrupted(Exception):
    """A host's run was stopped by Ctrl-C: the fleet stops."""

    def __init__(self, host: str) -> None:
        super().__init__(host)
        self.host = host


@dataclass
class FleetResult:
    hosts: list[str]
    runs: list[RunRecord] = field(default_factory=list)
    refused: tuple[str, UserError] | None = None  # a host whose run was refused before it started
    interrupted: str | None = None  # a host whose run was interrupted (Ctrl-C)

    @property
    def outcome(self) -> str:
        """DONE when every host ended DONE, else the first other outcome (a refusal counts as ABORTED)."""
        for r in self.runs:
            if r.outcome != Outcome.DONE:
                return r.outcome or "UNEXPECTED"
        if self.refused is not None:
            return Outcome.ABORTED
        if self.interrupted is not None:
            return "INTERRUPTED"
        return Outcome.DONE if len(self.runs) == len(self.hosts) else "UNEXPECTED"

    @property
    def stopped_at(self) -> str | None:
        if self.refused is not None:
            return self.refused[0]
        if self.interrupted is not None:
            return self.interrupted
        bad = next((r for r in self.runs if r.outcome != Outcome.DONE), None)
        return bad.host if bad else None

    @property
    def not_started(self) -> list[str]:
        started = {r.host for r in self.runs} | {self.stopped_at}
        return [h for h in self.hosts if h not in started]

    def summary(self, tag: str, runbook: str) -> str:
        done = [r.host for r in self.runs if r.outcome == Outcome.DONE]
        if self.outcome == Outcome.DONE:
            return f"fleet DONE: {', '.join(done)} at {tag}, one host at a time"
        if self.refused is not None:
            host, exc = self.refused
            text = f"fleet stopped at {host}: its run was refused before it started: {exc}"
        elif self.interrupted is not None:
            text = f"fleet interrupted at {self.interrupted}: its run stopped where the line above says (`orchestrate resume` it)"
        else:
            last = self.runs[-1]
            text = (f"fleet stopped at {last.host}: run {last.run_id} ended {last.outcome}"
                    + (f" ({last.message.rstrip('.')})" if last.message else ""))
        text += f". DONE: {', '.join(done) or 'none'}"
        if self.not_started:
            text += f"; not started: {', '.join(self.not_started)}"
        rest = [h for h in self.hosts if h not in done]
        text += (f". Once what stopped the fleet at {self.stopped_at} is fixed (its run's message says what), "
                 f"`orchestrate rollout --hosts {','.join(self.hosts)} --tag {tag} --runbook {runbook}` goes on: a host "
                 f"already at the target ends DONE with nothing sent"
                 if rest else "")
        return text


def run_fleet(hosts: Sequence[str], run_one: Callable[[str], RunRecord],
              announce: Callable[[str, int, int], None] = lambda h, i, n: None) -> FleetResult:
    """Run `run_one(host)` for each host in order; stop at the first not DONE, refused or interrupted."""
    result = FleetResult(list(hosts))
    for i, host in enumerate(hosts):
        announce(host, i, len(hosts))
        try:
            final = run_one(host)
        except UserError as exc:
            result.refused = (host, exc)
            break
        except Interrupted:
            result.interrupted = host
            break
        result.runs.append(final)
        if final.outcome != Outcome.DONE:
            break
    return result
