"""bench/results/latest.md from the results dict (the same dict is written as latest.json)."""

from __future__ import annotations

from typing import Any


def f(x: Any, digits: int = 2) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def met(*flags: Any) -> str:
    vals = [bool(x) for x in flags if x is not None]
    if not vals:
        return "–"
    return "**yes**" if all(vals) else "**no**"


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def _p1_variant(r: dict[str, Any]) -> str:
    name = "simulator as shipped" if "as shipped" in r["simulator"] else "simulator fixed"
    return f"{name}, x{r['speed']:g} (cold start {r['cold_start_real_s']:g} s real)"


def summary_rows(res: dict[str, Any]) -> list[list[Any]]:
    rows: list[list[Any]] = []
    p1 = res.get("P1")
    if p1 and "runs" in p1:
        for r in p1["runs"]:
            v = _p1_variant(r)
            rows.append(["P1", f"T / M ≤ 1.01 — {v}", f"{f(r['ratio'], 3)} (polling alone adds {f((r['polling_real']) / r['mandatory_real'] * 100, 2)} %)", met(r["goal"]["ratio_met"])])
            if "cpu_per_replica_met" in r["goal"]:
                rows.append(["P1", f"orchestrator's own CPU ≤ {f(r['goal']['per_replica_limit_s'], 0)} s per replica, outside the waiting gates — {v}",
                             f"{f(r.get('cpu_outside_waits_per_replica_s'))} s (with the cold-start and soak polls {f(r.get('cpu_per_replica_s'))} s)",
                             met(r["goal"]["cpu_per_replica_met"])])
            rows.append(["P1", f"orchestrator time (wall, T − M) ≤ {f(r['goal']['per_replica_limit_s'], 0)} s per replica — {v}", f"{f(r['orchestrator_per_replica_real'])} s (own work {f(r['own_work_per_replica_real'])} s, HTTP wait {f(r['http_wait_per_replica_real'])} s); "
                         f"executor CPU {f(r.get('cpu_per_replica_s'))} s per replica, {f(r.get('cpu_outside_waits_per_replica_s'))} s outside the waiting gates", met(r["goal"]["per_replica_met"])])
    p2 = res.get("P2")
    if p2 and "main" in p2:
        m = p2["main"]
        d = m["detection"]
        b = p2.get("before")
        was = (f" (before, poll only: p95 {f(b['detection']['p95'])} s)" if b else "")
        rows.append(["P2", f"detection p95 ≤ {f(m['goal']['limit_s'], 0)} s (poll {f(m['poll_interval_s'], 0)} s, log probe "
                     f"{f(m.get('log_probe_interval_s'))} s) — {m['trials']} trials at x{f(m['measure_speed'], 0)}",
                     f"p50 {f(d['p50'])} s, p95 {f(d['p95'])} s, max {f(d['max'])} s" + was, met(m["goal"]["detection_p95_met"])])
        rb = m["failure_to_first_rollback_call"]
        was = (f" (before: p95 {f(b['failure_to_first_rollback_call']['p95'])} s)" if b else "")
        rows.append(["P2", f"failure → first rollback call p95 ≤ {f(m['goal'].get('rollback_limit_s', m['goal']['limit_s']), 0)} s — {rb['n']} failures",
                     f"p50 {f(rb['p50'])} s, p95 {f(rb['p95'])} s" + was, met(m["goal"]["rollback_call_p95_met"])])
        if "as_shipped_sample" in p2:
            a = p2["as_shipped_sample"]
            rows.append(["P2", f"detection p95 — {a['trials']} trials, simulator as shipped",
                         f"p50 {f(a['detection']['p50'])} s, p95 {f(a['detection']['p95'])} s", met(a["goal"]["detection_p95_met"])])
    p3 = res.get("P3")
    if p3 and "cases" in p3:
        rates = [k for k in p3["cases"] if k.endswith("lines/s")]  # the follower as it is
        rows.append(["P3", "bytes fetched ≤ 3 × bytes of the new lines at " + ", ".join(rates),
                     " / ".join(f(p3["cases"][k]["bytes_ratio"]) for k in rates),
                     met(*(p3["goal"][k]["bytes_ratio_met"] for k in rates))])
        rows.append(["P3", "lines missed = 0 (gaps reported)", " / ".join(f"{p3['cases'][k]['missed']} ({p3['cases'][k]['gaps']})" for k in rates),
                     met(*(p3["goal"][k]["no_line_missed"] for k in rates))])
        for k, c in p3["cases"].items():
            if k in rates:
                continue
            rows.append(["P3", f"(extra case) {k}", f"ratio {f(c['bytes_ratio'])}, missed {c['missed']}, gaps {c['gaps']}",
                         met(p3["goal"][k]["bytes_ratio_met"], p3["goal"][k]["no_line_missed"])])
    if p3 and "cold_start_gate" in p3:
        for kind, cases in p3["cold_start_gate"].items():
            b, a = list(cases.values())[0], list(cases.values())[-1]
            rows.append(["P3", f"cold-start gate ({kind}): log bytes per minute ≤ before's, line read latency",
                         f"{f(a['log_bytes_per_min'] / 1000, 1)} KB/min (before {f(b['log_bytes_per_min'] / 1000, 1)}); "
                         f"latency p95 {f(a['line_latency']['p95'], 1)} s (before {f(b['line_latency']['p95'], 1)}); "
                         f"docker/ps {f(a['ps_calls_per_min'], 1)}/min (before {f(b['ps_calls_per_min'], 1)})",
                         met(a["log_bytes_per_min"] <= b["log_bytes_per_min"] and a["ps_calls_per_min"] <= b["ps_calls_per_min"] * 1.01)])
    p4 = res.get("P4")
    if p4 and "cpu_s_per_min" in p4:
        rows.append(["P4", f"≤ 0.3 CPU-s per minute waiting (real clock, poll {f(p4['poll_interval_s'], 0)} s, {f(p4['window_s'], 0)} s window)",
                     f"{f(p4['cpu_s_per_min'], 3)} CPU-s/min ({f(p4['cpu_ms_per_poll'], 1)} ms per poll)", met(p4["goal"]["cpu_met"])])
        rows.append(["P4", "≤ 80 MB peak RSS", f"{f(p4['peak_rss_mib'], 1)} MiB", met(p4["goal"]["rss_met"])])
    p5 = res.get("P5")
    if p5 and "planning" in p5:
        pl = p5["planning"]
        rows.append(["P5", "build_plan for 100 hosts ≤ 1 s", f"{f(pl['build_plan_total_s'], 3)} s (whole per-host path {f(pl['end_to_end_total_s'])} s)", met(pl["goal"]["build_plan_met"])])
        for c in p5.get("concurrency", []):
            g = c["goal"]
            rows.append(["P5", f"{c['runs']} concurrent rollouts, P1 per replica ≤ {f(g['per_replica_limit_s'], 0)} s — {c['layout']}",
                         f"orchestrator time p50 {f(c['orchestrator_per_replica_real']['p50'])} s, max {f(c['orchestrator_per_replica_real']['max'])} s; own work max {f(c['own_work_per_replica_real']['max'])} s", met(g["per_replica_met"])])
            cap = c.get("capacity")
            if cap:
                rows.append(["P5", f"{c['runs']} concurrent rollouts, orchestrator CPU per replica (load-robust; every poll and probe included) — {c['layout']}",
                             f"{f(cap['cpu_per_replica_s'])} s; {f(cap['cpu_cores_busy'])} cores busy at x{f(c['speed'], 0)} "
                             f"→ {f(cap['cpu_cores_at_x1'], 3)} at x1; 2 cores carry {f(cap['rollouts_two_cores_carry_at_this_speed'], 0)} rollouts at x{f(c['speed'], 0)}, "
                             f"{f(cap['rollouts_two_cores_carry_at_x1'], 0)} at x1", "–"])
            rows.append(["P5", f"{c['runs']} concurrent rollouts, P1 T / M ≤ 1.01 — {c['layout']}",
                         f"p50 {f(c['ratio']['p50'], 3)}, max {f(c['ratio']['max'], 3)}", met(g["ratio_met"])])
            rows.append(["P5", f"{c['runs']} concurrent rollouts, P2 detection p95 ≤ 2 s, rollback call p95 ≤ 3 s — {c['layout']}",
                         f"p50 {f(c['detection']['p50'])} s, p95 {f(c['detection']['p95'])} s (n={c['detection']['n']}); failure → rollback call p95 {f(c['failure_to_first_rollback_call']['p95'])} s",
                         met(g["detection_p95_met"], g["rollback_call_p95_met"])])
    p6 = res.get("P6")
    if p6 and "rows" in p6:
        for r in p6["rows"]:
            if r["limit_ratio"] is None:
                continue
            rows.append(["P6", f"`orchestrate {r['command']}` ≤ {f(r['limit_ratio'], 0)} × `python -c pass` (CPU, median of {p6['rounds']})",
                         f"{f(r['cpu_ratio'], 1)} × ({f(r['cpu_s'] * 1000, 0)} ms CPU; wall {f(r['wall_ratio'], 1)} ×)", met(r["met"])])
    return rows


def render(res: dict[str, Any]) -> str:
    m = res["machine"]
    out = [
        "# Benchmark results (`python -m bench`)",
        "",
        f"Run {m['date']} on `{m['platform']}` ({m['machine']}), {m['cpu_count']} CPUs, "
        f"{m['python_implementation']} {m['python']}, httpx {m['httpx']}; commit {m['git_commit']}"
        f"{' (work tree modified)' if m.get('git_worktree_dirty') else ''}; mode **{res['mode']}**, "
        f"{f(res['duration_s'], 0)} s in all. Definitions, method and explanations: docs/performance.md.",
        "",
        "## Goals",
        "",
    ]
    out += _table(["", "Goal", "Measured", "Met"], summary_rows(res))
    errors = {k: v["error"] for k, v in res.items() if isinstance(v, dict) and "error" in v}
    if errors:
        out += ["", "Errors: " + "; ".join(f"{k}: {v}" for k, v in errors.items())]

    p1 = res.get("P1")
    if p1 and "runs" in p1:
        out += ["", "## P1 overhead (full gpu02 rollout, production runbook, poll 10 s, soak 30 min)", ""]
        rows = []
        for r in p1["runs"]:
            rows.append([_p1_variant(r), r["outcome"], f(r["total_real"]), f(r["mandatory_real"]), f(r["orchestrator_real"]),
                         f(r["polling_real"], 3), f(r["http_wait_real"]), f(r["rest_real"]), f(r["orchestrator_per_replica_real"]),
                         f(r["ratio"], 3), f(r.get("projected_ratio_at_speed_1"), 4), f(r["thread_cpu_s"]), r["calls"]])
        out += _table(["variant", "outcome", "T s", "M s", "O = T−M s", "polling s", "HTTP wait s", "own work s",
                       "O / replica s", "T / M", "T / M projected at x1", "orchestrator CPU s", "calls"], rows)
        r0 = next((r for r in p1["runs"] if "as shipped" not in r["simulator"]), p1["runs"][0])
        mk = r0["by_kind_real"]
        out += ["", f"Mandatory waits of the run with the simulator fixed (real s; kinds overlap slightly): compose-manager operations {f(mk['compose'])}, "
                f"cold starts {f(mk['cold_start'])}, discovery {f(mk['discovery'])}, soak {f(mk['soak'])}, one-shot runs (perception check) {f(mk.get('oneshot'))}. "
                "Polling latency by gate (simulation s): " + ", ".join(f"{g} {f(v, 1)}" for g, v in r0["polling_latency_by_gate_sim_s"].items()) + "."]
        out += ["", "Orchestrator time by step (same run, real ms, largest first):", ""]
        out += _table(["step", "orchestrator ms", "wall ms", "executor CPU ms (waits included)", "calls"],
                      [[s["state"], f(s["orchestrator_real_s"] * 1000, 1), f(s["wall_real_s"] * 1000, 1),
                        f((s.get("cpu_s") or 0) * 1000, 1) if s.get("cpu_s") is not None else "–", s["calls"]]
                       for s in r0["top_steps"][:12]])
        d = p1.get("diagnostics", {})
        if d:
            out += ["", "Diagnostics: one request to the in-process simulator "
                    f"{f(d['simulator_request_ms_as_shipped'], 1)} ms as shipped vs {f(d['simulator_request_ms_fixed'], 1)} ms with TCP_NODELAY."]

    p2 = res.get("P2")
    if p2 and "main" in p2:
        out += ["", "## P2 detection latency (simulation seconds; poll interval 10 s)", ""]
        rows = []
        for name, m2 in [("after: log probes", p2["main"]), ("before: poll only", p2.get("before")),
                         ("simulator as shipped", p2.get("as_shipped_sample"))]:
            if not m2:
                continue
            for kind, dk in [("all", m2["detection"]), *m2["detection_by_kind"].items()]:
                rows.append([name, kind, dk["n"], f(dk["p50"]), f(dk["p95"]), f(dk["max"])])
        out += _table(["sample", "event", "n", "p50 s", "p95 s", "max s"], rows)
        for label, mm in [("after", p2["main"]), ("before", p2.get("before"))]:
            if mm:
                out += ["", f"{label}: wait for the read that saw it p50 {f(mm['wait_part']['p50'])} / p95 {f(mm['wait_part']['p95'])} s, "
                        f"that read's processing p95 {f(mm['processing_part']['p95'])} s; failure → first rollback call p50 "
                        f"{f(mm['failure_to_first_rollback_call']['p50'])} / p95 {f(mm['failure_to_first_rollback_call']['p95'])} s."]
        mm = p2["main"]
        out += ["", f"Setup at x{f(mm['setup_speed'], 0)}, measured window at x{f(mm['measure_speed'], 0)}. "
                f"Of the detection latency (simulator fixed): waiting for the next poll p50 {f(mm['wait_part']['p50'])} s / p95 {f(mm['wait_part']['p95'])} s; "
                f"the detecting poll's own processing p50 {f(mm['processing_part']['p50'])} s / p95 {f(mm['processing_part']['p95'])} s. "
                f"Failure → first rollback call p50 {f(mm['failure_to_first_rollback_call']['p50'])} s / p95 {f(mm['failure_to_first_rollback_call']['p95'])} s; "
                f"→ first rollback compose call p95 {f(mm['failure_to_first_rollback_effect']['p95'])} s. "
                f"Trials discarded and replaced (slow window started late): {len(mm.get('discarded_trials', []))}. "
                f"Outcomes: " + ", ".join(f"{k} {'/'.join(v)}" for k, v in mm["outcomes"].items()) + "."]

    p3 = res.get("P3")
    if p3 and "cases" in p3:
        out += ["", f"## P3 log-tail cost (one poll per {f(p3['poll_interval_s'], 0)} s, {f(p3['minutes'], 0)} min per case)", ""]
        rows = [[k, c["new_lines"], f(c["bytes_ratio"]), f(c["lines_fetched_per_new_line"]), f(c["bytes_fetched_per_new_line"], 0),
                 f(c["fetches_per_poll"]), c["missed"], c["duplicated"], c["gaps"], f(c["cpu_ms_per_poll"])] for k, c in p3["cases"].items()]
        out += _table(["case", "new lines", "bytes fetched / new bytes", "lines fetched / new line", "bytes fetched / new line",
                       "fetches / poll", "missed", "duplicated", "gaps", "follower CPU ms / poll"], rows)

    p4 = res.get("P4")
    if p4 and "cpu_s_per_min" in p4:
        out += ["", "## P4 idle cost (orchestrator process alone; real clock; engine in a 50-min cold start)", ""]
        out += _table(["window s", "CPU s", "CPU-s / min", "polls", "CPU ms / poll", "calls", "RSS after imports MiB",
                       "RSS window start → end MiB", "peak RSS MiB", "simulator process CPU s"],
                      [[f(p4["window_s"], 1), f(p4["cpu_s"], 3), f(p4["cpu_s_per_min"], 3), p4["polls_in_window"], f(p4["cpu_ms_per_poll"], 1),
                        ", ".join(f"{k} {v}" for k, v in p4["calls_in_window"].items()), f(p4["rss_after_imports_mib"], 1),
                        f"{f(p4['rss_window_start_mib'], 1)} → {f(p4['rss_window_end_mib'], 1)}", f(p4["peak_rss_mib"], 1),
                        f(p4["simulator_process_cpu_s"])]])

    p5 = res.get("P5")
    if p5 and "planning" in p5:
        pl = p5["planning"]
        out += ["", "## P5 fleet", "", f"Planning {pl['hosts']} generated hosts ({pl['steps_per_plan']} steps per plan):", ""]
        out += _table(["build_plan only s", "per host ms", "load runbook + compile + build + render ×3 s", "… + compose-file check s"],
                      [[f(pl["build_plan_total_s"], 3), f(pl["build_plan_per_host_ms"], 2), f(pl["end_to_end_total_s"]),
                        f(pl["end_to_end_with_compose_check_total_s"])]])
        idle = p5.get("simulator_idle_cpu_of_one_core")
        if idle:
            out += ["", f"{idle['fleets']} idle simulated hosts in one process use {f(idle['as_shipped'] * 100, 0)} % of a core as shipped "
                    f"(5 ms tick each), {f(idle['fixed'] * 100, 0)} % with a 50 ms tick."]
        rows = []
        for c in p5.get("concurrency", []):
            lag = c.get("event_loop", {})
            cpu = (f"orch {f(c.get('cpu_orchestrator_thread_s', c.get('cpu_orchestrator_process_s')), 1)} / "
                   f"sim {f(c.get('cpu_simulator_threads_s', c.get('cpu_simulator_process_s')), 1)}")
            rows.append([c["layout"], f"x{f(c['speed'], 0)}", ", ".join(f"{k} {v}" for k, v in c["outcomes"].items()), f(c["batch_real_s"], 0),
                         f"{f(c['orchestrator_per_replica_real']['p50'])} / {f(c['orchestrator_per_replica_real']['max'])}",
                         f"{f(c['own_work_per_replica_real']['p50'])} / {f(c['own_work_per_replica_real']['max'])}",
                         f(c["http_wait_per_replica_real"]["p50"]),
                         f"{f(c['ratio']['p50'], 3)} / {f(c['ratio']['max'], 3)}",
                         f"{f(c['detection']['p50'])} / {f(c['detection']['p95'])} / {f(c['detection']['max'])}",
                         f(c["failure_to_first_rollback_call"]["p95"]), cpu,
                         f"{f(lag.get('lag_ms', {}).get('p50'), 1)} / {f(lag.get('lag_ms', {}).get('p95'), 1)} / {f(lag.get('max_lag_first_10s_ms'), 0)} / {f(lag.get('time_lagging_over_50ms_s'), 1)}",
                         f"{f((c.get('detection_wait_part') or {}).get('p95'))} / {f((c.get('detection_processing_part') or {}).get('p95'))}"])
        out += ["", "Concurrent rollouts (happy runs for P1 columns; every cold-start gate for detection):", ""]
        out += _table(["layout", "speed", "outcomes", "batch s", "O / replica p50 / max s", "own work / replica p50 / max s",
                       "HTTP wait / replica p50 s", "T / M p50 / max", "detection p50 / p95 / max s", "failure → rollback call p95 s",
                       "CPU s", "loop lag p50 / p95 / max in first 10 s ms / total lag over 50 ms s",
                       "detection wait / processing part p95 s"], rows)
    p3 = res.get("P3")
    if p3 and "cold_start_gate" in p3:
        out += ["", "## P3 the cold-start gate's reads of the simulated engine (virtual time, no sockets)", ""]
        rows = []
        for kind, cases in p3["cold_start_gate"].items():
            for label, c in cases.items():
                ll = c["line_latency"]
                rows.append([kind, label, f(c["minutes"], 1), c["reads"], c["probes"], f(c["log_bytes_per_min"] / 1000, 1),
                             f(c["probe_bytes_per_min"] / 1000, 1), f(c["ps_calls_per_min"], 2), f(c["ps_bytes_per_min"] / 1000, 1),
                             f"{f(ll['p50'], 1)} / {f(ll['p95'], 1)} / {f(ll['max'], 1)}"])
        out += _table(["run", "policy", "cold start min", "log reads", "probes", "log KB/min (probes incl.)", "probe KB/min",
                       "docker/ps per min", "docker/ps KB/min", "line read latency p50 / p95 / max s"], rows)

    p6 = res.get("P6")
    if p6 and "rows" in p6:
        out += ["", f"## P6 start-up (each its own process; median of {p6['rounds']} rounds; load average "
                f"{', '.join(f(x, 1) for x in p6['load_avg'])})", ""]
        out += _table(["command", "CPU ms", "× python -c pass (CPU)", "wall ms", "× python -c pass (wall)", "goal"],
                      [[r["command"], f(r["cpu_s"] * 1000, 0), f(r["cpu_ratio"], 1), f(r["wall_s"] * 1000, 0),
                        f(r["wall_ratio"], 1), f"≤ {f(r['limit_ratio'], 0)} ×" if r["limit_ratio"] else "–"] for r in p6["rows"]])

    return "\n".join(out) + "\n"
