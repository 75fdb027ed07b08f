"""`orchestrate serve` (and `serve token ...`): team mode, defined in orchestrator/server/cli.py."""

from __future__ import annotations

from orchestrator.server.cli import serve_app as app

__all__ = ["app"]
