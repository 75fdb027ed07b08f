"""Where runbooks are found: the shipped folder and a name or path resolved to a file (no schema).
Re-exported by orchestrator.language.runbook."""

from __future__ import annotations

from pathlib import Path

import orchestrator  # the package's own folder, wherever in it this module lives
from orchestrator.util.user_errors import UserError

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
