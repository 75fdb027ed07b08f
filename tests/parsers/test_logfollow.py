"""LogFollower: compose logs followed through `--tail N` windows only."""

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.hosts.logfollow import LogFollower
from orchestrator.hosts.parsers.compose_logs import LogLine

R2 = "model-sg-glm53-w4afp8-tp4-r2"
DECODE = "[2025-12-12 08:43:59 TP0] Decode batch, #running-req: 6, #token: 1920, token usage: 0.94"
ALPHABET = [DECODE, "Prefill batch", "x"]


class FakeLogs:
    """Per-container logs; fetch(tail) answers like `docker compose logs --tail N`: the last N
    lines of each container, interleaved in a different order on every call."""

    def __init__(self, containers=(R2,), seed=0):
        self.logs = {c: [] for c in containers}
        self.rnd = random.Random(seed)
        self.calls: list[int] = []
        self.fail_next = False

    def add(self, container, lines):
        self.logs[container].extend(lines)

    async def fetch(self, tail: int) -> str:
        self.calls.append(tail)
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("compose-manager unavailable")
        queues = {c: list(lines[-tail:]) if tail else [] for c, lines in self.logs.items()}
        out = []
        while any(queues.values()):
            c = self.rnd.choice([c for c, q in queues.items() if q])
            out.append(f"{c}  | {queues[c].pop(0)}\n")
        return "".join(out)


def make_lines(rnd: random.Random, n: int, start: int, *, unique_every: int | None, state: dict) -> list[str]:
    """Lines with runs of identical lines. With `unique_every` = M, any M consecutive lines hold a
    unique line (and the very first line is unique)."""
    out = []
    for _ in range(n):
        since = state.get("since_unique")
        force = since is None or (unique_every is not None and since >= unique_every - 1)
        if force or rnd.random() < 0.15:
            state["counter"] = state.get("counter", 0) + 1
            line = f"[TP0] unique line {state['counter']}"
            state["since_unique"] = 0
        else:
            prev = state.get("prev")
            line = prev if prev in ALPHABET and rnd.random() < 0.6 else rnd.choice(ALPHABET)
            state["since_unique"] = since + 1
        state["prev"] = line
        out.append(line)
    return out


M = 6
CFG = dict(initial_tail=12, max_tail=96, min_overlap=M, keep_lines=24, min_tail=12)


async def run_single(growths, initial, seed, unique_every):
    rnd = random.Random(seed)
    state: dict = {}
    logs = FakeLogs(seed=seed)
    follower = LogFollower(logs.fetch, **CFG)
    stream = logs.logs[R2]
    logs.add(R2, make_lines(rnd, initial, 0, unique_every=unique_every, state=state))
    batch = await follower.poll()
    got = [line.text for line in batch.new]
    assert {line.container for line in batch.new} <= {R2}
    assert got == stream[max(0, len(stream) - CFG["initial_tail"]):]
    assert not batch.gap
    prev_end = len(stream)
    results = []
    for growth in growths:
        logs.add(R2, make_lines(rnd, growth, len(stream), unique_every=unique_every, state=state))
        batch = await follower.poll()
        got = [line.text for line in batch.new]
        end = len(stream)
        # Always: what is yielded is the end of the stream, contiguous.
        assert got == stream[end - len(got):end]
        results.append((end - prev_end, batch, got, stream[prev_end:end]))
        prev_end = end
    return follower, results


growth_st = st.lists(st.integers(0, 130), min_size=1, max_size=8)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(growths=growth_st, initial=st.integers(0, 30), seed=st.integers(0, 2**32))
async def test_property_exact_unless_gap_and_gap_when_lines_fell_out(growths, initial, seed):
    """Streams with runs of identical lines (any M consecutive lines hold a unique one)."""
    follower, results = await run_single(growths, initial, seed, unique_every=M)
    for growth, batch, got, expected in results:
        if not batch.gap:
            assert got == expected
        if growth > CFG["max_tail"]:
            assert batch.gap, "lines fell out of the largest window: a gap must be reported"
        if growth <= CFG["max_tail"] - M:
            assert not batch.gap, "the largest window overlapped enough: no gap"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(growths=growth_st, initial=st.integers(0, 30), seed=st.integers(0, 2**32))
async def test_property_unconstrained_repetitive_streams_yield_stream_suffixes(growths, initial, seed):
    """Arbitrary runs of identical lines: yielded lines are always the stream's end (checked in
    run_single), the window stays within bounds, and a burst beyond max_tail is never silent
    about the window it could not see."""
    follower, results = await run_single(growths, initial, seed, unique_every=None)
    for growth, batch, got, expected in results:
        assert CFG["min_tail"] <= batch.tail <= CFG["max_tail"]
        if not batch.gap and growth <= CFG["max_tail"] and got != expected:
            # A wrong alignment can only come from the stream repeating itself; it never
            # yields more lines than the window held.
            assert len(got) <= batch.tail
    assert CFG["min_tail"] <= follower.tail <= CFG["max_tail"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(growths=st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)), min_size=1, max_size=6), seed=st.integers(0, 2**32))
async def test_property_two_containers_interleaved_differently_each_fetch(growths, seed):
    rnd = random.Random(seed)
    other = "proxy-glm53"
    logs = FakeLogs(containers=(R2, other), seed=seed)
    follower = LogFollower(logs.fetch, **CFG)
    states = {R2: {}, other: {}}
    for c in (R2, other):
        logs.add(c, make_lines(rnd, 5, 0, unique_every=M, state=states[c]))
    await follower.poll()
    prev = {c: len(logs.logs[c]) for c in logs.logs}
    for g_r2, g_other in growths:
        logs.add(R2, make_lines(rnd, g_r2, 0, unique_every=M, state=states[R2]))
        logs.add(other, make_lines(rnd, g_other, 0, unique_every=M, state=states[other]))
        batch = await follower.poll()
        for c in (R2, other):
            got = [line.text for line in batch.new if line.container == c]
            if c not in batch.gap_containers:
                assert got == logs.logs[c][prev[c]:]
            prev[c] = len(logs.logs[c])


async def test_repeated_identical_decode_lines_are_counted_exactly():
    logs = FakeLogs()
    follower = LogFollower(logs.fetch, initial_tail=16, max_tail=512, min_overlap=8)
    logs.add(R2, [f"[TP0] startup {i}" for i in range(10)] + [DECODE] * 5)
    assert len((await follower.poll()).new) == 15
    for burst in (3, 1, 40, 0, 7, 120):
        logs.add(R2, [DECODE] * burst)
        batch = await follower.poll()
        assert [line.text for line in batch.new] == [DECODE] * burst
        assert not batch.gap
    # The identical run (176 lines) is shorter than keep_lines: the unique line before it anchors.
    logs.add(R2, ["[TP0] Prefill batch, #new-seq: 1"] + [DECODE] * 4)
    batch = await follower.poll()
    assert [line.text for line in batch.new] == ["[TP0] Prefill batch, #new-seq: 1"] + [DECODE] * 4
    assert not batch.gap


async def test_only_identical_lines_beyond_memory_report_a_gap_not_a_guess():
    logs = FakeLogs()
    follower = LogFollower(logs.fetch, initial_tail=16, max_tail=64, min_overlap=4, keep_lines=8)
    logs.add(R2, [DECODE] * 100)
    await follower.poll()
    logs.add(R2, [DECODE] * 3)
    batch = await follower.poll()
    assert batch.gap and batch.tail == 64
    assert [line.text for line in batch.new] == [DECODE] * len(batch.new)


async def test_burst_beyond_max_tail_is_a_gap_and_following_resumes():
    logs = FakeLogs()
    follower = LogFollower(logs.fetch, initial_tail=8, max_tail=64, min_overlap=4)
    logs.add(R2, [f"line {i}" for i in range(5)])
    await follower.poll()
    logs.add(R2, [f"burst {i}" for i in range(200)])
    batch = await follower.poll()
    assert batch.gap and batch.gap_containers == (R2,)
    assert [line.text for line in batch.new] == [f"burst {i}" for i in range(136, 200)]
    assert batch.tail == 64 and logs.calls[-4:] == [8, 16, 32, 64]
    logs.add(R2, ["after 1", "after 2"])
    batch = await follower.poll()
    assert not batch.gap and [line.text for line in batch.new] == ["after 1", "after 2"]


async def test_replaced_container_is_a_reset():
    logs = FakeLogs()
    follower = LogFollower(logs.fetch, initial_tail=50, max_tail=200, min_overlap=4)
    logs.add(R2, [f"old {i}" for i in range(10)])
    await follower.poll()
    logs.logs[R2] = [f"new {i}" for i in range(3)]  # recreated: a new, shorter log
    batch = await follower.poll()
    assert batch.gap and batch.reset_containers == (R2,)
    assert [line.text for line in batch.new] == ["new 0", "new 1", "new 2"]
    logs.add(R2, ["new 3"])
    batch = await follower.poll()
    assert not batch.gap and not batch.reset_containers and [line.text for line in batch.new] == ["new 3"]


async def test_window_shrinks_after_quiet_polls():
    logs = FakeLogs()
    follower = LogFollower(logs.fetch, initial_tail=200, max_tail=5000, min_overlap=8, min_tail=16)
    logs.add(R2, [f"startup {i}" for i in range(300)])
    first = await follower.poll()
    assert len(first.new) == 200 and not first.gap
    tails = []
    for i in range(6):
        logs.add(R2, [f"quiet {i}"])
        batch = await follower.poll()
        assert [line.text for line in batch.new] == [f"quiet {i}"]
        tails.append(batch.tail)
    # 2 x 200 new lines on the first poll kept the window large; quiet polls bring it down to min.
    assert tails[-1] == 16 and tails[0] > tails[-1]
    assert logs.calls[-6:] == tails  # one fetch per quiet poll, of the window it reports


async def test_first_poll_is_the_starting_point_and_new_container_later_is_complete():
    logs = FakeLogs(containers=(R2, "nginx"))
    follower = LogFollower(logs.fetch, initial_tail=4, max_tail=64, min_overlap=2)
    logs.add(R2, [f"a{i}" for i in range(10)])
    batch = await follower.poll()
    assert [line.text for line in batch.new] == ["a6", "a7", "a8", "a9"] and not batch.gap
    logs.add("nginx", ["n0", "n1"])
    logs.add(R2, ["a10"])
    batch = await follower.poll()
    assert sorted((line.container, line.text) for line in batch.new) == sorted([("nginx", "n0"), ("nginx", "n1"), (R2, "a10")])
    assert not batch.gap


async def test_fetch_error_propagates_and_state_is_kept():
    logs = FakeLogs()
    follower = LogFollower(logs.fetch, initial_tail=8, max_tail=64, min_overlap=2)
    logs.add(R2, ["a", "b", "c"])
    await follower.poll()
    logs.add(R2, ["d"])
    logs.fail_next = True
    with pytest.raises(RuntimeError):
        await follower.poll()
    logs.add(R2, ["e"])
    batch = await follower.poll()
    assert [line.text for line in batch.new] == ["d", "e"]


async def test_progress_bar_redraws_are_one_line():
    logs = FakeLogs()
    follower = LogFollower(logs.fetch, initial_tail=8, max_tail=64, min_overlap=2)
    logs.add(R2, ["Loading 0%\rLoading 50%\rLoading 100%", "loaded"])
    batch = await follower.poll()
    assert batch.new == [LogLine(R2, "Loading 100%"), LogLine(R2, "loaded")]


def test_constructor_rejects_inconsistent_windows():
    async def fetch(tail):
        return ""

    with pytest.raises(ValueError):
        LogFollower(fetch, initial_tail=10, max_tail=5)
    with pytest.raises(ValueError):
        LogFollower(fetch, min_overlap=0)


async def test_periodic_stream_is_never_guessed():
    """A periodic stream aligns in many places: the follower must not pick one silently."""
    logs = FakeLogs()
    follower = LogFollower(logs.fetch, initial_tail=16, max_tail=64, min_overlap=4, keep_lines=8)
    logs.add(R2, ["u0"] + ["A", "B"] * 20)
    await follower.poll()
    start = len(logs.logs[R2])
    logs.add(R2, ["A", "B"] * 3)
    batch = await follower.poll()
    got = [line.text for line in batch.new]
    assert batch.gap or got == logs.logs[R2][start:]
    assert batch.gap  # the anchor u0 is beyond keep_lines: the position is unknowable
    assert got == logs.logs[R2][len(logs.logs[R2]) - len(got):]


async def test_overlap_made_of_one_repeated_line_is_not_an_anchor():
    """The window starts with 4 identical lines that also end what we saw, but it is all new:
    an overlap of identical lines proves nothing, so the window grows until a varied overlap."""
    logs = FakeLogs()
    follower = LogFollower(logs.fetch, initial_tail=16, max_tail=256, min_overlap=4, keep_lines=8, min_tail=16)
    logs.add(R2, ["u1"] + [DECODE] * 5)
    await follower.poll()
    new = [f"z{i}" for i in range(10)] + [DECODE] * 4 + ["x"] + [f"y{i}" for i in range(11)]
    logs.add(R2, new)
    batch = await follower.poll()
    assert logs.calls[-2:] == [16, 32]
    assert not batch.gap
    assert [line.text for line in batch.new] == new


class RotatingLogs(FakeLogs):
    """docker's log rotation: each container keeps only its last `keep` lines."""

    def __init__(self, keep, **kw):
        super().__init__(**kw)
        self.keep = keep

    def add(self, container, lines):
        super().add(container, lines)
        del self.logs[container][: max(0, len(self.logs[container]) - self.keep)]


async def test_a_rotated_log_is_followed_without_gap_or_reset():
    """A 500-line rotated log asked for with a wider window: fewer lines than asked is not the
    whole log; the follower finds where it left off (mutation: without the rotation alignment in
    `_locate` every poll is a reset, the whole window yielded again as new)."""
    logs = RotatingLogs(500)
    counter = iter(range(10**6))
    logs.add(R2, [f"[TP0] line {next(counter)} Decode batch" for _ in range(800)])
    f = LogFollower(logs.fetch, initial_tail=4000, max_tail=5000)
    first = await f.poll()
    assert len(first.new) == 500 and not first.gap
    for burst in (3, 40, 120, 7):
        fresh = [f"[TP0] line {next(counter)} Decode batch" for _ in range(burst)]
        logs.add(R2, fresh)
        batch = await f.poll()
        assert [ln.text for ln in batch.new] == fresh
        assert not batch.gap and not batch.reset_containers
