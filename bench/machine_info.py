"""The machine and checkout a benchmark ran on (recorded with every result)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def describe() -> dict[str, Any]:
    try:
        import httpx
        httpx_version = httpx.__version__
    except ImportError:  # pragma: no cover
        httpx_version = None
    status = _git("status", "--porcelain")
    return {
        "date": datetime.now(UTC).replace(microsecond=0).isoformat(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "httpx": httpx_version,
        "git_commit": _git("rev-parse", "--short", "HEAD"),
        "git_worktree_dirty": bool(status) if status is not None else None,
    }
