"""The base tier (gpu03, gpu04, gpu23) in a fleet beside gpu02: each base host's initial state, the
runbook's section-5 procedure step by step (drain, the switch's plans, the downloader, the cold
start, perception, rejoin), the base faults by their symptoms, and the base-tier invariants.
Driven through the real HTTP apps, as an orchestrator would."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from orchestrator_sim import parse_fault
from orchestrator_sim.testing import (
    BASE,
    BASE_HOSTS,
    BASE_PREVIOUS_TAG,
    BASE_SIDECARS,
    BASE_TARGET_TAG,
    DOWNLOADER,
    FP8_R1,
    FP8_R2,
    GPU02,
    LONG,
    REGISTRAR,
    RELAY,
    W4_R1,
    W4_R2,
)
from orchestrator_sim.testing import (
    BASE_CANONICAL_FILE as C,
)
from orchestrator_sim.testing import (
    BASE_TARGET_FILE as W,
)
from orchestrator_sim.testing import SimDriver as Sim

ALL = ("gpu02", *BASE_HOSTS)
IPS = {"gpu03": "203.0.113.3", "gpu04": "203.0.113.4", "gpu23": "203.0.113.23"}
SWITCH = [W4_R1, W4_R2, *BASE_SIDECARS]
PERCEPTION = "glm53-perception-check"


def _base_listing(sim: Sim, peer: str) -> dict[str, bool]:
    backends = sim.peer(peer, "/backends/list", domain=BASE).json()["backends"]
    return {b["address"]: b["healthy"] for b in backends}


def _drain(b: Sim) -> None:
    assert b.down(BASE_PREVIOUS_TAG, C, [REGISTRAR]).ok
    b.wait(lambda: not b.domain_listing("peer-a") and not b.domain_listing("peer-b"), "host unregistered")


def _switch(b: Sim) -> None:
    """Steps 1 to 3b of the runbook on one base host."""
    _drain(b)
    assert b.down(BASE_PREVIOUS_TAG, C, [FP8_R1, FP8_R2]).ok
    b.wait(lambda: FP8_R1 not in b.ps() and FP8_R2 not in b.ps(), "FP8 engines gone")
    b.safe_up(BASE_TARGET_TAG, W, SWITCH)


def _plan(stream: Any) -> dict[str, list[str]]:
    return {k: sorted(v) for k, v in stream.plan["plan"].items()}


# ---------------------------------------------------------------------------- initial state
def test_each_base_host_starts_on_the_canonical_file_registered_under_the_base_domain(make_sim) -> None:
    sim = make_sim(hosts=ALL)
    fleet = sim.fleet
    assert list(fleet.hosts) == list(ALL) and fleet.host.name == "gpu02"
    urls = {fleet.host_urls[n].compose_manager for n in ALL}
    assert len(urls) == 4  # one compose-manager each
    for name in BASE_HOSTS:
        b = sim.on(name)
        ps = b.ps()
        assert {FP8_R1, FP8_R2, "nginx", "proxy-glm53", REGISTRAR, "dcgm-glm53", "otelcol-contrib"} == set(ps)
        assert all(row["State"] == "running" for row in ps.values())
        assert "0.0.0.0:8444->443/tcp" in ps["nginx"]["Ports"] and "8001" not in ps["nginx"]["Ports"]
        assert b.ready(FP8_R1) and b.ready(FP8_R2)
        downloader = b.host.container(DOWNLOADER)
        assert (downloader.state, downloader.exit_code) == ("exited", 0)
        ups = [a for a in b.actions() if a["action"] == "compose_up"]
        assert [(a["tag"], a["file"]) for a in ups] == [(BASE_PREVIOUS_TAG, C)]
        assert b.cm("GET", "/version").json()["projects"]["work"]["current"]["file"] == C
        env = b.env
        assert env["HOST_IP"] == IPS[name] and "LONG_TIER_ONLY" not in env and env["CVM_NAME"] == name
        log = b.logs(REGISTRAR, file=C)
        assert f"[GLM-5.3-Flash-SGL-TP4] Registered z-ai/glm-5.3-flash (2x TP4/EP4) at {IPS[name]}:8000" in log
        r = b.chat([{"role": "user", "content": "hello"}])
        assert r.status_code == 200 and fleet.calls[-1].host == name
    for peer in ("peer-a", "peer-b"):
        listing = _base_listing(sim, peer)
        assert all(listing[f"{ip}:8444"] for ip in IPS.values())
        assert [b["address"] for b in sim.peer(peer, "/backends/list", domain=LONG).json()["backends"]] == [GPU02]
    # the dashboard: one instance per host, distinct addresses, gpu02 as before
    instances = sim.client.get(
        fleet.urls.dashboard + "/api/instances", headers={"Authorization": f"Bearer {fleet.tokens.dashboard}"}
    ).json()
    names = [i["name"] for i in instances]
    assert len(names) == len(set(names)) and set(ALL) <= set(names)
    assert len({i["env_vars"]["HOST_IP"] for i in instances}) == len(instances)
    assert next(i for i in instances if i["name"] == "gpu02")["env_vars"]["LONG_TIER_ONLY"] == "true"
    # the inventory: every host with its own endpoints, the same keys as gpu02's entry
    inv = yaml.safe_load(fleet.inventory_yaml())
    assert set(inv["hosts"]) == set(ALL)
    keys = set(inv["hosts"]["gpu02"])
    for name in BASE_HOSTS:
        entry = inv["hosts"][name]
        assert set(entry) == keys and entry["gpus"] == 8 and entry["instance_name"] == name
        assert entry["model_proxy_address"] == f"{IPS[name]}:8444"
        assert entry["compose_manager_url"] == fleet.host_urls[name].compose_manager
        assert entry["soak_relay_port_map"][8008] == int(fleet.host_urls[name].relay[8008].rsplit(":", 1)[1])
    assert fleet.check_invariants() == []


def test_a_fleet_of_base_hosts_only(make_sim) -> None:
    sim = make_sim(hosts=("gpu04", "gpu03"))
    assert sim.fleet.host.name == "gpu04" and list(sim.fleet.hosts) == ["gpu04", "gpu03"]
    assert set(sim.ps()) >= {FP8_R1, FP8_R2}
    listing = _base_listing(sim, "peer-a")
    assert listing["203.0.113.3:8444"] and listing["203.0.113.4:8444"] and listing["203.0.113.23:8444"]
    assert sim.fleet.check_invariants() == []


# ---------------------------------------------------------------------------- drain, switch, rejoin
def test_drain_unregisters_and_the_running_request_gauges_decay(make_sim) -> None:
    sim = make_sim(hosts=ALL)
    b = sim.on("gpu03")
    b.safe_up(BASE_PREVIOUS_TAG, C, [RELAY], force_recreate=True)  # a relay of the canonical file routes to the FP8 names
    b.wait(lambda: b.relay(8008, "GET", "/health").status_code == 200, "relay up")
    assert sim.fleet.calls[-1].effects == [f"served-by:{FP8_R1}"] and sim.fleet.calls[-1].host == "gpu03"
    assert 5 <= b.running_reqs(8008) <= 20 and 5 <= b.running_reqs(8009) <= 20
    sent = len(sim.fleet.calls)
    assert b.down(BASE_PREVIOUS_TAG, C, [REGISTRAR]).ok
    b.wait(lambda: not b.domain_listing("peer-a") and not b.domain_listing("peer-b"), "host unregistered")
    down = sim.fleet.calls[sent]
    gone_at, serving = sim.fleet.hosts["gpu03"].domain_serving[-1]
    assert down.is_compose_down and not serving
    assert down.at <= gone_at <= down.finished_at  # unregistered while the down itself ran (~1 s)
    log = b.host.last_log(REGISTRAR)
    assert f"SIGTERM received, unregistering {IPS['gpu03']}:8000" in log
    assert all(_base_listing(sim, "peer-a")[f"{IPS[n]}:8444"] for n in ("gpu04", "gpu23"))
    b.wait_sim(150)
    assert b.running_reqs(8008) <= 1 and b.running_reqs(8009) <= 1
    assert sim.fleet.check_invariants() == []


def test_the_switch_plans_removals_while_fp8_runs_and_exactly_the_runbook_after_the_scoped_down(make_sim) -> None:
    sim = make_sim(hosts=ALL)
    b = sim.on("gpu03")
    _drain(b)
    before = b.ps()
    dry = b.up(BASE_TARGET_TAG, W, SWITCH, dry_run=True)
    assert dry.ok and _plan(dry)["remove"] == [f"Container {FP8_R1}", f"Container {FP8_R2}"]
    assert f" DRY-RUN MODE -  Container {FP8_R1}  Removed" in dry.lines  # orphans of the W4AFP8 file
    assert {n: r["ID"] for n, r in b.ps().items()} == {n: r["ID"] for n, r in before.items()}
    assert b.down(BASE_PREVIOUS_TAG, C, [FP8_R1, FP8_R2]).ok
    b.wait(lambda: FP8_R1 not in b.ps() and FP8_R2 not in b.ps(), "FP8 engines gone")
    dry = b.up(BASE_TARGET_TAG, W, SWITCH, dry_run=True)
    plan = _plan(dry)
    assert plan["create"] == [f"Container {W4_R1}", f"Container {W4_R2}"]
    # otelcol-contrib's only change is its inline config: compose leaves it as it is (#11900)
    assert plan["recreate"] == sorted(f"Container {s}" for s in BASE_SIDECARS if s != "otelcol-contrib")
    assert plan["remove"] == []
    assert plan["unchanged"] == sorted([f"Container {DOWNLOADER}", "Container otelcol-contrib"])  # nginx not named
    applied = b.up(BASE_TARGET_TAG, W, SWITCH, dry_run=False)
    assert applied.ok
    b.wait(lambda: b.ready(W4_R1) and b.ready(W4_R2), "both W4AFP8 engines ready")
    for engine in (W4_R1, W4_R2):
        log = b.logs(engine, file=W)
        assert "The server is fired up and ready to roll!" in log and "HiCache" not in log
        assert "dist_init_addr='127.0.0.1:29510'" in log
        assert b.host.container(engine).restart_count == 0
    assert b.host.orphan_removals() == []
    assert b.host.container("nginx").tag == BASE_PREVIOUS_TAG  # not touched
    assert sim.fleet.check_invariants() == []


def test_verification_then_rejoin_on_the_w4afp8_file(make_sim) -> None:
    sim = make_sim(hosts=ALL)
    b = sim.on("gpu04")
    _switch(b)
    b.wait(lambda: b.ready(W4_R1) and b.ready(W4_R2), "both W4AFP8 engines ready")
    b.safe_up(BASE_TARGET_TAG, W, [RELAY], force_recreate=True)
    b.wait(lambda: b.relay(8009, "GET", "/health").status_code == 200, "relay up")
    assert sim.fleet.calls[-1].effects == [f"served-by:{W4_R2}"]
    metrics = b.relay(8008, "GET", "/metrics").text
    # SGLang's own labels only: precision & co. are otelcol-contrib's scrape labels (section 10)
    assert 'model_name="z-ai/glm-5.3-flash"' in metrics and "precision=" not in metrics and "engine_image=" not in metrics
    assert b.running_reqs(8008) == 0  # not registered: no traffic
    b.safe_up(BASE_TARGET_TAG, W, [PERCEPTION])
    b.wait(lambda: b.host.container(PERCEPTION).state == "exited", "perception finished")
    assert b.host.container(PERCEPTION).exit_code == 0
    lines = b.logs(PERCEPTION, file=W).splitlines()
    events = [json.loads(x.split(" | ", 1)[1]) for x in lines]
    assert [e for e in events if e["event"] == "replica"] == [{"event": "replica", "replica": 1}, {"event": "replica", "replica": 2}]
    assert events[-1] == {"event": "qualification_finished", "ok": True}
    assert b.down(BASE_TARGET_TAG, W, [RELAY, PERCEPTION]).ok
    # rejoin: the registrar probes :8000, then registers
    dry = b.up(BASE_TARGET_TAG, W, [REGISTRAR], dry_run=True)
    assert _plan(dry)["create"] == [f"Container {REGISTRAR}"] and _plan(dry)["remove"] == []
    assert b.up(BASE_TARGET_TAG, W, [REGISTRAR], dry_run=False).ok
    b.wait(lambda: b.domain_listing("peer-a") and b.domain_listing("peer-b"), "host registered")
    registered_at, serving = sim.fleet.hosts["gpu04"].domain_serving[-1]
    assert serving and registered_at - b.host.container(REGISTRAR).started_at <= 60  # probe passed at once
    assert all(b.domain_listing(p)[0]["healthy"] for p in ("peer-a", "peer-b"))
    log = b.logs(REGISTRAR, file=W)
    assert "Model ready, starting registration loop" in log
    assert f"[GLM-5.3-Flash-SGL-TP4] Registered z-ai/glm-5.3-flash (2x TP4/EP4) at {IPS['gpu04']}:8000" in log
    assert b.chat([{"role": "user", "content": "hello"}]).status_code == 200
    assert sim.fleet.check_invariants() == []
    assert sim.fleet.hosts["gpu04"].domain_serving[-1][1] is True


def test_the_downloader_pre_stages_in_minutes_and_exits_zero(make_sim) -> None:
    sim = make_sim(hosts=("gpu03",))
    dry = sim.up(BASE_PREVIOUS_TAG, C, [DOWNLOADER], dry_run=True)
    assert _plan(dry)["remove"] == [] and _plan(dry)["create"] == [] and _plan(dry)["recreate"] == []
    assert sim.up(BASE_PREVIOUS_TAG, C, [DOWNLOADER], dry_run=False).ok
    sim.wait(lambda: sim.host.container(DOWNLOADER).state == "exited", "downloader done")
    view = sim.host.container(DOWNLOADER)
    assert view.exit_code == 0 and view.finished_at - view.started_at >= 120
    log = [x.split(" | ", 1)[1] for x in sim.logs(DOWNLOADER, file=C).splitlines()]
    marks = [x for x in log if x.startswith("Download")]
    assert marks[-4:] == [
        "Downloading zai-org/GLM-5.3-Flash...",
        "Downloading corrected GLM-5.3-Flash chat template...",
        "Downloading graphistry/GLM-5.3-Flash-W4AFP8...",
        "Download complete.",
    ]
    assert log[-1] == "Download complete."


# ---------------------------------------------------------------------------- faults
def test_fault_specs_target_a_host() -> None:
    spec = parse_fault("dist-store-error:r1@gpu03")
    assert (spec.name, spec.replica, spec.host) == ("dist-store-error", "r1", "gpu03")
    assert str(spec) == "dist-store-error:r1@gpu03" and str(parse_fault("dist-store-error")) == "dist-store-error:r2"
    assert parse_fault("host-unhealthy@gpu04").host == "gpu04" and parse_fault("busy-409:2@gpu03").count == 2
    with pytest.raises(ValueError):
        parse_fault("no-rejoin@")


def test_dist_store_error_hangs_the_first_container_and_a_fresh_one_starts(make_sim) -> None:
    sim = make_sim(hosts=ALL, faults=["dist-store-error@gpu03"])
    b = sim.on("gpu03")
    _switch(b)
    b.wait_ready(W4_R1)
    b.wait_sim(3 * 600)
    bad = b.host.container(W4_R2)
    assert bad.state == "running" and not bad.ready
    log = b.logs(W4_R2, file=W).splitlines()
    assert "torch.distributed.DistStoreError" in log[-1] and "127.0.0.1:29510" in log[-1]
    assert b.host.container(W4_R1).restart_count == 0
    assert b.down(BASE_TARGET_TAG, W, [W4_R2]).ok
    b.safe_up(BASE_TARGET_TAG, W, [W4_R2])
    b.wait_ready(W4_R2)
    assert "DistStoreError" not in b.logs(W4_R2, file=W)
    # the other hosts' engines were never affected (the fault named gpu03)
    g = sim.on("gpu04")
    _switch(g)
    g.wait(lambda: g.ready(W4_R1) and g.ready(W4_R2), "gpu04 both ready")


def test_drain_stuck_keeps_the_gauge_up(make_sim) -> None:
    sim = make_sim(hosts=("gpu03",), faults=["drain-stuck"])
    sim.safe_up(BASE_PREVIOUS_TAG, C, [RELAY], force_recreate=True)
    sim.wait(lambda: sim.relay(8008, "GET", "/health").status_code == 200, "relay up")
    _drain(sim)
    sim.wait_sim(600)
    assert sim.running_reqs(8008) == 6 and sim.running_reqs(8009) == 6


def test_downloader_fails_exits_one_without_download_complete(make_sim) -> None:
    sim = make_sim(hosts=("gpu02", "gpu03"), faults=["downloader-fails"])
    b = sim.on("gpu03")
    b.safe_up(BASE_PREVIOUS_TAG, C, [DOWNLOADER])
    b.wait(lambda: b.host.container(DOWNLOADER).state == "exited", "downloader done")
    assert b.host.container(DOWNLOADER).exit_code == 1
    log = b.logs(DOWNLOADER, file=C)
    this_run = log[log.rindex("Downloading zai-org/GLM-5.3-Flash...") :]  # the log keeps the earlier run
    assert "401 Client Error" in this_run and "Download complete." not in this_run
    # gpu02 is not a base host: its downloader is unaffected
    g = sim.on("gpu02")
    assert g.host.container(DOWNLOADER).exit_code == 0


def test_no_rejoin_never_registers(make_sim) -> None:
    sim = make_sim(hosts=("gpu03",), faults=["no-rejoin"])
    _drain(sim)
    sim.safe_up(BASE_PREVIOUS_TAG, C, [REGISTRAR])
    sim.wait_sim(40 * 30)
    assert not sim.domain_listing("peer-a") and not sim.domain_listing("peer-b")
    log = sim.logs(REGISTRAR, file=C)
    assert "Model not ready yet (attempt 1/30), retrying in 30s..." in log
    assert "Model not ready yet (attempt 29/30), retrying in 30s..." in log
    assert "Registered z-ai/glm-5.3-flash" not in log


def test_host_unhealthy_and_the_capacity_invariant(make_sim) -> None:
    sim = make_sim(hosts=ALL, faults=["host-unhealthy@gpu04"])
    for peer in ("peer-a", "peer-b"):
        listing = _base_listing(sim, peer)
        assert listing["203.0.113.4:8444"] is False
        assert listing["203.0.113.3:8444"] is True and listing["203.0.113.23:8444"] is True
    assert sim.fleet.check_invariants() == []  # 2 of 3 serve: enough
    _drain(sim.on("gpu03"))  # a careless drain leaves one of three
    found = sim.fleet.check_invariants()
    assert any(f.startswith("only 1 of 3 base hosts served the base domain") for f in found), found
    assert sim.fleet.check_invariants(allow_outage=True) == []


def test_stopping_engines_before_the_drain_and_orphan_removal_are_violations(make_sim) -> None:
    sim = make_sim(hosts=ALL)
    b = sim.on("gpu23")
    assert b.down(BASE_PREVIOUS_TAG, C, [FP8_R1]).ok  # no drain first
    found = sim.fleet.check_invariants()
    assert any(f.startswith(f"[gpu23] the engine {FP8_R1} was stopped") for f in found), found
    g = sim.on("gpu03")
    _drain(g)
    b2 = g.up(BASE_TARGET_TAG, W, [W4_R1, W4_R2], dry_run=True)
    assert b2.ok
    assert g.up(BASE_TARGET_TAG, W, [W4_R1, W4_R2], dry_run=False).ok  # the FP8 engines go as orphans
    found = sim.fleet.check_invariants()
    assert any("[gpu03] call #" in f and f"removed the container {FP8_R1} as an orphan" in f for f in found), found


def test_perception_fails_and_labels_wrong_on_a_base_host(make_sim) -> None:
    sim = make_sim(hosts=("gpu03",), faults=["perception-fails", "labels-wrong:r2@gpu03"])
    _switch(sim)
    sim.wait(lambda: sim.ready(W4_R1) and sim.ready(W4_R2), "both ready")
    assert "canary-stale" in sim.ps()[W4_R2]["Labels"] and "canary-stale" not in sim.ps()[W4_R1]["Labels"]
    sim.safe_up(BASE_TARGET_TAG, W, [PERCEPTION])
    sim.wait(lambda: sim.host.container(PERCEPTION).state == "exited", "perception finished")
    assert sim.host.container(PERCEPTION).exit_code == 1
    assert sim.logs(PERCEPTION, file=W).splitlines()[-1].endswith('{"event": "qualification_finished", "ok": false}')


def test_the_perception_check_probes_the_engines_its_file_names(make_sim) -> None:
    sim = make_sim(hosts=("gpu23",))

    def perception(tag: str, file: str) -> tuple[int, str]:
        sim.safe_up(tag, file, [PERCEPTION])
        sim.wait(lambda: sim.host.container(PERCEPTION).state == "exited", "perception finished")
        code, last = sim.host.container(PERCEPTION).exit_code, sim.logs(PERCEPTION, file=file).splitlines()[-1]
        assert sim.down(tag, file, [PERCEPTION]).ok
        return code, last

    assert perception(BASE_PREVIOUS_TAG, C) == (0, f'{PERCEPTION}  | {{"event": "qualification_finished", "ok": true}}')
    _drain(sim)
    assert sim.down(BASE_PREVIOUS_TAG, C, [FP8_R1, FP8_R2]).ok
    assert perception(BASE_PREVIOUS_TAG, C)[0] == 1  # it probes the FP8 names, which are gone
    # (an up of C after the switch would remove the W4AFP8 engines as orphans: never do that)
    sim.safe_up(BASE_TARGET_TAG, W, SWITCH)
    sim.wait(lambda: sim.ready(W4_R1) and sim.ready(W4_R2), "both ready")
    assert perception(BASE_TARGET_TAG, W)[0] == 0
    assert sim.fleet.check_invariants() == []


def test_check_base_tier_rules() -> None:
    from orchestrator_sim import check_base_tier

    up3 = {h: [(0.0, True)] for h in BASE_HOSTS}
    assert check_base_tier(up3, {}) == []
    one_out = {**up3, "gpu03": [(0.0, True), (10.0, False), (500.0, True)]}
    assert check_base_tier(one_out, {}) == []  # n-1 = 2 still serve
    two_out = {**one_out, "gpu04": [(0.0, True), (100.0, False), (200.0, True)]}
    assert check_base_tier(two_out, {}) == [
        "only 1 of 3 base hosts served the base domain from t=100s to t=200s (at least 2 must)"
    ]
    assert check_base_tier(two_out, {}, allow_outage=True) == []
    # a start already short (a fault) is the floor, not a finding; making it worse is
    short = {h: [(0.0, False)] for h in BASE_HOSTS}
    assert check_base_tier(short, {}) == []
    worse = {**{h: [(0.0, h != "gpu23")] for h in BASE_HOSTS}, "gpu03": [(0.0, True), (50.0, False)]}
    assert check_base_tier(worse, {}) == [
        "only 1 of 3 base hosts served the base domain from t=50s to the end of the run (at least 2 must)"
    ]
    found = check_base_tier(up3, {"gpu03": [(42.0, FP8_R1)]})
    assert found == [
        f"[gpu03] the engine {FP8_R1} was stopped at t=42s while gpu03 was still registered in its domain "
        "(drain before stop)"
    ]
