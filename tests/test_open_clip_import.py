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
    # a Hugging Face text tower (random weights, the packaged MiniLM's BERT config): needs transformers
    import open_clip

    from capgeo.encoders.minilm import default_model_dir

    hf_text = {"hf_model_name": str(default_model_dir()), "hf_tokenizer_name": str(default_model_dir()),
               "hf_model_pretrained": False, "hf_pooler_type": "mean_pooler", "hf_proj_type": "linear",
               "context_length": 32}
    hf_config = {**tiny_config(77), "custom_text": True, "text_cfg": hf_text}
    torch.manual_seed(5)
    hf_model = open_clip.CustomTextCLIP(**{key: value for key, value in hf_config.items() if key != "custom_text"})
    torch.save(hf_model.state_dict(), folder / "hf-text.pt")
    (folder / "hf-text.json").write_text(json.dumps(hf_config))
    return {"clip": folder / "tiny.pt", "longclip": folder / "longclip-tiny.pt", "hf_text": folder / "hf-text.pt"}


def _encode_in_fresh_process(spec: str, out: Path, mode: str, cache: Path) -> dict:
    return json.loads(_run(ENCODE, spec, str(out), mode, str(cache), json.dumps(CAPTIONS)).stdout.strip().splitlines()[-1])


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


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


# a Long-CLIP tower first (open_clip imported without transformers), then a Hugging Face text tower
BOTH = """
import sys
import numpy as np
from capgeo.encoders.registry import get_encoder
longclip, out, cache, hf_text, texts = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
get_encoder(longclip, device="cpu", cache_dir=cache).encode(texts)
assert "transformers" not in sys.modules
np.save(out, get_encoder(hf_text, device="cpu", cache_dir=cache).encode(texts))
"""


@pytest.mark.slow
def test_hugging_face_text_tower_after_a_tower_built_without_transformers(checkpoints, tmp_path):
    spec = f"{checkpoints['hf_text'].with_suffix('.json')}@{checkpoints['hf_text']}"
    _run(BOTH, str(checkpoints["longclip"]), str(tmp_path / "after.npy"), str(tmp_path / "cache"), spec, *CAPTIONS)
    alone = _encode_in_fresh_process(spec, tmp_path / "alone.npy", "plain", tmp_path / "cache-alone")
    assert alone["after_encoding"]["transformers"] is True
    after = np.load(tmp_path / "after.npy")
    assert after.shape == (len(CAPTIONS), 32)
    np.testing.assert_array_equal(after, np.load(tmp_path / "alone.npy"))
