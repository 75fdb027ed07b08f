"""P5 fleet scale: planning 100 hosts, and 20 simulated rollouts at once.

Planning: an inventory of 100 generated hosts (gpu001..gpu100, each its own compose-manager URL,
RAM figure, relay ports) and one runbook file per host (the production runbook with its `hosts`
and `name` changed), as 100 `orchestrate plan` invocations would see them. Timed separately:
`build_plan` alone for the 100 hosts (the goal: <= 1 s in total), and the whole per-host path
(load the inventory once; per host: load and validate its runbook, `compile_rollout`,
`build_plan`, render text, markdown and JSON), with and without `--compose-file` (the compose
check parses the 900-line long-context file each time).

Concurrency: `n` simulated gpu02s (each a `SimFleet` with its own servers and thread) and `n`
rollouts (`admission.new_rollout` + `runner.execute`, each with its own state directory and SQLite
journal) run with `asyncio.gather` in one event loop. Some runs carry an engine fault on r2
(`oom`, `cuda-801`) and roll back. Each run is then read exactly as P1 and P2 read theirs:
orchestrator time per replica and T / M for the runs that complete, and the detection latency of
every cold-start gate (ready lines and failures) and the failure -> first rollback call times,
plus the event-loop lag and the CPU of each side. The soak is overridden and the cold start is
`cold_start_s` so a batch takes a minute or two. Two layouts: `concurrency` puts the simulators
(threads) and the executors in this one process, as the goal states; `concurrency_separate` puts
the simulators in processes of their own (bench.fleet_server), leaving the executors alone here.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from orchestrator.hosts.inventory import load_inventory
from orchestrator.language.machine import compile_rollout
from orchestrator.language.runbook import DEFAULT_RUNBOOK, load_runbook, resolve_runbook_path
from orchestrator.previews.plan import build_plan, render_json, render_markdown, render_text

from bench.harness import SimRun
from bench.loop_lag import with_loop_lag
from bench.p1_overhead import PER_REPLICA_GOAL_S
from bench.run_analysis import detections, rollback_reactions, split
from bench.sim_fixes import label
from bench.stats import summary

COMPOSE_FILE = Path(__file__).resolve().parent.parent / "orchestrator_sim" / "compose" / "prod" / \
    "GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml"


def _generate(tmp: Path, n: int) -> tuple[Path, list[tuple[str, Path]]]:
    hosts = {}
    for i in range(1, n + 1):
        name = f"gpu{i:03d}"
        hosts[name] = {
            "compose_manager_url": f"http://10.0.{i // 250}.{i % 250 + 1}:8080",
            "instance_name": name,
            "model_proxy_address": f"203.0.113.{i % 250 + 1}:8444",
            "inference_endpoint": f"https://{name}.inference.example",
            "soak_relay_base_url": f"http://10.0.{i // 250}.{i % 250 + 1}",
            "soak_relay_port_map": {8008: 8008, 8009: 8009},
            "available_ram_gib": 1223 + i % 7,
            "available_ram_source": f"MemAvailable of {name} at boot",
            "gpus": 8,
        }
    inv = {"dashboard_url": "https://dashboard.example", "model_proxy_peers": {"peer-a": "https://a.example",
                                                                            "peer-b": "https://b.example"},
           "hosts": hosts}
    inv_path = tmp / "hosts.yaml"
    inv_path.write_text(yaml.safe_dump(inv, sort_keys=False))
    base = yaml.safe_load(resolve_runbook_path(DEFAULT_RUNBOOK).read_text())
    books = []
    for name in hosts:
        rb = dict(base, name=f"{name}-glm53-w4afp8-long-context", hosts=[name])
        path = tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump(rb, sort_keys=False))
        books.append((name, path))
    return inv_path, books


def planning(n: int = 100, *, compose_check: bool = True) -> dict[str, Any]:
    from orchestrator.previews.compose_check import check_against_compose_file

    tmp = Path(tempfile.mkdtemp(prefix="bench-p5-plan-"))
    try:
        inv_path, books = _generate(tmp, n)
        # build_plan alone: runbooks loaded and compiled beforehand
        loaded = [(name, load_runbook(str(path))) for name, path in books]
        compiled = [(name, rb, compile_rollout(rb)) for name, rb in loaded]
        t0 = time.perf_counter()
        for name, rb, table in compiled:
            build_plan(rb, table, host=name, tag="v0.0.300")
        build_only = time.perf_counter() - t0

        def whole(compose: bool) -> float:
            t = time.perf_counter()
            inv = load_inventory(inv_path)
            for name, path in books:
                entry = inv.host(name)
                rb = load_runbook(str(path))
                table = compile_rollout(rb)
                new_services = None
                if compose:
                    _, _, new_services = check_against_compose_file(rb, COMPOSE_FILE)
                plan = build_plan(rb, table, host=name, tag="v0.0.300", project=entry.project,
                                  new_file_services=new_services)
                render_text(plan), render_markdown(plan), render_json(plan)
            return time.perf_counter() - t

        end_to_end = whole(False)
        with_compose = whole(True) if compose_check else None
        steps = len(build_plan(compiled[0][1], compiled[0][2], host=compiled[0][0], tag="v0.0.300").steps)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {
        "hosts": n,
        "steps_per_plan": steps,
        "build_plan_total_s": build_only,
        "build_plan_per_host_ms": build_only / n * 1000,
        "end_to_end_total_s": end_to_end,
        "end_to_end_with_compose_check_total_s": with_compose,
        "goal": {"build_plan_met": build_only <= 1.0},
    }


async def _batch(runs: list[SimRun], soak: float) -> tuple[list[Any], dict[str, Any]]:
    async def one(sim: SimRun) -> Any:
        run, rb, table = sim.new_run()
        out = await sim.execute(run, rb, table, soak=soak)
        return out, table
    return await with_loop_lag(asyncio.gather(*(one(s) for s in runs)))


def concurrency(*, n: int = 20, speed: float = 20.0, cold_start_s: float = 600.0, soak: float = 60.0,
                faults: list[str] | None = None, fixed: bool = True, progress: Any = None) -> dict[str, Any]:
    plan = _fault_plan(n, faults if faults is not None else ["oom:r2", "cuda-801:r2"])
    tmp = Path(tempfile.mkdtemp(prefix="bench-p5-"))
    sims = [SimRun(tmp / f"host{i:02d}", speed=speed, cold_start_s=cold_start_s, faults=plan[i], seed=100 + i,
                   fixed=fixed) for i in range(n)]
    t0 = time.monotonic()
    opened: list[SimRun] = []
    try:
        for s in sims:
            s.__enter__()
            opened.append(s)
        if progress is not None:
            progress(f"P5 {n} simulated hosts up; {n} rollouts running at x{speed:g}")
        t1 = time.monotonic()
        cpu_main0, cpu_proc0 = time.thread_time(), time.process_time()
        results, lag = asyncio.run(_batch(sims, soak))
        batch_real = time.monotonic() - t1
        cpu_main, cpu_proc = time.thread_time() - cpu_main0, time.process_time() - cpu_proc0
        violations = [v for s in sims for v in s.fleet.check_invariants()]
    finally:
        for s in opened:
            s.__exit__(None, None, None)
        shutil.rmtree(tmp, ignore_errors=True)
    res = _analyse(results, plan, speed, soak)
    res.update({"runs": n, "speed": speed, "cold_start_sim_s": cold_start_s, "soak_override_s": soak,
                "simulator": label(fixed), "layout": f"one process: {n} simulators (threads) and {n} executors",
                "invariant_violations": violations, "batch_real_s": batch_real,
                "cpu_orchestrator_thread_s": cpu_main, "cpu_simulator_threads_s": cpu_proc - cpu_main,
                "setup_real_s": t1 - t0, "event_loop": lag, "capacity": _capacity(n, speed, batch_real, cpu_main)})
    return res


def _analyse(results: list[tuple[Any, Any]], plan: list[list[str]], speed: float, soak: float) -> dict[str, Any]:
    per_run = []
    dets: list[float] = []
    waits: list[float] = []
    det_by_kind: dict[str, list[float]] = {}
    reactions: list[float] = []
    for (out, table), f in zip(results, plan):
        sp = split(out, table, speed, soak_override=soak).as_dict()
        for d in detections(out, table):
            if d.gate.endswith("cold-start") or d.gate.endswith("cold-start-old"):
                dets.append(d.latency)
                det_by_kind.setdefault(d.kind, []).append(d.latency)
                if d.detecting_call_at is not None:
                    waits.append(d.detecting_call_at - d.event_at)
        for r in rollback_reactions(out, table):
            if r.first_rollback_call_at is not None:
                reactions.append(r.first_rollback_call_at - r.failure_at)
        per_run.append({"faults": f, "outcome": out.final.outcome, "total_real": sp["total_real"],
                        "orchestrator_real": sp["orchestrator_real"],
                        "orchestrator_per_replica_real": sp["orchestrator_per_replica_real"],
                        "http_wait_per_replica_real": sp["http_wait_per_replica_real"],
                        "own_work_per_replica_real": sp["own_work_per_replica_real"],
                        "ratio": sp["ratio"]})
    happy = [r for r in per_run if not r["faults"]]
    res: dict[str, Any] = {
        "outcomes": {o: sum(1 for r in per_run if r["outcome"] == o) for o in sorted({r["outcome"] for r in per_run})},
        "expected_outcomes_met": all(r["outcome"] == ("ROLLED_BACK" if r["faults"] else "DONE") for r in per_run),
        "orchestrator_per_replica_real": summary([r["orchestrator_per_replica_real"] for r in happy]),
        "http_wait_per_replica_real": summary([r["http_wait_per_replica_real"] for r in happy]),
        "own_work_per_replica_real": summary([r["own_work_per_replica_real"] for r in happy]),
        "ratio": summary([r["ratio"] for r in happy]),
        "detection": summary(dets),
        "detection_by_kind": {k: summary(v) for k, v in det_by_kind.items()},
        "detection_wait_part": summary(waits),
        "detection_processing_part": summary([d - w for d, w in zip(dets, waits)]) if len(waits) == len(dets) else None,
        "failure_to_first_rollback_call": summary(reactions),
        "per_run": per_run,
    }
    # P1's goal per replica, P2's detection p95 2 s and failure -> first rollback call p95 3 s
    res["goal"] = {
        "per_replica_limit_s": PER_REPLICA_GOAL_S,
        "per_replica_met": bool(happy) and max(r["orchestrator_per_replica_real"] for r in happy) <= PER_REPLICA_GOAL_S,
        "ratio_met": bool(happy) and max(r["ratio"] for r in happy) <= 1.01,
        "detection_p95_met": res["detection"]["p95"] is not None and res["detection"]["p95"] <= 2.0,
        "rollback_call_p95_met": None if res["failure_to_first_rollback_call"]["p95"] is None
        else res["failure_to_first_rollback_call"]["p95"] <= 3.0,
    }
    return res


def _capacity(n: int, speed: float, batch_real: float, cpu_s: float) -> dict[str, Any]:
    """What the orchestrator's CPU says, independent of the machine's load: CPU per replica (every
    poll and probe of the waits included), the cores the batch kept busy, and the same batch at x1.

    Polls and probes come at fixed simulated intervals, so a batch does the same work at any
    compression; at xS it is done in 1/S of the real time. Its demand at x1 is therefore the
    measured demand / S, and 2 cores carry 2 / (demand at x1 per rollout) rollouts at x1 (the
    orchestrator alone; the simulators are not part of a real deployment)."""
    demand = cpu_s / batch_real if batch_real > 0 else None
    per_rollout_x1 = demand / speed / n if demand else None
    return {"cpu_per_replica_s": cpu_s / (2 * n), "cpu_cores_busy": demand,
            "cpu_cores_at_x1": demand / speed if demand else None,
            "rollouts_two_cores_carry_at_this_speed": 2 / (demand / n) if demand else None,
            "rollouts_two_cores_carry_at_x1": 2 / per_rollout_x1 if per_rollout_x1 else None}


def _fault_plan(n: int, faults: list[str]) -> list[list[str]]:
    plan = []
    for i in range(n):
        # about one run in seven carries an engine fault on r2
        f = faults[(i // 7) % len(faults)] if faults and i % 7 == 6 else None
        plan.append([f] if f else [])
    return plan


def concurrency_separate(*, n: int = 20, speed: float = 20.0, cold_start_s: float = 600.0, soak: float = 60.0,
                         faults: list[str] | None = None, sim_processes: int = 2, progress: Any = None) -> dict[str, Any]:
    """The same batch, with the n simulators in one process of their own (bench.fleet_server) and the
    n executors alone in this one: what one orchestrator process does with 20 rollouts."""
    import json
    import os
    import signal
    import subprocess
    import sys

    from orchestrator.hosts.clients.retry import RetryPolicy
    from orchestrator.service.admission import new_rollout
    from orchestrator.service.demo import DEMO_HOST, DEMO_TAG
    from orchestrator.service.session import Session
    from orchestrator.util.settings import Settings
    from orchestrator_sim import RecordedCall

    from bench.harness import RemoteSimClock, execute_timed
    from bench.http_timing import HttpTimings
    from bench.p4_idle import REPO, _env
    from bench.sim_events import SimEvent

    plan = _fault_plan(n, faults if faults is not None else ["oom:r2", "cuda-801:r2"])
    tmp = Path(tempfile.mkdtemp(prefix="bench-p5s-"))
    groups = [list(range(n))[k::sim_processes] for k in range(sim_processes)]
    servers = [subprocess.Popen([sys.executable, "-m", "bench.fleet_server", "--state-dir", str(tmp / f"sim{k}"),
                                 "--hosts", str(len(g)), "--speed", str(speed), "--cold-start", str(cold_start_s),
                                 "--faults", json.dumps([plan[i] for i in g])], cwd=REPO, env=_env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
               for k, g in enumerate(groups)]
    sessions: list[Session] = []
    server_cpu = 0.0
    hosts: list[dict[str, Any]] = [{} for _ in range(n)]
    try:
        deadline = time.monotonic() + 120
        for k, (server, g) in enumerate(zip(servers, groups)):
            ready = tmp / f"sim{k}" / "ready"
            while not ready.exists():
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("fleet server did not start: " + (server.stderr.read().decode() if server.stderr else ""))
                time.sleep(0.05)
            for j, h in zip(g, json.loads(ready.read_text())["hosts"]):
                hosts[j] = h
        info = {"hosts": hosts}
        clocks = []
        for i, h in enumerate(info["hosts"]):
            env = dict(line.split("=", 1) for line in Path(h["dir"], "sim.env").read_text().splitlines() if line)
            fields = {k.removeprefix("ORCHESTRATOR_").lower(): v for k, v in env.items()}
            settings = Settings(_env_file=None, state_dir=tmp / f"orch{i:02d}", poll_interval=10.0, database_url="",
                                **fields)
            clock = RemoteSimClock(h["origin"], speed)
            clocks.append(clock)
            sessions.append(Session.open(settings, clock=clock, retry=RetryPolicy(deadline_s=900, busy_wait_s=5)))
        if progress is not None:
            progress(f"P5 {n} simulated hosts up in {sim_processes} processes; {n} rollouts running at x{speed:g}")

        async def batch() -> list[Any]:
            async def one(i: int) -> Any:
                run, rb, table = new_rollout(sessions[i], DEMO_HOST, DEMO_TAG, DEFAULT_RUNBOOK)
                return await execute_timed(sessions[i], clocks[i], run, rb, table, soak=soak), table
            return await with_loop_lag(asyncio.gather(*(one(i) for i in range(n))))

        t1 = time.monotonic()
        c0 = time.process_time()
        with HttpTimings():
            results, lag = asyncio.run(batch())
        batch_real = time.monotonic() - t1
        orch_cpu = time.process_time() - c0
    finally:
        for s in sessions:
            s.close()
        for server in servers:
            server.send_signal(signal.SIGTERM)
        for server in servers:
            try:
                _, status, usage = os.wait4(server.pid, 0)
                server.returncode = os.waitstatus_to_exitcode(status)
                server_cpu += usage.ru_utime + usage.ru_stime
            except ChildProcessError:
                pass
    violations: list[str] = []
    for i, (out, _table) in enumerate(results):
        rec = json.loads((Path(hosts[i]["dir"]) / "record.json").read_text())
        out.calls = [RecordedCall.from_json(c) for c in rec["calls"]]
        out.events = [SimEvent(**e) for e in rec["events"]]
        out.http = HttpTimings.for_ports(set(info["hosts"][i]["ports"]), out.real_start, out.real_end)
        violations += rec["invariant_violations"]
    shutil.rmtree(tmp, ignore_errors=True)
    res = _analyse(results, plan, speed, soak)
    res.update({"runs": n, "speed": speed, "cold_start_sim_s": cold_start_s, "soak_override_s": soak,
                "simulator": label(True), "layout": f"{n} simulators in {sim_processes} processes of their own; the {n} executors alone in this one",
                "invariant_violations": violations, "batch_real_s": batch_real,
                "cpu_orchestrator_process_s": orch_cpu, "cpu_simulator_process_s": server_cpu, "event_loop": lag,
                "capacity": _capacity(n, speed, batch_real, orch_cpu)})
    return res


def run(*, quick: bool = False, smoke: bool = False, progress: Any = None) -> dict[str, Any]:
    from bench.sim_fixes import idle_cpu_fraction

    t0 = time.monotonic()
    hosts = 5 if smoke else 100
    plan_res = planning(hosts, compose_check=not quick)
    if progress is not None:
        progress(f"P5 planning {hosts} hosts: build_plan {plan_res['build_plan_total_s']:.3f} s")
    n = 2 if smoke else 5 if quick else 20
    idle = {"fleets": n, "as_shipped": idle_cpu_fraction(fleets=n, fixed=False, seconds=0.5 if smoke else 2.0),
            "fixed": idle_cpu_fraction(fleets=n, fixed=True, seconds=0.5 if smoke else 2.0)}
    layouts = []
    if smoke:  # tiny: two rollouts, the simulators in a process of their own
        layouts.append(concurrency_separate(n=n, speed=1500.0, cold_start_s=300.0, soak=0.0, sim_processes=1,
                                            faults=["oom:r2"], progress=progress))
    elif quick:
        layouts.append(concurrency(n=n, speed=60.0, cold_start_s=300.0, soak=0.0, progress=progress))
    else:
        layouts.append(concurrency(n=n, speed=20.0, cold_start_s=300.0, soak=0.0, progress=progress))
        layouts.append(concurrency_separate(n=n, speed=20.0, cold_start_s=300.0, soak=0.0, sim_processes=2,
                                            progress=progress))
        # the same layout with one rollout alone: its CPU per replica is the reference the 20 are read against
        layouts.append(concurrency_separate(n=1, speed=20.0, cold_start_s=300.0, soak=0.0, sim_processes=1,
                                            faults=[], progress=progress))
    for conc in layouts:
        if progress is not None:
            progress(f"P5 {conc['layout']}: own work/replica p50 {conc['own_work_per_replica_real']['p50']:.2f} s, "
                     f"detection p95 {conc['detection']['p95']:.1f} s")
    return {"planning": plan_res, "simulator_idle_cpu_of_one_core": idle, "concurrency": layouts,
            "real_s": time.monotonic() - t0}
