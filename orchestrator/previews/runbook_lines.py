"""Where in the runbook file a fact the compose-file check compares comes from: `file:line field`.

A problem line names the runbook line that relies on the value it compares, so a reviewer of a
compose-files pull request sees which procedure step (or which declared value) the change breaks.
The runbook's YAML is composed (not constructed) to keep each node's line; a runbook whose file
cannot be found (parsed from text only) is cited by field path alone.
"""

from __future__ import annotations

import yaml

from orchestrator.language.runbook import RUNBOOK_DIR, Runbook


class RunbookLines:
    def __init__(self, rb: Runbook) -> None:
        path = RUNBOOK_DIR / f"{rb.name}.yaml"
        self.root: yaml.Node | None = None
        self.name = f"runbook {rb.name}"  # no file of it in runbooks/: cited by field path alone
        if path.is_file():
            self.name = f"runbooks/{path.name}" if path.resolve().parent == RUNBOOK_DIR.resolve() else str(path)
            try:
                self.root = yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
            except (OSError, yaml.YAMLError):
                pass

    def _cite(self, node: yaml.Node | None, what: str) -> str:
        if node is None:
            return f"{self.name} {what}"
        return f"{self.name}:{node.start_mark.line + 1} {what}"

    def at(self, *keys: str | int) -> str:
        """`runbooks/x.yaml:47 replica_values.r2.config_variant` (the deepest key found; a list index counted from 1)."""
        node = self.root
        found: yaml.Node | None = None  # the key's node for a mapping key (its line), else the item's
        for key in keys:
            child = _child(node, key)
            if child is None:
                break
            found = _key_node(node, key) or child
            node = child
        what = ".".join(f"[{k + 1}]" if isinstance(k, int) else str(k) for k in keys).replace(".[", "[")
        return self._cite(found, what)

    def step(self, section: str, step_id: str, field: str | None = None) -> str:
        """A forward step: `runbooks/x.yaml:157 r2/relay-checks` (`section`: a phase name, a
        whole-host rollback phase, or `preflight`)."""
        what = f"{section}/{step_id}" + (f" {field}" if field else "")
        steps: yaml.Node | None = None
        if section == "preflight":
            steps = _child(self.root, "preflight")
        else:
            for key in ("phases", "full_rollback"):
                for phase in _items(_child(self.root, key)):
                    if _scalar(_child(phase, "name")) == section:
                        steps = _child(phase, "steps")
        for st in _items(steps):
            if _scalar(_child(st, "id")) == step_id:
                return self._cite((_key_node(st, field) if field else None) or st, what)
        return self._cite(None, what)


def _child(node: yaml.Node | None, key: str | int) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode) and isinstance(key, str):
        return next((v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key), None)
    if isinstance(node, yaml.SequenceNode) and isinstance(key, int) and 0 <= key < len(node.value):
        return node.value[key]
    return None


def _key_node(node: yaml.Node | None, key: str | int) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode) and isinstance(key, str):
        return next((k for k, _ in node.value if isinstance(k, yaml.ScalarNode) and k.value == key), None)
    return None


def _items(node: yaml.Node | None) -> list[yaml.Node]:
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


def _scalar(node: yaml.Node | None) -> str | None:
    return node.value if isinstance(node, yaml.ScalarNode) else None
