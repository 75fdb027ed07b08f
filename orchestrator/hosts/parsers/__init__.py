"""Pure parsers of what hosts answer; `ParseError` (the clients' `MalformedResponse`) on a bad input."""

from __future__ import annotations


class ParseError(ValueError):
    """Input that does not have the documented shape; `line_no` (1-based, when known) starts the message."""

    def __init__(self, message: str, *, line_no: int | None = None) -> None:
        super().__init__(message if line_no is None else f"line {line_no}: {message}")
