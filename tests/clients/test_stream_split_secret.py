"""A secret cut across two consecutive compose-manager stream events (two output lines) is masked
in both, at every cut position, in what the outcome keeps; a line that cannot begin a secret is handed over at once, never held for the next one.

Mutation notes (each guard removed, the tests seen failing, the source restored):
- compose_manager_stream.StreamLines.push scrubbing each line alone (`redactor.scrub(data)`) ->
  test_a_secret_cut_between_two_events_is_masked_in_both fails at every position;
- StreamLines.push holding no line (`may_begin_secret` -> False) -> the same test fails (the head
  was handed over before the tail arrived);
- StreamLines.push holding every line -> test_a_line_that_cannot_begin_a_secret_is_not_held fails.
"""

from __future__ import annotations

import pytest

from helpers_compose import done_line, event_line, stream
from orchestrator.hosts.clients.compose_manager_stream import StreamLines, consume_stream
from orchestrator.hosts.redaction import Redactor

SECRET = "hf_Zq8kP2wM5rT7xL4nV1bH6c"
RESERVED = "pw/Zq9+x&y=z-secret-77"  # characters a URL encodes: its head may be percent-encoded


async def _consume(*datas: str) -> list[str]:
    redactor = Redactor(SECRET, RESERVED)
    body = [event_line("stderr" if i % 2 else "stdout", d) for i, d in enumerate(datas)]
    outcome = await consume_stream(stream(*body, done_line(True, 0)), redactor=redactor, idle_timeout_s=5)
    assert outcome.status == "success"
    return outcome.lines


@pytest.mark.parametrize("secret", [SECRET, RESERVED], ids=["token", "reserved-chars"])
async def test_a_secret_cut_between_two_events_is_masked_in_both(secret):
    for cut in range(1, len(secret)):
        head, tail = secret[:cut], secret[cut:]
        kept = await _consume("Pulling with token=" + head, tail + " accepted", "Container nginx  Started")
        assert kept == ["Pulling with token=***", "*** accepted", "Container nginx  Started"], (cut, kept)


async def test_a_held_line_is_released_by_the_done_event():
    assert await _consume("auth " + SECRET[:5], SECRET[5:]) == ["auth ***", "***"]
    assert await _consume("auth " + SECRET[:5]) == ["auth " + SECRET[:5]]  # a head alone is not the secret


def test_a_line_that_cannot_begin_a_secret_is_not_held():
    lines = StreamLines(Redactor(SECRET))
    assert lines.push(" Container nginx  Started") == [" Container nginx  Started"]
    assert lines.push(f"token {SECRET} here") == ["token *** here"]
    # a line ending in what may begin the secret waits for the next one, and only for it
    assert lines.push("token=" + SECRET[:7]) == []
    assert lines.push("unrelated") == ["token=" + SECRET[:7], "unrelated"]
    assert lines.push("token=hf_") == []
    assert lines.flush() == ["token=hf_"]
    assert lines.flush() == []
