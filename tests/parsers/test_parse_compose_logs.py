from orchestrator.hosts.parsers.compose_logs import LogLine, parse_compose_logs

ENGINE = "model-sg-glm53-w4afp8-tp4-r2"


def test_prefix_with_varying_padding_and_ansi():
    text = (
        "\x1b[36mnginx                         |\x1b[0m started\n"
        f"\x1b[33m{ENGINE}  |\x1b[0m [2026-09-23 20:00:00 TP0] Load weight begin.\n"
        "proxy-glm53 | a | b | c\n"
    )
    assert parse_compose_logs(text) == [
        LogLine("nginx", "started"),
        LogLine(ENGINE, "[2026-09-23 20:00:00 TP0] Load weight begin."),
        LogLine("proxy-glm53", "a | b | c"),
    ]


def test_lines_without_prefix_get_empty_container():
    assert parse_compose_logs("plain line\n\nanother\n") == [LogLine("", "plain line"), LogLine("", "another")]


def test_empty_prefixed_line_is_kept():
    assert parse_compose_logs("nginx  | \nnginx  |\n") == [LogLine("nginx", ""), LogLine("nginx", "")]


def test_carriage_return_progress_keeps_last_redraw_and_prefix():
    text = f"{ENGINE}  | Loading 0%\rLoading 50%\rLoading 100%\r\n{ENGINE}  | done\r\n"
    assert parse_compose_logs(text) == [LogLine(ENGINE, "Loading 100%"), LogLine(ENGINE, "done")]


def test_real_startup_sample_round_trips_through_a_prefix(sample):
    raw_lines = sample("sglang-startup.log").splitlines()
    prefixed = "".join(f"{ENGINE}  | {line}\n" for line in raw_lines)
    parsed = parse_compose_logs(prefixed)
    assert [p.container for p in parsed] == [ENGINE] * len(raw_lines)
    assert [p.text for p in parsed] == raw_lines
    assert any("The server is fired up and ready to roll!" == p.text for p in parsed)
    # The progress bar line holds '|' characters: the text after the prefix is intact.
    assert any(p.text.startswith("Capturing batches") and p.text.endswith("3.37it/s]") for p in parsed)


def test_real_samples_without_prefix(sample):
    for name in ("sglang-startup.log", "sglang-failures.log"):
        raw_lines = [line for line in sample(name).splitlines() if line]
        parsed = parse_compose_logs("\n".join(raw_lines))
        assert [p.text for p in parsed] == raw_lines
        assert {p.container for p in parsed} == {""}
