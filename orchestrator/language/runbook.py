"""Runbooks as data: the schema of `runbooks/*.yaml` and its loader.

A runbook reads top to bottom like the prose runbook it encodes: preflight checks that change nothing,
then phases (one per replica, then reconcile), each a list of steps that do one thing or wait on one
gate, each phase naming its rollback. The schema is in `step_specs`, `steps` and `runbook_model` (the
names importers use are re-exported here); this module finds runbooks (the shipped folder, or a name or
path) and parses them, refusing what the rules forbid naming the field, and pins named runbooks by sha256.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

import orchestrator  # the package's own folder, wherever in it this module lives
from orchestrator.language.runbook_model import HostState, Runbook  # noqa: F401  # re-exported: the public entry of the runbook language
from orchestrator.language.step_specs import (  # noqa: F401  # re-exported: the public entry of the runbook language
    SELECTED,
    ComposeSpec,
    GaugeBound,
    LogValue,
    Prerequisite,
    RelaySpec,
    SoakGauges,
    SoakSpec,
)
from orchestrator.language.steps import Phase, Step  # noqa: F401  # re-exported: the public entry of the runbook language
from orchestrator.util.names import DEFAULT_RUNBOOK  # noqa: F401  # re-exported: the public entry of the runbook language
from orchestrator.util.user_errors import Refused, UserError

#: libyaml's safe loader when available (3x faster on large files), else the pure-Python one.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_PACKAGE = Path(orchestrator.__file__).resolve().parent
#: The shipped runbooks: `orchestrator/runbooks/` in an installed wheel (pyproject maps the top-level
#: `runbooks/` onto that package), the top-level `runbooks/` in a checkout.
RUNBOOK_DIR = _PACKAGE / "runbooks" if (_PACKAGE / "runbooks").is_dir() else _PACKAGE.parent / "runbooks"


def resolve_runbook_path(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return p
    candidate = RUNBOOK_DIR / f"{name_or_path}.yaml"
    if candidate.exists():
        return candidate
    known = ", ".join(sorted(x.stem for x in RUNBOOK_DIR.glob("*.yaml"))) or "none"
    raise UserError(f"runbook {name_or_path!r} not found: pass a path or one of {known}")


def field_path(loc: tuple[int | str, ...], data: object) -> str:
    """Where an error is, in the one style every runbook error uses: keys dotted, a phase by its
    name (`phases.canary`), any other list item by its index counting from 1 as `plan` counts,
    with its id or name when it has one (`phases.canary.steps[4] (apply).up.services`)."""
    out, cur, parent = "", data, ""
    for part in loc:
        if isinstance(part, int) and not isinstance(part, bool):
            item = cur[part] if isinstance(cur, list) and 0 <= part < len(cur) else None
            name = item.get("name") if isinstance(item, dict) else None
            ident = item.get("id") if isinstance(item, dict) else None
            if parent in ("phases", "full_rollback") and isinstance(name, str):
                out += f".{name}"
            else:
                label = ident if isinstance(ident, str) else name if isinstance(name, str) else None
                out += f"[{part + 1}]" + (f" ({label})" if label else "")
            cur = item
        elif cur is not None and not isinstance(cur, dict):
            continue  # pydantic's name of a union member (`list[str]`), not a key of the runbook
        else:
            out += f".{part}" if out else str(part)
            cur = cur.get(part) if isinstance(cur, dict) else None
        parent = str(part)
    return out


def _boolean_key(data: object, loc: tuple[int | str, ...] = ()) -> tuple[tuple[int | str, ...], bool] | None:
    """(where, key) of the first mapping key YAML 1.1 read as a boolean (a bare `on`, `off`, `yes`,
    `no`, `y`, `n`), else None: no key of the schema is a boolean."""
    items: Iterable[tuple[Any, object]] = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for k, v in items:
        if isinstance(k, bool):
            return loc, k
        found = _boolean_key(v, (*loc, k))
        if found:
            return found
    return None


def read_runbook(name_or_path: str) -> tuple[Runbook, dict[str, str], str]:
    """(runbook, identity, text): the file read once, and what a run records of it. The identity
    (name, resolved path, sha256 of the bytes) names it; the text is what the run executes on
    every resume, whatever happens to the file on disk afterwards (an edit, a `git pull`)."""
    path = resolve_runbook_path(name_or_path).resolve()
    raw = _read(path)
    text = _decode(raw, path)
    identity = {"name": path.stem, "path": str(path), "sha256": hashlib.sha256(raw).hexdigest()}
    return _parse_text(text, str(path)), identity, text


def load_recorded_runbook(name: str, identity: dict[str, str] | None, text: str | None = None) -> Runbook:
    """The runbook a run was started with. Its recorded text when the run kept it (and it still
    hashes to the recorded sha256): the file on disk is not read at all. Else (runs recorded
    without their text) the recorded path, checked against the sha256 (refused if the file
    changed since); else by name (runs recorded without an identity)."""
    if not identity or not identity.get("sha256"):
        return load_runbook(name)
    if text is not None and hashlib.sha256(text.encode("utf-8")).hexdigest() == identity["sha256"]:
        return _parse_text(text, f"{identity.get('name', name)} (as recorded when the run started)")
    where = identity.get("path") or name
    try:
        path = resolve_runbook_path(where)
        data = path.read_bytes()
    except (UserError, OSError):
        raise Refused(f"the runbook run with ({identity.get('name', name)}, {where}) is gone: this run cannot be continued "
                      f"with another file") from None
    if hashlib.sha256(data).hexdigest() != identity["sha256"]:
        raise Refused(f"runbook {identity.get('name', name)} changed since this run started ({where}): a run is only "
                      f"continued with the runbook it started with; restore it, or start a new run")
    return _parse_text(_decode(data, path), str(path))


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read runbook {path}: {exc.strerror}") from None


def _decode(raw: bytes, path: Path) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"runbook {path} is not UTF-8 text; fix the file") from None


def _parse_text(text: str, source: str) -> Runbook:
    try:
        data = yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise UserError(f"runbook {source}{where} is not valid YAML; fix the file") from None
    return parse_runbook(data, source=source)


def load_runbook(name_or_path: str = DEFAULT_RUNBOOK) -> Runbook:
    path = resolve_runbook_path(name_or_path)
    return _parse_text(_decode(_read(path), path), str(path))


def parse_runbook(data: object, *, source: str = "<runbook>") -> Runbook:
    if not isinstance(data, dict):
        raise UserError(f"runbook {source} must be a mapping")
    boolean = _boolean_key(data)
    if boolean is not None:
        loc, key = boolean
        spelt = "on, yes, y or true" if key else "off, no, n or false"
        hint = " (a remedy names its log marker with marker:)" if loc and loc[-1] == "remedy" else ""
        raise UserError(f"runbook {source} is invalid at {field_path(loc, data) or 'the top level'}: a key YAML 1.1 "
                        f"reads as {str(key).lower()} (a bare {spelt}); quote it if it is a word (\"on\":){hint}")
    try:
        return Runbook.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key (typo?)"
        where = field_path(tuple(err["loc"]), data)
        raise UserError(f"runbook {source} is invalid" + (f" at {where}" if where else "") + f": {msg}") from None


def shipped_runbooks() -> list[Runbook]:
    """Every runbook shipped in runbooks/, by file name."""
    return [load_runbook(p.stem) for p in sorted(RUNBOOK_DIR.glob("*.yaml"))]


def default_runbook(host: str) -> str:
    """`--runbook` left out for one HOST: the one shipped runbook that names it; of several, the one
    written for a tier of hosts (a one-host procedure such as a canary is chosen by name only);
    else the default (whose own host check then says which hosts it is written for)."""
    fits = [rb for rb in shipped_runbooks() if host in rb.hosts]
    if len(fits) == 1:
        return fits[0].name
    tiers = [rb.name for rb in fits if len(rb.hosts) > 1]
    return tiers[0] if len(tiers) == 1 else DEFAULT_RUNBOOK


# Named, pinned runbooks, for callers that must not read arbitrary files (`orchestrate serve`): a name,
# never a path, from RUNBOOK_DIR only, pinned by the sha256 of its bytes so that a resumed run uses
# exactly the runbook it started with. Errors name the runbook only: no path, no YAML line.

#: A runbook name: letters, digits, `-` and `_` (no `/`, no `.`: no path, no `..`, no `.yaml`).
RUNBOOK_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")


def runbook_names(directory: Path = RUNBOOK_DIR) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.yaml") if RUNBOOK_NAME_RE.fullmatch(p.stem))


def load_runbook_checked(name: str, sha256: str | None = None, *,
                         directory: Path = RUNBOOK_DIR) -> tuple[Runbook, str]:
    """(runbook, sha256) of the runbook called `name` in `directory`, read once and hashed as read;
    with `sha256`, `Refused` unless the file still has that content."""
    known = ", ".join(runbook_names(directory)) or "none"
    unknown = UserError(f"unknown runbook {str(name)[:100]!r}: one of {known}")
    if not isinstance(name, str) or not RUNBOOK_NAME_RE.fullmatch(name):
        raise unknown
    path = directory / f"{name}.yaml"
    try:
        if not path.resolve().is_relative_to(directory.resolve()):
            raise unknown
        raw = path.read_bytes()
    except OSError:
        raise unknown from None
    digest = hashlib.sha256(raw).hexdigest()
    if sha256 is not None and not hmac.compare_digest(digest, str(sha256)):
        raise Refused(f"runbook {name} changed since the run started (sha256 {str(sha256)[:12]}... now {digest[:12]}...): "
                      f"refusing to continue it with another runbook")
    try:
        data = yaml.load(raw.decode("utf-8"), Loader=_LOADER)
    except (yaml.YAMLError, UnicodeDecodeError):
        raise UserError(f"runbook {name} is not valid YAML") from None
    return parse_runbook(data, source=name), digest
