"""A docker compose file, modelled as far as the orchestrator needs it.

Loaded with PyYAML's safe loader: YAML 1.1 merge keys (`<<: *anchor`) as compose reads them (an
explicit key wins, a merge is shallow), duplicate keys refused as compose refuses them. `closure`
is what a scoped `up` starts; `up --remove-orphans` removes every running service the file does
not define, whatever the `up` is scoped to.

Interpolation follows compose: `$VAR`, `${VAR}`, `${VAR:-d}` (unset or empty -> d), `${VAR-d}`
(unset -> d), `${VAR:?e}`, `${VAR?e}`, `${VAR:+r}`, `${VAR+r}`, nesting, `$$` for `$`. Error
messages never contain a variable's value.

Not modelled: `extends`, `env_file`, `include`, multiple files, YAML 1.1 vs 1.2 scalars (an
unquoted `yes` in a mapping-form environment reads as `true`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from orchestrator.util.durations import parse_go_duration as parse_duration  # stop_grace_period; re-exported

CONDITIONS = frozenset({"service_started", "service_healthy", "service_completed_successfully"})

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OPERATORS = (":-", ":?", ":+", "-", "?", "+")  # longest first


class ComposeFileError(ValueError):
    """A compose file that cannot be used; the message names the file and what is wrong."""


class InterpolationError(ComposeFileError):
    """A `${...}` expression that is malformed (or, for a budget, not one variable with a default)."""


class _Var(NamedTuple):
    name: str
    operator: str  # "" for $VAR / ${VAR}
    argument: str | None  # raw text after the operator


def _scan(raw: str) -> list[str | _Var]:
    """Split `raw` into literal text (with `$$` already unescaped) and variable references."""
    parts: list[str | _Var] = []
    text: list[str] = []

    def flush() -> None:
        if text:
            parts.append("".join(text))
            text.clear()

    i = 0
    while i < len(raw):
        if raw[i] != "$":
            text.append(raw[i])
            i += 1
        elif raw.startswith("$$", i):
            text.append("$")
            i += 2
        elif raw.startswith("${", i):
            end = _closing_brace(raw, i + 2)
            body = raw[i + 2 : end]
            name = _NAME.match(body)
            rest = body[name.end() :] if name else ""
            operator = next((op for op in _OPERATORS if rest.startswith(op)), None)
            if name is None or (rest and operator is None):
                raise InterpolationError(f"invalid interpolation format {raw[i:end + 1]!r}")
            flush()
            argument = rest[len(operator) :] if operator else None
            parts.append(_Var(name.group(), operator or "", argument))
            i = end + 1
        elif name := _NAME.match(raw, i + 1):
            flush()
            parts.append(_Var(name.group(), "", None))
            i = name.end()
        else:  # a `$` that starts no variable is kept as is
            text.append("$")
            i += 1
    flush()
    return parts


def _closing_brace(raw: str, start: int) -> int:
    depth = 0
    i = start
    while i < len(raw):
        if raw.startswith("$$", i):
            i += 2
            continue
        if raw.startswith("${", i):
            depth += 1
            i += 2
            continue
        if raw[i] == "}":
            if depth == 0:
                return i
            depth -= 1
        i += 1
    raise InterpolationError(f"unterminated '${{' in {raw!r}")


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """`value` (a string, or a parsed YAML tree: every string in it) interpolated against `env`. An
    unset variable without a default is empty (as in compose); a missing required one (`${VAR:?e}`)
    reads `${VAR}`: the previews show the file as the host would run it, and say what is missing."""
    if isinstance(value, str):
        return "".join(part if isinstance(part, str) else _resolve_var(part, env) for part in _scan(value))
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    return value


def _resolve_var(var: _Var, env: Mapping[str, str]) -> str:
    is_set = var.name in env
    value = env.get(var.name, "")
    non_empty = is_set and value != ""
    argument = var.argument or ""
    match var.operator:
        case "":
            return value
        case ":-":
            return value if non_empty else interpolate(argument, env)
        case "-":
            return value if is_set else interpolate(argument, env)
        case ":+":
            return interpolate(argument, env) if non_empty else ""
        case "+":
            return interpolate(argument, env) if is_set else ""
        case ":?" | "?":
            return value if non_empty or (is_set and var.operator == "?") else f"${{{var.name}}}"
    raise AssertionError(var.operator)


@dataclass(frozen=True)
class BudgetExpr:
    """An environment value that is one variable with an optional default (`${VAR:-406GiB}`,
    `${VAR-406GiB}`, `${VAR}`), or a literal (variable None, default the value in effect)."""

    variable: str | None
    default: str | None
    raw: str

    @classmethod
    def parse(cls, raw: str) -> BudgetExpr:
        parts = _scan(raw)
        variables = [p for p in parts if isinstance(p, _Var)]
        if not variables:
            return cls(variable=None, default="".join(parts), raw=raw)  # type: ignore[arg-type]  # no variable: its parts are all text
        var = parts[0]
        if len(parts) == 1 and isinstance(var, _Var) and var.operator in ("", ":-", "-"):
            return cls(variable=var.name, default=var.argument, raw=raw)
        raise InterpolationError(f"{raw!r} is not a single ${{VAR}}, ${{VAR:-default}} or ${{VAR-default}} expression")


@dataclass(frozen=True)
class ServiceDef:
    """One service, after merge keys. `depends_on`: service -> condition (a list means
    `service_started`). `environment` keeps values as written; an entry without a value (`- FOO`,
    `FOO:`) is None (compose passes FOO through from its own environment)."""

    container_name: str | None
    profiles: tuple[str, ...]
    depends_on: dict[str, str]
    stop_grace_period_s: float | None
    environment: dict[str, str | None]
    image: str | None
    #: the whole service after merge keys, as written (uninterpolated)
    body: dict[str, Any] = field(default_factory=lambda: {}, compare=False, repr=False)


@dataclass
class ComposeFile:
    path: str
    services: dict[str, ServiceDef]
    #: top-level `configs:` -> inline `content` as written (None: a file or external config)
    configs: dict[str, str | None] = field(default_factory=lambda: {})

    @classmethod
    def load(cls, path: str | Path) -> ComposeFile:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ComposeFileError(f"compose file {path} is unreadable: {reason}") from exc
        return cls.from_text(text, str(path))

    @classmethod
    def from_text(cls, text: str, name: str = "<text>") -> ComposeFile:
        try:
            document = yaml.load(text, Loader=_Loader)  # a safe loader subclass
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            what = exc.problem or exc.context or "syntax error"
            raise ComposeFileError(f"compose file {name} is invalid YAML{where}: {what}") from exc
        except yaml.YAMLError as exc:
            raise ComposeFileError(f"compose file {name} is invalid YAML: {exc}") from exc
        if document is None:
            raise ComposeFileError(f"compose file {name} is empty: it has no `services`")
        if not isinstance(document, dict):
            raise ComposeFileError(f"compose file {name} is not a mapping at the top level")
        services = document.get("services")
        if not isinstance(services, dict) or not services:
            raise ComposeFileError(f"compose file {name} has no `services` mapping")
        configs: dict[Any, Any] = document["configs"] if isinstance(document.get("configs"), dict) else {}
        return cls(
            path=name,
            services={str(key): _service(name, str(key), body) for key, body in services.items()},
            configs={str(k): (v.get("content") if isinstance(v, dict) and isinstance(v.get("content"), str) else None)
                     for k, v in configs.items()},
        )

    def closure(self, services: list[str]) -> list[str]:
        """`services` plus everything they depend on, transitively, dependencies first (depth-first
        in the order given and declared). An undefined service or a cycle: `ComposeFileError`."""
        order: list[str] = []
        state: dict[str, str] = {}

        def visit(name: str, needed_by: str | None) -> None:
            if name not in self.services:
                suffix = f" (a dependency of {needed_by})" if needed_by else ""
                raise ComposeFileError(f"compose file {self.path} does not define {name}{suffix}")
            if state.get(name) == "done":
                return
            if state.get(name) == "visiting":
                raise ComposeFileError(f"compose file {self.path}: dependency cycle through {name}")
            state[name] = "visiting"
            for dependency in self.services[name].depends_on:
                visit(dependency, name)
            state[name] = "done"
            order.append(name)

        for service in services:
            visit(service, None)
        return order

    def dependencies_of(self, services: list[str]) -> set[str]:
        return set(self.closure(services)) - set(services)

    def budget_of(self, service: str, var_prefix: str = "SGLANG_HICACHE_RAM_BUDGET") -> BudgetExpr | None:
        """The budget expression of `service`'s environment key `var_prefix` (exact), None when
        unset; a pass-through entry (`- KEY`) reads as `${KEY}`."""
        environment = self.services[service].environment
        if var_prefix not in environment:
            return None
        raw = environment[var_prefix]
        if raw is None:
            return BudgetExpr(variable=var_prefix, default=None, raw=f"${{{var_prefix}}}")
        try:
            return BudgetExpr.parse(raw)
        except InterpolationError as exc:
            where = f"compose file {self.path}, {service}, {var_prefix}"
            raise InterpolationError(f"{where}: {exc}") from exc


def _service(file: str, name: str, body: Any) -> ServiceDef:
    where = f"compose file {file}, service {name}"
    if not isinstance(body, dict):
        raise ComposeFileError(f"{where}: the service is not a mapping")
    container_name = _optional_str(where, "container_name", body.get("container_name"))
    grace, profiles = body.get("stop_grace_period"), body.get("profiles")
    if profiles is not None and not isinstance(profiles, list):
        raise ComposeFileError(f"{where}: profiles must be a list")
    return ServiceDef(
        container_name=container_name,
        profiles=tuple(str(p) for p in profiles or []),
        depends_on=_depends_on(where, body.get("depends_on")),
        stop_grace_period_s=None if grace is None else _grace(where, grace),
        environment=_environment(where, body.get("environment")),
        image=_optional_str(where, "image", body.get("image")),
        body=dict(body),
    )


def _optional_str(where: str, key: str, value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ComposeFileError(f"{where}: {key} must be a string")


def _depends_on(where: str, value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if isinstance(value, list):
        return {str(name): "service_started" for name in value}
    if not isinstance(value, dict):
        raise ComposeFileError(f"{where}: depends_on must be a list or a mapping")
    result: dict[str, str] = {}
    for dependency, spec in value.items():
        condition = (spec or {}).get("condition", "service_started") if isinstance(spec, dict) or spec is None else None
        if condition not in CONDITIONS:
            raise ComposeFileError(
                f"{where}: depends_on {dependency} has condition {condition!r}; "
                f"use one of {', '.join(sorted(CONDITIONS))}"
            )
        result[str(dependency)] = condition
    return result


def _grace(where: str, value: Any) -> float:
    if value == 0 and not isinstance(value, bool):
        return 0.0
    if not isinstance(value, str):
        raise ComposeFileError(f"{where}: stop_grace_period {value!r} needs a unit, e.g. 30s or 5m")
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise ComposeFileError(f"{where}: stop_grace_period {exc}") from exc


def _environment(where: str, value: Any) -> dict[str, str | None]:
    if value is None:
        return {}
    if isinstance(value, dict):
        return {str(key): _scalar(item) for key, item in value.items()}
    if not isinstance(value, list):
        raise ComposeFileError(f"{where}: environment must be a list or a mapping")
    result: dict[str, str | None] = {}
    for entry in value:
        key, sep, item = str(entry).partition("=")
        result[key] = item if sep else None
    return result


def _scalar(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    raise ComposeFileError(f"environment value of type {type(value).__name__} is not a scalar")


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]  # the base is chosen at run time
    """The safe loader, refusing duplicate keys within one mapping (merged keys excepted)."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._checked: set[int] = set()

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        # Runs before any merge rewrites node.value, so the first visit sees the keys as written.
        if id(node) not in self._checked:
            self._checked.add(id(node))
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                    continue
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"found duplicate key {key_node.value!r}", key_node.start_mark,
                    )
                seen.add(key_node.value)
        super().flatten_mapping(node)


#: Keys docker compose leaves out of a service's config hash: a change of them alone recreates nothing.
HASH_EXCLUDED = ("profiles", "depends_on", "build", "pull_policy", "scale")


def _document(text: str, name: str) -> dict[str, Any]:
    try:
        document = yaml.load(text, Loader=_Loader)  # a safe loader subclass
    except yaml.YAMLError as exc:
        raise ComposeFileError(f"compose file {name} is invalid YAML: {exc}") from exc
    if not isinstance(document, dict) or not isinstance(document.get("services"), dict):
        raise ComposeFileError(f"compose file {name} has no `services` mapping")
    return document


def _config_sources(body: Any) -> list[str]:
    refs = body.get("configs") if isinstance(body, dict) else None
    return [str(r.get("source")) if isinstance(r, dict) else str(r) for r in refs or []]


def config_only_changes(old_text: str, new_text: str, *, old_name: str = "<old>", new_name: str = "<new>") -> list[str]:
    """Services of the new file whose only change is the content of an inline `configs:` entry
    they use. compose hashes the *reference* to a config, never its inline content
    (docker/compose#11900, #13045): a dry run reports such a service unchanged and an up keeps its
    old config, so it must be force-recreated. Compared as written, before interpolation."""
    old, new = _document(old_text, old_name), _document(new_text, new_name)

    def contents(doc: dict[str, Any]) -> dict[str, Any]:
        return {str(k): (v or {}).get("content") for k, v in (doc.get("configs") or {}).items() if isinstance(v, dict) or v is None}

    old_cfg, new_cfg = contents(old), contents(new)
    out: list[str] = []
    for name, body in new["services"].items():
        before = old["services"].get(name)
        if not isinstance(body, dict) or not isinstance(before, dict):
            continue
        if {k: v for k, v in body.items() if k not in HASH_EXCLUDED} != {k: v for k, v in before.items() if k not in HASH_EXCLUDED}:
            continue  # its definition changed: compose recreates it anyway
        sources = _config_sources(body)
        if any(new_cfg.get(s) is not None and new_cfg.get(s) != old_cfg.get(s) for s in sources):
            out.append(str(name))
    return out
