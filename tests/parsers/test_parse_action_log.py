import pytest

from orchestrator.hosts.parsers import ParseError
from orchestrator.hosts.parsers.action_log import Action, last_deploy, parse_action_log

R1 = "model-sg-glm53-w4afp8-tp4-r1"
R2_OLD = "model-sg-glm53-fp8-tp4-r2"
R2_NEW = "model-sg-glm53-w4afp8-tp4-r2"
CANARY = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-Canary.yaml"
NEW = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml"


def entry(action, tag, file, services=None, ts="2026-09-20T10:00:00Z"):
    e = {"timestamp": ts, "action": action, "tag": tag, "commit": "c" + tag, "file": file, "file_sha256": "s" + tag}
    if services is not None:
        e["services"] = services
    return e


REPORT = {
    "nonce": "00" * 32,
    "actions_hash": "h",
    "actions": [
        entry("compose_up", "t1", CANARY),  # no services list: every service of the file
        entry("compose_up", "t2", CANARY, [R2_OLD]),
        entry("docker_restart", "t2", CANARY, [R1]),
        entry("compose_down", "t3", CANARY, [R2_OLD]),
        entry("compose_up", "t4", NEW, [R2_NEW], ts="2026-09-20T10:00:00Z"),
        entry("compose_up", "t5", NEW, [R2_NEW, "proxy-glm53"], ts="2026-09-20T10:00:00Z"),
    ],
}


def test_parse_keeps_order_and_fields():
    actions = parse_action_log(REPORT)
    assert [a.tag for a in actions] == ["t1", "t2", "t2", "t3", "t4", "t5"]
    assert actions[0].services == ()
    assert actions[1] == Action("2026-09-20T10:00:00Z", "compose_up", "t2", "ct2", CANARY, "st2", (R2_OLD,))


def test_last_deploy_rule():
    actions = parse_action_log(REPORT)
    # r1 was deployed by the whole-file up t1; the restart and the down do not count.
    assert last_deploy(actions, R1).tag == "t1"
    # the old r2: its scoped up t2 is later than t1; the down t3 is not a deploy.
    assert last_deploy(actions, R2_OLD).tag == "t2"
    # same timestamp: log order decides.
    assert last_deploy(actions, R2_NEW).tag == "t5"
    # a service never named is covered by the whole-file up.
    assert last_deploy(actions, "nginx").tag == "t1"


def test_last_deploy_none_without_a_covering_up():
    actions = parse_action_log({"actions": [entry("compose_up", "t2", CANARY, [R2_OLD]), entry("compose_down", "t3", CANARY)]})
    assert last_deploy(actions, R1) is None
    assert last_deploy([], R1) is None


def test_report_without_actions_and_malformed_entries():
    assert parse_action_log({"quote": "q"}) == []
    with pytest.raises(ParseError):
        parse_action_log({"actions": "nope"})
    with pytest.raises(ParseError):
        parse_action_log({"actions": [{"tag": "x"}]})
    with pytest.raises(ParseError):
        parse_action_log({"actions": [{"action": "compose_up", "services": [1]}]})
