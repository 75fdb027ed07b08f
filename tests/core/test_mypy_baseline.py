"""scripts/mypy_baseline.py: no file of orchestrator/ may have more mypy errors than the recorded
baseline; fewer passes (with a hint to record them); mypy failing to run is no pass. mypy itself is
not run here (a fake output stands in): .ci/run runs the real check."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("mypy_baseline", ROOT / "scripts" / "mypy_baseline.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["mypy_baseline"] = mod
    spec.loader.exec_module(mod)
    return mod


mb = _tool()

OUTPUT = """\
orchestrator/a.py:3: error: "A" has no attribute "b"  [attr-defined]
orchestrator/a.py:3: note: a note is not an error
orchestrator/a.py:9:5: error: Incompatible types in assignment  [assignment]
orchestrator/pkg/b.py:1: error: Name "x" is not defined  [name-defined]
Found 3 errors in 2 files (checked 4 source files)
"""


def test_errors_are_counted_per_file_and_notes_are_not():
    counts, lines = mb.count_errors(OUTPUT)
    assert counts == Counter({"orchestrator/a.py": 2, "orchestrator/pkg/b.py": 1})
    assert len(lines["orchestrator/a.py"]) == 2


def test_the_baseline_file_round_trips_and_lists_only_files_with_errors():
    counts = Counter({"orchestrator/b.py": 1, "orchestrator/a.py": 4, "orchestrator/clean.py": 0})
    text = mb.render_baseline(counts)
    assert "clean.py" not in text
    assert mb.read_baseline(text) == Counter({"orchestrator/a.py": 4, "orchestrator/b.py": 1})


def test_a_malformed_baseline_line_is_an_error():
    with pytest.raises(ValueError, match="line 2"):
        mb.read_baseline("# header\nfour orchestrator/a.py\n")


def test_a_file_with_more_errors_or_a_new_file_with_errors_is_worse():
    base = Counter({"orchestrator/a.py": 2, "orchestrator/b.py": 5})
    now = Counter({"orchestrator/a.py": 3, "orchestrator/b.py": 1, "orchestrator/new.py": 1})
    worse, better = mb.compare(now, base)
    assert worse == {"orchestrator/a.py": (2, 3), "orchestrator/new.py": (0, 1)}
    assert better == {"orchestrator/b.py": (5, 1)}


def _run(monkeypatch, tmp_path, output: str, rc: int, baseline: str | None, *argv: str) -> int:
    path = tmp_path / "mypy-baseline.txt"
    if baseline is not None:
        path.write_text(baseline)
    monkeypatch.setattr(mb, "BASELINE", path)
    monkeypatch.setattr(mb, "run_mypy", lambda: (rc, output))
    return mb.main(list(argv))


def test_main_fails_when_a_file_got_worse(monkeypatch, tmp_path, capsys):
    assert _run(monkeypatch, tmp_path, OUTPUT, 1, "1 orchestrator/a.py\n1 orchestrator/pkg/b.py\n") == 1
    assert "orchestrator/a.py: 1 -> 2" in capsys.readouterr().err


def test_main_passes_at_or_below_the_baseline_and_says_when_it_shrank(monkeypatch, tmp_path, capsys):
    assert _run(monkeypatch, tmp_path, OUTPUT, 1, "2 orchestrator/a.py\n1 orchestrator/pkg/b.py\n") == 0
    assert "fewer" not in capsys.readouterr().out
    assert _run(monkeypatch, tmp_path, OUTPUT, 1, "5 orchestrator/a.py\n1 orchestrator/pkg/b.py\n") == 0
    assert "3 error(s) fewer" in capsys.readouterr().out


def test_update_records_the_current_counts(monkeypatch, tmp_path):
    assert _run(monkeypatch, tmp_path, OUTPUT, 1, None, "--update") == 0
    assert mb.read_baseline((tmp_path / "mypy-baseline.txt").read_text()) == Counter(
        {"orchestrator/a.py": 2, "orchestrator/pkg/b.py": 1})


def test_mypy_that_did_not_run_is_no_pass(monkeypatch, tmp_path):
    assert _run(monkeypatch, tmp_path, "mypy: error: invalid configuration\n", 2, "") == 2
    assert _run(monkeypatch, tmp_path, "Traceback ...\n", 1, "") == 2


def test_the_committed_baseline_reads_and_names_files_of_orchestrator():
    base = mb.read_baseline((ROOT / "mypy-baseline.txt").read_text())
    assert all(p.startswith("orchestrator/") and p.endswith(".py") for p in base), sorted(base)
