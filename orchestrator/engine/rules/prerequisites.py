"""Prerequisites: another host's run in the journal, DONE and soaked (pure: fed the runs and the time).

The latest run of `runbook` on `host` that may have changed it decides: a later rollback or failed
retry supersedes an older DONE; an ABORTED run (it changed nothing) never does; a DONE with
"nothing to do" proves no soak and is passed over. It must have ended DONE at least `soaked` ago.
An override names a prerequisite's host (a typo is refused). Where the host itself was read
(`HostWord`), it has the last word on a DONE: a host rolled back from another machine is still
DONE in this journal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from orchestrator.util.durations import format_duration
from orchestrator.util.user_errors import UserError


@dataclass(frozen=True)
class HostWord:
    """compose-manager's action log (oldest first), its last successful up (tag, file), the runbook's file."""

    actions: Sequence[Any]
    current: tuple[str, str] | None
    file: str


def host_disagrees(host: str, run: Any, word: HostWord) -> str | None:
    """Why `host` itself says the journal's DONE `run` no longer holds (None: it agrees)."""
    ups = [a for a in word.actions if a.action == "compose_up"]
    last = max((i for i, a in enumerate(ups) if (a.tag, a.file) == (run.tag, word.file)), default=None)
    if last is None:
        return (f"{host}: the journal's {run.run_id} ended DONE at {run.tag}, but compose-manager's action log on {host} "
                f"holds no up of {word.file}@{run.tag}: look at {host}")
    away = [a for a in ups[last + 1:] if a.file != word.file]
    if away:
        a = away[-1]
        return (f"{host}: compose-manager on {host} has run {a.file}@{a.tag}"
                + (f" ({', '.join(a.services)})" if a.services else "") + (f" at {a.timestamp}" if a.timestamp else "")
                + f" since {run.run_id} ended DONE at {run.tag} (rolled back from another machine?); roll {host} out "
                f"again (and soak it) first")
    if word.current is not None and word.current[1] != word.file:
        return (f"{host}: compose-manager's last successful up on {host} is {word.current[1]}@{word.current[0]}, not "
                f"{word.file}@{run.tag} as the journal's {run.run_id} left it; look at {host}")
    return None


def check_overrides(prereqs: Iterable[Any], overrides: Iterable[str]) -> None:
    """An override must name a prerequisite's host: a typo never passes (one line, exit 2)."""
    prereqs = list(prereqs)
    unknown = set(overrides) - {p.host for p in prereqs}
    if unknown:
        raise UserError(f"--override-prerequisite {', '.join(sorted(unknown))}: not a prerequisite of this runbook "
                        f"(prerequisites: {', '.join(p.host for p in prereqs) or 'none'})")


def unfinished(journal: Any, hosts: Iterable[str], *, but: str | None = None) -> list[tuple[str, Any]]:
    """(host, run) for every run of these hosts that has not ended (but `but`): it may be out of its pool."""
    return [(h, r) for h in hosts for r in journal.list_runs(h, limit=50) if not r.terminal and r.run_id != but]


def unmet_in(journal: Any, prereqs: Iterable[Any], now: datetime, overrides: Iterable[str] = (),
             words: Mapping[str, HostWord] | None = None) -> list[str]:
    """`unmet`, reading the runs from the journal (a nothing-to-do DONE passed over)."""
    def nothing_to_do(run: Any) -> bool:  # it ended DONE at preflight's host-state check
        return run.outcome == "DONE" and any(t.event == "skip" and t.to_state == "DONE" and t.from_state.startswith("preflight.")
                                             for t in journal.transitions(run.run_id))
    return unmet(prereqs, lambda h: journal.list_runs(h), now, overrides, nothing_to_do, words)


def unmet(prereqs: Iterable[Any], runs_of: Any, now: datetime, overrides: Iterable[str] = (),
          placed_only: Callable[[Any], bool] = lambda run: False,
          words: Mapping[str, HostWord] | None = None) -> list[str]:
    """Why each prerequisite is not met. `runs_of(host)`: its runs, newest first; `placed_only(run)`:
    it ended DONE with nothing to do; `words`: what each host read says of itself."""
    prereqs = list(prereqs)
    overrides = set(overrides)
    check_overrides(prereqs, overrides)
    out: list[str] = []
    for p in prereqs:
        if p.host in overrides:
            continue
        # an ABORTED run (refused before any change) changed nothing: the run before it decides
        latest = next((r for r in runs_of(p.host) if r.runbook == p.runbook and not placed_only(r)
                       and r.kind in ("rollout", "rollback") and r.outcome != "ABORTED"), None)
        if latest is None or (latest.kind == "rollback" and not any(
                r.kind == "rollout" and r.runbook == p.runbook for r in runs_of(p.host))):
            out.append(f"{p.host}: no {p.runbook} rollout in the journal")
        elif latest.kind == "rollback":
            out.append(f"{p.host}: rollback {latest.run_id} ({latest.outcome or 'still running'}) took it back after "
                       f"its last {p.runbook} rollout; roll {p.host} out again (and soak it) first")
        elif latest.outcome != "DONE":
            out.append(f"{p.host}: its latest {p.runbook} rollout {latest.run_id} is {latest.outcome or 'still running'}, not DONE")
        else:
            ended = latest.updated_at if latest.updated_at.tzinfo else latest.updated_at.replace(tzinfo=now.tzinfo)
            if now - ended < timedelta(seconds=p.soaked):
                out.append(f"{p.host}: {latest.run_id} ended DONE {format_duration((now - ended).total_seconds())} ago, "
                           f"less than the {format_duration(p.soaked)} soak")
            elif words and p.host in words and (said := host_disagrees(p.host, latest, words[p.host])):
                out.append(said)
    return out
