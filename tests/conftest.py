"""Fixtures shared by the whole test suite."""

import os
from pathlib import Path

import pytest

# Tests never touch the network: model hubs are offline, and the embedding cache
# lives in a throw-away folder unless a test points it elsewhere.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"


@pytest.fixture(autouse=True, scope="session")
def _isolated_embedding_cache(tmp_path_factory):
    previous = os.environ.get("CAPGEO_CACHE")
    os.environ["CAPGEO_CACHE"] = str(tmp_path_factory.mktemp("capgeo-cache"))
    yield
    if previous is None:
        os.environ.pop("CAPGEO_CACHE", None)
    else:
        os.environ["CAPGEO_CACHE"] = previous

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
