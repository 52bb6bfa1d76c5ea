"""One options object for a profile run, and one place that decides exact vs sampled."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from capgeo.errors import CapgeoError
from capgeo.geometry import build_profile
from capgeo.geometry.estimate import pairwise_mode
from capgeo.geometry.profile_options import ProfileOptions
from test_profile import caption_set, fake_embeddings


def test_pairwise_mode_switches_above_the_threshold_only_in_auto():
    assert [pairwise_mode("auto", n, 100) for n in (99, 100, 101)] == ["exact", "exact", "sampled"]
    assert pairwise_mode("exact", 10**9, 100) == "exact" and pairwise_mode("sampled", 2, 100) == "sampled"
    with pytest.raises(CapgeoError, match="auto, exact or sampled, got 'fast'"):
        pairwise_mode("fast", 10)


def test_options_object_and_keywords_give_the_same_profile():
    rng = np.random.default_rng(2)
    captions = caption_set([f"t{i}" for i in range(90)], np.arange(90) // 3)
    embeddings = fake_embeddings(rng.normal(size=(90, 8)))
    options = ProfileOptions(batch_sizes=(4, 8), n_batches=3, relative_buckets=True, seed=5, sampled_above=50,
                             sampled_pairs=2000)
    by_object = build_profile(captions, embeddings, options, progress=False).to_dict()
    by_keywords = build_profile(captions, embeddings, progress=False,
                                **{f.name: getattr(options, f.name) for f in dataclasses.fields(options)}).to_dict()
    by_object.pop("provenance"), by_keywords.pop("provenance")
    assert by_object == by_keywords
    assert by_object["options"]["mode_used"] == "sampled"  # 90 captions > sampled_above
    assert by_object["options"]["batch_sizes"] == [4, 8] and by_object["options"]["seed"] == 5
    # a keyword overrides the object
    overridden = build_profile(captions, embeddings, options, progress=False, mode="exact").to_dict()
    assert overridden["options"]["mode_used"] == "exact" and overridden["pairwise"]["exact"] is True


@pytest.mark.parametrize("change, message", [
    ({"mode": "fast"}, "got 'fast'"),
    ({"companions": "annoy"}, "companions must be one of exact, faiss"),
    ({"top_k": 0}, "--top-k: expected at least 1"),
    ({"near_duplicate_threshold": 1.5}, "near-duplicate threshold: expected a cosine between -1 and 1"),
    ({"relative_buckets": True, "relative_quantiles": (0.9, 0.5)}, "ascending levels"),
])
def test_bad_options_are_refused_before_any_work(change, message):
    with pytest.raises(CapgeoError, match=message):
        ProfileOptions(**change).checked([16])


def test_companions_faiss_without_faiss_is_refused_before_encoding(tmp_path, monkeypatch):
    import importlib.util

    from click.testing import CliRunner

    import capgeo.encoders
    from capgeo.cli import main

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "faiss" else real_find_spec(name, *a))
    data = tmp_path / "d.txt"
    data.write_text("a dog runs\na cat sits\na red car\n")
    # a sample covering all 3 negative pairs runs the exact pass, which needs no faiss: on to the encoder
    covered = CliRunner().invoke(main, ["profile", str(data), "--mode", "sampled", "--companions", "faiss",
                                        "--encoder", "vectors:missing.npy"])
    assert covered.exit_code == 2 and "vector file not found" in covered.output
    monkeypatch.setattr(capgeo.encoders, "embed", lambda *a, **k: pytest.fail("encoded before refusing"))
    result = CliRunner().invoke(main, ["profile", str(data), "--mode", "sampled", "--sampled-pairs", "2",
                                       "--companions", "faiss"])
    assert result.exit_code == 2 and "approximate companions need faiss" in result.output
