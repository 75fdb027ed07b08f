"""Scrubbing secrets (tokens, env-map values) out of text, objects and structlog events.

Hidden: every added string of at least `MIN_SECRET_LEN` (3) characters -- a run's tokens and what
`EnvMap.redaction_values()` decides (shorter ones never: replacing every `1` would destroy a message).

Matched:
- As a whole token: not inside a longer word (`tok-123` is not hidden in `tok-1234`). A letter or
  digit next to the secret makes it another word, except the last character of an escape before
  it (`%3D`, `\\n`, `\\u00e9`, an ANSI colour code), after which a new token starts.
- In every form a server, a URL, a log or a header may carry it, each character independently:
  as is, JSON-escaped (`\\"`, `\\\\`, `\\u00e9`, `\\/`), percent-encoded in either case (`+` for a space).
- Split across two consecutive lines (after `docker compose logs`' `service | ` prefix, if any):
  each piece becomes `***` and the line break stays. `scrub_obj` reads a list of strings as lines.
- Base64 and base64url-encoded, also inside a longer blob (`Basic <b64(user:secret)>`): the
  characters encoding the secret's bytes alone, at each of the three byte alignments (when at
  least `MIN_B64_CORE` long), are searched for and the whole blob around them is hidden.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any, NamedTuple
from urllib.parse import unquote

from orchestrator.hosts.envmap import EnvMap

MIN_SECRET_LEN = 3
MASK = "***"
#: Shortest base64 core searched for (shorter ones would match unrelated blobs).
MIN_B64_CORE = 8
#: A secret whose longest run of letters and digits is shorter is searched for in every text.
MIN_ANCHORED_RUN = 8

_ALNUM = "A-Za-z0-9"
# After a secret's first character (a letter or digit): the character before it is not a letter
# or digit (or there is none), or it ends an escape. Written as look-behinds over two characters
# (the one before and the first one) so the pattern starts with a literal and Python's re can scan
# for the first characters fast.
_ESCAPE_ENDS = [r"%[0-9A-Fa-f]{2}", r"\\[nrtbfv0]", r"\\u[0-9A-Fa-f]{4}", r"\\x[0-9A-Fa-f]{2}",
                *(rf"\x1b\[[0-9;]{{{n}}}m" for n in range(0, 9))]
_START = "(?:" + "|".join([rf"(?<![{_ALNUM}].)"] + [rf"(?<={e}.)" for e in _ESCAPE_ENDS]) + ")"
_END = rf"(?![{_ALNUM}])"
#: A compose log line's `name | ` prefix.
_LOG_PREFIX = r"[A-Za-z0-9_.\-]{1,128} *\| ?"
#: Between two characters of a secret: nothing, or a line break (raw, or JSON-escaped).
_BREAK = rf"\r?\n(?:{_LOG_PREFIX})?|\\r\\n|\\n"
_GAP = f"(?:{_BREAK})?"
_LINE_BREAK = re.compile(r"(\r?\n)")
_PREFIX_RE = re.compile(_LOG_PREFIX)
_B64_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_")
_URLSAFE = str.maketrans("+/", "-_")


def reveal(secret: Any) -> str:
    """The plain text of a `str` or a pydantic `SecretStr` (anything with `get_secret_value`)."""
    if secret is None:
        return ""
    getter = getattr(secret, "get_secret_value", None)
    if callable(getter):
        return str(getter())
    return str(secret)


def _any_case(escape: str) -> str:
    """An escape (`%2F`, `\\u00e9`) as a pattern with its hex letters in either case."""
    return "".join(f"[{c.upper()}{c.lower()}]" if c.lower() in "abcdef" else re.escape(c) for c in escape)


def _char_pattern(c: str) -> str:
    """One character of a secret in every form it may take: as is, percent-encoded, JSON-escaped."""
    if c.isascii() and c.isalnum():
        return c
    # The encoded forms first: `%25` must be read whole, not as `%` and then `25`.
    forms = ["".join(_any_case(f"%{b:02X}") for b in c.encode("utf-8"))]
    escaped = json.dumps(c)[1:-1]
    if escaped != c:
        forms.append(_any_case(escaped))
    if c == "/":
        forms.append(r"\\/")
    if c == " ":
        forms.append(r"\+")
    forms.append(re.escape(c))
    return "(?:" + "|".join(forms) + ")"


def _text_pattern(secret: str) -> str:
    """The secret as a whole token, every character in any form, a line break allowed between two."""
    first, rest = secret[0], secret[1:]
    head = _char_pattern(first) + (_START if first.isascii() and first.isalnum() else "")
    body = "".join(_GAP + _char_pattern(c) for c in rest)
    tail = _END if secret[-1].isascii() and secret[-1].isalnum() else ""
    return head + body + tail


def _b64_cores(secret: str) -> set[str]:
    """The base64 and base64url characters that encode the secret's bytes and nothing else, for
    each of the three positions its first byte may take in a longer blob."""
    raw = secret.encode("utf-8")
    cores: set[str] = set()
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + raw).decode()
        core = encoded[-(-8 * pad // 6):(8 * (pad + len(raw))) // 6]
        if len(core) >= MIN_B64_CORE:
            cores |= {core, core.translate(_URLSAFE)}
    return cores


def _mask(found: str, line_prefix: str) -> str:
    """`***` for each line of a matched secret; its line breaks stay, and so does a next line's
    log prefix when it is the prefix of the line the secret starts on (`line_prefix`)."""
    parts = _LINE_BREAK.split(found)
    out = []
    for i, part in enumerate(parts):
        if i % 2:  # a line break
            out.append(part)
        elif i and line_prefix and part.startswith(line_prefix) and len(part) > len(line_prefix):
            out.append(line_prefix + MASK)
        elif part:
            out.append(MASK)
    return "".join(out)


class _Compiled(NamedTuple):
    """A redactor's patterns. `text` finds every secret in every form, run only on a text holding
    one of `anchors` (literal pieces every match contains), else `always` runs (the secrets too
    short to have an anchor). `b64` finds the base64 cores, run only on a text holding one of
    `cores` and a base64 run as long as the shortest (`b64_run`)."""

    text: re.Pattern[str] | None
    always: re.Pattern[str] | None
    anchors: _Literals
    #: the first anchor of each secret: enough in a text without a line break
    heads: _Literals
    b64: re.Pattern[str] | None
    b64_run: re.Pattern[str] | None
    cores: _Literals

    def may_hold_b64(self, text: str) -> bool:
        return self.b64_run is not None and self.b64_run.search(text) is not None and self.cores.found_in(text)

    def may_hold_text(self, text: str) -> bool:
        """Whether `text` holds an anchor (a text on one line: the first one of a secret)."""
        one_line = "\n" not in text and "\\n" not in text
        return (self.heads if one_line else self.anchors).found_in(text)


class _Literals:
    """Literal strings a text is checked for: by `in` on a long text, by one alternation on a short one."""

    SHORT = 512

    def __init__(self, pieces: Iterable[str]) -> None:
        self.pieces = tuple(sorted(set(pieces), key=lambda p: (-len(p), p)))
        self.pattern = re.compile("|".join(re.escape(p) for p in self.pieces)) if self.pieces else None

    def found_in(self, text: str) -> bool:
        if self.pattern is None:
            return False
        if len(text) <= self.SHORT:
            return self.pattern.search(text) is not None
        return any(p in text for p in self.pieces)


def _anchors(secret: str) -> tuple[str, ...]:
    """Two literal pieces of which every match of the secret holds at least one: the halves of its
    longest run of letters and digits (letters and digits are never encoded, and one line break
    splits one half at most). Empty when that run is shorter than `MIN_ANCHORED_RUN`."""
    run = max(re.findall(f"[{_ALNUM}]+", secret) or [""], key=len)
    half = len(run) // 2
    return (run[:half], run[half:]) if len(run) >= MIN_ANCHORED_RUN else ()


def _alternation(secrets: Iterable[str]) -> re.Pattern[str] | None:
    # Longest first: at one position the alternation takes the first alternative that matches,
    # so a secret that contains another is replaced whole.
    ordered = sorted(secrets, key=lambda s: (-len(s), s))
    return re.compile("|".join(_text_pattern(s) for s in ordered)) if ordered else None


def _compile(secrets: set[str]) -> _Compiled:
    anchors = {s: _anchors(s) for s in secrets}
    cores = sorted({c for s in secrets for c in _b64_cores(s)}, key=lambda c: (-len(c), c))
    return _Compiled(
        text=_alternation(secrets),
        always=_alternation(s for s, a in anchors.items() if not a),
        anchors=_Literals(a for pair in anchors.values() for a in pair),
        heads=_Literals(pair[0] for pair in anchors.values() if pair),
        b64=re.compile("|".join(re.escape(c) for c in cores)) if cores else None,
        b64_run=re.compile(f"[A-Za-z0-9+/_-]{{{len(cores[-1])}}}") if cores else None,
        cores=_Literals(cores),
    )


class Redactor:
    """Holds secrets; replaces each occurrence (in any form of the module doc) with `***`.
    Thread-safe; secrets only accumulate."""

    def __init__(self, *secrets: Any) -> None:
        self._secrets: set[str] = set()
        self._patterns: _Compiled | None = None
        self._lock = threading.Lock()
        self.add(*secrets)

    def add(self, *secrets: Any) -> Redactor:
        """Add secrets (str or SecretStr); shorter than `MIN_SECRET_LEN` ones are ignored."""
        new = {text for text in (reveal(s) for s in secrets) if len(text) >= MIN_SECRET_LEN}
        with self._lock:
            if not new <= self._secrets:
                self._secrets |= new
                self._patterns = None
        return self

    def __repr__(self) -> str:
        return f"Redactor({len(self._secrets)} secrets)"

    def _compiled(self) -> _Compiled:
        ready = self._patterns
        if ready is not None:
            return ready
        with self._lock:
            if self._patterns is None:
                self._patterns = _compile(self._secrets)
            return self._patterns

    def _spans(self, text: str) -> list[tuple[int, int]]:
        """Where secrets are in `text`: sorted, overlapping ones merged."""
        c = self._compiled()
        plain = c.text if c.may_hold_text(text) else c.always
        spans = [m.span() for m in plain.finditer(text)] if plain is not None else []
        if c.b64 is not None and c.may_hold_b64(text):
            for m in c.b64.finditer(text):
                start, end = m.span()
                while start > 0 and text[start - 1] in _B64_CHARS:
                    start -= 1
                while end < len(text) and text[end] in _B64_CHARS:
                    end += 1
                while end < len(text) and text[end] == "=":
                    end += 1
                spans.append((start, end))
            spans.sort()
        merged: list[tuple[int, int]] = []
        for start, end in spans:
            if merged and start < merged[-1][1]:
                merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
            else:
                merged.append((start, end))
        return merged

    def scrub(self, text: str) -> str:
        spans = self._spans(text)
        if not spans:
            return text
        out, pos = [], 0
        for start, end in spans:
            prefix = ""
            if "\n" in text[start:end]:
                head = _PREFIX_RE.match(text, text.rfind("\n", 0, start) + 1)
                prefix = head.group(0) if head else ""
            out += [text[pos:start], _mask(text[start:end], prefix)]
            pos = end
        out.append(text[pos:])
        return "".join(out)

    def contains_secret(self, text: str) -> bool:
        return bool(self._spans(text))

    def may_begin_secret(self, line: str) -> bool:
        """Whether `line` ends with what may be the head of a secret split across it and the next
        line: a suffix starting a token (as is or percent-decoded) that is a proper prefix of a
        secret (a stream holds such a line until the next one)."""
        words = line.rsplit(None, 1)
        with self._lock:
            secrets = tuple(self._secrets)
        if not words or line[-1:].isspace() or not secrets:
            return False
        word = words[-1]
        for text in {word, unquote(word)}:
            starts = [i for i in range(len(text)) if i == 0 or not text[i - 1].isalnum()]
            for i in starts:
                head = text[i:]
                if any(len(head) < len(s) and s.startswith(head) for s in secrets):
                    return True
        return False

    def scrub_lines(self, lines: list[str]) -> list[str]:
        """A list of strings read as consecutive lines (a secret split across two is found)."""
        if len(lines) > 1 and not any("\n" in s or "\r" in s for s in lines):
            joined = "\n".join(lines)
            if not self.contains_secret(joined):
                return list(lines)
            out = self.scrub(joined).split("\n")
            if len(out) == len(lines):
                return out
        return [self.scrub(s) for s in lines]

    def scrub_obj(self, obj: Any) -> Any:
        """`obj` with every secret masked in every string at any depth (keys too, containers
        copied; `bytes` as UTF-8; a list of strings as lines). An `EnvMap` is returned as is (it
        shows keys only); any other object whose `repr` holds a secret becomes its scrubbed `repr`."""
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
            if obj and all(isinstance(v, str) for v in obj):
                return self.scrub_lines(obj)
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
        """A structlog processor scrubbing every event dict: place it last before the renderer
        (after `format_exc_info`, so tracebacks are scrubbed too)."""

        def scrub_event(_logger: Any, _method: str, event_dict: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
            return self.scrub_obj(dict(event_dict))

        return scrub_event
