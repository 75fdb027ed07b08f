"""`orchestrate continue`: let a paused run go on (a journal signal, service.signals)."""

from __future__ import annotations

from orchestrator.cli.options import signal_app
from orchestrator.service import signals

app = signal_app("continue", "Let a paused RUN_ID go on (journaled, with who asked).", signals.continue_run)
