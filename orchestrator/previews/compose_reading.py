"""A service of a compose file as compose would run it: interpolated with the env map (the
defaults the file writes where the map has no value; a required variable the map lacks reads as
`${NAME}`), the command split as a shell splits it. What the compose-file check compares."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from orchestrator.hosts.compose_file import (
    ComposeFile,
    ComposeFileError,
    _config_sources,
    interpolate,
    resolve_env_value,
)


def _body(cf: ComposeFile, service: str) -> dict[str, Any]:
    if service not in cf.services:
        raise ComposeFileError(f"compose file {cf.path} does not define {service}")
    return cf.services[service].body


def argv(cf: ComposeFile, service: str, env: Mapping[str, str]) -> list[str] | None:
    """The service's `command` as the argument list compose passes (a string is split as a
    shell would, after interpolation); None when it has no `command`."""
    command = _body(cf, service).get("command")
    if command is None:
        return None
    if isinstance(command, str):
        try:
            return shlex.split(resolve_env_value(command, env, lenient=True))
        except ValueError as exc:
            raise ComposeFileError(f"compose file {cf.path}, service {service}: command: {exc}") from exc
    return [str(a) for a in interpolate(list(command), env)]


def labels(cf: ComposeFile, service: str, env: Mapping[str, str]) -> dict[str, str]:
    raw = _body(cf, service).get("labels") or {}
    if isinstance(raw, list):
        raw = dict(str(e).partition("=")[::2] for e in raw)
    return {str(k): "" if v is None else str(interpolate(v, env)) for k, v in raw.items()}


def env_value(cf: ComposeFile, service: str, name: str, env: Mapping[str, str]) -> str | None:
    """The value `name` has in the container (None: not set); a pass-through entry takes the
    env map's value."""
    environment = cf.services[service].environment
    if name not in environment:
        return None
    raw = environment[name]
    return env.get(name) if raw is None else resolve_env_value(raw, env, lenient=True)


def device_ids(cf: ComposeFile, service: str) -> list[str] | None:
    """GPU ids the service reserves (`deploy.resources.reservations.devices[].device_ids`);
    None when it reserves none by id."""
    deploy = _body(cf, service).get("deploy") or {}
    devices = ((deploy.get("resources") or {}).get("reservations") or {}).get("devices") if isinstance(deploy, dict) else None
    ids = [str(i) for d in devices or [] if isinstance(d, dict) for i in d.get("device_ids") or []]
    return ids if devices and any(isinstance(d, dict) and "device_ids" in d for d in devices) else None


def published_ports(cf: ComposeFile, service: str, env: Mapping[str, str]) -> set[int]:
    """Host ports the service publishes (`ports:` short or long syntax)."""
    out: set[int] = set()
    for entry in interpolate(_body(cf, service).get("ports") or [], env):
        if isinstance(entry, dict):
            published = entry.get("published")
            text = str(published) if published is not None else ""
        else:
            parts = str(entry).split("/")[0].split(":")
            text = parts[-2] if len(parts) >= 2 else ""
        for piece in text.split("-") if "-" in text else [text]:
            if piece.strip().isdigit():
                out.add(int(piece))
    return out


def config_text(cf: ComposeFile, service: str, env: Mapping[str, str]) -> str:
    """The inline content of every config the service mounts, interpolated, joined."""
    sources = _config_sources(_body(cf, service))
    texts = (cf.configs.get(s) for s in sources)
    return "\n".join(resolve_env_value(t, env, lenient=True) for t in texts if t is not None)
