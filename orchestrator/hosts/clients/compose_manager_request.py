"""A compose-manager `compose/up` / `compose/down` request (`ComposeRequest`), checked before anything
is sent (`RequestInvalid` names the first bad field, never an env value), its body and its redacted
form (what may be logged or journaled).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any, Literal

from orchestrator.hosts.clients.errors import RequestInvalid
from orchestrator.hosts.envmap import EnvMap
from orchestrator.hosts.inventory import RESERVED_PROJECTS

SYSTEM = "compose-manager"

ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SERVICE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
PROJECT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_BAD_TEXT_RE = re.compile(r"[\x00-\x1f\x7f]")

ComposeVerb = Literal["up", "down"]


def _invalid(field_name: str, detail: str) -> RequestInvalid:
    return RequestInvalid(SYSTEM, f"{field_name}: {detail}", field=field_name)


def validate_file(file: Any) -> None:
    if not isinstance(file, str) or not file.strip():
        raise _invalid("file", "must be a non-empty path in the compose-files repository")
    if _BAD_TEXT_RE.search(file):
        raise _invalid("file", "contains a control character")
    if file.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:", file):
        raise _invalid("file", "must be relative to the repository root, not absolute")
    if ".." in PurePosixPath(file.replace("\\", "/")).parts:
        raise _invalid("file", "must not contain '..'")


def validate_services(services: Any, *, allow_empty: bool = False) -> None:
    if isinstance(services, str) or not isinstance(services, (list, tuple)):
        raise _invalid("services", "must be a list of service names")
    if not services and not allow_empty:
        raise _invalid("services", "must not be empty (an empty list means every service of the file)")
    for name in services:
        if not isinstance(name, str) or not name.strip():
            raise _invalid("services", "contains an empty service name")
        if not SERVICE_RE.match(name):
            raise _invalid("services", f"{name!r} is not a valid compose service name")


def validate_project(project: Any) -> None:
    """None (the default project `work`) or a non-reserved compose project name."""
    if project is None:
        return
    if not isinstance(project, str) or not PROJECT_RE.match(project):
        raise _invalid("project", "must be a compose project name ([a-z0-9][a-z0-9_-]*) or None")
    if project in RESERVED_PROJECTS:
        raise _invalid("project", f"{project!r} is reserved by compose-manager: omit it for the default project")


def validate_env(env: Any) -> None:
    if not isinstance(env, EnvMap):
        raise _invalid("env", f"must be an EnvMap read from the dashboard, got {type(env).__name__}")
    if len(env) == 0:
        raise _invalid("env", "is empty: every call passes the host's full env map")
    for key, value in env.items():
        if not ENV_KEY_RE.match(key):
            raise _invalid("env", f"key {key!r} does not match [A-Za-z_][A-Za-z0-9_]*")
        if "\n" in value or "\r" in value:
            raise _invalid("env", f"value of {key} contains a newline")  # never the value
        if "\x00" in value:
            raise _invalid("env", f"value of {key} contains a NUL byte")


@dataclass(frozen=True)
class ComposeRequest:
    tag: str
    file: str
    services: tuple[str, ...]
    project: str | None = None
    force_recreate: bool = False
    dry_run: bool = False
    allow_force_recreate: bool = False  # set only by a runbook step that explicitly allows it

    def validate(self, env: EnvMap, *, action: ComposeVerb = "up") -> None:
        if not isinstance(self.tag, str) or not self.tag or any(c.isspace() for c in self.tag) or _BAD_TEXT_RE.search(self.tag):
            raise _invalid("tag", "must be a non-empty git tag without whitespace")
        validate_file(self.file)
        validate_services(self.services)
        validate_project(self.project)
        if not isinstance(self.force_recreate, bool) or not isinstance(self.dry_run, bool):
            raise _invalid("force_recreate", "force_recreate and dry_run must be booleans")
        if self.force_recreate and not self.allow_force_recreate:
            raise _invalid("force_recreate", "true is only allowed by a step that explicitly allows it")
        if action == "down" and self.dry_run:
            raise _invalid("dry_run", "compose/down ignores dry_run and would act at once; refusing")
        validate_env(env)

    def _body(self, env: Any, action: ComposeVerb) -> dict[str, Any]:
        body: dict[str, Any] = {"tag": self.tag, "file": self.file}
        if self.project is not None:
            body["project"] = self.project
        body |= {"services": list(self.services), "env": env}
        if action == "up":
            body |= {"force_recreate": self.force_recreate, "dry_run": self.dry_run}
        return body

    def body(self, env: EnvMap, *, action: ComposeVerb = "up") -> dict[str, Any]:
        """The JSON body. Holds every env value: never log it (use `redacted`)."""
        return self._body(env.as_body(), action)

    def redacted(self, n_keys: int | None = None, *, action: ComposeVerb = "up") -> dict[str, Any]:
        """The body as it may be logged or journaled: env shown as `<env map: N keys>`."""
        return self._body(f"<env map: {n_keys} keys>" if n_keys is not None else "<env map>", action)

    def as_dry_run(self) -> ComposeRequest:
        return replace(self, dry_run=True)
