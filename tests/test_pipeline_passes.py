"""`capgeo gamma` and `capgeo truncation` go through capgeo.pipeline.run_profile (passes=GammaPasses /
TruncationPasses): their JSON is the one the findings' own builders make from the same captions and
vectors, byte for byte (provenance aside), and every option is checked there before the encoding."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from capgeo._json_write import dumps
from capgeo.captions import load_captions
from capgeo.cli import main
from capgeo.errors import CapgeoError
from capgeo.geometry.profile_options import ProfileOptions
from capgeo.pipeline import EncodeOptions, GammaPasses, TruncationPasses, run_profile

N_GROUPS, PER_GROUP = 24, 2


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """24 images of 2 captions each (JSONL) and random vectors aligned with them by row."""
    folder = tmp_path_factory.mktemp("passes")
    words = ("red", "blue", "green", "small", "large", "old", "new", "wet")
    records = [{"caption_id": f"c{i}", "image_id": f"img{i // PER_GROUP}",
                "caption": f"a {words[i % 8]} {words[(i // 3) % 8]} bus number {i} by a {words[(i // 5) % 8]} kerb "
                           f"under a {words[(i // 7) % 8]} sky near the {words[(i // 2) % 8]} station"}
               for i in range(N_GROUPS * PER_GROUP)]
    data = folder / "captions.jsonl"
    data.write_text("".join(json.dumps(record) + "\n" for record in records))
    vectors = np.random.default_rng(5).normal(size=(len(records), 16)).astype(np.float32)
    np.save(folder / "emb.npy", vectors)
    return folder, data, folder / "emb.npy"


def cli_json(*args) -> dict:
    result = CliRunner().invoke(main, [str(arg) for arg in args] + ["--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def without_timings(profile: dict) -> dict:
    profile = {key: value for key, value in profile.items() if key != "provenance"}
    for name in ("gamma", "truncation"):
        if name in profile:
            profile[name] = {key: value for key, value in profile[name].items() if key != "elapsed_s"}
    return profile


def test_gamma_json_is_gamma_profiles_own(dataset):
    from capgeo.encoders import embed
    from capgeo.findings.gamma import DEFAULT_GRID, gamma_profile

    _, data, vectors = dataset
    spec = f"vectors:{vectors}"
    by_cli = cli_json("gamma", data, "--encoder", spec, "--batch-size", 16, "--batch-size", 8, "--n-batches", 7,
                      "--seed", 3, "--hard-edge", 0.5)
    captions = load_captions(str(data))
    direct = gamma_profile(captions, embed(captions, spec, progress=False), batch_sizes=[16, 8], n_batches=7, seed=3,
                           grid=DEFAULT_GRID, hard_edge=0.5, progress=False).to_dict()
    assert dumps(without_timings(by_cli)) == dumps(without_timings(direct))
    # the pipeline's typed Profile writes the same JSON
    run = run_profile(str(data), EncodeOptions(spec), ProfileOptions(batch_sizes=(16, 8), n_batches=7, seed=3),
                      passes=GammaPasses(hard_edge=0.5), progress=False)
    assert run.batch_sizes.sizes == [16, 8]
    assert dumps(without_timings(run.profile.to_dict())) == dumps(without_timings(by_cli))


def test_truncation_json_is_truncation_profiles_own(dataset):
    from capgeo.pipeline import truncation_profile

    folder, data, _ = dataset
    cache = folder / "cache"
    by_cli = cli_json("truncation", data, "--lengths", "8,16", "--batch-size", 16, "--n-batches", 5, "--seed", 2,
                      "--threshold", 0.8, "--top", 2, "--top-k", 3, "--buckets", "0.5,0.7", "--cache-dir", cache)
    captions = load_captions(str(data))
    direct = truncation_profile(captions, None, lengths=[8, 16], cache_dir=str(cache), progress=False, batch_size=16,
                                n_batches=5, seed=2, threshold=0.8, max_listed=2, top_k=3, edges=(0.5, 0.7)).to_dict()
    assert by_cli["truncation"]["lengths"][:2] == [8, 16]
    assert dumps(without_timings(by_cli)) == dumps(without_timings(direct))


@pytest.mark.parametrize("options, passes, says", [
    (ProfileOptions(n_batches=10**6), GammaPasses(), "--n-batches: expected at most 100,000"),
    (ProfileOptions(batch_sizes=(3,)), GammaPasses(), "--batch-size 3 is too small for the gamma rule"),
    (ProfileOptions(buckets=(0.9, 0.5)), TruncationPasses(), "--buckets: edges must be strictly ascending"),
    (ProfileOptions(top_k=5000), TruncationPasses(), "--top-k: expected at most 1,000"),
    (ProfileOptions(), TruncationPasses(threshold=1.5), "threshold: expected a cosine between -1 and 1"),
    (ProfileOptions(), TruncationPasses(max_listed=-1), "pairs listed per length must be >= 0"),
])
def test_options_are_refused_before_any_encoding(dataset, monkeypatch, options, passes, says):
    import capgeo.encoders
    import capgeo.pipeline as pipeline

    def never(*args, **kwargs):
        raise AssertionError("encoded before the options were checked")

    monkeypatch.setattr(EncodeOptions, "embed", never)
    monkeypatch.setattr(capgeo.encoders, "get_encoder", never)
    monkeypatch.setattr(pipeline, "embed_at_lengths", never)
    _, data, _ = dataset
    with pytest.raises(CapgeoError, match=says):
        run_profile(str(data), EncodeOptions(use_cache=False), options, passes=passes, progress=False)


def test_one_group_is_refused_before_any_encoding(tmp_path, monkeypatch):
    monkeypatch.setattr(EncodeOptions, "embed", lambda *a, **k: pytest.fail("encoded"))
    data = tmp_path / "one.jsonl"
    data.write_text("".join(json.dumps({"caption": f"a dog {i}", "image_id": "x"}) + "\n" for i in range(4)))
    for passes in (None, GammaPasses(), TruncationPasses()):
        with pytest.raises(CapgeoError, match="all 4 captions belong to one group"):
            run_profile(str(data), EncodeOptions(use_cache=False), passes=passes, progress=False)


def test_an_unwritable_cache_is_refused_before_any_encoding(dataset, tmp_path, monkeypatch):
    monkeypatch.setattr(EncodeOptions, "embed", lambda *a, **k: pytest.fail("encoded"))
    _, data, vectors = dataset
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    for passes in (None, GammaPasses()):
        with pytest.raises(CapgeoError, match="cannot write the embedding cache"):
            run_profile(str(data), EncodeOptions(cache_dir=blocker / "cache"), passes=passes, progress=False)
    # vectors of a file are never cached: they need no cache folder
    EncodeOptions(f"vectors:{vectors}", cache_dir=blocker / "cache").check_cache()
