"""`orchestrate pause`: hold a run at its next safe step (a journal signal, service.signals)."""

from __future__ import annotations

from orchestrator.cli.options import signal_app
from orchestrator.service import signals

app = signal_app("pause", signals.pause)
