"""Fixtures shared by the whole test suite."""

from pathlib import Path

import pytest

#: real benchmark captions, laid beside the repository (see ../shared/data/README.md)
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
#: the samples shipped in the repository
REPO_DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture
def shared_data() -> Path:
    """Folder of real benchmark captions; the test is skipped when it is not there."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real benchmark captions not found at {SHARED_DATA} (they lie beside the repository in CI)")
    return SHARED_DATA


@pytest.fixture
def repo_data() -> Path:
    """The repository's data/ folder (small DOCCI and COCO samples)."""
    return REPO_DATA
