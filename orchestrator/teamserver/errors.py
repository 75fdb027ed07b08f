"""Errors as answers: `{"error": "<one line>", "exit_code": N}` with the HTTP status that fits, every
message scrubbed of secrets and of this machine's paths (an API client learns what to fix, not how
the server is laid out).
"""

from __future__ import annotations

from pathlib import Path

from starlette.responses import JSONResponse

from orchestrator.util.exit_codes import ExitCode


class ApiError(Exception):
    def __init__(self, status: int, message: str, code: int | ExitCode) -> None:
        super().__init__(message)
        self.status, self.message, self.code = status, message, int(code)


def error_response(status: int, message: str, code: int | ExitCode, *, close: bool = False) -> JSONResponse:
    """`close`: the connection closes after the answer (a refused body is not read)."""
    headers = {"Connection": "close"} if close else {}
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    one_line = " ".join(message.split())[:500]
    return JSONResponse({"error": one_line, "exit_code": int(code)}, status_code=status, headers=headers or None)


class PathScrubber:
    """Replaces this machine's paths in a message with a placeholder."""

    def __init__(self, *paths: str | Path | None) -> None:
        forms: set[str] = set()
        for p in paths:
            if not p:
                continue
            text = str(p)
            forms.add(text)
            try:
                forms.add(str(Path(text).resolve()))
            except (OSError, RuntimeError):
                pass
        self._paths = sorted((f for f in forms if len(f) > 1), key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for p in self._paths:
            text = text.replace(p, "<server path>")
        return text
