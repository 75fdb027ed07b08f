"""A seeded schedule explorer (FoundationDB/Jepsen style) for the product's one promise:

    at every moment at least one replica serves, and nothing healthy is torn down unless a gate on
    that very replica failed or an operator asked for it.

For a seed it draws a schedule: simulator faults (from `FAULTS`, with their args), crash points
(SIGKILL the orchestrator right after journal write N, or while the k-th mutating compose call is
in flight) and operator actions (abort, approve, a second runner started concurrently; after the
run: re-run `rollout`, `rollback --replica all|r2|r1`, `rollback --to-file <typo>`, `resume RUN`,
`resume RUN --retry`). It runs the schedule against a fresh simulator on loopback, driving the real
CLI in subprocesses, and judges the simulator's own record over the whole history:

  I1 serving     at least one replica slot *ready* at every moment (the timeline means ready);
  I2 teardown    no ready engine of the new definition stopped unless a fault targeted a gate of that
                 replica or the operator asked (abort, rollback of that replica) before it stopped;
  I3 duplicate   no mutating call repeated: two consecutive accepted compose calls with the same
                 request; for crash schedules also: no request sent more often than in an
                 uninterrupted run of the same faults, and the same end state and outcome;
  I4 rules       `check_invariants` (every up after a checked dry run of the same request and env,
                 no orphan removal, env map whole, ...);
  live           every command ends (no hang).

    python -m orchestrator_sim.explore --seed 1234            # one seed, verbose
    python -m orchestrator_sim.explore --seeds 50 --jobs 2     # seeds 0..49
    python -m orchestrator_sim.explore --sweep writes|inflight|all [--points 1,5,9]

The parts: schedule.py (what a schedule is, how a seed draws one, the known-hole schedules),
doors.py and door_runs.py (every way a run enters besides the gpu02 CLI rollout), run.py (one
schedule against a fresh simulator), judge.py (I1-I4, live; human.py: invariant H), cli.py (the
command line and its report). The `orchestrate` processes it starts: fork.py (a warm fork server),
crash.py (the kill, clock and break hooks), primed.py (an interpreter waiting for its argv), and
hooks.py (a Ctrl-C or crash at a journal state, a journal clock shift, a stalled rollback: the
gatekeeper's end-to-end tests).
"""

from orchestrator_sim.explore.cli import main, print_result, summarize, write_report
from orchestrator_sim.explore.common import TAG, Command, end_state
from orchestrator_sim.explore.judge import Result, baseline, judge, run_hole, run_schedule, run_seed, sweep_point
from orchestrator_sim.explore.run import Execution
from orchestrator_sim.explore.schedule import HOLES, Action, Schedule, draw

__all__ = ["HOLES", "TAG", "Action", "Command", "Execution", "Result", "Schedule", "baseline", "draw", "end_state",
           "judge", "main", "print_result", "run_hole", "run_schedule", "run_seed", "summarize", "sweep_point",
           "write_report"]
