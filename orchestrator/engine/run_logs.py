"""One structlog JSON-lines file per run, even with several runs in one process (`serve`): a routing
processor writes each event to its `run_id`'s file, scrubbed by that run's redactor, and drops it.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import TextIO

import structlog
from structlog.typing import EventDict, WrappedLogger

from orchestrator.hosts.redaction import Redactor


class RunLogRouter:
    def __init__(self) -> None:
        self._files: dict[str, tuple[TextIO, Redactor]] = {}
        self._paths: dict[str, Path] = {}
        self._lock = threading.Lock()

    def directory(self, run_id: str) -> Path | None:
        """`<state>/logs/<run_id>/`, for files a run keeps beside its log (None: not open here)."""
        path = self._paths.get(run_id)
        return path.parent / run_id if path is not None else None

    def open(self, run_id: str, path: Path, redactor: Redactor) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._paths[run_id] = path
        with self._lock:
            if run_id not in self._files:
                self._files[run_id] = (path.open("a", encoding="utf-8"), redactor)

    def close(self, run_id: str) -> None:
        with self._lock:
            entry = self._files.pop(run_id, None)
        if entry is not None:
            entry[0].close()

    def __call__(self, logger: WrappedLogger, method: str, event_dict: EventDict) -> EventDict:
        run_id = event_dict.get("run_id")
        with self._lock:
            entry = self._files.get(run_id) if isinstance(run_id, str) else None
        if entry is None:
            return event_dict
        fh, redactor = entry
        line = json.dumps(redactor.scrub_obj(event_dict), default=str)
        with self._lock:
            fh.write(line + "\n")
            fh.flush()
        raise structlog.DropEvent


ROUTER = RunLogRouter()
_configured = False


def ensure_configured() -> None:
    """Install the router once; events no run claims are dropped (the CLI prints progress itself)."""
    global _configured
    if _configured:
        return
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            ROUTER,
            _drop,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        cache_logger_on_first_use=False,
    )
    _configured = True


def _drop(logger: WrappedLogger, method: str, event_dict: EventDict) -> EventDict:
    raise structlog.DropEvent


def open_run_log(state_dir: Path, run_id: str, redactor: Redactor) -> Path:
    ensure_configured()
    path = state_dir / "logs" / f"{run_id}.jsonl"
    ROUTER.open(run_id, path, redactor)
    return path
