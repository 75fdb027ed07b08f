"""A host's env map: read whole from the dashboard, passed whole to compose-manager, shown by keys only.

The map holds secrets (tokens) and labels (`ENV`, `CVM_NAME`, ...). Every rendering of an
`EnvMap` -- `repr`, `str`, f-strings, rich's pretty printer, structlog's renderers -- shows the
number of keys and the key names, never a value. The only ways to get values out are explicit:
`env[key]`, iteration over `.values()`/`.items()`, `as_body()` (for a request body) and
`secret_values()` (to feed a `Redactor`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping
from typing import Any

_SECRET_KEY = re.compile(r"TOKEN|SECRET|KEY|PASSWORD|PASS|AUTH|CREDENTIAL|CERT|PRIVATE", re.IGNORECASE)


_PLACEHOLDERS = {"redacted", "[redacted]", "changeme", "placeholder", "none", "null", "xxx", "todo"}


class EnvMap(Mapping[str, str]):
    """Immutable mapping of env var name -> value whose renderings never show a value."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, str] | None = None) -> None:
        copied: dict[str, str] = {}
        for key, value in (data or {}).items():
            if not isinstance(key, str):
                raise TypeError(f"env map keys must be strings, got {type(key).__name__}")
            if not isinstance(value, str):
                # Name the key, never the value.
                raise TypeError(f"env map value of {key!r} must be a string, got {type(value).__name__}")
            copied[key] = value
        object.__setattr__(self, "_data", copied)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("EnvMap is immutable")

    # Mapping protocol
    def __getitem__(self, key: str) -> str:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return hash(frozenset(self._data.items()))

    # Renderings: keys only
    def __repr__(self) -> str:
        keys = ", ".join(sorted(self._data))
        return f"EnvMap({len(self._data)} keys: {keys})" if keys else "EnvMap(0 keys)"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return format(repr(self), spec)

    def __rich_repr__(self) -> Iterator[tuple[str, Any]]:
        yield "n_keys", len(self._data)
        yield "keys", tuple(sorted(self._data))

    def __structlog__(self) -> str:
        """structlog's JSONRenderer calls this instead of serialising the mapping."""
        return repr(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (EnvMap, (dict(self._data),))

    # Explicit accessors
    def as_body(self) -> dict[str, str]:
        """A fresh dict, exactly as read, for a compose-manager request body."""
        return dict(self._data)

    def secret_values(self) -> frozenset[str]:
        """Every non-empty value (labels included: `ENV=prod` is hidden like a token)."""
        return frozenset(v for v in self._data.values() if v)

    def redaction_values(self) -> frozenset[str]:
        """What a run's shared redactor hides in every log line, journal entry and message.

        Every value of a key that names a credential (TOKEN, SECRET, KEY, PASSWORD, PASS, AUTH,
        CREDENTIAL, CERT, PRIVATE), whatever its length from 4 characters, and every other value of
        16 characters or more (a credential under an unexpected name). Short labels such as
        `ENV=prod` or `CVM_NAME=gpu02` are not scrubbed out of text: hiding them would rewrite file
        paths (`prod/...`) and host names that the journal must keep exact to roll back. They are
        still never rendered as env-map values: the map itself only ever shows its keys.
        """
        out = set()
        for key, value in self._data.items():
            if not value:
                continue
            if _SECRET_KEY.search(key) and len(value) >= 4:
                out.add(value)
            elif len(value) >= 16:
                out.add(value)
        return frozenset(out)

    def fingerprint(self) -> str:
        """A digest of keys *and* values: a dry run is valid only for the env map it was sent
        with. Salted with a fixed label and covering the whole map (credentials included), so it
        reveals nothing about any one value."""
        h = hashlib.sha256(b"orchestrator-env-v1\0")
        for k in sorted(self._data):
            h.update(k.encode() + b"=" + self._data[k].encode() + b"\0")
        return h.hexdigest()[:32]

    def masked_credentials(self) -> list[str]:
        """Keys naming a credential whose value is a mask or a placeholder (`***`, `<redacted>`,
        empty): such a map was copied from a redacted view and must never be deployed."""
        bad = []
        for k, v in self._data.items():
            if not _SECRET_KEY.search(k):
                continue
            t = v.strip()
            if not t or set(t) <= set("*x•.") or (t.startswith("<") and t.endswith(">")) or t.lower() in _PLACEHOLDERS:
                bad.append(k)
        return sorted(bad)

    def keys_fingerprint(self) -> str:
        """sha256 over the sorted key names only (safe to journal; detects added/removed keys)."""
        digest = hashlib.sha256()
        for key in sorted(self._data):
            digest.update(key.encode())
            digest.update(b"\n")
        return digest.hexdigest()

    def describe(self) -> str:
        """`<env map: N keys>`: the form request bodies take in logs and the journal."""
        return f"<env map: {len(self._data)} keys>"
