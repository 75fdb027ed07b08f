"""`orchestrate continue`: let a paused run go on (a journal signal, service.signals)."""

from __future__ import annotations

from orchestrator.cli.options import signal_app
from orchestrator.service import signals

app = signal_app("continue", signals.continue_run)
