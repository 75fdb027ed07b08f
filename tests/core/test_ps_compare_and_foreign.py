"""The pure halves of scoped dry runs (`orchestrator.hosts.ps_compare`) and foreign-change detection
(`orchestrator.engine.rules.foreign_change`).

Mutation list (each guard deleted in the source, the test seen failing, the source restored):
- compare_ps: the `gone` branch -> test_a_container_gone_is_named; the one-shot exemption ->
  test_a_one_shot_that_exited_is_no_change_but_an_engine_gone_still_is; the condition check in
  completion_dependencies -> test_a_service_the_engines_wait_to_complete_is_a_one_shot_by_docker_ps_alone;
  the ID/creation branch ->
  test_a_recreated_container_is_named; the state branch -> test_a_restarting_container_is_named;
  the `t1 < t0` branch -> test_a_restart_in_place_is_named_by_its_up_time_going_back.
- on_definition: the action-log tag rule -> test_a_service_last_applied_at_another_tag_is_held_back;
  split_by_definition: `s not in engines` -> test_a_running_engine_is_never_named.
- unexplained: `j is None -> foreign` -> test_an_entry_no_journaled_call_explains_is_foreign;
  the BENIGN skip -> test_a_compose_manager_restart_is_not_foreign; the in-order search from `i`
  (instead of `range(i, ...)` -> `range(0, ...)`, one call explaining two entries) ->
  test_one_journaled_call_explains_one_entry_only.
- since_mark: the identity check -> test_a_rewritten_log_cannot_be_explained.
"""

from __future__ import annotations

from orchestrator.engine.rules.foreign_change import (
    OwnCall,
    describe_action,
    new_mark,
    own_call,
    since_mark,
    unexplained,
    unjournaled,
)
from orchestrator.hosts.parsers.action_log import Action
from orchestrator.hosts.parsers.docker_ps import Container
from orchestrator.hosts.ps_compare import (
    CONFIG_FILES_LABEL,
    DEPENDS_ON_LABEL,
    compare_ps,
    completion_dependencies,
    split_by_definition,
)

NEW = "prod/New.yaml"
OLD = "prod/Old.yaml"


def ctr(name: str, cid: str, *, state: str = "running", status: str = "Up 3 hours", file: str = OLD) -> Container:
    return Container(id=cid, name=name, image="img", state=state, status=status, created_at=f"c-{cid}", service=name,
                     labels={CONFIG_FILES_LABEL: f"/app/work/{file}"})


# -- docker/ps around a dry run --------------------------------------------------------------------

def test_nothing_changed_when_only_up_times_grow():
    before = [ctr("a", "1", status="Up 59 minutes"), ctr("b", "2", status="Up 13 days")]
    after = [ctr("a", "1", status="Up About an hour"), ctr("b", "2", status="Up 2 weeks")]
    assert compare_ps(before, after) == []


def test_a_recreated_container_is_named():
    [c] = compare_ps([ctr("r1", "aaa")], [ctr("r1", "bbb")])
    assert c.startswith("r1 recreated ") and "aaa" in c and "bbb" in c


def test_a_container_gone_is_named():
    [c] = compare_ps([ctr("r1", "aaa"), ctr("r2", "ccc")], [ctr("r1", "aaa")])
    assert c.startswith("r2 gone ")


def test_a_one_shot_that_exited_is_no_change_but_an_engine_gone_still_is():
    # docker/ps lists running containers only: model-downloader, started by the step before,
    # exits during the next dry run on its own; a dry run did not remove it
    before = [ctr("model-downloader", "ddd"), ctr("r2", "ccc")]
    assert compare_ps(before, [ctr("r2", "ccc")], oneshots={"model-downloader"}) == []
    [c] = compare_ps(before, [], oneshots={"model-downloader"})
    assert c.startswith("r2 gone ")
    [c] = compare_ps(before, [ctr("r2", "ccc")])  # not a one-shot of this runbook: a change
    assert c.startswith("model-downloader gone ")
    [c] = compare_ps([], [ctr("model-downloader", "eee")], oneshots={"model-downloader"})  # one started: a change
    assert c.startswith("model-downloader new ")


def test_a_service_the_engines_wait_to_complete_is_a_one_shot_by_docker_ps_alone():
    # the engine's label as docker compose writes it; the downloader exits during the dry run
    engine = ctr("r2", "ccc")
    engine.labels[DEPENDS_ON_LABEL] = "model-downloader:service_completed_successfully:false,nginx:service_started:true"
    assert completion_dependencies([engine]) == {"model-downloader"}
    assert compare_ps([ctr("model-downloader", "ddd"), ctr("nginx", "nnn"), engine], [ctr("nginx", "nnn"), engine]) == []
    [c] = compare_ps([ctr("model-downloader", "ddd"), ctr("nginx", "nnn"), engine], [ctr("model-downloader", "ddd"), engine])
    assert c.startswith("nginx gone ")  # a service merely started first is no one-shot


def test_a_new_container_is_named():
    [c] = compare_ps([], [ctr("r2", "ccc")])
    assert c.startswith("r2 new ")


def test_a_restarting_container_is_named():
    [c] = compare_ps([ctr("r1", "aaa")], [ctr("r1", "aaa", state="restarting", status="Restarting (1) 2 seconds ago")])
    assert c.startswith("r1 restarted ")


def test_a_restart_in_place_is_named_by_its_up_time_going_back():
    [c] = compare_ps([ctr("r1", "aaa", status="Up 9 days")], [ctr("r1", "aaa", status="Up 2 seconds")])
    assert c.startswith("r1 restarted ") and "Up 9 days" in c


# -- which services a check may name ---------------------------------------------------------------

def test_absent_and_same_definition_may_be_named_another_definition_is_held_back():
    running = {"nginx": ctr("nginx", "1", file=NEW), "proxy": ctr("proxy", "2", file=OLD)}
    safe, held = split_by_definition(["nginx", "proxy", "relay"], running, "v2", NEW, [])
    assert safe == ["nginx", "relay"] and held == ["proxy"]


def test_a_service_last_applied_at_another_tag_is_held_back():
    running = {"nginx": ctr("nginx", "1", file=NEW)}
    actions = [Action("t", "compose_up", "v1", None, NEW, None, ("nginx",))]
    assert split_by_definition(["nginx"], running, "v2", NEW, actions) == ([], ["nginx"])
    assert split_by_definition(["nginx"], running, "v1", NEW, actions) == (["nginx"], [])


def test_a_running_engine_is_never_named():
    running = {"r1": ctr("r1", "1", file=NEW)}
    assert split_by_definition(["r1", "r2"], running, "v2", NEW, [], engines={"r1", "r2"}) == (["r2"], ["r1"])


def test_a_container_without_its_file_label_is_held_back():
    c = Container(id="1", name="nginx", image="img", state="running", status="Up 1 hour", created_at="x", service="nginx")
    assert split_by_definition(["nginx"], {"nginx": c}, "v2", NEW, []) == ([], ["nginx"])


# -- foreign changes -------------------------------------------------------------------------------

def up(services, tag="v2", file=NEW, at="2026-12-01T10:00:00.123456789+00:00"):
    return Action(at, "compose_up", tag, None, file, None, tuple(services))


def down(services, tag="v2", file=NEW, at="2026-12-01T10:00:00.123456789+00:00"):
    return Action(at, "compose_down", tag, None, file, None, tuple(services))


def mine(kind, services, tag="v2", file=NEW):
    return own_call(kind, {"request": {"tag": tag, "file": file, "services": list(services)}, "baseline": {}})


def test_own_calls_explain_their_entries_in_order_and_a_refused_one_may_be_missing():
    own = [mine("compose_down", ["r2"]), mine("compose_up", ["r2"]), mine("compose_down_resend_1", ["relay"])]
    assert unexplained([down(["r2"]), down(["relay"])], own) == []  # the up got a 409: never logged


def test_an_entry_no_journaled_call_explains_is_foreign():
    person = up(["nginx"], at="2026-12-01T11:22:33.000000001+00:00")
    own = [mine("compose_down", ["r2"])]
    assert unexplained([down(["r2"]), person], own) == [person]
    text = describe_action(person)
    assert "compose_up of nginx" in text and NEW in text and "11:22:33.000000001" in text


def test_another_tag_or_file_is_not_ours():
    own = [mine("compose_up", ["r2"])]
    assert unexplained([up(["r2"], tag="v9")], own) and unexplained([up(["r2"], file=OLD)], own)


def test_one_journaled_call_explains_one_entry_only():
    own = [mine("compose_up", ["r2"])]
    assert len(unexplained([up(["r2"]), up(["r2"])], own)) == 1


def test_a_compose_manager_restart_is_not_foreign():
    started = Action("t", "compose_manager_started", None, None, None, None, ())
    assert unexplained([started], []) == []
    restart = Action("t", "docker_restart", None, None, None, None, ())
    assert unexplained([restart], []) == [restart]


def test_the_mark_finds_what_came_after_it():
    log = [up(["a"]), down(["b"])]
    mark = new_mark(log, 7)
    assert since_mark(log + [up(["c"])], mark) == [up(["c"])] and mark["effect_id"] == 7


def test_a_rewritten_log_cannot_be_explained():
    mark = new_mark([up(["a"]), down(["b"])], 1)
    assert since_mark([up(["a"]), up(["x"]), down(["b"])], mark) is None
    assert since_mark([up(["a"])], mark) is None


def test_unjournaled_target_calls_are_counted_across_runs():
    journaled = [OwnCall("compose_up", "v2", NEW, ("r2",))]
    log = [up(["r2"]), up(["r2"]), down(["x"], file=OLD)]
    assert unjournaled(log, journaled, file=NEW, tag="v2") == [up(["r2"])]
