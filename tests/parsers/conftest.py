from pathlib import Path

import pytest

SAMPLES = Path(__file__).resolve().parents[3] / "shared" / "reference" / "samples"


@pytest.fixture
def sample():
    """Read a reference sample unchanged; skip when the shared reference tree is absent."""

    def read(name: str) -> str:
        path = SAMPLES / name
        if not path.is_file():
            pytest.skip(f"reference sample {path} is absent on this machine")
        return path.read_text(encoding="utf-8")

    return read
