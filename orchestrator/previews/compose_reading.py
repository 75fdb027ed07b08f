"""A service of a compose file as compose would run it: interpolated with the env map (the
defaults the file writes where the map has no value; a required variable the map lacks reads as
`${NAME}`), the command split as a shell splits it. What the compose-file check compares."""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from orchestrator.hosts.compose_file import ComposeFile, ComposeFileError, _config_sources, interpolate

#: a command that is a shell running a script: `[/bin/bash, -lc, script]`, `[sh, -c, script]`
_SHELLS = frozenset({"sh", "bash", "/bin/sh", "/bin/bash", "/usr/bin/bash"})


def argv(cf: ComposeFile, service: str, env: Mapping[str, str]) -> list[str] | None:
    """The service's `command` as the argument list compose passes (a string is split as a
    shell would, after interpolation); None when it has no `command`. A shell wrapper whose
    script ends in `exec PROGRAM ...` (the gpu04 canary's engine checks its loader, then execs
    `sglang serve`) is read as the argument list of the program it execs: that is the process
    the flags configure."""
    command = cf.services[service].body.get("command")
    if command is None:
        return None
    if isinstance(command, str):
        line = interpolate(command, env)
    else:
        args = [str(a) for a in interpolate(list(command), env)]
        execd = _exec_of_wrapper(args)
        if execd is None:
            return args
        line = execd
    try:
        return shlex.split(line)
    except ValueError as exc:
        raise ComposeFileError(f"compose file {cf.path}, service {service}: command: {exc}") from exc


def _exec_of_wrapper(args: list[str]) -> str | None:
    """The `exec ...` command line of a `[shell, -c|-lc, script]` command (backslash-newline
    continuations joined), or None."""
    if len(args) != 3 or args[0] not in _SHELLS or not args[1].startswith("-") or "c" not in args[1]:
        return None
    lines = args[2].replace("\\\n", " ").splitlines()
    execs = [line.strip()[len("exec "):] for line in lines if line.strip().startswith("exec ")]
    return execs[-1] if execs else None


def labels(cf: ComposeFile, service: str, env: Mapping[str, str]) -> dict[str, str]:
    raw = cf.services[service].body.get("labels") or {}
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
    return env.get(name) if raw is None else interpolate(raw, env)


def device_ids(cf: ComposeFile, service: str) -> list[str] | None:
    """GPU ids the service reserves (`deploy.resources.reservations.devices[].device_ids`);
    None when it reserves none by id."""
    deploy = cf.services[service].body.get("deploy") or {}
    devices = ((deploy.get("resources") or {}).get("reservations") or {}).get("devices") if isinstance(deploy, dict) else None
    ids = [str(i) for d in devices or [] if isinstance(d, dict) for i in d.get("device_ids") or []]
    return ids if devices and any(isinstance(d, dict) and "device_ids" in d for d in devices) else None


def published_ports(cf: ComposeFile, service: str, env: Mapping[str, str]) -> set[int]:
    """Host ports the service publishes (`ports:` short or long syntax)."""
    out: set[int] = set()
    for entry in interpolate(cf.services[service].body.get("ports") or [], env):
        if isinstance(entry, dict):
            published = entry.get("published")
            text = str(published) if published is not None else ""
        else:
            parts = str(entry).split("/")[0].split(":")
            text = parts[-2] if len(parts) >= 2 else ""
        for piece in text.split("-"):
            if piece.strip().isdigit():
                out.add(int(piece))
    return out


def config_text(cf: ComposeFile, service: str, env: Mapping[str, str]) -> str:
    """The inline content of every config the service mounts, interpolated, joined."""
    sources = _config_sources(cf.services[service].body)
    texts = (cf.configs.get(s) for s in sources)
    return "\n".join(interpolate(t, env) for t in texts if t is not None)
