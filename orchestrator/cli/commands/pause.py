"""`orchestrate pause`: hold a run at its next safe step (a journal signal, service.signals)."""

from __future__ import annotations

from orchestrator.cli.options import signal_app
from orchestrator.service import signals

app = signal_app("pause", "Hold RUN_ID at its next safe step (never between a down and its replacement's readiness) "
                          "until `orchestrate continue RUN_ID` (journaled, with who asked).", signals.pause)
