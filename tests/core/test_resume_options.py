"""What `resume` says of the options it runs with: each one kept, given again, or absent."""

from types import SimpleNamespace

from orchestrator.service.oncall import OPTIONS_KEY, kept_options


def _run(**opts: object) -> SimpleNamespace:
    return SimpleNamespace(context={OPTIONS_KEY: opts} if opts else {})


def test_options_given_again_are_not_called_absent() -> None:
    yes, soak, note = kept_options(_run(yes=True, soak="10m"), yes=True, soak="10m")
    assert (yes, soak) == (True, "10m")
    assert "without" not in note
    assert note == "uses the options given now: --soak 10m --yes"


def test_options_the_run_had_are_kept() -> None:
    yes, soak, note = kept_options(_run(yes=True, soak="10m"), yes=False, soak=None)
    assert (yes, soak) == (True, "10m")
    assert note.startswith("keeps the run's own options: --soak 10m --yes")


def test_a_different_soak_given_now_names_the_one_it_replaces() -> None:
    _, soak, note = kept_options(_run(soak="30m"), yes=False, soak="5m")
    assert soak == "5m"
    assert note == "uses the options given now: --soak 5m (the run had 30m)"


def test_one_kept_and_one_given() -> None:
    yes, soak, note = kept_options(_run(soak="30m"), yes=True, soak=None)
    assert (yes, soak) == (True, "30m")
    assert note == ("keeps the run's own options: --soak 30m (give them again to override); "
                    "uses the options given now: --yes")


def test_none_anywhere() -> None:
    yes, soak, note = kept_options(_run(), yes=False, soak=None)
    assert (yes, soak) == (False, None)
    assert "none kept" in note
