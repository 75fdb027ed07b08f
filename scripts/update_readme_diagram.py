"""Regenerate the state diagram embedded in docs/design.md from the gpu02 runbook's transition table.

    .venv/bin/python scripts/update_readme_diagram.py      # or: make diagram

The block between `<!-- state-diagram:begin -->` and `<!-- state-diagram:end -->` is replaced by
`orchestrate plan gpu02 --tag v0.0.300 --format mermaid`, never edited by hand; a test
(tests/core/test_diagram.py) fails when the document's copy differs from the generated one. (The file keeps
its name: the diagram lived in the README before the README was cut down to what a newcomer needs.)
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from orchestrator.language.machine import compile_rollout  # noqa: E402
from orchestrator.language.runbook import load_runbook  # noqa: E402
from orchestrator.previews.diagram import render_mermaid  # noqa: E402

#: Where the diagram lives.
DOCUMENT = ROOT / "docs" / "design.md"
BEGIN, END = "<!-- state-diagram:begin -->", "<!-- state-diagram:end -->"


def readme_block() -> str:
    """The design document's block: the mermaid diagram of the default (gpu02) runbook's rollout."""
    return f"{BEGIN}\n```mermaid\n{render_mermaid(compile_rollout(load_runbook()))}```\n{END}"


def main() -> int:
    path = DOCUMENT
    text = path.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    path.write_text(text[:start] + readme_block() + text[end:])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
