"""docker/ps around a dry run, and which services a dry run may name (pure).

docker/compose#14029: a dry run that decides a running container needs a recreate performs the
real swap (and `--remove-orphans`), without the `DRY-RUN MODE -` prefix, and still ends in success.
So `compare_ps` compares docker/ps before and after EVERY dry run: a container recreated, gone, new
or restarted in place is a change. A gone one-shot is not (it exits on its own): the runbook's
`oneshot:` services and those a `depends_on` label waits for with `service_completed_successfully`.
And `split_by_definition` lets a check name only services it cannot recreate: absent ones, or
ones running from the very file (label `com.docker.compose.project.config_files`) and tag (the
action log) the dry run asks for.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence

from orchestrator.hosts.parsers.action_log import Action, last_deploy
from orchestrator.hosts.parsers.docker_ps import Container

CONFIG_FILES_LABEL = "com.docker.compose.project.config_files"
DEPENDS_ON_LABEL = "com.docker.compose.depends_on"  # "svc:condition:restart,..." as docker compose writes it

_UP_RE = re.compile(r"^Up\s+(?:(?P<less>Less than a second)|(?P<about>About an? )?(?P<n>\d+|an?)?\s*"
                    r"(?P<unit>second|minute|hour|day|week|month|year)s?)", re.I)
_UNIT = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800, "month": 2592000, "year": 31536000}


def up_for(status: str) -> float | None:
    """Seconds since start from docker's `Up 5 minutes` (None when not `Up ...`): never goes down
    while a container keeps running."""
    m = _UP_RE.match((status or "").strip())
    if not m:
        return None
    if m.group("less"):
        return 0.0
    n = m.group("n")
    return float((1 if n in (None, "a", "an") else int(n)) * _UNIT[m.group("unit").lower()])


def completion_dependencies(containers: Iterable[Container]) -> set[str]:
    """The services some container waits to complete (`service_completed_successfully`): one-shots."""
    out: set[str] = set()
    for c in containers:
        for entry in c.labels.get(DEPENDS_ON_LABEL, "").split(","):
            service, _, rest = entry.strip().partition(":")
            if rest.partition(":")[0] == "service_completed_successfully":
                out.add(service)
    return out


def compare_ps(before: Iterable[Container], after: Iterable[Container],
               oneshots: Collection[str] = ()) -> list[str]:
    """What changed between two docker/ps reads, one line per container (by name): `NAME recreated
    (...)`, `gone`, `new`, `restarted`."""
    b = {c.name: c for c in before}
    a = {c.name: c for c in after}
    oneshots = set(oneshots) | completion_dependencies([*b.values(), *a.values()])
    out: list[str] = []
    for name in sorted(set(b) | set(a)):
        old, new = b.get(name), a.get(name)
        if new is None:
            assert old is not None
            if (old.service or old.name) not in oneshots:
                out.append(f"{name} gone (was {old.id[:12]})")
        elif old is None:
            out.append(f"{name} new ({new.id[:12]})")
        elif (old.id, old.created_at) != (new.id, new.created_at):
            out.append(f"{name} recreated ({old.id[:12]} -> {new.id[:12]})")
        elif old.state == "running" and not old.restarting and (new.state != "running" or new.restarting):
            out.append(f"{name} restarted ({new.id[:12]} now {new.state}: {new.status})")
        else:
            t0, t1 = up_for(old.status), up_for(new.status)
            if t0 is not None and t1 is not None and t1 < t0:
                out.append(f"{name} restarted in place ({new.id[:12]}: {old.status!r} -> {new.status!r})")
    return out


def describe_changes(changes: Sequence[str]) -> str:
    return ", ".join(changes)


def runs_from(c: Container, file: str) -> bool | None:
    """Was `c` created from `file` (relative to compose-manager's work dir)? None: no label."""
    files = [f.strip() for f in c.labels.get(CONFIG_FILES_LABEL, "").split(",") if f.strip()]
    if not files:
        return None
    file = file.lstrip("/")
    return any(f == file or f.endswith("/" + file) for f in files)


def on_definition(c: Container, service: str, tag: str, file: str, actions: Sequence[Action]) -> bool | None:
    """Does the running `c` come from `file` at `tag` (by its label and the action log)? None: no label."""
    on = runs_from(c, file)
    if not on:
        return on
    last = last_deploy(actions, service)
    if last is not None and last.file == file and last.tag is not None and last.tag != tag:
        return False
    return True


def split_by_definition(services: Sequence[str], running: dict[str, Container], tag: str, file: str,
                        actions: Sequence[Action], engines: Collection[str] = ()) -> tuple[list[str], list[str]]:
    """(may be named, held back): held back are the services running another definition than
    `file`@`tag` (or an unknown one), and every running engine of `engines`."""
    safe: list[str] = []
    held: list[str] = []
    for s in services:
        c = running.get(s)
        if c is None or (s not in engines and on_definition(c, s, tag, file, actions)):
            safe.append(s)
        else:
            held.append(s)
    return safe, held
