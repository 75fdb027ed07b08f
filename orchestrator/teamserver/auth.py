"""Who is asking: bearer tokens, one shared token or a tokens file of named operators. Modes:

- **single token** (`ORCHESTRATOR_SERVER_TOKEN`): its holder is an operator; the journal records
  the `by` the client sends, marked as the client's word. At least 32 characters with enough
  entropy (`check_token_strength`).
- **tokens file** (`--tokens-file`): YAML entries of `name`, `role` (`viewer` reads, `operator`
  also submits, approves and aborts) and the `sha256` of a token from `orchestrate serve token add`
  (32 random bytes: a fast hash is enough). The journal's `by` is the entry's name. The file is
  re-read when it changes and on SIGHUP (removing an entry revokes its token). A file that cannot
  be read or parsed, or that anyone may write, is refused: at start-up the server does not start;
  on a reload no token is accepted (503, fail closed) until it is usable again, with one log line each.
- **no auth** (`--insecure-no-auth`, loopback binds only): everyone is an anonymous operator.

Tokens are compared as sha256 digests with `hmac.compare_digest` (constant time).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import re
import secrets
import stat
import tempfile
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from orchestrator.util.user_errors import UserError

ROLES = ("viewer", "operator")
MIN_TOKEN_LEN = 32
#: Shannon estimate of the token's entropy (bits per character x length), and distinct characters.
MIN_TOKEN_BITS = 128.0
MIN_DISTINCT_CHARS = 10
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Principal:
    name: str
    role: str
    #: True when `name` comes from the server's tokens file (not from the client's word).
    verified: bool

    def may(self, role: str) -> bool:
        return ROLES.index(self.role) >= ROLES.index(role)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def check_token_strength(token: str, what: str = "ORCHESTRATOR_SERVER_TOKEN") -> None:
    """Refuse a short or low-entropy shared token (UserError, one line)."""
    if len(token) < MIN_TOKEN_LEN:
        raise UserError(f"{what} is {len(token)} characters: at least {MIN_TOKEN_LEN} are needed "
                        f"(e.g. `openssl rand -hex 32`)")
    counts = Counter(token)
    per_char = -sum(n / len(token) * math.log2(n / len(token)) for n in counts.values())
    if len(counts) < MIN_DISTINCT_CHARS or per_char * len(token) < MIN_TOKEN_BITS:
        raise UserError(f"{what} looks guessable (too few distinct characters): use a random one, "
                        f"e.g. `openssl rand -hex 32`")


class TokensFile:
    """The per-operator tokens file, re-read when it changes on disk or on `reload()`.

    `on_change(error)` is called when a reload refuses the file (`error`: one line naming it and
    why) or finds it usable again (`None`): once per change of state, and on every explicit
    `reload()` that refuses it (an operator who sends SIGHUP gets an answer)."""

    def __init__(self, path: Path, on_change: Callable[[str | None], None] | None = None) -> None:
        self.path = Path(path)
        self.on_change = on_change
        self._lock = threading.Lock()
        self._key: tuple[int, ...] | None = None
        self._entries: list[tuple[str, str, str]] = []  # (sha256, name, role)
        self.error: str | None = None
        self._load(strict=True)

    def _stat_key(self) -> tuple[int, ...] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, st.st_mode)

    def _load(self, *, strict: bool, explicit: bool = False) -> None:
        key = self._stat_key()
        before = self.error
        try:
            entries = parse_tokens_file(self.path)
        except UserError as exc:
            if strict:
                raise
            entries, self.error = [], str(exc)  # fail closed: no token is accepted
        else:
            self.error = None
        self._entries, self._key = entries, key
        if self.on_change is not None and (self.error != before or (explicit and self.error is not None)):
            self.on_change(self.error)

    def reload(self) -> None:
        with self._lock:
            self._load(strict=False, explicit=True)

    def maybe_reload(self) -> None:
        if self._stat_key() != self._key:
            with self._lock:
                if self._stat_key() != self._key:
                    self._load(strict=False)

    def lookup(self, token: str) -> Principal | None:
        self.maybe_reload()
        digest = token_hash(token)
        found: Principal | None = None
        for sha, name, role in self._entries:  # every entry compared: no early exit to time
            if hmac.compare_digest(sha, digest):
                found = Principal(name, role, verified=True)
        return found


def check_tokens_file_mode(path: Path, st: os.stat_result) -> None:
    """Refuse a tokens file anyone may write (UserError naming it): whoever can write it can give
    themselves an operator's token. Its group may write it (a team's admins)."""
    if st.st_mode & stat.S_IWOTH:
        raise UserError(f"the tokens file {path} is world-writable (mode {stat.S_IMODE(st.st_mode):04o}): "
                        f"anyone on this machine could add a token; `chmod o-w` it (0600 is best)")
    try:
        parent = os.stat(Path(path).absolute().parent)
    except OSError:
        return
    if parent.st_mode & stat.S_IWOTH and not parent.st_mode & stat.S_ISVTX:
        raise UserError(f"the tokens file {path} is in a world-writable directory: anyone on this machine "
                        f"could replace it; move it to a directory only its owner may write")


def parse_tokens_file(path: Path) -> list[tuple[str, str, str]]:
    try:
        with open(path, "rb") as f:
            check_tokens_file_mode(path, os.fstat(f.fileno()))
            raw = f.read()
        data = yaml.safe_load(raw.decode("utf-8")) or {}
    except OSError as exc:
        raise UserError(f"cannot read the tokens file {path}: {exc.strerror}") from None
    except (yaml.YAMLError, UnicodeDecodeError):
        raise UserError(f"the tokens file {path} is not valid YAML") from None
    items = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise UserError(f"the tokens file {path} needs a `tokens:` list")
    out: list[tuple[str, str, str]] = []
    names: set[str] = set()
    for i, item in enumerate(items):
        if not isinstance(item, dict) or set(item) - {"name", "role", "sha256"}:
            raise UserError(f"the tokens file {path}: tokens[{i}] needs exactly name, role, sha256")
        name, role, sha = str(item.get("name", "")), str(item.get("role", "")), str(item.get("sha256", ""))
        if not NAME_RE.fullmatch(name) or name in names:
            raise UserError(f"the tokens file {path}: tokens[{i}] has a missing, malformed or repeated name")
        if role not in ROLES or not _HEX64.fullmatch(sha):
            raise UserError(f"the tokens file {path}: tokens[{i}] ({name}) needs role viewer|operator and a sha256")
        names.add(name)
        out.append((sha, name, role))
    return out


def add_token(path: Path, name: str, role: str) -> str:
    """Make a fresh token for `name`, store its hash in `path` (created 0600), return the token."""
    if not NAME_RE.fullmatch(name):
        raise UserError(f"token name {name[:70]!r}: letters, digits and . _ @ - (at most 64)")
    if role not in ROLES:
        raise UserError(f"--role {role!r} must be viewer or operator")
    path = Path(path)
    entries = parse_tokens_file(path) if path.exists() else []
    if any(n == name for _, n, _ in entries):
        raise UserError(f"{name} already has a token in {path}: remove its entry first (that revokes it)")
    token = secrets.token_urlsafe(32)
    items: list[dict[str, Any]] = [{"name": n, "role": r, "sha256": s} for s, n, r in entries]
    items.append({"name": name, "role": role, "sha256": token_hash(token)})
    text = ("# orchestrate serve tokens: sha256 of each token, never the token. Delete an entry to revoke it\n"
            "# (the server re-reads this file when it changes, and on SIGHUP).\n"
            + yaml.safe_dump({"tokens": items}, sort_keys=False))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return token


class Authenticator:
    """Turns an `Authorization` header into a Principal (or None)."""

    def __init__(self, *, token: str | None = None, tokens_file: TokensFile | None = None,
                 open_access: bool = False) -> None:
        self._digest = token_hash(token) if token else None
        self.tokens_file = tokens_file
        self.open_access = open_access and token is None and tokens_file is None

    @property
    def mode(self) -> str:
        return "tokens-file" if self.tokens_file else "token" if self._digest else "none"

    def tokens_unusable(self) -> bool:
        """True while the tokens file is refused: no token can be checked (the answer is a 503, not a 401)."""
        if self.tokens_file is None:
            return False
        self.tokens_file.maybe_reload()
        return self.tokens_file.error is not None

    def presents_valid_token(self, authorization: str | None) -> bool:
        """A connection whose request carries this header holds a real token (never in open access,
        where nobody presents one): serving.py keeps room for such connections."""
        return not self.open_access and self.authenticate(authorization) is not None

    def authenticate(self, authorization: str | None) -> Principal | None:
        if self.open_access:
            return Principal("anonymous", "operator", verified=False)
        scheme, _, value = (authorization or "").partition(" ")
        value = value.strip()
        if scheme.lower() != "bearer" or not value or len(value) > 512:
            return None
        if self.tokens_file is not None:
            return self.tokens_file.lookup(value)
        if self._digest is not None and hmac.compare_digest(token_hash(value), self._digest):
            return Principal("token", "operator", verified=False)
        return None
