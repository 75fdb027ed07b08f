"""`orchestrate serve` (and `serve token ...`): team mode, defined in orchestrator/teamserver/cli.py."""

from __future__ import annotations

from orchestrator.teamserver.cli import serve_app as app

__all__ = ["app"]
