"""A host's env map: read whole from the dashboard, passed whole to compose-manager, shown by keys only.

Every rendering of an `EnvMap` (`repr`, `str`, f-strings, rich, structlog) shows the key names,
never a value; values come out only explicitly (`env[key]`, `.items()`, `as_body()`,
`redaction_values()`).

Which values are secrets (`redaction_values`): a value is hidden by what it is, never because its
key merely contains a credential-ish substring (`AUTH_ENV=prod`, `TOKENIZERS_PARALLELISM=false`
are labels: hiding them would rewrite every `prod` in paths, every `false` a gate judges). A
value is a secret when

1. its key is a credential (`is_credential_key`): one of `NAMED_CREDENTIALS`, a key the inventory
   declares (`secret_keys:`), or a key whose last word (split on `_`, `-`, `.`) is TOKEN, SECRET,
   PASSWORD, PASSWD or PASSPHRASE, or whose last two are API/ACCESS/SECRET/PRIVATE KEY; or
2. it has a random token's shape whatever its key (`looks_like_secret`): 16+ characters, no
   whitespace, entropy >= 3 bits per character, and a run of 12+ letters and digits mixing both
   with 4+ changes of class (lower, upper, digit); paths, image tags and model names (short
   words) do not. UUIDs, `sha256:` digests and URLs are not secrets by shape (a 40-digit hex
   commit is, unless passed among the identifiers); or
3. it is the password of a URL (`scheme://user:password@host`);

and never when it is a plain value (`is_plain_value`: shorter than 6, no letter, a common word, a
placeholder), nor when it appears in one of the host's identifiers the caller passes (host name,
file paths, tags, service names): those must stay exact wherever they are written.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import unquote

#: Keys that are credentials by name (compared upper-cased).
NAMED_CREDENTIALS = frozenset({
    "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN", "PROXY_TOKEN", "MODEL_PROXY_TOKEN",
    "COMPOSE_MANAGER_TOKEN", "DASHBOARD_TOKEN", "GITHUB_TOKEN", "GH_TOKEN", "PGPASSWORD", "MYSQL_PWD",
})
_CREDENTIAL_LAST_WORDS = frozenset({"TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE"})
_CREDENTIAL_LAST_PAIRS = frozenset({("API", "KEY"), ("ACCESS", "KEY"), ("SECRET", "KEY"), ("PRIVATE", "KEY")})
_KEY_WORD_SEP = re.compile(r"[_.\-]+")

MIN_CREDENTIAL_LEN = 6
#: rule 2 of the module doc
SHAPE_MIN_LEN = 16
SHAPE_MIN_ENTROPY = 3.0
SHAPE_MIN_RUN = 12
SHAPE_MIN_CLASS_CHANGES = 4

#: Values that are words, never secrets (compared lower-cased).
COMMON_WORDS = frozenset({
    "true", "false", "yes", "no", "on", "off", "none", "null", "nil", "undefined", "unset", "empty",
    "enabled", "disabled", "enable", "disable", "auto", "always", "never", "default", "required", "optional",
    "prod", "production", "staging", "stage", "dev", "development", "test", "testing", "local", "localhost",
    "debug", "info", "warn", "warning", "error", "latest", "stable", "main", "master", "public", "private",
})
_PLACEHOLDERS = {"redacted", "[redacted]", "changeme", "placeholder", "none", "null", "xxx", "todo"}

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_DIGEST = re.compile(r"(?i)\b(?:md5|sha1|sha224|sha256|sha384|sha512):[0-9a-f]{16,}")
_ALNUM_RUN = re.compile(r"[A-Za-z0-9]+")
_URL_PASSWORD = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://[^/?#:@\s]*:([^/?#@\s]+)@")


def is_credential_key(key: str, declared: Iterable[str] = ()) -> bool:
    """Rule 1 of the module doc; `declared`: the inventory's `secret_keys` (exact names)."""
    if key in set(declared) or key.upper() in NAMED_CREDENTIALS:
        return True
    words = [w for w in _KEY_WORD_SEP.split(key.upper()) if w]
    return bool(words) and (words[-1] in _CREDENTIAL_LAST_WORDS or tuple(words[-2:]) in _CREDENTIAL_LAST_PAIRS)


def shannon_entropy(text: str) -> float:
    """Bits per character of `text`'s own character distribution."""
    if not text:
        return 0.0
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values())


def _class_changes(run: str) -> int:
    def cls(c: str) -> int:
        return 0 if c.isdigit() else 1 if c.isupper() else 2

    return sum(cls(a) != cls(b) for a, b in zip(run, run[1:], strict=False))


def is_plain_value(value: str) -> bool:
    """Never a secret: shorter than `MIN_CREDENTIAL_LEN`, no letter, a common word or a placeholder."""
    t = value.strip()
    return (len(t) < MIN_CREDENTIAL_LEN or not any(c.isalpha() for c in t)
            or t.lower() in COMMON_WORDS or t.lower() in _PLACEHOLDERS)


def looks_like_secret(value: str) -> bool:
    """Rule 2 of the module doc."""
    if len(value) < SHAPE_MIN_LEN or any(c.isspace() for c in value) or "://" in value:
        return False
    if _UUID.fullmatch(value) or shannon_entropy(value) < SHAPE_MIN_ENTROPY:
        return False
    for run in _ALNUM_RUN.findall(_DIGEST.sub("-", value)):
        if (len(run) >= SHAPE_MIN_RUN and any(c.isdigit() for c in run) and any(c.isalpha() for c in run)
                and _class_changes(run) >= SHAPE_MIN_CLASS_CHANGES):
            return True
    return False


def _is_mask(value: str) -> bool:
    """A redacted view's mask, whatever the key: `***`, `•••`, `<redacted>`, `[REDACTED]`."""
    return (len(value) >= 3 and set(value) <= {"*", "•"}) or value.lower() in {"<redacted>", "[redacted]"}


def url_password(value: str) -> str | None:
    m = _URL_PASSWORD.match(value.strip())
    return m.group(1) if m else None


class EnvMap(Mapping[str, str]):
    """Immutable mapping of env var name -> value whose renderings never show a value."""

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, str] | None = None) -> None:
        copied: dict[str, str] = {}
        for key, value in (data or {}).items():
            if not isinstance(key, str):
                raise TypeError(f"env map keys must be strings, got {type(key).__name__}")
            if not isinstance(value, str):  # name the key, never the value
                raise TypeError(f"env map value of {key!r} must be a string, got {type(value).__name__}")
            copied[key] = value
        object.__setattr__(self, "_data", copied)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("EnvMap is immutable")

    def __getitem__(self, key: str) -> str:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return hash(frozenset(self._data.items()))

    def __repr__(self) -> str:
        keys = ", ".join(sorted(self._data))
        return f"EnvMap({len(self._data)} keys: {keys})" if keys else "EnvMap(0 keys)"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return format(repr(self), spec)

    def __rich_repr__(self) -> Iterator[tuple[str, Any]]:
        yield "n_keys", len(self._data)
        yield "keys", tuple(sorted(self._data))

    def __structlog__(self) -> str:  # structlog's JSONRenderer calls it instead of serialising the mapping
        return repr(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (EnvMap, (dict(self._data),))

    def as_body(self) -> dict[str, str]:
        """A fresh dict, exactly as read, for a compose-manager request body."""
        return dict(self._data)

    def redaction_values(self, *, secret_keys: Iterable[str] = (), identifiers: Iterable[str] = ()) -> frozenset[str]:
        """What a run's shared redactor hides: the module doc's rules. `secret_keys`: the
        inventory's for this host; `identifiers`: the host's own names (a value inside one is
        never hidden)."""
        declared = frozenset(secret_keys)
        names = [str(i) for i in identifiers if i]
        out: set[str] = set()
        for key, value in self._data.items():
            found = [value] if is_credential_key(key, declared) or looks_like_secret(value) else []
            password = url_password(value)
            if password is not None:
                found += [password, unquote(password)]
            out.update(v for v in found if not is_plain_value(v) and not any(v in name for name in names))
        return frozenset(out)

    def fingerprint(self) -> str:
        """A digest of keys *and* values (a dry run is valid only for the env map it was sent
        with), salted and over the whole map, so it reveals nothing about any one value."""
        entries = b"".join(k.encode() + b"=" + self._data[k].encode() + b"\0" for k in sorted(self._data))
        return hashlib.sha256(b"orchestrator-env-v1\0" + entries).hexdigest()[:32]

    def masked_credentials(self, *, secret_keys: Iterable[str] = ()) -> list[str]:
        """Keys whose value was copied from a redacted view and must never be deployed: a mask
        (`***`, `•••`, `<redacted>`) under any key, and under a credential key
        (`is_credential_key`) also an empty value, `xxx` or a placeholder (`changeme`, `none`)."""
        declared = frozenset(secret_keys)
        bad = []
        for k, v in self._data.items():
            t = v.strip()
            if _is_mask(t):
                bad.append(k)
            elif is_credential_key(k, declared) and (
                    not t or set(t) <= set("*x•.") or (t.startswith("<") and t.endswith(">"))
                    or t.lower() in _PLACEHOLDERS):
                bad.append(k)
        return sorted(bad)

    def keys_fingerprint(self) -> str:
        """sha256 over the sorted key names only (safe to journal; detects added/removed keys)."""
        return hashlib.sha256("".join(f"{key}\n" for key in sorted(self._data)).encode()).hexdigest()
