"""Building a CLIP / Long-CLIP text tower does not import transformers or timm (seconds of
start-up), gives the same embeddings as with them imported, and leaves them usable afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("open_clip")
pytest.importorskip("transformers")

from _clip_fixtures import tiny_clip, tiny_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CAPTIONS = ["a red bus parked by the kerb", "two dogs on a beach at dusk",
            "an empty train platform in the rain, lights reflected in the puddles"]

# run in a fresh interpreter: this test process has imported open_clip (and transformers) already
ENCODE = """
import json, sys
import numpy as np
if sys.argv[3] == "transformers-first":
    import transformers  # noqa: F401 - the way open_clip is imported when something needs it
from capgeo.encoders.registry import get_encoder
encoder = get_encoder(sys.argv[1], device="cpu", cache_dir=sys.argv[4])
np.save(sys.argv[2], encoder.encode(json.loads(sys.argv[5])))
after_encoding = {name: name in sys.modules for name in ("transformers", "timm")}
from capgeo.encoders.minilm import load_minilm_encoder
minilm = load_minilm_encoder(device="cpu").encode(["a red bus parked by the kerb"])
print(json.dumps({"after_encoding": after_encoding, "minilm_shape": list(minilm.shape)}))
"""


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("towers")
    config = tiny_config(77)
    torch.save(tiny_clip(config).state_dict(), folder / "tiny.pt")
    (folder / "tiny.json").write_text(json.dumps(config))
    state = tiny_clip(tiny_config(248), seed=3).state_dict()
    state["positional_embedding_res"] = torch.randn(state["positional_embedding"].shape) * 0.5
    torch.save(state, folder / "longclip-tiny.pt")
    return {"clip": folder / "tiny.pt", "longclip": folder / "longclip-tiny.pt"}


def _encode_in_fresh_process(spec: str, out: Path, mode: str, cache: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", ENCODE, spec, str(out), mode, str(cache), json.dumps(CAPTIONS)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["clip", "longclip"])
def test_text_tower_is_built_without_transformers_and_gives_the_same_vectors(checkpoints, kind, tmp_path):
    spec = str(checkpoints[kind])
    hidden = _encode_in_fresh_process(spec, tmp_path / "hidden.npy", "plain", tmp_path / "cache-a")
    assert hidden["after_encoding"] == {"transformers": False, "timm": False}
    # sentence-transformers (which needs transformers) still loads and encodes in the same process
    assert hidden["minilm_shape"] == [1, 384]
    whole = _encode_in_fresh_process(spec, tmp_path / "whole.npy", "transformers-first", tmp_path / "cache-b")
    assert whole["after_encoding"]["transformers"] is True
    np.testing.assert_array_equal(np.load(tmp_path / "hidden.npy"), np.load(tmp_path / "whole.npy"))
