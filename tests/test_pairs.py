"""The pairs section (capgeo/findings/pairs.py): every count against a numpy brute force on the same
vectors, planted mismatches, false negatives and image twins found, the gradient zeros against torch."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from capgeo.captions import load_captions
from capgeo.errors import CapgeoError
from capgeo.findings.pairs import (TIE, keys_above, pair_pass, pairs_section,
                                   zero_negative_gradients)
from capgeo.images import ImageVectors
from capgeo.images.vectors import from_array


def unit(rows):
    rows = np.asarray(rows, dtype=np.float64)
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def dataset(n_images=40, per_image=3, width=16, noise=0.6, seed=0):
    """Images and captions near their image, at random positions; codes 0..G-1 in caption order."""
    rng = np.random.default_rng(seed)
    images = unit(rng.standard_normal((n_images, width)))
    codes = np.repeat(np.arange(n_images), per_image)
    text = unit(images[codes] + noise * rng.standard_normal((len(codes), width)))
    return images, text, codes


def brute(images, text, codes, delta):
    """Every count from the whole (G, N) matrix, by its definitions in docs/pairs.md."""
    S = images.astype(np.float64) @ text.astype(np.float64).T
    n = len(codes)
    own = S[codes, np.arange(n)]
    other_image = codes[None, :] != np.arange(len(images))[:, None]      # (G, N): caption of another image
    text_rank = np.array([int(((S[:, k] > own[k] + TIE) & (np.arange(len(images)) != codes[k])).sum())
                          for k in range(n)])
    image_rank = np.array([int(((S[codes[m]] > own[m] + TIE) & other_image[codes[m]]).sum()) for m in range(n)])
    fn = np.array([int(((S[codes[m]] >= own[m] - delta - TIE) & other_image[codes[m]]).sum()) for m in range(n)])
    rows = sorted((m, k) for m in range(n) for k in range(n)
                  if codes[k] != codes[m] and S[codes[m], k] >= own[m] - delta - TIE)
    return S, own, text_rank, image_rank, fn, rows


@pytest.mark.parametrize("delta", [0.0, 0.05, 0.3])
@pytest.mark.parametrize("block_values", [64, 1 << 22])
@pytest.mark.parametrize("dense_factor", [0, 10 ** 9], ids=["sorted", "dense"])
@pytest.mark.parametrize("export", [True, False])
def test_pair_pass_matches_brute_force(delta, block_values, dense_factor, export, monkeypatch):
    import capgeo.findings.pairs as pairs

    monkeypatch.setattr(pairs, "DENSE_FACTOR", dense_factor)   # each block counted one way or the other
    images, text, codes = dataset()
    done = pair_pass(text, images, codes, delta=delta, listed=15, export=export, block_values=block_values)
    S, own, text_rank, image_rank, fn, rows = brute(images, text, codes, delta)
    np.testing.assert_allclose(done.alignment, own, rtol=0, atol=1e-13)
    np.testing.assert_array_equal(done.text_rank, text_rank)
    np.testing.assert_array_equal(done.image_rank, image_rank)
    np.testing.assert_array_equal(done.false_negatives, fn)
    assert fn.sum() > 0
    if export:
        pairs_, negatives, cosines = done.exported
        assert sorted(zip(pairs_.tolist(), negatives.tolist())) == rows
        np.testing.assert_allclose(cosines, S[codes[pairs_], negatives], rtol=0, atol=1e-13)
    # the listed rows are the largest margins, in order
    margins = sorted((S[codes[m], k] - own[m] for m, k in rows), reverse=True)[:15]
    listed = [S[codes[m], k] - own[m] for m, k in done.top_rows]
    np.testing.assert_allclose(listed, margins)


def test_keys_above_counts_ties_as_asked():
    key_rows, key_values = np.array([0, 0, 0, 1]), np.array([0.5, 0.7, 0.7, 0.9])
    query_rows, query_values = np.array([0, 0, 1, 0]), np.array([0.7, 0.1, 0.95, 0.8])
    np.testing.assert_array_equal(keys_above(key_rows, key_values, query_rows, query_values, 2, ties=True),
                                  [2, 3, 0, 0])
    np.testing.assert_array_equal(keys_above(key_rows, key_values, query_rows, query_values, 2, ties=False),
                                  [0, 3, 0, 0])


def _captions(codes, texts=None):
    texts = texts or [f"caption {k} of a dog on a red sofa number {k}" for k in range(len(codes))]
    return load_captions([{"id": f"c{k}", "group": f"sha256:{'ab' * 32}#{g}" if g % 2 else f"img{g}.jpg",
                           "text": text} for k, (g, text) in enumerate(zip(codes, texts))],
                         id_column="id", group_column="group", text_column="text")


def jpeg(seed: int) -> bytes:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 255, (24, 24, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=70)
    return out.getvalue()


def test_section_finds_planted_mismatch_false_negative_and_twins(tmp_path):
    images, text, codes = dataset(n_images=30, per_image=2, noise=0.3)
    # planted: caption 0 (image 0) swapped for a vector far from every image, so it is mismatched
    text[0] = unit(-images[:10].sum(axis=0, keepdims=True))[0]
    # planted: image 5 a near copy of image 7, and image 9's bytes those of image 11
    images[5] = unit(images[7:8] + 1e-3)[0]
    captions = _captions(codes)
    hashes = [f"h{g}" for g in range(30)]
    hashes[9] = hashes[11]
    vectors = ImageVectors(vectors=images, present=np.ones(30, dtype=bool), source="test", content_hashes=tuple(hashes),
                           thumbnail=lambda g: jpeg(g))
    out = tmp_path / "negatives.parquet"
    section = pairs_section(captions, text, vectors, batch_size=8, n_batches=20, false_negatives_output=str(out)).to_dict()
    assert section["mismatched"]["pairs"][0]["caption_id"] == "c0"
    card = section["mismatched"]["pairs"][0]
    assert card["hardest_wrong"]["id"] not in {c["id"] for c in card["captions"]}
    S, own, text_rank, image_rank, fn, rows = brute(images, text, codes, 0.0)
    negatives = section["false_negatives"]
    assert negatives["n_rows"] == len(rows) == section["false_negatives"]["n_written"]
    import polars as pl

    written = pl.read_parquet(out)
    assert written.height == len(rows)
    assert set(written.columns) >= {"image_id", "caption_id", "negative_caption_id", "cosine", "boost"}
    twins = section["twins"]
    names = captions.groups
    assert {frozenset((p["a"], p["b"])) for p in twins["near_pairs"]} >= {frozenset((names[10], names[14]))}
    assert twins["n_exact_sets"] == 1 and set(twins["exact_sets"][0]) == {names[18], names[22]}
    # thumbnails of the listed images, as base64 JPEG
    assert section["thumbnails"] and all(json.dumps(v) for v in section["thumbnails"].values())
    # retrieval against the brute force: text -> image and image -> text R@1, R@5
    best = np.full(30, 10 ** 9)
    np.minimum.at(best, codes, image_rank)
    for k in (1, 5):
        assert section["retrieval"][f"text_to_image_r{k}"] == pytest.approx((text_rank < k).mean())
        assert section["retrieval"][f"image_to_text_r{k}"] == pytest.approx((best < k).mean())


def test_missing_images_leave_their_pairs_out():
    images, text, codes = dataset(n_images=12, per_image=2)
    present = np.ones(12, dtype=bool)
    present[3] = False
    images = images.copy()
    images[3] = 0
    section = pairs_section(_captions(codes), text, ImageVectors(vectors=images, present=present, source="t")).to_dict()
    assert section["n_pairs"] == 22 and section["n_images"] == 11 and section["n_images_missing"] == 1


def test_batch_saturation_and_false_negatives_against_brute_force():
    from capgeo.findings.hnclip_loss import hnclip_loss
    from capgeo.geometry.batches import sample_batches

    images, text, codes = dataset(n_images=20, per_image=2, noise=0.05)
    captions = _captions(codes)
    section = pairs_section(captions, text, from_array(captions, images, "x", width=16), batch_size=6,
                            n_batches=30, logit_scale=100.0, gamma=0.5, delta=0.02).to_dict()
    batches = sample_batches(codes, 6, 30, 0)
    with_negative = zero0 = below = 0
    for batch in batches:
        S = images[codes[batch]].astype(np.float64) @ text[batch].astype(np.float64).T
        off = ~np.eye(6, dtype=bool)
        with_negative += bool(((S >= np.diag(S)[:, None] - 0.02 - TIE) & off).any())
        below += hnclip_loss(S, np.zeros((6, 6)), 100.0, 0.0) < 1e-3
    assert section["false_negatives"]["batch_share_batches"] == pytest.approx(with_negative / 30)
    saturation = section["saturation"]
    assert saturation["gammas"][0]["share_batches_below"] == pytest.approx(below / 30)
    assert saturation["logit_scale"] == 100.0


@pytest.mark.parametrize("scale", [100.0, 400.0])
def test_zero_gradients_match_torch_autograd(scale):
    import torch

    rng = np.random.default_rng(3)
    images = unit(rng.standard_normal((16, 8)))
    texts = unit(images + 0.2 * rng.standard_normal((16, 8)))
    for gamma in (0.0, 0.5):
        logits = torch.tensor(images) @ torch.tensor(texts).T
        if gamma:
            caption = torch.tensor(texts) @ torch.tensor(texts).T
            caption.fill_diagonal_(0)
            logits = logits + gamma * caption
        logits = (scale * logits).detach().requires_grad_(True)
        labels = torch.arange(16)
        loss = (torch.nn.functional.cross_entropy(logits, labels)
                + torch.nn.functional.cross_entropy(logits.T, labels)) / 2
        loss.backward()
        grad = logits.grad.numpy()
        expected = int(((grad == 0) & ~np.eye(16, dtype=bool)).sum())
        assert zero_negative_gradients(images, texts, scale, gamma) == expected
    assert expected > 0 if scale == 400.0 else True


def test_bad_options_are_one_error():
    images, text, codes = dataset(n_images=5, per_image=1)
    with pytest.raises(CapgeoError, match="--delta"):
        pair_pass(text, images, codes, delta=-0.1)
    with pytest.raises(CapgeoError, match="image vectors"):
        pairs_section(_captions(codes), text, ImageVectors(vectors=images[:4], present=np.ones(4, bool), source="f")).to_dict()


def test_pairs_section_is_typed_documented_and_round_trips():
    import dataclasses
    import re
    from pathlib import Path

    from capgeo.geometry.typed_profile import Pairs

    images, text, codes = dataset(n_images=12, per_image=2)
    vectors = ImageVectors(vectors=images, present=np.ones(12, bool), source="t", thumbnail=lambda g: jpeg(g))
    section = json.loads(json.dumps(pairs_section(_captions(codes), text, vectors, batch_size=4, n_batches=3).to_dict()))
    typed = Pairs.from_dict(section)
    assert typed.to_dict() == section and typed.retrieval.text_to_image_r1 == section["retrieval"]["text_to_image_r1"]
    doc = (Path(__file__).resolve().parents[1] / "docs" / "profile-schema.md").read_text(encoding="utf-8")
    body = doc.split("\n## `pairs`", 1)[1].split("\n## ", 1)[0]
    documented = {key for line in body.splitlines() if line.startswith("| `")
                  for key in re.findall(r"`([a-z_0-9]+)`", line.split("|")[1])}
    declared = {item.name for item in dataclasses.fields(Pairs)} - {"extra", "nulls", "order"}
    assert declared == documented == set(section)


def test_short_id_shortens_hash_ids_only():
    from capgeo.display import short_id

    full = "sha256:" + "0123456789abcdef" * 4 + "#3"
    assert short_id(full) == "sha256:0123456789…#3"
    assert short_id("sha256:" + "ab" * 32) == "sha256:abababab" + "ab…"
    assert short_id("COCO_val2014_000000391895.jpg#0") == "COCO_val2014_000000391895.jpg#0"


def test_pairs_findings_are_typed_and_load_as_built(tmp_path):
    """Each finding of the section is a typed section, read back from its JSON as it was built: the keys
    written as null (batch_size, output) and those written only when set (n_written) included."""
    from capgeo.geometry.typed_profile import (Distribution, ImageTwinPair, ImageTwins, PairCard, PairFalseNegatives,
                                               PairGammaSaturation, PairMismatched, PairNegativeRow, PairRetrieval,
                                               Pairs, PairSaturation)

    images, text, codes = dataset(n_images=12, per_image=2)
    images[3] = unit(images[4:5] + 1e-3)[0]
    vectors = ImageVectors(vectors=images, present=np.ones(12, bool), source="t", thumbnail=lambda g: jpeg(g))
    for fields in ({}, {"batch_size": 4, "n_batches": 3, "false_negatives_output": str(tmp_path / "fn.csv")}):
        built = pairs_section(_captions(codes), text, vectors, delta=0.5, **fields)
        written = json.loads(json.dumps(built.to_dict()))
        assert Pairs.from_dict(written) == built and Pairs.from_dict(written).to_dict() == written
        assert isinstance(built.alignment, Distribution) and isinstance(built.alignment_per_image, Distribution)
        assert isinstance(built.retrieval, PairRetrieval) and isinstance(built.mismatched, PairMismatched)
        assert all(isinstance(card, PairCard) for card in built.mismatched.pairs)
        negatives = built.false_negatives
        assert isinstance(negatives, PairFalseNegatives) and negatives.rows
        assert all(isinstance(row, PairNegativeRow) for row in negatives.rows)
        assert isinstance(built.twins, ImageTwins) and isinstance(built.twins.near_pairs[0], ImageTwinPair)
        if fields:
            assert negatives.n_written == negatives.n_rows == written["false_negatives"]["n_written"]
            assert isinstance(built.saturation, PairSaturation)
            assert all(isinstance(entry, PairGammaSaturation) for entry in built.saturation.gammas)
        else:
            assert written["false_negatives"]["batch_size"] is None and written["false_negatives"]["output"] is None
            assert "n_written" not in written["false_negatives"] and written["saturation"] is None
