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

import open_clip  # noqa: E402,F401
import torch  # noqa: E402
import transformers  # noqa: E402,F401

from _clip_fixtures import tiny_clip, tiny_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CAPTIONS = ["a red bus parked by the kerb", "two dogs on a beach at dusk",
            "an empty train platform in the rain, lights reflected in the puddles"]

# run in a fresh interpreter (this test process has imported open_clip and transformers already):
# encode with each spec in turn, noting after each whether transformers / timm were imported,
# then ("plain") load the MiniLM encoder (sentence-transformers, which needs transformers)
ENCODE = """
import json, sys
import numpy as np
mode, folder, cache, texts, specs = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]), sys.argv[5:]
if mode == "transformers-first":
    import transformers  # noqa: F401 - open_clip then imports as it always did
from capgeo.encoders.registry import get_encoder
imported = []
for index, spec in enumerate(specs):
    encoder = get_encoder(spec, device="cpu", cache_dir=cache)
    encoder.token_counts(texts)  # first, as embed() does: the cache is keyed on them
    np.save(f"{folder}/{index}.npy", encoder.encode(texts))
    imported.append({name: name in sys.modules for name in ("transformers", "timm")})
shape = None
if mode == "plain":
    from capgeo.encoders.minilm import load_minilm_encoder
    shape = list(load_minilm_encoder(device="cpu").encode(texts).shape)
print(json.dumps({"imported": imported, "minilm_shape": shape}))
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


def _encode_in_fresh_process(mode: str, folder: Path, *specs: str, cache: Path | None = None
                             ) -> tuple[list[np.ndarray], dict]:
    """Vectors of CAPTIONS under each spec, in one fresh process, and what it imported."""
    folder.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", ENCODE, mode, str(folder), str(cache or folder / "cache"),
                           json.dumps(CAPTIONS), *specs], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return [np.load(folder / f"{index}.npy") for index in range(len(specs))], report


@pytest.mark.slow
def test_towers_build_without_transformers_same_vectors_and_transformers_still_usable(checkpoints, tmp_path):
    clip, longclip = str(checkpoints["clip"]), str(checkpoints["longclip"])
    hf_text = f"{checkpoints['hf_text'].with_suffix('.json')}@{checkpoints['hf_text']}"
    # a CLIP and a Long-CLIP tower, then a Hugging Face text tower in the same process: open_clip
    # was imported without transformers, so its modules that guard the import are reloaded
    hidden, report = _encode_in_fresh_process("plain", tmp_path / "hidden", clip, longclip, hf_text)
    assert report["imported"][:2] == [{"transformers": False, "timm": False}] * 2
    assert report["imported"][2]["transformers"] is True
    # sentence-transformers (which needs transformers) loads and encodes in the same process
    assert report["minilm_shape"] == [len(CAPTIONS), 384]
    # the same three encoders where transformers was imported first, as open_clip always did
    whole, report = _encode_in_fresh_process("transformers-first", tmp_path / "whole", clip, longclip, hf_text)
    assert report["imported"][0]["transformers"] is True
    assert [vectors.shape for vectors in hidden] == [(len(CAPTIONS), 32)] * 3
    for ours, reference in zip(hidden, whole):
        np.testing.assert_array_equal(ours, reference)


@pytest.mark.slow
def test_a_second_run_with_the_weights_remembered_imports_neither(checkpoints, tmp_path):
    # the first run hashes the weights and imports open_clip meanwhile (without transformers and timm);
    # a second one finds the facts remembered, hashes nothing, and its first open_clip import comes
    # from tokenising: it must hide them too
    clip, longclip = str(checkpoints["clip"]), str(checkpoints["longclip"])
    first, _ = _encode_in_fresh_process("plain", tmp_path / "first", clip, longclip, cache=tmp_path / "cache")
    assert (tmp_path / "cache" / "weight-files.json").is_file()
    for spec, vectors in ((clip, first[0]), (longclip, first[1])):
        again, report = _encode_in_fresh_process("plain", tmp_path / f"again-{Path(spec).stem}", spec,
                                                 cache=tmp_path / "cache")
        assert report["imported"] == [{"transformers": False, "timm": False}]
        np.testing.assert_array_equal(again[0], vectors)
