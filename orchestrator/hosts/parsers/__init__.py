"""Pure parsers of what hosts answer; `ParseError` (the clients' `MalformedResponse`) on a bad input."""

from __future__ import annotations


class ParseError(ValueError):
    """Input that does not have the documented shape; `line N: ` (1-based) starts the message when known."""
