"""Races between runners: threads on separate connections, and separate processes (SQLite)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from orchestrator.journal import open_journal
from orchestrator.journal.base import Fenced, LeaseHeld

TTL = 60.0
HANG_GUARD_S = 60  # only stops a deadlocked test from hanging; nothing asserts on time


def test_two_runners_racing_for_one_host_exactly_one_wins(store, clock) -> None:
    """50 rounds, two connections, released or expired in between: one winner each round."""
    a, b = store.open(), store.open()
    barrier = threading.Barrier(2)
    tokens: list[int] = []
    last = None

    def attempt(journal, name: str, round_: int):
        barrier.wait(timeout=HANG_GUARD_S)
        try:
            return journal.acquire_lease("gpu02", f"gpu02-{name}-{round_}", name, TTL)
        except LeaseHeld as held:
            return held

    with ThreadPoolExecutor(max_workers=2) as pool:
        for round_ in range(50):
            futures = [pool.submit(attempt, a, "runner-a", round_),
                       pool.submit(attempt, b, "runner-b", round_)]
            results = [f.result(timeout=HANG_GUARD_S) for f in futures]
            wins = [r for r in results if not isinstance(r, LeaseHeld)]
            losses = [r for r in results if isinstance(r, LeaseHeld)]
            assert (len(wins), len(losses)) == (1, 1), f"round {round_}: {results}"
            lease, previous = wins[0]
            assert losses[0].holder_run_id == lease.run_id
            assert (losses[0].owner, losses[0].expires_at) == (lease.owner, lease.expires_at)
            # Even rounds end in a release (nothing to take over next round), odd ones in
            # an expiry (next round's winner takes the expired lease over).
            if round_ == 0 or round_ % 2 == 1:
                assert previous is None
            else:
                assert previous == last
            if round_ % 2 == 0:
                a.release(lease)
            else:
                clock.advance(TTL + 1)
            tokens.append(lease.token)
            last = lease
    assert tokens == list(range(1, 51))


def test_no_write_of_a_fenced_runner_lands_after_the_takeover(store, clock, make_run) -> None:
    """A writes in a loop while B takes the host over: every write that started after B's
    acquisition committed is refused, and the journal holds exactly the writes A was told
    succeeded."""
    a, b = store.open(), store.open()
    run = make_run(a)
    lease_a, _ = a.acquire_lease("gpu02", run.run_id, "runner-a", TTL)
    clock.advance(TTL + 1)  # expired, not taken over yet: A may still write
    a_has_written = threading.Event()
    taken_over = threading.Event()

    def runner_a():
        succeeded = []
        for i in range(100_000):
            started_after_takeover = taken_over.is_set()
            try:
                effect = a.record_intent(
                    lease_a, run.run_id, f"step{i}", "http.post", {"i": i}, mutating=True
                )
            except Fenced:
                return succeeded
            assert not started_after_takeover, f"write {i} started after the takeover and landed"
            succeeded.append(effect.effect_id)
            if len(succeeded) == 5:
                a_has_written.set()
        raise AssertionError("runner A was never fenced")

    def runner_b():
        a_has_written.wait(timeout=HANG_GUARD_S)
        result = b.acquire_lease("gpu02", run.run_id, "runner-b", TTL)
        taken_over.set()
        return result

    with ThreadPoolExecutor(max_workers=2) as pool:
        fa, fb = pool.submit(runner_a), pool.submit(runner_b)
        succeeded = fa.result(timeout=HANG_GUARD_S)
        lease_b, previous = fb.result(timeout=HANG_GUARD_S)

    assert previous == lease_a and lease_b.token == lease_a.token + 1
    stored = store.open().effects(run.run_id)
    assert [e.effect_id for e in stored] == succeeded
    assert len(succeeded) >= 5


# --------------------------------------------------------------------------- processes (SQLite)

READER_AND_WRITER = r"""
import json, sys
from orchestrator.journal import open_journal
j = open_journal(sys.argv[1])
run = j.get_run(sys.argv[2])
lease = j.current_lease(run.host)
seen = {
    "state": run.state,
    "context": run.context,
    "events": [t.event for t in j.transitions(run.run_id)],
    "open_effects": [e.step for e in j.open_effects(run.run_id)],
    "lease": [lease.run_id, lease.owner, lease.token] if lease else None,
}
other = j.create_run(host="gpu13", runbook="rb", tag=None, kind="rollout", state="INIT",
                     context={"from": "child"})
lease13, _ = j.acquire_lease("gpu13", other.run_id, "child", 3600)
j.record_transition(lease13, other.run_id, "INIT", "start", "DEPLOY")
seen["child_run"] = other.run_id
print(json.dumps(seen))
"""


def _run_child(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True, text=True, timeout=HANG_GUARD_S, check=False,
    )


def test_a_second_process_on_the_same_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    parent = open_journal(f"sqlite:///{path}")
    run = parent.create_run(host="gpu02", runbook="rb", tag="v1", kind="rollout", state="INIT",
                            context={"k": "v"})
    lease, _ = parent.acquire_lease("gpu02", run.run_id, "parent", 3600)
    parent.record_transition(lease, run.run_id, "INIT", "start", "DEPLOY", context={"k": "w"})
    parent.record_intent(lease, run.run_id, "deploy", "http.post", {}, mutating=True)

    child = _run_child(READER_AND_WRITER, str(path), run.run_id)
    assert child.returncode == 0, child.stderr
    seen = json.loads(child.stdout)
    assert seen["state"] == "DEPLOY" and seen["context"] == {"k": "w"}
    assert seen["events"] == ["start"]
    assert seen["open_effects"] == ["deploy"]
    assert seen["lease"] == [run.run_id, "parent", lease.token]

    # ... and the parent, still open on its connection, sees the child's writes.
    theirs = parent.get_run(seen["child_run"])
    assert (theirs.host, theirs.state, theirs.context) == ("gpu13", "DEPLOY", {"from": "child"})
    assert parent.current_lease("gpu13").owner == "child"
    parent.close()


RACER = r"""
import sys
from orchestrator.journal import open_journal
from orchestrator.journal.base import LeaseHeld
j = open_journal(sys.argv[1])
me = sys.argv[2]
print("ready", flush=True)
sys.stdin.readline()  # the start gun: every racer is released by the same parent loop
try:
    lease, _ = j.acquire_lease("gpu02", "gpu02-" + me, me, 3600)
    print("won", lease.token, flush=True)
except LeaseHeld as held:
    print("lost", held.holder_run_id, flush=True)
"""


def test_processes_racing_for_one_host_on_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "journal.db"
    open_journal(path).close()  # schema in place before the race
    procs = [
        subprocess.Popen([sys.executable, "-c", RACER, str(path), f"p{i}"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(4)
    ]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready", p.stderr.read()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        outputs = [p.communicate(timeout=HANG_GUARD_S) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs), [err for _, err in outputs]
    lines = [out.split() for out, _ in outputs]
    winners = [i for i, line in enumerate(lines) if line[0] == "won"]
    assert len(winners) == 1, lines
    assert lines[winners[0]] == ["won", "1"]
    assert all(line == ["lost", f"gpu02-p{winners[0]}"] for i, line in enumerate(lines)
               if i != winners[0])
