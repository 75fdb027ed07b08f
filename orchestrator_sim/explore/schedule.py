"""The schedule explorer's schedules (orchestrator_sim/explore/, docs/explorer.md): the constants,
what a schedule is (`Schedule`, `Action`), how a seed draws one (`draw`, pure) and the fixed
known-hole schedules (`HOLES`)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from orchestrator_sim.explore.common import GPU02_FAULTS, MAX_MUTATING, MAX_WRITE
from orchestrator_sim.faults import FAULTS


# ----------------------------------------------------------------------------- schedules
@dataclass
class Action:
    kind: str  # abort | approve | second-runner | rerun | rollback | rollback-typo | rollback-wrong | resume | retry
    arg: str = ""  # rollback: all|r1|r2
    #: in-run: ("mut", k, delay_s) k-th mutating call arrived, ("done", k, delay_s) it was answered,
    #: or ("t", seconds, 0) after the command started (real seconds)
    trigger: tuple[str, float, float] | None = None
    crash: tuple[str, int] | None = None  # follow-ups: ("after", N)

    def __str__(self) -> str:
        s = self.kind + (f"({self.arg})" if self.arg else "")
        if self.trigger:
            kind, a, d = self.trigger
            s += f"@{kind}{int(a)}+{d:.2f}s" if kind in ("mut", "done") else f"@{a:.1f}s"
        if self.crash:
            s += f"!kill-after-write-{self.crash[1]}"
        return s


@dataclass
class Schedule:
    seed: int
    faults: list[str] = field(default_factory=list)
    yes: bool = True
    crash: tuple[str, int] | None = None  # ("after", N) journal write, ("inflight", k) mutating call
    during: list[Action] = field(default_factory=list)  # operator actions while the first rollout runs
    after: list[Action] = field(default_factory=list)  # operator actions once it ended
    #: how the runs enter (doors.py): "cli" is the gpu02 CLI schedule above
    door: str = "cli"
    door_args: dict[str, Any] = field(default_factory=dict)
    hosts: tuple[str, ...] = ("gpu02",)
    #: busy-409/server-500 aimed at one host's k-th eligible request: (name, host, k, count)
    aimed: list[tuple[str, str, int, int]] = field(default_factory=list)
    log_lines: int | None = None  # every engine keeps only its last N log lines (if the simulator can)
    fast: bool = False  # the CI form: shorter cold starts, base hosts without gpu02's run first
    #: product guards broken on purpose in every command (test-only, human.BREAKS): a hole
    #: schedule showing the judge sees what the guard prevents
    breaks: tuple[str, ...] = ()

    @property
    def kinds(self) -> list[str]:
        out = [f"door:{self.door}"] if self.door != "cli" else []
        if self.aimed:
            out.append("aimed")
        if self.log_lines:
            out.append("short-logs")
        if self.faults:
            out.append("faults")
        if self.crash or any(a.crash for a in self.after):
            out.append("crashes")
        if self.during or self.after or not self.yes:
            out.append("operator")
        return out or ["plain"]

    def describe(self) -> str:
        parts = [f"faults=[{', '.join(self.faults)}]", "--yes" if self.yes else "approval by `approve`"]
        if self.door != "cli" or self.aimed or self.log_lines:
            from orchestrator_sim.explore.doors import describe_door

            parts.insert(0, describe_door(self))
        if self.fast:
            parts.append("fast")
        if self.crash:
            parts.append(f"kill {'after journal write' if self.crash[0] == 'after' else 'with mutating call in flight'} #{self.crash[1]}")
        if self.during:
            parts.append("during: " + ", ".join(map(str, self.during)))
        if self.after:
            parts.append("after: " + ", ".join(map(str, self.after)))
        return "; ".join(parts)


#: how often each door is drawn (doors.DOORS; `preview` only when the simulator has
#: the dry-run-recreates fault)
DOOR_WEIGHTS = {"cli": 30, "base": 14, "stall": 10, "serve": 12, "page": 8, "clock": 8, "env": 8, "journals": 5,
                "preview": 5}


def draw(seed: int, fast: bool = False) -> Schedule:
    """The schedule of a seed (pure: the same seed always draws the same schedule; `fast`: the CI
    form of the same schedule, see `Execution`)."""
    from orchestrator_sim.explore.doors import doors_available, draw_door, draw_extras

    rng = random.Random(seed)
    doors = doors_available()
    door = rng.choices(doors, weights=[DOOR_WEIGHTS[d] for d in doors])[0]
    s = Schedule(seed=seed, door=door, fast=fast)
    if door != "cli":
        draw_door(rng, s)
        draw_extras(rng, s)
        return s
    _draw_cli(rng, s)
    draw_extras(rng, s)
    return s


def _draw_cli(rng: random.Random, s: Schedule) -> None:
    names = sorted(GPU02_FAULTS)
    n_faults = rng.choices([0, 1, 2], weights=[45, 45, 10])[0]
    for name in rng.sample(names, n_faults):
        arg = FAULTS[name].arg
        if name == "lock-after-down":  # held for a few calls, or past the client's busy retries (the default 12)
            s.faults.append(f"{name}:{rng.choice([3, 12])}")
        elif arg == "replica":
            s.faults.append(f"{name}:{rng.choice(['r1', 'r2'])}")
        elif arg == "count":
            s.faults.append(f"{name}:{rng.randint(1, 3)}")
        else:
            s.faults.append(name)
    s.yes = rng.random() < 0.85
    r = rng.random()
    if r < 0.30:
        s.crash = ("after", rng.randint(1, MAX_WRITE))
    elif r < 0.45:
        s.crash = ("inflight", rng.randint(1, MAX_MUTATING))
    if not s.yes:
        s.during.append(Action("approve", trigger=("t", rng.uniform(0.5, 8.0), 0.0)))
    if rng.random() < 0.35:
        kind = rng.choices(["abort", "second-runner"], weights=[70, 30])[0]
        trig = (rng.choice(["mut", "done"]), float(rng.randint(1, MAX_MUTATING)), rng.choice([0.0, 0.0, rng.uniform(0.0, 0.6)]))
        s.during.append(Action(kind, trigger=trig))
    if rng.random() < 0.45:
        for _ in range(rng.choice([1, 1, 2])):
            kind = rng.choice(["rerun", "rollback", "rollback", "rollback-typo", "resume", "retry"])
            if kind == "rollback-typo" and rng.random() < 0.5:  # a file that exists, but the wrong one
                kind = "rollback-wrong"
            a = Action(kind)
            if kind == "rollback":
                a.arg = rng.choice(["all", "all", "r2", "r1"])
            if kind in ("rerun", "rollback") and rng.random() < 0.25:
                a.crash = ("after", rng.randint(1, 40))
            s.after.append(a)


#: The holes the executor was just changed to close, as fixed schedules (`--hole NAME`). The
#: uninterrupted rollout's mutating calls: 1 down old r2, 2 up new r2, 3 up relay, 4 down relay,
#: 5 up sidecars, 6 down r1, 7 up new r1, 8 up relay, 9 down relay, 10 up reconcile.
HOLES: dict[str, Schedule] = {
    "rerun-after-done": Schedule(seed=0, after=[Action("rerun")]),
    "inflight-r2-up": Schedule(seed=0, crash=("inflight", 2)),
    "inflight-r1-up": Schedule(seed=0, crash=("inflight", 7)),
    "kill-after-r2-up-intent": Schedule(seed=0, crash=("after", 14)),
    "abort-r1-cold-start": Schedule(seed=0, during=[Action("abort", trigger=("done", 7, 0.0))]),
    "abort-r2-cold-start": Schedule(seed=0, during=[Action("abort", trigger=("done", 2, 0.0))]),
    "rollback-typo-after-done": Schedule(seed=0, after=[Action("rollback-typo")]),
    "rollback-wrong-after-done": Schedule(seed=0, after=[Action("rollback-wrong")]),
    # compose-manager busy for 12 calls after every down (past the client's busy retries): each
    # step after a stop, the rollout's and the rollback's, waits the lock out
    "lock-after-down-rollback-all": Schedule(seed=0, faults=["lock-after-down:12"], after=[Action("rollback", "all")]),
    # compose-manager's lock held past `timeouts.gone` for r1's perception-check / relay stop, after
    # the new r1 came up: the run halts there, and the `--retry` its message names keeps the new r1
    "sidecar-lock-then-retry": Schedule(seed=0, faults=["sidecar-down-busy:r1"], after=[Action("retry")]),
    "second-runner-mid-r1": Schedule(seed=0, during=[Action("second-runner", trigger=("done", 7, 0.0))]),
    "rollback-all-after-done": Schedule(seed=0, after=[Action("rollback", "all")]),
    "rollback-r1-after-done": Schedule(seed=0, after=[Action("rollback", "r1")]),
    "oom-r1-then-retry": Schedule(seed=0, faults=["oom:r1"], after=[Action("retry")]),
    "oom-r1-then-rollback-all": Schedule(seed=0, faults=["oom:r1"], after=[Action("rollback", "all")]),
    # issue 21's cases through the new doors (doors.py)
    # (mutating call 7 is the up of the new r1: killed during r1's cold start, rolled back by hand)
    "serve-adopts-after-rollback": Schedule(seed=0, door="serve", door_args={"crash": ("killdone", 7), "rollback": True,
                                                                             "adopt": True}),
    "server-resume-after-rollback": Schedule(seed=0, door="serve", door_args={"crash": ("killdone", 7), "rollback": True,
                                                                              "adopt": False}),
    # seed 136: killed right after journal write 52, the outcome of the perception check's down (the
    # fast form's mutating call 7), then `rollback --replica all` by hand: it must not send that down again
    "serve-rollback-after-perception-stop": Schedule(seed=0, door="serve", fast=True, door_args={
        "crash": ("after", 52), "rollback": True, "adopt": True}),
    "sigint-then-adopted": Schedule(seed=0, door="serve", door_args={"crash": ("sigint", 40), "adopt": True}),
    "page-approve-in-cold-start": Schedule(seed=0, door="page", yes=False,
                                           door_args={"actions": [("page-approve", "done", 2)]}),
    "stall-rollback-gpu04": Schedule(seed=0, door="stall", hosts=("gpu02", "gpu03", "gpu04", "gpu23"),
                                     door_args={"variant": "base-rollback", "k": 3}),
    "clock-back-resume-after-rollback": Schedule(seed=0, door="clock", door_args={"kill": 60, "step": -3600,
                                                                                  "rollback": True, "when": "resume"}),
    "clock-back-rollback": Schedule(seed=0, door="clock", door_args={"kill": 60, "step": -3600, "rollback": True,
                                                                     "when": "rollback"}),
    "budget-changed-after-crash": Schedule(seed=0, door="env", door_args={
        "change": ("GLM53_HICACHE_RAM_BUDGET", "650GiB"), "kill": 60, "then": "resume"}),
    # the judge of invariant H against a product guard broken on purpose (human.BREAKS):
    # these must show H1/H2 (tests/explore/test_explore_human.py); without the break they keep H
    "broken-adopted-keeps-yes": Schedule(seed=0, door="serve", breaks=("inherit-yes",),
                                         door_args={"crash": ("sigint", 40), "adopt": True}),
    "ctrl-c-resume-without-yes": Schedule(seed=0, door="serve", door_args={"crash": ("sigint", 40), "adopt": False,
                                                                          "resume_yes": False}),
    "broken-page-approves-any-gate": Schedule(seed=0, door="page", yes=False, breaks=("page-any-gate",),
                                              door_args={"actions": [("page-approve", "done", 2)]}),
    "two-journals-gpu02": Schedule(seed=0, door="journals", door_args={"trigger": ("done", 2), "host": "gpu02"}),
    # seed 423: the fleet Ctrl-C'd while gpu23 waits on model-downloader (mutating call 38 is past
    # its up), then the fleet command again: it resumes gpu23's run, not a new run sending the up again
    "fleet-again-after-ctrl-c": Schedule(seed=0, door="base", fast=True, faults=["drain-stuck@gpu23"],
                                         hosts=("gpu02", "gpu03", "gpu04", "gpu23"), door_args={
                                             "order": ["gpu23", "gpu04", "gpu03"], "crash": ("sigint", 38),
                                             "then": "again"}),
}
