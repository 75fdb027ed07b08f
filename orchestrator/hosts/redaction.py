"""Scrubbing secrets (tokens, env-map values) out of text, objects and structlog events.

Which strings are hidden
------------------------
Every added string of at least `MIN_SECRET_LEN` (3) characters. What a run adds is decided in one
place, `EnvMap.redaction_values()`: the configured tokens, every env value whose key names a
credential (`*TOKEN*`, `*SECRET*`, `*KEY*`, `*PASSWORD*`, ...) and every other env value of 16
characters or more. Short labels (`ENV=prod`, `CVM_NAME=gpu02`) are not added: scrubbing them
would rewrite file paths (`prod/...`) and host names that the journal must keep exact to roll
back, and they are never rendered anyway (an env map only ever shows its keys). Values of one or
two characters are never hidden: replacing every `1` in a message would destroy it.

Each secret is also matched in the forms a server or a URL may echo it in: JSON-escaped (a value
with quotes or backslashes) and percent-encoded.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any
from urllib.parse import quote, quote_plus

from orchestrator.hosts.envmap import EnvMap

MIN_SECRET_LEN = 3
MASK = "***"


def reveal(secret: Any) -> str:
    """The plain text of a `str` or a pydantic `SecretStr` (anything with `get_secret_value`)."""
    if secret is None:
        return ""
    getter = getattr(secret, "get_secret_value", None)
    if callable(getter):
        return str(getter())
    return str(secret)


def _variants(secret: str) -> set[str]:
    forms = {secret, json.dumps(secret)[1:-1], quote(secret, safe=""), quote_plus(secret, safe="")}
    return {f for f in forms if len(f) >= MIN_SECRET_LEN}


class Redactor:
    """Holds secrets; replaces each occurrence with `***`. Thread-safe; secrets only accumulate."""

    def __init__(self, *secrets: Any) -> None:
        self._secrets: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._lock = threading.Lock()
        self.add(*secrets)

    def add(self, *secrets: Any) -> Redactor:
        """Add secrets (str or SecretStr); empty and < 3-character strings are ignored (see module doc)."""
        new: set[str] = set()
        for secret in secrets:
            text = reveal(secret)
            if len(text) >= MIN_SECRET_LEN:
                new |= _variants(text)
        with self._lock:
            if not new <= self._secrets:
                self._secrets |= new
                self._pattern = None
        return self

    def add_all(self, secrets: Iterable[Any]) -> Redactor:
        return self.add(*secrets)

    def __len__(self) -> int:
        return len(self._secrets)

    def __repr__(self) -> str:
        return f"Redactor({len(self._secrets)} secret forms)"

    def _compiled(self) -> re.Pattern[str] | None:
        with self._lock:
            if self._pattern is None and self._secrets:
                # Longest first: at one position the alternation takes the first alternative that
                # matches, so a secret that contains another is replaced whole.
                ordered = sorted(self._secrets, key=len, reverse=True)
                self._pattern = re.compile("|".join(re.escape(s) for s in ordered))
            return self._pattern

    def scrub(self, text: str) -> str:
        pattern = self._compiled()
        if pattern is None or not text:
            return text
        return pattern.sub(MASK, text)

    def contains_secret(self, text: str) -> bool:
        pattern = self._compiled()
        return bool(pattern and text and pattern.search(text))

    def scrub_obj(self, obj: Any) -> Any:
        """`obj` with every secret masked in every string, at any depth of dicts, lists, tuples and
        sets (keys too; the containers are copied); `bytes` are scrubbed as UTF-8 text.

        `EnvMap` is returned as is (its renderings show keys only). Any other object whose
        `repr` contains a secret is replaced by its scrubbed `repr`.
        """
        if isinstance(obj, str):
            return self.scrub(obj)
        if obj is None or isinstance(obj, (bool, int, float, EnvMap)):
            return obj
        if isinstance(obj, bytes):
            text = obj.decode("utf-8", "replace")
            return self.scrub(text).encode() if self.contains_secret(text) else obj
        if isinstance(obj, Mapping):
            return {self.scrub_obj(k): self.scrub_obj(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.scrub_obj(v) for v in obj]
        if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
            return tuple(self.scrub_obj(v) for v in obj)
        if isinstance(obj, (set, frozenset)):
            return type(obj)(self.scrub_obj(v) for v in obj)
        try:
            text = repr(obj)
        except Exception:  # noqa: BLE001 - a broken repr must not break logging
            return "<unrepresentable>"
        return self.scrub(text) if self.contains_secret(text) else obj

    def structlog_processor(self) -> Callable[[Any, str, MutableMapping[str, Any]], MutableMapping[str, Any]]:
        """A structlog processor scrubbing every event dict.

        Place it last before the renderer (after `format_exc_info`, so rendered tracebacks are
        scrubbed too).
        """

        def scrub_event(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
            return self.scrub_obj(dict(event_dict))

        return scrub_event


def redact_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a compose request body with `env` replaced by `"<env map: N keys>"`."""
    out = dict(body)
    if "env" in out:
        env = out["env"]
        n = len(env) if isinstance(env, Mapping) else None
        out["env"] = f"<env map: {n} keys>" if n is not None else "<env map>"
    return out
