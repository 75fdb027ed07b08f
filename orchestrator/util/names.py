"""The default runbook's name, and where things live (the state directory, the inventory searched,
XDG): plain values and functions that orchestrator/util/settings.py builds on."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

#: The runbook used when none is named and no shipped runbook names the host.
DEFAULT_RUNBOOK = "gpu02-glm53-w4afp8-long-context"

#: The inventory in the working directory (a checkout of the deploy repository).
LOCAL_INVENTORY = Path("config/hosts.yaml")


def _xdg_dir(var: str, fallback: tuple[str, ...]) -> Path:
    """An XDG base directory: the variable if absolute (the spec ignores relative ones), else the fallback."""
    value = os.environ.get(var, "")
    if value and Path(value).is_absolute():
        return Path(value)
    return Path.home().joinpath(*fallback)


def default_state_dir() -> Path:
    return _xdg_dir("XDG_STATE_HOME", (".local", "state")) / "orchestrator"


def user_inventory() -> Path:
    return _xdg_dir("XDG_CONFIG_HOME", (".config",)) / "orchestrator" / "hosts.yaml"


@dataclass(frozen=True)
class InventoryChoice:
    """Which inventory a command uses and why (`status` prints it)."""

    path: Path | None  # None: none found
    source: str  # "--inventory", "ORCHESTRATOR_INVENTORY", "./config/hosts.yaml", "$XDG_CONFIG_HOME/..."
    searched: tuple[Path, ...] = ()

    def describe(self) -> str:
        if self.path is None:
            return "none found (searched " + ", ".join(str(p) for p in self.searched) + ")"
        return f"{self.path} (from {self.source})"


def placeholder_hosts(text: str) -> str | None:
    """The first URL of an inventory's text whose host is a reserved placeholder name (RFC 2606:
    `.invalid`, `.example`, `example.com/net/org`); None when it names none."""
    for url in re.findall(r"https?://[^\s\"']+", text):
        name = (urlsplit(url).hostname or "").lower()
        if name.endswith((".invalid", ".example")) or name in ("example.com", "example.net", "example.org"):
            return url
    return None


def is_placeholder_inventory(path: Path) -> bool:
    """Every URL of the inventory is a placeholder (the checkout's config/hosts.yaml as shipped)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    urls = re.findall(r"https?://[^\s\"']+", text)
    return bool(urls) and all(placeholder_hosts(u) for u in urls)


def choose_inventory(inventory: Path | str | None, source: str) -> InventoryChoice:
    """`inventory` (from `source`) if given, else the first found of ./config/hosts.yaml and the
    user's, else the example an installed wheel carries."""
    if inventory is not None:
        return InventoryChoice(Path(inventory), source)
    candidates = ((LOCAL_INVENTORY, "./config/hosts.yaml"), (user_inventory(), "$XDG_CONFIG_HOME/orchestrator/hosts.yaml"))
    found = [(path, where) for path, where in candidates if path.is_file()]
    if len(found) > 1 and is_placeholder_inventory(found[0][0]):
        # a checkout's placeholder (every URL .invalid) never wins over the user's own inventory
        path, where = found[1]
        return InventoryChoice(path, f"{where}; ./config/hosts.yaml is a placeholder")
    for path, where in found:
        return InventoryChoice(path, where)
    example = example_inventory()
    if example is not None:  # offline previews work from an installed wheel; acting on it is refused (a placeholder)
        return InventoryChoice(example, "the example shipped with orchestrate, every URL a placeholder",
                               tuple(p for p, _ in candidates))
    return InventoryChoice(None, "", tuple(p for p, _ in candidates))


def example_inventory() -> Path | None:
    """The example inventory an installed wheel carries (pyproject maps config/hosts.yaml there)."""
    path = Path(__file__).resolve().parents[1] / "examples" / "hosts.yaml"
    return path if path.is_file() else None

