"""compose-manager as the simulator serves it: auth, the tag gate, the lock, dry runs, scoped ups
and the exact --remove-orphans rule."""

from __future__ import annotations

import re
import threading

import httpx
import pytest

from orchestrator_sim.testing import (
    CANARY,
    NEW_R2,
    NEW_TAG,
    OLD_R2,
    OLD_TAG,
    R1,
    RELAY,
    TARGET,
)
from orchestrator_sim.testing import (
    SimDriver as Sim,
)


def test_every_route_but_version_and_attestation_needs_the_bearer_token(sim: Sim) -> None:
    base = sim.fleet.urls.compose_manager
    assert sim.client.get(base + "/version").status_code == 200
    assert sim.client.get(base + "/v1/attestation/report?nonce=" + "0" * 64).status_code == 200  # 8e07c35: no auth
    for method, path in [
        ("GET", "/docker/ps"),
        ("GET", "/status"),
        ("GET", "/host/gpu"),
        ("GET", "/host/cache"),
        ("POST", "/compose/up"),
        ("POST", "/compose/down"),
        ("POST", "/compose/logs"),
    ]:
        missing = sim.client.request(method, base + path, json={})
        wrong = sim.client.request(method, base + path, json={}, headers={"Authorization": "Bearer nope"})
        assert missing.status_code == 401 and wrong.status_code == 401, path
        assert missing.json() == {"status": "error", "error": "Missing or invalid Authorization header"}
        assert wrong.json() == {"status": "error", "error": "Invalid token"}
    post_ps = sim.cm("POST", "/docker/ps", json={"project": "work"})
    assert (post_ps.status_code, post_ps.content, post_ps.headers.get("content-type")) == (405, b"", None)
    assert sim.client.get(sim.fleet.urls.dashboard + "/api/instances").status_code == 401
    assert sim.client.get(sim.fleet.urls.peers["peer-a"] + "/registry").status_code == 401
    assert sim.client.post(sim.fleet.urls.inference + "/v1/chat/completions", json={}).status_code == 401


def test_version_and_action_log_describe_the_canary_deploy(sim: Sim) -> None:
    version = sim.client.get(sim.fleet.urls.compose_manager + "/version").json()
    assert (version["status"], version["tag"], version["file"]) == ("ok", OLD_TAG, CANARY)
    assert re.fullmatch(r"[0-9a-f]{64}", version["file_sha256"])
    assert re.fullmatch(r"nearaidev/compose-manager@sha256:[0-9a-f]{64}", version["image"])
    assert version["projects"]["work"]["current"]["tag"] == OLD_TAG
    actions = sim.actions()
    assert [a["action"] for a in actions] == ["compose_manager_started", "compose_up", "compose_up"]
    assert actions[0]["container"] == "compose-manager" and actions[0]["image"] == version["image"]
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}\+00:00", a["timestamp"]) for a in actions)
    assert OLD_R2 in actions[1]["services"] and R1 in actions[1]["services"]
    assert actions[2]["services"] == [RELAY]
    report = sim.cm("GET", "/v1/attestation/report", params={"nonce": "ab" * 32}).json()
    assert report["nonce"] == "ab" * 32 and report["quote"] and re.fullmatch(r"[0-9a-f]{64}", report["actions_hash"])
    bad = sim.cm("GET", "/v1/attestation/report", params={"nonce": "xyz"})
    assert (bad.status_code, bad.json()) == (400, {"status": "error", "error": "nonce must be hex-encoded"})
    drawn = sim.client.get(sim.fleet.urls.compose_manager + "/v1/attestation/report").json()
    assert drawn["nonce_source"] == "server" and re.fullmatch(r"[0-9a-f]{64}", drawn["nonce"])
    assert report["nonce_source"] == "client"


def test_initial_docker_ps(sim: Sim) -> None:
    ps = sim.ps()
    assert "model-downloader" not in ps  # exited one-shot: plain `docker ps` lists running containers only
    assert sim.fleet.host.container("model-downloader").state == "exited"
    for name in (R1, OLD_R2, "proxy-glm53", "nginx", RELAY):
        assert ps[name]["State"] == "running" and ps[name]["Status"].startswith("Up "), name
        assert re.fullmatch(r"[0-9a-f]{12}", ps[name]["ID"])
        assert f"com.docker.compose.service={name}" in ps[name]["Labels"]
        assert "com.docker.compose.project=work" in ps[name]["Labels"]
        assert re.search(r"com\.docker\.compose\.config-hash=[0-9a-f]{64}", ps[name]["Labels"])
        assert ps[name]["RunningFor"].endswith(" ago")
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \+0000 UTC", ps[name]["CreatedAt"])
    assert ps["model-proxy-registrar"]["Status"].endswith("(healthy)")
    assert NEW_R2 not in ps


@pytest.mark.parametrize(
    "body, message",
    [
        ({"tag": "v9.9.9", "file": CANARY}, "tag not found: v9.9.9"),
        ({"tag": OLD_TAG, "file": TARGET}, f"file '{TARGET}' not found at tag '{OLD_TAG}'"),
        ({"tag": OLD_TAG, "file": CANARY, "env": {"BAD-KEY": "x"}}, "invalid env var key: 'BAD-KEY' (must match [A-Za-z_][A-Za-z0-9_]*)"),
        ({"tag": OLD_TAG, "file": CANARY, "env": {"K": "a\nb"}}, "env var 'K' value must not contain newlines"),
        ({"tag": OLD_TAG, "file": CANARY, "project": "work"}, 'compose project name "work" is reserved and cannot be overridden'),
        ({"tag": OLD_TAG, "file": CANARY, "project": "dstack"}, 'compose project name "dstack" is reserved and cannot be overridden'),
    ],
)
def test_requests_refused_before_docker_runs(sim: Sim, body: dict, message: str) -> None:
    r = sim.cm("POST", "/compose/up", json={"services": [R1], "dry_run": True, **body})
    assert r.status_code == 400 and r.json() == {"status": "error", "error": message}
    if "tag" in message or "file" in message:
        # a down never fetches the tag or the file: it is accepted (and fails in the stream if
        # this host never fetched the file)
        assert sim.cm("POST", "/compose/down", json={"services": [R1], **body}).status_code != 400
    else:
        r = sim.cm("POST", "/compose/down", json={"services": [R1], **body})
        assert r.status_code == 400 and r.json() == {"status": "error", "error": message}
    assert sim.cm("GET", "/status").json() == {"status": "ok"}  # a refusal releases the lock


@pytest.mark.parametrize(
    "body, needle",
    [
        ({"file": CANARY, "dry_run": True}, ".: missing field `tag` at line 1 column "),
        ({"tag": OLD_TAG, "file": CANARY, "dry_run": "yes"}, 'dry_run: invalid type: string "yes", expected a boolean'),
    ],
)
def test_body_shape_errors_are_422_text_plain(sim: Sim, body: dict, needle: str) -> None:
    r = sim.cm("POST", "/compose/up", json=body)
    assert r.status_code == 422 and r.headers["content-type"].startswith("text/plain")
    assert r.text.startswith("Failed to deserialize the JSON body into the target type: ") and needle in r.text


def test_a_failed_up_is_in_the_action_log_and_version_top_level_but_not_deployed(sim: Sim) -> None:
    env = {k: v for k, v in sim.fleet.dashboard_env.items() if k != "PROXY_TOKEN"}
    r = sim.up(NEW_TAG, TARGET, [NEW_R2], dry_run=False, env=env)  # interpolation fails inside the stream
    assert r.status == 200 and r.done["success"] is False
    last = sim.actions()[-1]
    assert (last["action"], last["tag"], last["services"]) == ("compose_up", NEW_TAG, [NEW_R2])
    version = sim.client.get(sim.fleet.urls.compose_manager + "/version").json()
    assert (version["tag"], version["file"]) == (NEW_TAG, TARGET)  # the last ATTEMPT
    assert version["projects"]["work"]["current"]["tag"] == OLD_TAG  # the last success


def test_tag_too_recent(make_sim) -> None:
    sim = make_sim(faults=["tag-too-recent"])
    r = sim.up(NEW_TAG, TARGET, [NEW_R2], dry_run=True)
    assert r.status == 400
    assert re.fullmatch(r"tag too recent: \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC is less than 48 hours old", r.error["error"])
    assert sim.up(OLD_TAG, CANARY, [R1], dry_run=True).ok


def test_tag_unknown(make_sim) -> None:
    sim = make_sim(faults=["tag-unknown"])
    r = sim.up(NEW_TAG, TARGET, [NEW_R2], dry_run=True)
    assert (r.status, r.error) == (400, {"status": "error", "error": "tag not found: v0.0.300"})


def test_a_dry_run_changes_nothing_and_shows_the_plan(sim: Sim) -> None:
    before, actions = sim.ps(), sim.actions()
    r = sim.up(NEW_TAG, TARGET, [NEW_R2], dry_run=True)
    assert r.ok
    # non-TTY lines, one per step: the orphan the new file does not define, the scoped target,
    # and the one-shot it depends on
    assert r.lines == [
        *(f" DRY-RUN MODE -  Container {OLD_R2}  {s}" for s in ("Stopping", "Stopped", "Removing", "Removed")),
        f" DRY-RUN MODE -  Container {NEW_R2}  Creating",
        f" DRY-RUN MODE -  Container {NEW_R2}  Created",
        " DRY-RUN MODE -  Container model-downloader  Starting",
        f" DRY-RUN MODE -  Container {NEW_R2}  Starting",
        " DRY-RUN MODE -  Container model-downloader  Started",
        f" DRY-RUN MODE -  Container {NEW_R2}  Started",
    ]
    assert r.plan == {
        "event": "plan",
        "exit_code": 0,
        "plan": {"create": [f"Container {NEW_R2}"], "recreate": [], "remove": [f"Container {OLD_R2}"],
                 "unchanged": ["Container model-downloader"]},
        "success": True,
    }
    after = sim.ps()
    assert {n: (c["ID"], c["CreatedAt"], c["State"]) for n, c in before.items()} == {
        n: (c["ID"], c["CreatedAt"], c["State"]) for n, c in after.items()
    }
    assert sim.actions() == actions
    assert sim.fleet.host.orphan_removals() == []


def test_409_while_a_down_runs(make_sim) -> None:
    sim = make_sim(speed=300.0)  # the engine's 5-minute grace lasts a real second
    first_line = threading.Event()
    result: dict = {}

    def run_down() -> None:
        body = sim.request(OLD_TAG, CANARY, [OLD_R2])
        with sim.client.stream(
            "POST", sim.fleet.urls.compose_manager + "/compose/down", json=body, headers=sim.auth
        ) as r:
            lines = []
            for raw in r.iter_lines():
                lines.append(raw)
                first_line.set()
            result["lines"] = lines

    t = threading.Thread(target=run_down)
    t.start()
    assert first_line.wait(10)
    busy = sim.up(NEW_TAG, TARGET, [NEW_R2], dry_run=True)
    busy_down = sim.down(OLD_TAG, CANARY, [RELAY])
    t.join(20)
    assert busy.status == 409
    assert busy.error == {"status": "error", "error": "another docker operation is already in progress: compose_down"}
    assert busy_down.status == 409
    assert '"done"' in result["lines"][-1]
    assert sim.up(NEW_TAG, TARGET, [NEW_R2], dry_run=True).ok


def test_a_scoped_down_waits_for_the_grace_period(sim: Sim) -> None:
    r = sim.down(OLD_TAG, CANARY, [OLD_R2])
    assert r.ok and r.done["exit_code"] == 0
    assert [line.split()[-1] for line in r.lines] == ["Stopping", "Stopped", "Removing", "Removed"]
    assert OLD_R2 not in sim.ps() and R1 in sim.ps()
    call = next(c for c in sim.fleet.calls if c.path == "/compose/down")
    assert call.finished_at - call.at >= 300.0  # stop_grace_period: 5m
    stop = next(c for c in sim.fleet.timeline.changes() if c.container == OLD_R2)
    assert stop.serving is False and call.at <= stop.at <= call.finished_at - 300.0
    last = sim.actions()[-1]
    assert (last["action"], last["tag"], last["file"], last["services"]) == ("compose_down", OLD_TAG, CANARY, [OLD_R2])
    # a down ignores dry_run: it always acts
    r = sim.down(OLD_TAG, CANARY, [RELAY], dry_run=True)
    assert r.ok and RELAY not in sim.ps()


def test_scoped_up_reruns_the_downloader_and_touches_nothing_else(sim: Sim) -> None:
    assert sim.down(OLD_TAG, CANARY, [OLD_R2]).ok
    before = sim.ps()
    downloader = sim.fleet.host.container("model-downloader")
    r = sim.safe_up(NEW_TAG, TARGET, [NEW_R2])
    statuses = [" ".join(line.split()[-2:]) for line in r.lines if line.startswith(" Container ")]
    assert "model-downloader Started" in statuses and "model-downloader Exited" in statuses
    assert f"{NEW_R2} Created" in statuses and f"{NEW_R2} Started" in statuses
    after = sim.ps()
    assert sim.fleet.host.container("model-downloader").id == downloader.id  # re-run, not recreated
    for name in before:
        assert after[name]["ID"] == before[name]["ID"], name
    assert sim.logs("model-downloader").count("Download complete.") == 2
    new = sim.fleet.host.container(NEW_R2)
    assert (new.tag, new.file) == (NEW_TAG, TARGET)
    assert f"com.docker.compose.config-hash={new.config_hash}" in after[NEW_R2]["Labels"]
    last = sim.actions()[-1]
    assert (last["action"], last["tag"], last["file"], last["services"]) == ("compose_up", NEW_TAG, TARGET, [NEW_R2])
    version = sim.client.get(sim.fleet.urls.compose_manager + "/version").json()
    assert version["tag"] == NEW_TAG
    assert version["projects"]["work"]["current"]["tag"] == NEW_TAG
    assert version["projects"]["work"]["previous"]["tag"] == OLD_TAG
    assert sim.fleet.check_invariants() == []


def test_up_of_the_new_file_removes_the_old_r2_as_an_orphan_with_a_10s_stop(sim: Sim) -> None:
    r = sim.up(NEW_TAG, TARGET, [NEW_R2], dry_run=False)  # no down first, no dry run
    assert r.ok
    assert f" Container {OLD_R2}  Removed" in r.lines
    assert OLD_R2 not in sim.ps()
    [removal] = sim.fleet.host.orphan_removals()
    assert (removal.container, removal.by_file, removal.stop_timeout_s) == (OLD_R2, TARGET, 10.0)
    stopped = next(c for c in sim.fleet.timeline.changes() if c.container == OLD_R2)
    assert removal.at - stopped.at == pytest.approx(10.0)
    problems = sim.fleet.check_invariants()
    assert any(f"removed the container {OLD_R2} as an orphan" in p for p in problems)
    assert any("not preceded by a successful dry run" in p for p in problems)


def test_up_of_the_canary_file_removes_the_new_r2_even_when_scoped_to_r1(sim: Sim) -> None:
    sim.swap_r2()
    before = sim.ps()
    dry = sim.up(OLD_TAG, CANARY, [R1], dry_run=True)
    assert f" DRY-RUN MODE -  Container {NEW_R2}  Removed" in dry.lines
    assert f" DRY-RUN MODE -  Container {R1}  Running" in dry.lines
    assert dry.plan["plan"]["remove"] == [f"Container {NEW_R2}"]
    assert sim.ps()[NEW_R2]["ID"] == before[NEW_R2]["ID"]
    applied = sim.up(OLD_TAG, CANARY, [R1], dry_run=False)
    assert applied.ok
    after = sim.ps()
    assert NEW_R2 not in after
    for name in ("proxy-glm53", "nginx", "model-proxy-registrar", R1, RELAY):
        assert after[name]["ID"] == before[name]["ID"], name  # defined but not listed: untouched
    [removal] = sim.fleet.host.orphan_removals()
    assert (removal.container, removal.by_tag, removal.stop_timeout_s) == (NEW_R2, OLD_TAG, 10.0)


def test_empty_services_means_every_service_outside_a_profile(sim: Sim) -> None:
    r = sim.up(NEW_TAG, TARGET, [], dry_run=True)
    planned = {m.group(1) for line in r.lines if (m := re.match(r" DRY-RUN MODE -  Container (\S+)", line))}
    assert planned == {
        "model-downloader",
        "nginx",
        "model-proxy-registrar",
        "proxy-glm53",
        R1,
        NEW_R2,
        "dcgm-glm53",
        "otelcol-contrib",
        OLD_R2,
    }
    assert RELAY not in planned and "glm53-perception-check" not in planned
    # every service of the canary sits under a profile: an unscoped up plans no container at all
    r = sim.up(OLD_TAG, CANARY, [], dry_run=True)
    assert r.ok and not [line for line in r.lines if "Container" in line]


def test_unknown_service_fails_inside_the_stream(sim: Sim) -> None:
    r = sim.up(NEW_TAG, TARGET, ["no-such-thing"], dry_run=True)
    assert r.status == 200 and r.done == {"event": "done", "success": False, "exit_code": 1}
    assert r.lines[-1] == "no such service: no-such-thing"


def test_an_env_map_missing_a_required_variable_fails_the_whole_file(sim: Sim) -> None:
    env = {k: v for k, v in sim.fleet.dashboard_env.items() if k != "PROXY_TOKEN"}
    r = sim.up(NEW_TAG, TARGET, [NEW_R2], dry_run=True, env=env)
    assert r.done["success"] is False
    assert any("required variable PROXY_TOKEN is missing a value" in line for line in r.lines)
    assert env["MODEL_PROXY_TOKEN"] not in "\n".join(r.lines)


def test_compose_logs_prefixes_and_tails(sim: Sim) -> None:
    out = sim.cm("POST", "/compose/logs", json={"file": CANARY, "services": [R1, "nginx"], "tail": 3}).json()["output"]
    lines = out.splitlines()
    assert len(lines) == 6
    width = len(R1) + 1
    assert all(line.startswith(f"{R1:<{width}} | ") for line in lines[:3])
    assert all(line.startswith(f"{'nginx':<{width}} | ") for line in lines[3:])
    r = sim.cm("POST", "/compose/logs", json={"file": CANARY, "services": ["nope"]})
    assert r.status_code == 500
    assert r.json() == {"status": "error", "error": "docker compose failed (exit 1):\nstderr: no such service: nope\n\nstdout: "}
    # no project field: a project sent is ignored, project `work` is read
    other = sim.cm("POST", "/compose/logs", json={"file": CANARY, "project": "glm", "services": [R1], "tail": 3})
    other_lines = other.json()["output"].splitlines()
    assert len(other_lines) == 3 and all(line.startswith(f"{R1}  | ") for line in other_lines)
    # the server's copy of a file it never fetched: docker compose cannot open it
    never = sim.cm("POST", "/compose/logs", json={"file": TARGET, "services": [NEW_R2], "tail": 3})
    assert never.status_code == 500 and f"open /app/work/{TARGET}: no such file or directory" in never.json()["error"]


def test_recorded_calls_keep_the_full_body(sim: Sim) -> None:
    sim.up(NEW_TAG, TARGET, [NEW_R2], dry_run=True)
    call = next(c for c in sim.fleet.calls if c.path == "/compose/up")
    assert call.server == "compose-manager" and call.status == 200 and call.outcome == "done:ok"
    assert call.body["env"] == sim.fleet.dashboard_env
    assert call.to_json()["body"]["env"]["PROXY_TOKEN"].startswith("sha256:")


def test_connection_is_plain_http_on_loopback(sim: Sim) -> None:
    for url in [
        sim.fleet.urls.compose_manager,
        sim.fleet.urls.dashboard,
        sim.fleet.urls.inference,
        *sim.fleet.urls.peers.values(),
        *sim.fleet.urls.relay.values(),
    ]:
        assert httpx.URL(url).host == "127.0.0.1"
