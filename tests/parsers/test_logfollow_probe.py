"""LogFollower.probe (issue 25): one `--tail 1` read tells whether the next poll would yield a line."""

from __future__ import annotations

from orchestrator.hosts.logfollow import LogFollower

ENGINE = "model-sg-glm53-w4afp8-tp4-r2"


class Log:
    def __init__(self, *lines: str) -> None:
        self.lines = list(lines)
        self.tails: list[int] = []

    async def fetch(self, tail: int) -> str:
        self.tails.append(tail)
        return "".join(f"{ENGINE}  | {ln}\n" for ln in self.lines[-tail:])


async def test_probe_says_whether_a_poll_would_yield_a_line():
    log = Log()
    f = LogFollower(log.fetch)
    assert await f.probe() is False  # nothing logged yet
    log.lines.append("[TP0] Init torch distributed begin.")
    assert await f.probe() is True  # logged before the first poll
    await f.poll()
    assert await f.probe() is False  # read
    log.lines.append("[TP0] Load weight begin.")
    assert await f.probe() is True
    batch = await f.poll()
    assert [ln.text for ln in batch.new] == ["[TP0] Load weight begin."]
    assert log.tails.count(1) == 4


async def test_a_verbatim_repeat_is_not_news_but_the_next_poll_yields_it():
    log = Log("GET /health 200")
    f = LogFollower(log.fetch)
    await f.poll()
    log.lines.append("GET /health 200")
    assert await f.probe() is False  # the documented limit: the gate reads whole every minute
