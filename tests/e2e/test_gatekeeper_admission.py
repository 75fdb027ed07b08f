"""Issue 21, one gatekeeper: cases 1, 2, 4, 5, 7, 8 and 10, end to end against the simulator, as an
on-call team would meet them (orchestrator/service/admission.py: every door into a run is one admission
transaction; orchestrator/service/orphans.py: an abort of a run nobody drives ends it truthfully).

Judged on the simulator's own record (its calls per host, its containers, the peers' pools, its
invariant checker), never on what the orchestrator says about itself. The CLI runs in its own
process (tests/e2e/gatekeeper_orchestrate.py adds the Ctrl-C, crash, clock-step and stall hooks);
`orchestrate serve` is a real server process on the same journal.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from ports import free_port
from waiting import wait_until

from orchestrator.journal import SqliteJournal
from orchestrator_sim import BASE_HOSTS, BASE_TARGET_TAG

pytestmark = pytest.mark.e2e

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SPEED = "3000"
BASE_RB = "base-glm53-w4afp8"
SERVER_TOKEN = "srv-3c1f0a9b2e4d6f8a1c3e5b7d9f0a2c7d"
GPU02 = ["rollout", "gpu02", "--tag", "v0.0.300"]
FLEET = ["rollout", "--hosts", ",".join(BASE_HOSTS), "--tag", BASE_TARGET_TAG, "--yes", "--soak", "0",
         "--override-prerequisite", "gpu02"]


class Team:
    """The simulated hosts and an on-call team's terminals (one journal, one state directory)."""

    def __init__(self, tmp_path: Path, hosts: tuple[str, ...]) -> None:
        from orchestrator_sim import SimConfig, SimFleet

        self.fleet = SimFleet(SimConfig(speed=float(SPEED), cold_start_s=1200, hosts=hosts))
        self.fleet.__enter__()
        self.state = tmp_path / "state"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
        self.env.update(self.fleet.env_for_orchestrator(tmp_path / "inventory.yaml"))
        self.env.update({"ORCHESTRATOR_STATE_DIR": str(self.state), "ORCHESTRATOR_TIME_SCALE": SPEED,
                         "ORCHESTRATOR_POLL_INTERVAL": "10", "ORCHESTRATOR_SERVER_TOKEN": SERVER_TOKEN})
        self.servers: list[subprocess.Popen] = []

    def cmd(self, *args: str, **hooks: str) -> list[str]:
        return [sys.executable, str(HERE / "gatekeeper_orchestrate.py"), *args]

    def run(self, *args: str, timeout: float = 600, **hooks: str) -> subprocess.CompletedProcess:
        env = {**self.env, **{f"ORCHESTRATOR_TEST_{k.upper()}": v for k, v in hooks.items()}}
        return subprocess.run(self.cmd(*args), env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)

    def start(self, *args: str, **hooks: str) -> subprocess.Popen:
        env = {**self.env, **{f"ORCHESTRATOR_TEST_{k.upper()}": v for k, v in hooks.items()}}
        return subprocess.Popen(self.cmd(*args), env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)

    def journal(self) -> SqliteJournal:
        return SqliteJournal(self.state / "journal.sqlite3")

    def runs(self, host: str) -> list:
        j = self.journal()
        try:
            return j.list_runs(host)
        finally:
            j.close()

    def mark(self) -> int:
        return max((c.seq for c in self.fleet.calls), default=0)

    def mutating(self, host: str, after: int = 0) -> list:
        return [c for c in self.fleet.calls if c.host == host and c.seq > after
                and ((c.is_compose_up and not (c.body or {}).get("dry_run")) or c.is_compose_down)]

    def serve(self, ttl: str = "3") -> str:
        port = free_port()
        self.serve_log = self.state.parent / f"serve{len(self.servers)}.log"
        log = self.serve_log.open("w")
        proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "serve", "--port", str(port)], cwd=ROOT,
                                env={**self.env, "ORCHESTRATOR_LEASE_TTL": ttl}, stdout=log, stderr=subprocess.STDOUT)
        self.servers.append(proc)
        url = f"http://127.0.0.1:{port}"

        def listening() -> bool:
            assert proc.poll() is None, f"serve exited {proc.returncode}"
            try:
                return httpx.get(url + "/healthz", timeout=5).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(listening, "the server to listen")
        return url

    def adoption_rounds(self, run_id: str) -> int:
        """How many adoption rounds of the last `serve` passed `run_id` over (its log's `adoption_skipped`)."""
        return sum(1 for line in self.serve_log.read_text().splitlines() if "adoption_skipped" in line and run_id in line)

    def close(self) -> None:
        for p in self.servers:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
        self.fleet.__exit__(None, None, None)


@pytest.fixture
def team(tmp_path):
    made: list[Team] = []

    def make(hosts: tuple[str, ...] = ("gpu02",)) -> Team:
        t = Team(tmp_path / f"t{len(made)}", hosts)
        made.append(t)
        return t

    yield make
    for t in made:
        t.close()


def ok(r: subprocess.CompletedProcess, code: int = 0) -> subprocess.CompletedProcess:
    assert r.returncode == code, f"exit {r.returncode}: " + r.stdout[-3000:] + r.stderr[-2000:]
    return r


def killed_in_r1_cold_start_then_rolled_back(t: Team, **rollback_hooks: str) -> str:
    """Case 1's history: gpu02's rollout is killed during r1's cold start (r2 already on the new
    file), then `rollback gpu02 --replica all` by hand puts both replicas back. Returns the id of
    the killed (now superseded) run."""
    r = t.run(*GPU02, "--yes", "--soak", "0", signal_at="gpu02:r1.cold-start:SIGKILL")
    assert r.returncode == -9, r.stderr[-2000:]
    [killed] = t.runs("gpu02")
    assert not killed.terminal and killed.state == "r1.cold-start"
    ok(t.run("rollback", "gpu02", "--replica", "all", **rollback_hooks))  # ROLLED_BACK: exit 0, the rollback the operator asked for reached its target (issue 22)
    return killed.run_id


# --------------------------------------------------------------------------- case 5


def test_case5_a_clock_stepped_back_one_hour_never_lets_a_superseded_run_resume(team):
    """The rollback runs with the wall clock one hour behind, so its `created_at` is older than the
    killed rollout's: resuming the killed run is still refused (runs are ordered by the journal's
    sequence), and nothing reaches gpu02."""
    t = team()
    killed = killed_in_r1_cold_start_then_rolled_back(t, journal_shift_s="-3600")
    [rollback] = [r for r in t.runs("gpu02") if r.kind == "rollback"]
    assert rollback.created_at < t.journal().get_run(killed).created_at
    mark = t.mark()
    r = ok(t.run("resume", killed, "--yes", "--soak", "0"), 5)
    assert f"run {rollback.run_id} (rollback) started after {killed}" in r.stderr, r.stderr
    assert t.mutating("gpu02", mark) == []
    assert t.fleet.check_invariants() == []


# --------------------------------------------------------------------------- case 1


def test_case1_serve_neither_adopts_nor_resumes_a_run_a_later_rollback_superseded(team):
    """`orchestrate serve` on the same journal: its adoption loop passes the killed run over (it is
    superseded), and `resume RUN --server URL` is refused exactly as the CLI refuses it; the healthy
    r1 the rollback restored is never touched."""
    t = team()
    killed = killed_in_r1_cold_start_then_rolled_back(t)
    mark = t.mark()
    url = t.serve(ttl="1.5")
    wait_until(lambda: t.adoption_rounds(killed) >= 3, "three adoption rounds to pass the killed run over")
    r = ok(t.run("resume", killed, "--server", url), 5)
    assert "acted on gpu02" in r.stderr and killed in r.stderr, r.stderr
    after = t.adoption_rounds(killed)
    wait_until(lambda: t.adoption_rounds(killed) > after, "an adoption round after the refused resume")
    assert t.mutating("gpu02", mark) == []
    run = t.journal().get_run(killed)
    assert not run.terminal and run.state == "r1.cold-start"
    detail = httpx.get(f"{url}/runs/{killed}", headers={"Authorization": f"Bearer {SERVER_TOKEN}"}, timeout=10).json()
    assert detail["worker"] is None or detail["worker"]["status"] not in ("starting", "running")
    assert t.fleet.check_invariants() == []


# --------------------------------------------------------------------------- case 2


def test_case2_a_ctrl_c_run_adopted_by_serve_waits_for_a_human_at_its_approval_gates(team):
    """`rollout gpu02 --yes`, Ctrl-C during r2's cold start: `serve` adopts the run, but an adopted
    run waits for a human at every approval gate whatever `--yes` was stored; it ends DONE only
    after an approval through the server."""
    t = team()
    r = t.run(*GPU02, "--yes", "--soak", "0", signal_at="gpu02:r2.cold-start:SIGINT")
    assert r.returncode == 130, r.stderr[-2000:]
    [run] = t.runs("gpu02")
    url = t.serve(ttl="1.5")
    auth = {"Authorization": f"Bearer {SERVER_TOKEN}"}

    def detail() -> dict:
        return httpx.get(f"{url}/runs/{run.run_id}", headers=auth, timeout=10).json()

    def waiting() -> dict | None:
        d = detail()
        assert not d["terminal"], f"the adopted run ended {d['outcome']} with no human: {d['message']}"
        return d if "approve" in ((d["worker"] or {}).get("waiting") or "") else None

    d = wait_until(waiting, "the adopted run to wait at its approval gate", timeout=180)
    assert d["worker"]["adopted"] is True and d["approvals"] == []
    # two heartbeats of the wait later (10 minutes on the run's clock): still waiting, nobody approved
    seen = max((e["seq"] for e in d["worker"]["events"]), default=0)

    def two_more_heartbeats() -> bool:
        x = detail()
        assert not x["terminal"] and x["approvals"] == [], f"the adopted run ended {x['outcome']} with no human"
        return sum(1 for e in x["worker"]["events"] if e["event"] == "heartbeat" and e["seq"] > seen) >= 2

    wait_until(two_more_heartbeats, "two heartbeats of the run's wait at its approval gate", timeout=180)
    gate = d["worker"]["waiting"]
    assert httpx.post(f"{url}/runs/{run.run_id}/approve", headers=auth, json={"gate": "*"}, timeout=10).status_code == 200
    d = wait_until(lambda: (x := detail())["terminal"] and x, "the run to end after the approval", timeout=180)
    assert d["outcome"] in ("DONE", "HALTED", "ROLLED_BACK") and d["approvals"], (gate, d["message"])
    assert t.fleet.check_invariants() == []


# --------------------------------------------------------------------------- case 8


def test_case8_gpu02_rolled_back_after_done_blocks_the_base_fleet(team):
    """gpu02 DONE, then `rollback gpu02` ROLLED_BACK: the base fleet is refused (exit 5, one line
    naming gpu02 and the override) and nothing reaches a base host; with the override it may go."""
    t = team(("gpu02", *BASE_HOSTS))
    ok(t.run(*GPU02, "--yes", "--soak", "0"))
    ok(t.run("rollback", "gpu02", "--replica", "all"))  # ROLLED_BACK: exit 0 (issue 22)
    mark = t.mark()
    r = ok(t.run("rollout", "--hosts", ",".join(BASE_HOSTS), "--tag", BASE_TARGET_TAG, "--yes", "--soak", "0"), 5)
    assert "prerequisite not met: gpu02" in r.stderr and "--override-prerequisite gpu02" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert all(t.mutating(h, mark) == [] for h in BASE_HOSTS)
    assert all(t.runs(h) == [] for h in BASE_HOSTS)
    # the single-host door is the same door
    r = ok(t.run("rollout", "gpu03", "--tag", BASE_TARGET_TAG, "--yes", "--soak", "0"), 5)
    assert "prerequisite not met: gpu02" in r.stderr and t.runs("gpu03") == []


# --------------------------------------------------------------------------- case 10


def test_case10_a_fleet_ctrl_c_in_gpu04_preflight_can_be_aborted_and_the_tier_goes_on(team):
    """Ctrl-C during gpu04's preflight in a fleet run, then the same fleet command again: the first
    gpu04 run, superseded, blocks gpu23 (its run has not ended). `orchestrate abort` of that run,
    which nobody drives, reads gpu04 and ends it ABORTED (it changed nothing), with the host's
    state in its message; the fleet command then finishes every host."""
    t = team(BASE_HOSTS)
    r = t.run(*FLEET, signal_at="gpu04:preflight.:SIGINT")
    assert r.returncode == 130, r.stdout[-2000:] + r.stderr[-2000:]
    [first] = t.runs("gpu04")
    assert not first.terminal and first.state.startswith("preflight.")
    t.run(*FLEET)  # the same fleet command again: gpu04 goes on in a run of its own
    assert t.runs("gpu04")[0].run_id != first.run_id
    assert not t.journal().get_run(first.run_id).terminal  # nothing ends the first one
    r = ok(t.run("abort", first.run_id))
    assert "ended ABORTED" in r.stdout and "host now:" in r.stdout and "in the pool" in r.stdout, r.stdout
    run = t.journal().get_run(first.run_id)
    assert run.terminal and run.outcome == "ABORTED" and "host now:" in run.message
    r = ok(t.run(*FLEET))
    assert "fleet DONE" in r.stdout, r.stdout[-2000:]
    assert [x.outcome for x in t.runs("gpu23")][0] == "DONE"
    assert t.fleet.check_invariants() == []


# --------------------------------------------------------------------------- case 4


def test_case4_a_rollback_stalled_between_its_check_and_its_run_never_drains_a_second_base_host(team, tmp_path):
    """`rollback gpu04` passes "no other base host mid-run", then stalls before its run exists; meanwhile
    `rollout gpu03` starts and drains gpu03. When the rollback wakes, its checks are evaluated again in
    the admission transaction: refused (exit 5), gpu04 never drained; at least 2 of 3 base hosts serve
    at every moment (the simulator's invariant)."""
    t = team(BASE_HOSTS)
    ok(t.run("rollout", "gpu04", "--tag", BASE_TARGET_TAG, "--yes", "--soak", "0", "--override-prerequisite", "gpu02"))
    stall = tmp_path / "go"
    rollback = t.start("rollback", "gpu04", stall_file=str(stall))
    try:
        wait_until(lambda: Path(str(stall) + ".waiting").exists() or rollback.poll() is not None, "the rollback's stall")
        assert rollback.poll() is None, rollback.communicate()
        mark = t.mark()
        rollout = t.start("rollout", "gpu03", "--tag", BASE_TARGET_TAG, "--yes", "--soak", "0",
                          "--override-prerequisite", "gpu02")
        wait_until(lambda: any(r.state.startswith("switch.") for r in t.runs("gpu03")) or rollout.poll() is not None,
                   "gpu03 to be drained (its switch phase)", timeout=300)
        stall.write_text("go")
        out, err = rollback.communicate(timeout=300)
        r_out, r_err = rollout.communicate(timeout=600)
    finally:
        for p in (rollback,):
            if p.poll() is None:
                p.kill()
    assert rollout.returncode == 0, r_out[-2000:] + r_err[-2000:]
    assert rollback.returncode == 5, out[-2000:] + err[-2000:]
    assert "gpu03" in err and "Nothing was changed" in err or "nothing was started" in err, err
    assert t.mutating("gpu04", mark) == []
    assert [r.kind for r in t.runs("gpu04")] == ["rollout"]
    assert t.fleet.check_invariants() == []


# --------------------------------------------------------------------------- case 7


def test_case7_a_rollback_counts_the_hosts_the_peers_route_to(e2e_factory):
    """gpu03 DONE; gpu04's rollout HALTS outside the model-proxy pool (its registrar never rejoins):
    its run has ended, but the peers route the base domain to 2 of 3 hosts. `rollback gpu03` would
    leave 1: refused (exit 5, naming gpu04), nothing sent to gpu03 but reads."""
    from recording import RecordingProgress

    from orchestrator.engine.fleet import journal_overrides
    from orchestrator.service.admission import new_rollback, new_rollout
    from orchestrator.service.runner import execute
    from orchestrator.util.user_errors import Refused

    e = e2e_factory("no-rejoin@gpu04", hosts=BASE_HOSTS)

    def rollout(host: str):
        run, rb, table = new_rollout(e.session, host, BASE_TARGET_TAG, BASE_RB)
        journal_overrides(e.session.journal, run, ["gpu02"], "test")
        return asyncio.run(execute(e.session, run, rb, table, progress=RecordingProgress(), yes=True, soak=0.0))

    assert rollout("gpu03").outcome == "DONE"
    halted = rollout("gpu04")
    assert halted.outcome == "HALTED", halted.message
    assert not e.fleet.hosts["gpu04"].domain_serving[-1][1]  # the simulator's record: out of the pool
    mark = max((c.seq for c in e.fleet.calls), default=0)
    with pytest.raises(Refused, match="route the base domain to only 2 of 3") as exc:
        asyncio.run(new_rollback(e.session, "gpu03", "all", None, None, None))
    assert "gpu04" in str(exc.value)
    assert [c for c in e.fleet.calls if c.host == "gpu03" and c.seq > mark
            and ((c.is_compose_up and not (c.body or {}).get("dry_run")) or c.is_compose_down)] == []
    assert [r.kind for r in e.session.journal.list_runs("gpu03")] == ["rollout"]
    assert e.fleet.check_invariants() == []
