"""The runbook loader: the gpu02 runbook loads; each forbidden shape is refused naming its field."""

import copy

import pytest
import yaml

from orchestrator.language.runbook import RUNBOOK_DIR, load_runbook, parse_runbook
from orchestrator.util.user_errors import UserError

RAW = yaml.safe_load((RUNBOOK_DIR / "gpu02-glm53-w4afp8-long-context.yaml").read_text())


def test_gpu02_runbook_encodes_the_procedure():
    rb = load_runbook()
    assert [p.name for p in rb.phases] == ["r2", "r1", "reconcile"]
    assert rb.budget.variable == "GLM53_HICACHE_RAM_BUDGET" and rb.budget.allowed == ["406GiB"]
    assert rb.timeouts.cold_start == 3000 and rb.timeouts.stop_grace == 300
    r2 = rb.phase("r2")
    assert r2.steps[0].down.file == "previous:model-sg-glm53-fp8-tp4-r2"
    assert rb.replica_of(r2.steps[0].down.services[0]) == "r2" and rb.replica_of("model-sg-glm53-w4afp8-tp4-r1") == "r1"
    sidecars = next(s for s in r2.steps if s.id == "sidecars-up")
    assert sidecars.up.services == ["proxy-glm53", "dcgm-glm53"]
    assert [p.replica for p in rb.full_rollback] == ["r2", "r1"]
    assert set(rb.previous_refs()) == {"model-sg-glm53-fp8-tp4-r2", "proxy-glm53", "model-sg-glm53-w4afp8-tp4-r1"}


def _relay_pair(d):
    steps = d["phases"][0]["steps"]
    return [st for st in steps if st["id"] in ("relay-dry-run", "relay-up")]


def test_config_only_services_are_recreated_by_a_scoped_force_recreate():
    """The relay and the collector differ between the canary and the long-context file only in
    their inline configs: compose would not recreate them (docker/compose#11900), so their dry
    runs and ups force it, each scoped to that one service."""
    rb = parse_runbook(copy.deepcopy(RAW), source="t.yaml")
    for ph in rb.phases:
        for st in ph.steps:
            c = st.compose
            if c is not None and st.down is None and c.force_recreate:
                assert c.services in (["glm53-soak-relay"], ["otelcol-contrib"]), st.id
    forced = [st.id for st in rb.phases[0].steps if st.compose is not None and st.compose.force_recreate]
    assert forced == ["relay-dry-run", "relay-up", "collector-dry-run", "collector-up"]


def _mutated(fn):
    data = copy.deepcopy(RAW)
    fn(data)
    return data


@pytest.mark.parametrize(
    "mutate, needle",
    [
        (lambda d: d.__setitem__("colour", "red"), "colour: unknown key"),
        (lambda d: d["phases"][0]["steps"][0].__setitem__("typo", 1), "typo: unknown key"),
        (lambda d: d["phases"][0]["steps"][1]["dry_run"].__setitem__("services", []), "services must not be empty"),
        (lambda d: (d["phases"][0]["steps"][1]["dry_run"].__setitem__("force_recreate", True),
                    d["phases"][0]["steps"][2]["up"].__setitem__("force_recreate", True)),
         "(dry-run).dry_run.force_recreate: never on an engine (model-sg-glm53-w4afp8-tp4-r2)"),
        (lambda d: d["phases"][0]["steps"][2]["up"].__setitem__("force_recreate", True),
         "an up must be preceded by a dry_run of the same request (same file, services and force_recreate)"),
        (lambda d: _relay_pair(d)[1]["up"].__setitem__("force_recreate", False), "an up must be preceded by a dry_run"),
        (lambda d: d["phases"][0]["steps"][0]["down"].__setitem__("force_recreate", True), "down.force_recreate: a down recreates nothing"),
        (lambda d: d["preflight"][-1]["dry_run"].__setitem__("services", ["glm53-soak-relay"])
         or d["preflight"][-1]["dry_run"].__setitem__("force_recreate", True), "a preflight tag check recreates nothing"),
        (lambda d: d["rollback_keeps"].__setitem__("model-sg-glm53-w4afp8-tp4-r1", "x"),
         "rollback_keeps.model-sg-glm53-w4afp8-tp4-r1: an engine never stays on the new file"),
        (lambda d: (d["phases"][0]["steps"][1]["dry_run"].__setitem__("force_recreate", True),
                    d["phases"][0]["steps"][1]["dry_run"].__setitem__("services", "selected")), "needs an explicit services list"),
        (lambda d: d["phases"][0]["steps"].pop(1), "an up must be preceded by a dry_run of the same request"),
        (lambda d: d["phases"][0]["steps"][2]["up"].__setitem__("services", ["nginx"]), "an up must be preceded by a dry_run"),
        (lambda d: d["phases"][0]["steps"][1]["dry_run"].__setitem__("file", "../etc/passwd"), "file must be 'new' or 'previous:<service>'"),
        (lambda d: d.__setitem__("file", "/abs/path.yaml"), "relative path"),
        (lambda d: d["preflight"].append({"id": "x", "say": "x", "down": {"file": "new", "services": ["a"]}}), "must not mutate"),
        (lambda d: d["phases"][0]["steps"][1].pop("plan"), "needs a plan"),
    ],
)
def test_loader_refuses_forbidden_shapes_naming_the_field(mutate, needle):
    with pytest.raises(UserError) as exc:
        parse_runbook(_mutated(mutate), source="t.yaml")
    assert needle in str(exc.value)
    assert "\n" not in str(exc.value)


def test_missing_runbook_and_bad_yaml(tmp_path):
    with pytest.raises(UserError, match="not found"):
        load_runbook("no-such-runbook")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(UserError, match="not valid YAML"):
        load_runbook(str(bad))


def test_a_run_resumes_only_with_the_runbook_it_started_with(tmp_path):
    """A run records its runbook's identity (name, path, sha256) and text, read once: resume runs
    that text whatever happens to the file; a run recorded without its text loads the recorded
    file and refuses when it changed (never another file of the same name)."""
    import shutil

    from orchestrator.language.runbook import load_recorded_runbook, read_runbook
    from orchestrator.util.user_errors import Refused

    name = "gpu02-glm53-w4afp8-long-context"
    copy = tmp_path / f"{name}.yaml"
    shutil.copy(RUNBOOK_DIR / f"{name}.yaml", copy)
    rb, ident, text = read_runbook(str(copy))
    assert ident["path"] == str(copy.resolve()) and len(ident["sha256"]) == 64 and text == copy.read_text()
    assert load_recorded_runbook(name, ident).name == name == rb.name
    copy.write_text(copy.read_text().replace("cold_start: 50m", "cold_start: 5m") + "# edited\n")
    # the recorded text: the edit (or a git pull) does not change what the run executes
    assert load_recorded_runbook(name, ident, text) == rb
    with pytest.raises(Refused, match="changed since this run started"):
        load_recorded_runbook(name, ident)  # recorded without its text
    with pytest.raises(Refused, match="changed since this run started"):
        load_recorded_runbook(name, ident, text + "# not what was recorded\n")  # a text that is not the recorded one
    copy.unlink()
    assert load_recorded_runbook(name, ident, text) == rb
    with pytest.raises(Refused, match="is gone"):
        load_recorded_runbook(name, ident)
