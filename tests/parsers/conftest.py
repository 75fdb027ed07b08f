from pathlib import Path

import pytest

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "reference" / "samples"


@pytest.fixture
def sample():
    """Read a reference sample (tests/data/reference/samples) unchanged; a missing one is an error."""

    def read(name: str) -> str:
        return (SAMPLES / name).read_text(encoding="utf-8")

    return read
