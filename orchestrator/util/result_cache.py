"""Small results kept under `<state dir>/cache/`, keyed by the sha256 of everything they are computed
from, so that the read-only commands answer without rebuilding them (issue 25: `status`'s step
list, `plan`'s offline text; each one's key is documented where it is made).

Every key includes `code_fingerprint()`: the package version and the size and mtime of each module
of the package, so a changed module always misses. A cache file that cannot be read is a miss; one
that cannot be written is not an error (a read-only state dir just means no cache). At most
`KEEP` files of one kind are kept (the oldest are removed on write).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

#: Bump when a cached form changes.
FORM = 1
KEEP = 64


def code_fingerprint() -> str:
    """sha256 of the package's version and the (path, size, mtime) of each of its modules."""
    import orchestrator

    root = Path(orchestrator.__file__).resolve().parent
    h = hashlib.sha256(f"{FORM}:{getattr(orchestrator, '__version__', '')}".encode())
    stack = [str(root)]
    while stack:
        with os.scandir(stack.pop()) as it:
            for e in sorted(it, key=lambda e: e.name):
                if e.is_dir(follow_symlinks=False) and e.name != "__pycache__":
                    stack.append(e.path)
                elif e.name.endswith(".py"):
                    st = e.stat()
                    h.update(f"{e.path}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def key_of(*parts: bytes | str) -> str:
    """The sha256 of the code fingerprint and `parts` (each hashed, so no two splits collide)."""
    h = hashlib.sha256(code_fingerprint().encode())
    for p in parts:
        h.update(hashlib.sha256(p.encode() if isinstance(p, str) else p).digest())
    return h.hexdigest()


def cache_path(state_dir: Path | str, kind: str, key: str, suffix: str) -> Path:
    return Path(state_dir) / "cache" / f"{kind}-{key}{suffix}"


def read(path: Path) -> str | None:
    """The cached text, or None (no file, unreadable, not UTF-8)."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, ValueError):
        return None


def write(path: Path, text: str) -> None:
    """Write atomically (a reader sees the old file or the new one, never half of one)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
        kind = path.name.split("-", 1)[0] + "-"
        same = sorted((p for p in path.parent.iterdir() if p.name.startswith(kind)), key=lambda p: p.stat().st_mtime_ns)
        for old in same[:-KEEP]:
            old.unlink(missing_ok=True)
    except OSError:
        pass
