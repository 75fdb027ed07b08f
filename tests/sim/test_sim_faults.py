"""The compose-manager and docker faults, each by its observable symptom."""

from __future__ import annotations

from typing import TypeVar

import httpx
import pytest
from sim_time import SteppedClock

from orchestrator_sim import FAULTS, parse_fault
from orchestrator_sim.faults import LOCK_AFTER_DOWN_HOLD_S, SIDECAR_DOWN_BUSY_S
from orchestrator_sim.testing import CANARY, NEW_R2, NEW_TAG, OLD_R2, OLD_TAG, R1, RELAY, TARGET
from orchestrator_sim.testing import SimDriver as Sim

T = TypeVar("T")


def test_the_fault_table_names_every_fault_and_its_expected_end_state() -> None:
    assert set(FAULTS) == {
        "sidecar-down-busy",
        "oom",
        "cuda-801",
        "budget-80pct",
        "rank-budget-wrong",
        "restart-loop",
        "cold-start-hang",
        "dry-run-extra-recreate",
        "dry-run-extra-remove",
        "dry-run-not-dry",
        "dry-run-recreates",
        "force-recreate-ignored",
        "busy-409",
        "lock-after-down",
        "down-busy",
        "server-500",
        "cut-before-effect",
        "cut-after-effect",
        "zombie-after-down",
        "peer-missing",
        "completion-fails",
        "cache-miss",
        "tag-too-recent",
        "tag-unknown",
        "tag-unmerged",
        "github-down",
        "weights-missing",
        "budget-no-fit",
        "host-restore-missing",
        "labels-wrong",
        "perception-fails",
        "dist-store-error",
        "drain-stuck",
        "downloader-fails",
        "no-rejoin",
        "host-unhealthy",
        "candidate-faster",
        "candidate-slower",
        "candidate-slightly-slower",
        "candidate-errors",
        "low-traffic",
        "live-noise",
        "no-abort-counter",
        "memory-squeeze",
        "serving-errors",
        # issue 23's gates outside the engines
        "pr-unmerged",
        "ci-failing",
        "ci-pending",
        "proxy-pool-stale",
        "attestation-stale",
        "attestation-file-mismatch",
        "hash-unregistered",
        "prometheus-down",
    }
    assert all(f.symptom and f.expected_end_state for f in FAULTS.values())
    assert str(parse_fault("oom")) == "oom:r2" and parse_fault("cuda-801:r1").replica == "r1"
    assert parse_fault("busy-409:3").count == 3 and parse_fault("server-500").count == 1
    assert str(parse_fault("down-busy:r1")) == "down-busy:r1:6" and parse_fault("down-busy:r2:3").count == 3
    for bad in ("nope", "oom:r3", "busy-409:x", "peer-missing:r1", "down-busy:r3", "down-busy:r1:x", "down-busy:r1:-1"):
        with pytest.raises(ValueError):
            parse_fault(bad)


def test_busy_409(make_sim) -> None:
    sim = make_sim(faults=["busy-409:2"])
    assert sim.client.get(sim.fleet.urls.compose_manager + "/version").status_code == 200  # no lock needed
    for _ in range(2):
        r = sim.up(NEW_TAG, TARGET, [NEW_R2], dry_run=True)
        assert (r.status, r.error["error"]) == (409, "another docker operation is already in progress: docker_restart")
    assert sim.up(NEW_TAG, TARGET, [NEW_R2], dry_run=True).ok


def test_down_busy_refuses_only_downs_of_that_replicas_engine(make_sim) -> None:
    """`down-busy:r1:2`: the next two downs naming the running r1 get 409; downs of other services
    and every up go through; the third down of r1 is accepted."""
    sim = make_sim(faults=["down-busy:r1:2"])
    r1_id = {c.service: c.id for c in sim.fleet.host.containers()}[R1]
    assert sim.up(NEW_TAG, TARGET, [NEW_R2], dry_run=True).ok
    assert sim.down(OLD_TAG, CANARY, [OLD_R2]).ok  # r2's down: not aimed at
    for _ in range(2):
        r = sim.down(NEW_TAG, TARGET, [R1])
        assert (r.status, r.error["error"]) == (409, "another docker operation is already in progress: docker_restart")
        assert {c.service: c.id for c in sim.fleet.host.containers() if c.state == "running"}[R1] == r1_id
    assert sim.down(NEW_TAG, TARGET, [R1]).ok
    assert R1 not in {c.service for c in sim.fleet.host.containers() if c.state == "running"}


def test_server_500(make_sim) -> None:
    sim = make_sim(faults=["server-500:2"])
    for _ in range(2):
        r = sim.cm("GET", "/docker/ps")
        assert r.status_code == 500 and r.headers["content-type"].startswith("text/html")
        assert "<h1>500 Internal Server Error</h1>" in r.text
    assert sim.cm("GET", "/docker/ps").status_code == 200
    assert [c.outcome for c in sim.fleet.calls][:2] == ["fault:server-500"] * 2


def test_cut_before_effect(make_sim) -> None:
    sim = make_sim(faults=["cut-before-effect"])
    assert sim.down(OLD_TAG, CANARY, [OLD_R2]).ok
    assert sim.up(NEW_TAG, TARGET, [NEW_R2], dry_run=True).ok
    actions = sim.actions()
    with pytest.raises(httpx.RemoteProtocolError):
        sim.up(NEW_TAG, TARGET, [NEW_R2], dry_run=False)
    # 8e07c35 records the up when it accepts it, before docker runs: the cut attempt is logged
    assert NEW_R2 not in sim.ps()
    assert sim.actions()[:-1] == actions and sim.actions()[-1]["services"] == [NEW_R2]
    version = sim.client.get(sim.fleet.urls.compose_manager + "/version").json()
    assert version["tag"] == NEW_TAG and version["projects"]["work"]["current"]["tag"] == OLD_TAG
    applies = [c for c in sim.fleet.calls if c.is_compose_up and not c.dry_run]
    assert [c.outcome for c in applies] == ["cut:before-effect"]
    sim.safe_up(NEW_TAG, TARGET, [NEW_R2])  # only the first apply is cut
    assert NEW_R2 in sim.ps()


def test_cut_after_effect(make_sim) -> None:
    sim = make_sim(faults=["cut-after-effect"])
    assert sim.down(OLD_TAG, CANARY, [OLD_R2]).ok
    assert sim.up(NEW_TAG, TARGET, [NEW_R2], dry_run=True).ok
    with pytest.raises(httpx.RemoteProtocolError):
        sim.up(NEW_TAG, TARGET, [NEW_R2], dry_run=False)
    assert sim.ps()[NEW_R2]["State"] == "running"
    assert sim.actions()[-1]["services"] == [NEW_R2]
    sim.wait_ready(NEW_R2)


def test_zombie_after_down(make_sim) -> None:
    sim = make_sim(faults=["zombie-after-down"])
    first = sim.down(OLD_TAG, CANARY, [OLD_R2])
    assert first.done == {"event": "done", "success": False, "exit_code": 1}
    assert any(line.startswith("Error response from daemon:") for line in first.lines)
    assert OLD_R2 not in sim.ps()  # plain `docker ps`: a container being removed is not running
    assert sim.fleet.host.container(OLD_R2).state == "removing"
    second = sim.down(OLD_TAG, CANARY, [OLD_R2])
    assert second.ok and OLD_R2 not in sim.ps()


def test_dry_run_extra_recreate(make_sim) -> None:
    sim = make_sim(faults=["dry-run-extra-recreate"])
    assert sim.down(OLD_TAG, CANARY, [OLD_R2]).ok
    dry = sim.up(NEW_TAG, TARGET, [NEW_R2], dry_run=True)
    assert any(" Container nginx " in line and "Recreated" in line for line in dry.lines)
    nginx_id = sim.ps()["nginx"]["ID"]
    assert sim.up(NEW_TAG, TARGET, [NEW_R2], dry_run=False).ok  # applying it anyway does it
    assert sim.ps()["nginx"]["ID"] != nginx_id


def test_force_recreate_ignored(make_sim) -> None:
    sim = make_sim(faults=["force-recreate-ignored"])
    dry = sim.up(NEW_TAG, TARGET, [RELAY], dry_run=True, force_recreate=True)
    assert dry.ok and dry.plan["plan"]["unchanged"] == [f"Container {RELAY}"]


def test_dry_run_extra_remove(make_sim) -> None:
    sim = make_sim(faults=["dry-run-extra-remove"])
    assert sim.down(OLD_TAG, CANARY, [OLD_R2]).ok
    dry = sim.up(NEW_TAG, TARGET, [NEW_R2], dry_run=True)
    assert any(f" Container {R1} " in line and "Removed" in line for line in dry.lines)
    assert R1 in sim.ps()


def test_dry_run_not_dry(make_sim) -> None:
    sim = make_sim(faults=["dry-run-not-dry"])
    before = {n: (r["ID"], r["CreatedAt"]) for n, r in sim.ps().items()}
    dry = sim.up(NEW_TAG, TARGET, [RELAY], dry_run=True, force_recreate=True)  # config-only change (#11900)
    assert dry.ok and all("DRY-RUN MODE" in line or line.startswith("[+]") for line in dry.lines)
    after = {n: (r["ID"], r["CreatedAt"]) for n, r in sim.ps().items()}
    assert after[RELAY] != before[RELAY]  # docker/compose#14029: the relay was really recreated
    assert {n: v for n, v in after.items() if n != RELAY} == {n: v for n, v in before.items() if n != RELAY}
    assert sim.actions()[-1]["services"] == [RELAY] and sim.actions()[-1]["tag"] == OLD_TAG  # nothing recorded


def test_dry_run_recreates_like_docker_compose_14029(make_sim) -> None:
    """A dry run of the serving r1 from the new file (a recreate) really recreates r1 and removes
    the old r2 as an orphan, with unprefixed lines; a dry run that only creates stays dry."""
    sim = make_sim(faults=["dry-run-recreates"])
    before = {n: (r["ID"], r["CreatedAt"]) for n, r in sim.ps().items()}
    n_actions = len(sim.actions())
    dry = sim.up(NEW_TAG, TARGET, [NEW_R2], dry_run=True)  # a create only: stays dry
    assert dry.ok and {n: (r["ID"], r["CreatedAt"]) for n, r in sim.ps().items()} == before
    dry = sim.up(NEW_TAG, TARGET, [R1], dry_run=True)
    assert dry.ok
    after = {n: (r["ID"], r["CreatedAt"]) for n, r in sim.ps().items()}
    assert after[R1] != before[R1]
    assert OLD_R2 in before and OLD_R2 not in after  # orphan-removed
    assert any(f"Container {R1}" in line and "Recreated" in line and "DRY-RUN" not in line for line in dry.lines)
    assert len(sim.actions()) == n_actions  # the server took it for a dry run: nothing recorded


@pytest.mark.parametrize("fault, value", [("budget-80pct", "80%"), ("budget-no-fit", "650GiB")])
def test_budget_faults_put_the_override_in_the_dashboards_env_map(make_sim, fault: str, value: str) -> None:
    sim = make_sim(faults=[fault], log_lines=None)  # the old r2's whole start: no log rotation
    instances = sim.client.get(
        sim.fleet.urls.dashboard + "/api/instances", headers={"Authorization": f"Bearer {sim.fleet.tokens.dashboard}"}
    ).json()
    gpu02 = next(i for i in instances if i["name"] == "gpu02")
    assert gpu02["env_vars"]["GLM53_HICACHE_RAM_BUDGET"] == value
    # the canary was deployed before the override: its r2 still logged 80%
    assert "budget=80% ranks=4 rank_budget_bytes=262552089395" in sim.logs(OLD_R2, file=CANARY)


def test_dashboard_default_env_map(sim: Sim) -> None:
    instances = sim.client.get(
        sim.fleet.urls.dashboard + "/api/instances", headers={"Authorization": f"Bearer {sim.fleet.tokens.dashboard}"}
    ).json()
    gpu02 = next(i for i in instances if i["name"] == "gpu02")
    assert gpu02["url"] == sim.fleet.urls.compose_manager and gpu02["bearer_token"] == "***"
    env = gpu02["env_vars"]
    assert env["HOST_IP"] == "203.0.113.2" and env["CVM_NAME"] == "gpu02" and env["LONG_TIER_ONLY"] == "true"
    for secret in ("PROXY_TOKEN", "MODEL_PROXY_TOKEN", "HUGGING_FACE_HUB_TOKEN", "MONITORING_INGEST_TOKEN"):
        assert len(env[secret]) >= 32
    assert "GLM53_HICACHE_RAM_BUDGET" not in env
    assert len(instances) >= 2 and all(i["bearer_token"] == "***" for i in instances)


def test_github_agrees_with_compose_manager_and_its_faults(make_sim) -> None:
    repo = "/repos/nearai/cvm-compose-files"
    sim = make_sim(faults=["tag-unmerged"])
    gh = sim.fleet.urls.github
    ref = sim.client.get(f"{gh}{repo}/git/ref/tags/{NEW_TAG}").json()
    commit = sim.fleet.host.repo.tag(NEW_TAG).commit
    assert ref["object"] == {**ref["object"], "sha": commit, "type": "commit"}
    assert sim.client.get(f"{gh}{repo}/compare/main...{commit}").json()["status"] == "diverged"
    old = sim.fleet.host.repo.tag(OLD_TAG).commit
    assert sim.client.get(f"{gh}{repo}/compare/main...{old}").json()["status"] == "behind"
    assert sim.client.get(f"{gh}{repo}/git/ref/tags/v9.9.9").status_code == 404
    assert sim.up(NEW_TAG, TARGET, [NEW_R2], dry_run=True).ok  # compose-manager never checks merging
    recent = make_sim(faults=["tag-too-recent"])
    date = recent.client.get(f"{recent.fleet.urls.github}{repo}/commits/{NEW_TAG}").json()["commit"]["committer"]["date"]
    refused = recent.up(NEW_TAG, TARGET, [NEW_R2], dry_run=True).error["error"]
    assert refused.startswith(f"tag too recent: {date[:10]} {date[11:19]} UTC")


def test_github_down_reads_as_tag_not_found_on_compose_manager(make_sim) -> None:
    sim = make_sim(faults=["github-down"])
    assert sim.client.get(f"{sim.fleet.urls.github}/repos/nearai/cvm-compose-files/git/ref/tags/{OLD_TAG}").status_code == 503
    r = sim.up(OLD_TAG, CANARY, [R1], dry_run=True)
    assert (r.status, r.error["error"]) == (400, f"tag not found: {OLD_TAG}")


def test_weights_missing(make_sim) -> None:
    default = make_sim().cm("GET", "/host/cache").json()
    assert "models--graphistry--GLM-5.3-Flash-W4AFP8" in default["weights"]
    assert {v["name"] for v in default["volumes"]} == {"work_huggingface_cache", "work_kernel_cache"}
    missing = make_sim(faults=["weights-missing"]).cm("GET", "/host/cache").json()
    assert "models--graphistry--GLM-5.3-Flash-W4AFP8" not in missing["weights"]


def test_container_ids_are_stable_per_seed_and_change_only_on_recreate(make_sim) -> None:
    """docker ps `ID` (12 hex digits): the same for the same seed, kept while a container lives,
    new when compose creates it again (what a run's ownership ledger relies on)."""
    sim, twin = make_sim(), make_sim()
    ids = {n: r["ID"] for n, r in sim.ps().items()}
    assert ids == {n: r["ID"] for n, r in twin.ps().items()}
    assert sim.down(OLD_TAG, CANARY, [R1]).ok
    assert sim.up(OLD_TAG, CANARY, [R1], dry_run=True).ok
    assert sim.up(OLD_TAG, CANARY, [R1], dry_run=False).ok  # the same definition, a new container
    after = {n: r["ID"] for n, r in sim.ps().items()}
    assert after[R1] != ids[R1]
    assert {n: i for n, i in after.items() if n != R1} == {n: i for n, i in ids.items() if n != R1}


def test_the_external_gate_faults_show_on_their_surfaces(make_sim) -> None:
    """Issue 23: GitHub's PR and check runs, the in-host proxy, the registry and the attestation
    report each change under their fault (and only then)."""
    import hashlib
    import json

    def surfaces(sim):
        gh = sim.fleet.urls.github + "/repos/" + sim.fleet.host.repo.name
        sha = sim.client.get(gh + "/git/ref/tags/" + TARGET_TAG_NAME).json()["object"]["sha"]
        pr = sim.client.get(gh + f"/commits/{sha}/pulls").json()[0]
        runs = sim.client.get(gh + f"/commits/{pr['head']['sha']}/check-runs").json()["check_runs"]
        token = sim.fleet.dashboard_env["PROXY_TOKEN"]
        pool = sim.client.get(sim.fleet.urls.proxy + "/backends/list", headers={"Authorization": f"Bearer {token}"}).json()
        hashes = sim.client.get(sim.fleet.urls.registry + "/v1/compose-hashes").json()["hashes"]
        rep = sim.client.get(sim.fleet.urls.compose_manager + "/v1/attestation/report", params={"nonce": "ab" * 32}).json()
        bound = rep["actions_hash"] == hashlib.sha256(json.dumps(rep["actions"], separators=(",", ":")).encode()).hexdigest()
        return pr["merged_at"] is not None, {r["name"]: (r["status"], r["conclusion"]) for r in runs}, \
            [b["address"].split(":")[0] for b in pool["backends"]], bool(hashes), bound

    merged, runs, pool, hashes, bound = surfaces(make_sim())
    assert merged and runs["validate"] == ("completed", "success") and hashes and bound
    assert any(a.endswith("-r2") for a in pool)
    assert not surfaces(make_sim(faults=["pr-unmerged"]))[0]
    assert surfaces(make_sim(faults=["ci-failing"]))[1]["validate"] == ("completed", "failure")
    assert surfaces(make_sim(faults=["ci-pending"]))[1]["validate"] == ("in_progress", None)
    assert not any(a.endswith("-r2") for a in surfaces(make_sim(faults=["proxy-pool-stale"]))[2])
    assert not surfaces(make_sim(faults=["hash-unregistered"]))[3]
    assert not surfaces(make_sim(faults=["attestation-stale"]))[4]


TARGET_TAG_NAME = "v0.0.300"


def test_lock_after_down_ends_by_simulated_time_whatever_is_left_of_its_count(make_sim) -> None:
    """Another client's operation holds the lock for a bounded time: with a count no run spends,
    it still ends LOCK_AFTER_DOWN_HOLD_S simulated seconds after the down, so a slow machine (more
    simulated time per call) never sees it outlast a runbook's `timeouts.gone`."""
    clock = SteppedClock()
    sim = make_sim(clock=clock, faults=["lock-after-down:100000"])
    assert clock.run(lambda: sim.down(OLD_TAG, CANARY, [OLD_R2])).ok
    ended = clock.t
    refused = sim.up(NEW_TAG, TARGET, [NEW_R2], dry_run=True)
    assert (refused.status, refused.error["error"]) == (409, "another docker operation is already in progress: compose_up")
    clock.t = ended + LOCK_AFTER_DOWN_HOLD_S + 1
    assert clock.run(lambda: sim.up(NEW_TAG, TARGET, [NEW_R2], dry_run=True)).ok


def test_sidecar_down_busy_holds_the_lock_for_a_sidecar_down_once_the_new_engine_runs(make_sim) -> None:
    """Before r2's new engine exists, a sidecar's down goes through; after, every down naming no
    engine is refused until SIDECAR_DOWN_BUSY_S simulated seconds after the first refusal; an
    engine's down never is."""
    clock = SteppedClock()
    sim = make_sim(clock=clock, faults=["sidecar-down-busy:r2"])
    assert clock.run(lambda: sim.down(NEW_TAG, TARGET, [RELAY])).status == 200  # no new r2 yet: not refused
    assert clock.run(lambda: sim.down(OLD_TAG, CANARY, [OLD_R2])).ok
    assert clock.run(lambda: sim.safe_up(NEW_TAG, TARGET, [NEW_R2, RELAY])).ok
    first = clock.t
    refused = sim.down(NEW_TAG, TARGET, [RELAY])
    assert (refused.status, refused.error["error"]) == (409, "another docker operation is already in progress: compose_up")
    clock.t = first + SIDECAR_DOWN_BUSY_S - 1
    assert sim.down(NEW_TAG, TARGET, [RELAY]).status == 409
    clock.t = first + SIDECAR_DOWN_BUSY_S
    assert clock.run(lambda: sim.down(NEW_TAG, TARGET, [RELAY])).ok
