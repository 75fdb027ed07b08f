"""The engines' cold start on the simulated host: sglang's milestones one event at a time (args,
rank initialisation, weight loading, KV cache, HiCache budget, CUDA graphs, ready), the engine
faults that break it (OOM, dist-store error, restart loop, CUDA 801, wrong budget, a hang), and the
log noise of a ready engine."""

from __future__ import annotations

import re
from datetime import datetime

from orchestrator_sim.host import sglang_log
from orchestrator_sim.host.containers import SERVED_MODEL, Container
from orchestrator_sim.host.hicache_budget import RESERVE_BYTES, BudgetError, resolve_budget
from orchestrator_sim.host.state import NOISE_INTERVAL_S, HostState


class HostEngines(HostState):
    """An engine container's process, from start to ready (HostCore's `_start` begins it)."""

    def _engine_step(self, c: Container, run: int, index: int) -> None:
        if c.run != run or c.state != "running" or c.engine is None:
            return
        step, frac = sglang_log.MILESTONES[index]
        ts = self.wall()
        fault = c.engine.fault
        if step == "dist" and fault == "dist-store-error":  # the ranks hang: no exit, no more lines
            dist = re.search(r"--dist-init-addr\s+(\S+)", c.command)
            self._append(c, sglang_log.dist_lines(ts, self.rng)[:4])
            self._append(c, sglang_log.dist_store_error_lines(ts, dist.group(1) if dist else ""))
            return
        if step == "dist" and fault == "restart-loop":
            self._append(c, sglang_log.dist_lines(ts, self.rng)[:4] + sglang_log.nccl_error_lines(ts))
            self._exit(c, 1)
            return
        if step == "load_begin" and any(  # another engine still holds one of this engine's GPUs
            o is not c and o.engine is not None and set(o.gpus) & set(c.gpus) and o.state == "running"
            for o in self._containers.values()
        ):
            self._append(c, sglang_log.gpu_busy_oom_lines(ts))
            self._exit(c, 1)
            return
        if step == "hicache":
            if c.engine.hicache and not self._engine_hicache(c, ts):
                return
        elif step == "graph_end" and fault == "oom":
            self._append(c, sglang_log.oom_lines(ts))
            self._exit(c, 1)
            return
        else:
            self._append(c, self._engine_step_lines(c, step, ts))
        if step == "graph_begin" and fault == "cold-start-hang":
            return  # never another line
        if step == "ready":
            c.engine.ready = True
            c.engine.ready_at = self._now
            self._update_slot(c.slot, c.name, "ready")
            self._schedule(NOISE_INTERVAL_S, self._engine_noise, c, run)
            return
        next_frac = sglang_log.MILESTONES[index + 1][1]
        self._schedule((next_frac - frac) * self.cold_start_s, self._engine_step, c, run, index + 1)

    def _engine_step_lines(self, c: Container, step: str, ts: datetime) -> list[str]:
        ranks = sglang_log.ranks_of(c.command)  # each TP rank logs its own lines (TP0-TP3, or TP0-TP1 at TP2)
        if step == "args":
            model = re.search(r"--model-path\s+(\S+)", c.command)
            dist = re.search(r"--dist-init-addr\s+(\S+)", c.command)
            chunk = re.search(r"--chunked-prefill-size[ =](\S+)", c.command)
            return sglang_log.args_lines(
                ts, SERVED_MODEL, model.group(1) if model else "", dist.group(1) if dist else "",
                chunk.group(1) if chunk else None, ranks,
            )
        return {
            "dist": lambda: sglang_log.dist_lines(ts, self.rng, ranks),
            "load_begin": lambda: sglang_log.load_begin_lines(ts, self.rng, ranks),
            "load_end": lambda: sglang_log.load_end_lines(ts, self.rng, ranks),
            "kv": lambda: sglang_log.kv_lines(ts, ranks),
            "graph_begin": lambda: sglang_log.graph_begin_lines(ts, ranks),
            "graph_end": lambda: sglang_log.graph_end_lines(ts, self.rng, ranks),
            "uvicorn": lambda: sglang_log.uvicorn_lines(ts),
            "ready": lambda: sglang_log.ready_lines(ts),
        }[step]()

    def _engine_hicache(self, c: Container, ts: datetime) -> bool:
        """Resolve and allocate the HiCache host budget; False if the engine failed."""
        assert c.engine is not None
        text = c.env.get("SGLANG_HICACHE_RAM_BUDGET", "")
        available = self.available_bytes - self._booked(exclude=c)
        ranks = sglang_log.ranks_of(c.command)  # the budget is split over the engine's own TP ranks
        try:
            budget = resolve_budget(text, available, len(ranks))
        except BudgetError:
            self._append(c, sglang_log.budget_invalid_lines(ts, text))
            self._exit(c, 1)
            return False
        logged = budget.rank_bytes
        if c.engine.fault == "rank-budget-wrong":
            wrong_text = text.replace("GiB", "GB").replace("gib", "GB")
            logged = resolve_budget(wrong_text, available, len(ranks)).rank_bytes if wrong_text != text else budget.replica_bytes
        self._append(c, sglang_log.hicache_budget_lines(ts, text, logged, ranks))
        if c.engine.fault == "cuda-801":
            self._append(c, sglang_log.cuda_801_lines(ts))
            self._exit(c, 1)
            return False
        if not budget.fits:
            self._append(c, sglang_log.budget_no_fit_lines(ts, budget.replica_bytes, available, RESERVE_BYTES))
            self._exit(c, 1)
            return False
        c.engine.booked_bytes = budget.replica_bytes
        self._append(c, sglang_log.hicache_allocated_lines(ts, ranks))
        return True

    def _engine_noise(self, c: Container, run: int) -> None:
        if c.run != run or not c.ready or c.name not in self._containers:
            return
        self._append(c, sglang_log.noise_lines(self.wall(), self.rng))
        self._schedule(NOISE_INTERVAL_S, self._engine_noise, c, run)
