"""The command line as an on-call engineer meets it at 3 a.m. (issue 22), each in its own process
against the simulator: the exit code and the first and last lines of what it prints.

- a rollback that reached its target exits 0, names the target first and where the host is last;
- a rollback of a host this journal never rolled out: one line and the one command that forces it;
- rollback takes the flags rollout and resume take (--yes, --soak, ...);
- `resume RUN` keeps the run's own --soak and --yes, and says so;
- a HALTED run ends formatted: what happened, one line per replica, the one command that works next;
- `approve` of a run no process drives says it needs `resume`;
- `abort` during r1's cold start ends saying how to finish the abort;
- Ctrl-C during `orchestrate demo` says what happened;
- the inventory: a checkout's placeholder never wins over ~/.config/orchestrator/hosts.yaml nor is
  used for a real host; every mutating command names its inventory and journal on its first line.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from waiting import wait_until

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SPEED = "3000"
OLD_FILE = "prod/GLM-5.3-Flash-SGL-TP4-W4AFP8-Canary.yaml"
R2_OLD = "model-sg-glm53-fp8-tp4-r2"
R2_NEW = "model-sg-glm53-w4afp8-tp4-r2"


class Cli:
    """`orchestrate` in a working directory that holds the checkout's placeholder config/hosts.yaml,
    with the simulator's inventory as the user's own (~/.config/orchestrator/hosts.yaml)."""

    def __init__(self, tmp_path: Path, *faults: str, speed: str = SPEED, cold_start_s: float = 1200) -> None:
        from orchestrator_sim import SimConfig, SimFleet

        self.fleet = SimFleet(SimConfig(speed=float(speed), cold_start_s=cold_start_s, faults=list(faults)))
        self.fleet.__enter__()
        self.cwd = tmp_path / "checkout"
        (self.cwd / "config").mkdir(parents=True)
        shutil.copy(ROOT / "config" / "hosts.yaml", self.cwd / "config" / "hosts.yaml")
        self.user_inventory = tmp_path / "xdg-config" / "orchestrator" / "hosts.yaml"
        self.user_inventory.parent.mkdir(parents=True)
        sim_env = self.fleet.env_for_orchestrator(self.user_inventory)
        sim_env.pop("ORCHESTRATOR_INVENTORY")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_")}
        self.env.update(sim_env)
        self.env.update({"ORCHESTRATOR_STATE_DIR": str(tmp_path / "state"), "ORCHESTRATOR_TIME_SCALE": speed,
                         "ORCHESTRATOR_POLL_INTERVAL": "10", "XDG_CONFIG_HOME": str(tmp_path / "xdg-config")})
        self.journal = str(tmp_path / "state" / "journal.sqlite3")

    def __call__(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "orchestrator.cli", *args], env=self.env, cwd=self.cwd,
                              capture_output=True, text=True, timeout=timeout)

    def background(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "orchestrator.cli", *args], env=self.env, cwd=self.cwd,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def wait_for_state(self, state: str, timeout: float = 120.0) -> str:
        """The newest run's id once it is at `state`, read from the journal file directly (a
        process per look would miss a short state on a loaded machine)."""
        from orchestrator.journal import SqliteJournal

        def reached() -> str | None:
            if not Path(self.journal).is_file():
                return None
            journal = SqliteJournal(self.journal)
            try:
                runs = journal.list_runs(limit=1)
            finally:
                journal.close()
            return runs[0].run_id if runs and runs[0].state == state else None

        return wait_until(reached, f"the run to reach {state}", timeout)

    def close(self) -> None:
        self.fleet.__exit__(None, None, None)


@pytest.fixture
def cli(tmp_path):
    c = Cli(tmp_path)
    yield c
    c.close()


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_a_rollback_that_reached_its_target_exits_0_naming_it_first_and_the_host_last(cli):
    r = cli("rollout", "gpu02", "--tag", "v0.0.300", "--yes", "--soak", "0")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    first = lines(r.stdout)[0]
    # the checkout's placeholder did not win over the user's inventory, and the first line says which
    assert first.startswith("gpu02: rollout to v0.0.300 (runbook gpu02-glm53-w4afp8-long-context) · inventory "
                            f"{cli.user_inventory} (from $XDG_CONFIG_HOME/orchestrator/hosts.yaml; ./config/hosts.yaml "
                            f"is a placeholder); journal {cli.journal}"), first
    rollout_id = json.loads(cli("runs", "--json").stdout)[0]["run_id"]

    r = cli("rollback", "gpu02", "--yes")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr
    out = lines(r.stdout)
    assert out[0].startswith(f"gpu02: r1, r2 back to {OLD_FILE} @ v0.0.290 (from run {rollout_id}) · inventory "
                             f"{cli.user_inventory}"), out[0]
    assert out[0].endswith(f"journal {cli.journal}")
    assert out[-1].startswith("gpu02 now: r1: model-sg-glm53-w4afp8-tp4-r1 serving; r2: model-sg-glm53-fp8-tp4-r2 serving"), out[-1]
    assert "ROLLED_BACK: the rollback reached its target" in out[-2]
    runs = json.loads(cli("runs", "--json").stdout)
    assert runs[0]["kind"] == "rollback" and runs[0]["outcome"] == "ROLLED_BACK"


def test_rollback_of_a_host_never_rolled_out_is_one_message_with_the_forcing_command(cli):
    r = cli("rollback", "gpu02")
    assert r.returncode == 5
    assert r.stdout == ""
    assert r.stderr.splitlines() == [
        f"orchestrate: gpu02 was never rolled out by this journal ({cli.journal}); nothing to roll back. If its "
        f"replicas must go to another file and tag anyway: `orchestrate rollback gpu02 --to-tag TAG --to-file FILE`"]
    assert [c for c in cli.fleet.calls if c.is_compose_up or c.is_compose_down] == []


def test_the_mutating_commands_take_the_same_flags():
    from orchestrator.cli import _command

    root = _command()
    flags = {name: {o for p in root.get_command(None, name).params for o in p.opts if o.startswith("--")}
             for name in ("rollout", "rollback", "resume")}
    shared = {"--yes", "--soak", "--json", "--inventory", "--server", "--server-ca"}
    for name, have in flags.items():
        assert shared <= have, f"{name} lacks {shared - have}"


def test_resume_keeps_the_runs_own_soak_and_yes_and_says_so(tmp_path):
    cli = Cli(tmp_path, speed="150")  # r2's cold start lasts seconds: long enough to stop the run in it
    try:
        proc = cli.background("rollout", "gpu02", "--tag", "v0.0.300", "--soak", "0", "--yes")
        try:
            run_id = cli.wait_for_state("r2.cold-start")
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=60) == 130
        finally:
            proc.kill()
        # without its own --yes the resumed run would wait for an approval at r2.soak (here: time out),
        # without its --soak 0 it would soak 30 simulated minutes there
        r = cli("resume", run_id, timeout=240)
    finally:
        cli.close()
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr
    out = lines(r.stdout)
    assert out[0].startswith(f"{run_id}: resume of the rollout of gpu02 at r2.cold-start; keeps the run's own options: "
                             f"--soak 0 --yes (give them again to override) · inventory "), out[0]
    soak = out[[i for i, line in enumerate(out) if " r2.soak " in line][0] + 1]
    assert soak.split()[1:3] == ["ok:", "soaked"], soak  # not "ok after 30m0s"
    assert out[-1].endswith("DONE gpu02: every phase passed its gates"), out[-1]


def test_a_halted_run_ends_formatted_with_one_line_per_replica_and_the_next_command(tmp_path):
    cli = Cli(tmp_path, "oom:r1")
    try:
        r = cli("rollout", "gpu02", "--tag", "v0.0.300", "--yes", "--soak", "0")
        run_id = json.loads(cli("runs", "--json").stdout)[0]["run_id"]
    finally:
        cli.close()
    assert r.returncode == 4, r.stdout[-3000:]
    out = lines(r.stdout)
    end = out[[i for i, line in enumerate(out) if "HALTED: r1.cold-start failed" in line][0]:]
    assert end[-1] == f"next: orchestrate resume {run_id} --retry", end[-1]
    assert end[-4:-1] == ["gpu02 now:", "  r1: nothing running", f"  r2: {R2_NEW} serving"], end
    assert all(len(line) <= 120 for line in end[:-4]), [len(x) for x in end]  # not one 1,200-character line


def test_approve_of_a_run_no_process_drives_says_it_needs_resume(cli):
    proc = cli.background("rollout", "gpu02", "--tag", "v0.0.300")
    try:
        run_id = cli.wait_for_state("r2.soak")
    finally:
        proc.kill()  # the runner is gone (SIGKILL: no clean-up)
        proc.wait(timeout=30)
    r = cli("approve", run_id)
    assert r.returncode == 0, r.stderr
    out = lines(r.stdout)
    assert out[0] == f"approved r2.soak of {run_id} (journal {cli.journal})"  # the gate it waits at, never *
    assert out[-1].startswith(f"no process drives {run_id} (") and \
        out[-1].endswith(f"): nothing happens until `orchestrate resume {run_id}` continues it"), out[-1]


def test_abort_during_r1s_cold_start_ends_saying_how_to_finish_the_abort(tmp_path):
    # r1's cold start hangs (30 s of real time at this speed): the abort lands while it lasts
    cli = Cli(tmp_path, "cold-start-hang:r1", speed="100", cold_start_s=600)
    try:
        proc = cli.background("rollout", "gpu02", "--tag", "v0.0.300", "--yes", "--soak", "0")
        try:
            run_id = cli.wait_for_state("r1.cold-start", timeout=180)
            r = cli("abort", run_id)
            assert r.returncode == 0 and r.stdout.startswith(f"abort recorded for {run_id}"), r.stderr
            out, _ = proc.communicate(timeout=180)
        finally:
            proc.kill()
    finally:
        cli.close()
    assert proc.returncode == 4
    end = lines(out)
    assert end[-1] == "next: orchestrate rollback gpu02", end[-6:]
    assert any(line.startswith("to finish the abort: once r1 serves, `orchestrate rollback gpu02` takes the host back")
               for line in end[-6:]), end[-6:]
    assert f"  r2: {R2_NEW} serving" in end


def test_ctrl_c_during_the_demo_says_what_happened(tmp_path):
    # the demo's simulator keeps the suite's log rotation (`--sim-log-lines`, make test-short-logs)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCHESTRATOR_") or k == "ORCHESTRATOR_SIM_LOG_LINES"}
    env["PYTHONFAULTHANDLER"] = "1"  # a demo still running when the bound is up prints every thread's stack (SIGABRT)
    state = tmp_path / "demo"
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator.cli", "demo", "--speed", "50", "--state-dir", str(state)],
                            env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        from orchestrator.journal import SqliteJournal

        def stepped() -> bool:  # the demo's run has taken a step: there is a state it was at
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            if not (state / "journal.sqlite3").is_file():
                return False
            journal = SqliteJournal(state / "journal.sqlite3")
            try:
                runs = journal.list_runs(limit=1)
                return bool(runs and journal.transitions(runs[0].run_id))
            finally:
                journal.close()

        wait_until(stepped, "the demo's run to take its first step")
        proc.send_signal(signal.SIGINT)
        # the bound is generous (the simulator's servers stop one by one on a loaded machine); a demo
        # that went on instead would end its whole rollout with exit 0, which the returncode check names
        try:
            out, err = proc.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            out, err = proc.communicate(timeout=30)
            raise AssertionError(f"the demo had not stopped 180 s after Ctrl-C; its threads:\n{err[-6000:]}") from None
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert lines(out)[0].startswith("simulated gpu02 on loopback")
    [line] = lines(err)
    assert line.startswith("orchestrate: demo stopped by Ctrl-C (run gpu02-") and " was at " in line, line
    assert line.endswith(f"nothing real was touched. Its journal and run log stay in {state}; `orchestrate demo` starts over")


def test_a_placeholder_inventory_is_never_used_for_a_real_host(cli):
    r = cli("rollout", "gpu02", "--tag", "v0.0.300", "--yes", "--inventory", "config/hosts.yaml")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [
        "orchestrate: inventory config/hosts.yaml (from --inventory) is a placeholder for gpu02 "
        "(https://gpu02.example.invalid:8080/ never resolves): pass --inventory with the fleet's inventory, or put it "
        "in ~/.config/orchestrator/hosts.yaml"]
    assert cli.fleet.calls == [] or all(not (c.is_compose_up or c.is_compose_down) for c in cli.fleet.calls)


def test_plan_live_with_a_placeholder_inventory_names_it_at_once(cli):
    r = cli("plan", "gpu02", "--tag", "v0.0.300", "--live", "--inventory", "config/hosts.yaml")
    assert r.returncode == 2 and r.stdout == ""
    [line] = r.stderr.splitlines()
    assert line.startswith("orchestrate: inventory config/hosts.yaml (from --inventory) is a placeholder for gpu02"), line
    assert "try again" not in line
    assert cli.fleet.calls == []


def test_a_placeholder_checkout_inventory_is_still_used_when_it_is_the_only_one(tmp_path, monkeypatch):
    """Precedence only: with no inventory of the user's, the checkout's is what `plan` reads (offline)."""
    from orchestrator.util.settings import Settings

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "none"))
    monkeypatch.delenv("ORCHESTRATOR_INVENTORY", raising=False)
    assert Settings().inventory_choice().source == "./config/hosts.yaml"
    user = tmp_path / "none" / "orchestrator" / "hosts.yaml"
    user.parent.mkdir(parents=True)
    user.write_text("hosts: {}\n")
    choice = Settings().inventory_choice()
    assert choice.path == user and choice.source.endswith("./config/hosts.yaml is a placeholder")


def test_ctrl_c_outside_a_run_is_said_not_silent(monkeypatch, capsys):
    """typer turns a Ctrl-C into a silent exit 130: every command says it stopped."""
    from orchestrator import cli
    from orchestrator.service import startup

    def interrupted(cls, settings):
        raise KeyboardInterrupt

    monkeypatch.setattr(startup.ReadSession, "open", classmethod(interrupted))
    with pytest.raises(SystemExit) as exc:
        cli.main(["runs"])
    assert exc.value.code == 130
    assert capsys.readouterr().err == "orchestrate: stopped by Ctrl-C\n"
