"""External text reaches a terminal as text: never markup, never a control character."""

from __future__ import annotations

import io

from rich.console import Console

from orchestrator.cli.render import LiveProgress
from orchestrator.util.text import shown


def _live() -> tuple[LiveProgress, io.StringIO]:
    buf = io.StringIO()
    return LiveProgress(Console(file=buf, force_terminal=False, highlight=False, soft_wrap=True, emoji=False)), buf


def test_controls_and_bidi_overrides_are_made_visible():
    assert shown("a\x1b[31mred\x9b2J\u202eevil\u2066x\u2069\x00") == "a\\x1b[31mred\\x9b2J\\u202eevil\\u2066x\\u2069\\x00"
    assert shown("one\ntwo\tthree") == "one\\ntwo\tthree"  # one field, one line; a tab is harmless
    assert shown("plain text [/INST] :warning:") == "plain text [/INST] :warning:"


def test_a_log_line_with_markup_is_printed_as_written_and_cannot_crash_the_run():
    live, buf = _live()
    # a closing tag with no opening one raised rich's MarkupError; a link tag printed a link
    live.event("log_line", service="r2", line="OOM [/INST] at [link=https://evil.example]here[/link] :warning:")
    live.event("note", text="[bold]not bold[/bold]")
    live.event("transition", event_name="fail", to="HALTED", note="exit [/red] \x1b]8;;https://x\x07", clock=0.0)
    text = buf.getvalue()
    assert "OOM [/INST] at [link=https://evil.example]here[/link] :warning:" in text
    assert "[bold]not bold[/bold]" in text
    assert "exit [/red] \\x1b]8;;https://x\\x07" in text
    assert "\x1b" not in text and "\x07" not in text


def test_a_failing_watcher_never_stops_the_run():
    from orchestrator.engine.executor.runtime import Voice
    from orchestrator.hosts.redaction import Redactor
    from orchestrator.util.clock import RealClock

    class Broken:
        def event(self, kind: str, **fields: object) -> None:
            raise RuntimeError("terminal gone")

    Voice(progress=Broken(), clock=RealClock(), redactor=Redactor()).emit("note", text="x")  # no exception
