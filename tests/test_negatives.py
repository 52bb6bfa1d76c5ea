"""`capgeo negatives`: hard negatives in a cosine range, against brute force, written and read back."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from _action_fixtures import unit, write_jsonl
from _report_fixtures import REPO_DATA
from capgeo.cli import main
from capgeo.findings.negatives import NegativeOptions, cosine_quantiles, hard_negatives


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], env={"COLUMNS": "200"})


def clustered(n_groups=30, per_group=2, dim=8, seed=0):
    """Captions in tight clusters across images, so many companions sit above a max cosine."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(6, dim))
    n = n_groups * per_group
    vectors = unit(centres[rng.integers(6, size=n)] + 0.3 * rng.normal(size=(n, dim)))
    return vectors, np.arange(n) // per_group


def brute_negatives(vectors, codes, k, low, high, per_image=1, texts=None, margin=None):
    """The rules of docs/negatives.md one candidate at a time, in float64: range, another image,
    no text of the anchor's own image, a text once, at most per_image from one image, margin."""
    similarity = vectors.astype(np.float64) @ vectors.astype(np.float64).T
    n = len(codes)
    keys = [" ".join(text.casefold().split()) for text in texts] if texts is not None else None
    order_index = np.full((n, k), -1)
    order_cosine = np.full((n, k), np.nan)
    for anchor in range(n):
        own = [j for j in range(n) if codes[j] == codes[anchor] and j != anchor]
        ceiling = min((similarity[anchor, j] for j in own), default=np.inf) - (margin or 0.0) \
            if margin is not None else np.inf
        own_keys = {keys[j] for j in range(n) if codes[j] == codes[anchor]} if keys else set()
        taken, per_group = set(), {}
        found = 0
        for j in np.argsort(-similarity[anchor], kind="stable"):
            value = similarity[anchor, j]
            if codes[j] == codes[anchor] or not low <= value < high or value > ceiling + 1e-7:
                continue
            if keys is not None and (keys[j] in own_keys or keys[j] in taken):
                continue
            if per_image is not None and per_group.get(codes[j], 0) >= per_image:
                continue
            if keys is not None:
                taken.add(keys[j])
            per_group[codes[j]] = per_group.get(codes[j], 0) + 1
            order_index[anchor, found], order_cosine[anchor, found] = j, value
            found += 1
            if found == k:
                break
    return order_index, order_cosine


@pytest.mark.parametrize("per_image", [1, 2, None])
@pytest.mark.parametrize("k, low, high", [(3, -1.0, 0.95), (4, 0.0, 0.8), (2, 0.5, 0.7), (5, 0.97, 1.0)])
def test_hard_negatives_match_brute_force(k, low, high, per_image):
    vectors, codes = clustered(per_group=3)
    index, cosine = hard_negatives(vectors, codes, NegativeOptions(k=k, min_cosine=low, max_cosine=high,
                                                                   per_image=per_image), block_size=16)
    expected_index, expected_cosine = brute_negatives(vectors, codes, k, low, high, per_image=per_image)
    # compare away from the range's edges, where float32 and float64 may disagree
    assert np.all(np.abs(np.nan_to_num(expected_cosine, nan=9) - high) > 1e-5)
    np.testing.assert_array_equal(index, expected_index)
    np.testing.assert_allclose(cosine, expected_cosine, atol=1e-6)
    assert not np.any(np.nan_to_num(cosine, nan=-2) >= high)


def test_command_round_trips_rows_and_prints_quantiles(tmp_path):
    vectors, codes = clustered()
    n = len(codes)
    ids = [f"cap{i}" for i in range(n)]
    texts = [f"caption {i}" for i in range(n)]
    data = write_jsonl(tmp_path / "data.jsonl", ids, [f"img{c}" for c in codes], texts)
    np.savez(tmp_path / "vectors.npz", vectors=vectors, ids=np.array(ids))
    encoder = f"vectors:{tmp_path / 'vectors.npz'}"
    expected_index, expected_cosine = brute_negatives(vectors, codes, 3, 0.2, 0.9)
    for suffix in (".jsonl", ".parquet"):
        out = tmp_path / f"negatives{suffix}"
        result = run("negatives", data, "--encoder", encoder, "-o", out, "-k", 3, "--min-cosine", 0.2,
                     "--max-cosine", 0.9, "--json", tmp_path / "summary.json")
        assert result.exit_code == 0, result.output
        rows = (pl.read_parquet(out).to_dicts() if suffix == ".parquet"
                else [json.loads(line) for line in out.read_text().splitlines()])
        assert [row["anchor_id"] for row in rows] == ids
        for i, row in enumerate(rows):
            found = expected_index[i] >= 0
            assert row["negative_ids"] == [ids[j] for j in expected_index[i][found]]
            assert row["negative_texts"] == [texts[j] for j in expected_index[i][found]]
            np.testing.assert_allclose(row["negative_cosines"], expected_cosine[i][found], atol=1e-6)
    summary = json.loads((tmp_path / "summary.json").read_text())
    finite = expected_cosine[np.isfinite(expected_cosine)]
    overall = summary["cosines"][-1]
    assert overall["rank"] == "all" and overall["count"] == finite.size
    assert overall["quantiles"]["p50"] == pytest.approx(np.quantile(finite, 0.5), abs=1e-6)
    assert summary["cosines"][0]["mean"] == pytest.approx(np.nanmean(expected_cosine[:, 0]), abs=1e-6)
    assert f"{np.quantile(finite, 0.5):.3f}" in result.stdout


def test_quantiles_per_rank_skip_missing():
    summary = cosine_quantiles(np.array([[0.9, 0.5], [0.7, np.nan]], dtype=np.float32))
    assert [entry.count for entry in summary] == [2, 1, 3]
    assert summary[0].mean == pytest.approx(0.8)


@pytest.mark.parametrize("args, message", [
    (["--min-cosine", "0.9", "--max-cosine", "0.5"], "must be below --max-cosine"),
    (["--max-cosine", "1.5"], "--max-cosine"),
    (["-o", "{tmp}/negatives.csv"], "expected a name ending in .jsonl, .parquet"),
    (["-o", "{tmp}/data.jsonl/negatives.jsonl"], "cannot write"),
])
def test_bad_options_are_one_line_errors_without_output(tmp_path, args, message):
    data = write_jsonl(tmp_path / "data.jsonl", ["a", "b"], ["x", "y"], ["one", "two"])
    args = [arg.replace("{tmp}", str(tmp_path)) for arg in args]
    if "-o" not in args:
        args += ["-o", str(tmp_path / "negatives.jsonl")]
    result = run("negatives", data, *args)
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output
    assert len([line for line in result.output.splitlines() if line.startswith("Error:")]) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.jsonl"]


def test_antipodal_negatives_are_in_range_of_the_default_floor():
    """A float32 product of antipodal unit vectors reaches -1.0000001, below the default floor of -1:
    those captions got no negative at all, and no floor below -1 can be asked for."""
    half = unit(np.random.default_rng(0).normal(size=(20, 8))).astype(np.float32)
    vectors = np.concatenate([half, -half])
    index, cosine = hard_negatives(vectors, np.arange(40), NegativeOptions(k=1, max_cosine=-0.99), device="cpu")
    assert (index[:, 0] == np.r_[np.arange(20, 40), np.arange(20)]).all()
    assert np.all(cosine >= -1.0) and np.allclose(cosine, -1.0)


@pytest.mark.parametrize("margin", [None, 0.0, 0.05])
@pytest.mark.parametrize("per_image", [1, None])
def test_text_rules_and_margin_match_brute_force(per_image, margin):
    """Texts repeated across images (and within one, in other case and spacing): a text of the
    anchor's own image is never its negative, a text is listed once, and the margin holds."""
    vectors, codes = clustered(n_groups=40, per_group=3, seed=1)
    rng = np.random.default_rng(2)
    spellings = [str, lambda text: text + " ", lambda text: "  " + text.replace(" ", "   "), str.upper]
    texts = [spellings[rng.integers(4)](f"text {rng.integers(30)}") for _ in codes]
    for i in range(0, len(texts) - 1, 7):  # some texts shared inside an image, so its captions are refused
        texts[i + 1] = texts[i].upper() if codes[i + 1] == codes[i] else texts[i + 1]
    index, cosine = hard_negatives(vectors, codes, NegativeOptions(k=4, per_image=per_image, margin=margin),
                                   texts=texts, block_size=16)
    expected_index, expected_cosine = brute_negatives(vectors, codes, 4, -1.0, 0.95, per_image=per_image,
                                                      texts=texts, margin=margin)
    np.testing.assert_array_equal(index, expected_index)
    np.testing.assert_allclose(cosine, expected_cosine, atol=1e-6)
    keys = np.array([" ".join(text.casefold().split()) for text in texts])
    for anchor, row in enumerate(index):
        listed = row[row >= 0]
        assert len(set(keys[listed])) == len(listed)  # no text twice
        assert not set(keys[listed]) & set(keys[codes == codes[anchor]])  # no text of its own image
        if per_image is not None:
            assert np.bincount(codes[listed]).max(initial=0) <= per_image


@pytest.mark.slow
@pytest.mark.parametrize("margin", [0.0, 0.1])
def test_the_rules_are_what_sentence_transformers_mines_on_the_same_vectors(margin):
    """sentence-transformers' mine_hard_negatives, given capgeo's vectors of the COCO sample (its
    positives: the other captions of an anchor's image) with its max_score and absolute_margin,
    lists the negatives capgeo lists with --per-image 0 (no per-image limit, which it lacks).
    Its candidate window (range_max) is the whole corpus here: with its default window, anchors
    whose positives sit low find no candidate under the margin inside it, and get none."""
    import torch
    from datasets import Dataset
    from sentence_transformers.util import mine_hard_negatives

    from capgeo.captions import load_captions
    from capgeo.encoders import embed

    captions = load_captions(REPO_DATA / "coco_sample.json")
    vectors = unit(np.asarray(embed(captions, None, progress=False).vectors, dtype=np.float64)).astype(np.float32)
    texts, codes = captions.texts, np.asarray(captions.group_codes)
    table = {}
    for text, vector in zip(texts, vectors):
        table.setdefault(text, vector)

    class GivenVectors:
        """The model's part mine_hard_negatives uses, answering with capgeo's vectors."""
        device = torch.device("cpu")
        model_card_data = type("Card", (), {"base_model": "capgeo-test"})()

        def encode_document(self, batch, **options):
            return np.stack([table[text] for text in batch])

        encode_query = encode_document

        def similarity(self, a, b):
            return torch.as_tensor(a) @ torch.as_tensor(b).T

        def similarity_pairwise(self, a, b):
            return (torch.as_tensor(a) * torch.as_tensor(b)).sum(-1)

    k, ceiling = 5, 0.95
    counts = {text: texts.count(text) for text in set(texts)}
    anchors = [i for i in range(len(texts)) if counts[texts[i]] == 1 and (codes == codes[i]).sum() > 1]
    pairs = {"anchor": [], "positive": []}
    for i in anchors:
        for j in np.flatnonzero(codes == codes[i]):
            if j != i:
                pairs["anchor"].append(texts[i]), pairs["positive"].append(texts[j])
    mined = mine_hard_negatives(Dataset.from_dict(pairs), GivenVectors(), corpus=list(texts), range_max=len(texts),
                                max_score=ceiling, absolute_margin=margin, num_negatives=k,
                                output_format="labeled-pair", verbose=False)
    theirs = {}
    for row in mined:
        if row["label"] == 0:
            theirs.setdefault(row["anchor"], []).append(row["positive"])
    index, _ = hard_negatives(vectors, codes, NegativeOptions(k=k, per_image=None, margin=margin, max_cosine=ceiling),
                              texts=texts)
    ours = {texts[i]: [texts[j] for j in index[i] if j >= 0] for i in anchors}
    same = sum(ours[text] == theirs.get(text, []) for text in ours)
    # identical but for equal cosines, which the two may order apart
    assert len(ours) > 250 and same / len(ours) >= 0.99, (same, len(ours))
    overlap = sum(len(set(ours[text]) & set(theirs.get(text, []))) for text in ours)
    assert overlap / sum(len(listed) for listed in ours.values()) >= 0.99


def test_the_command_takes_the_rules_and_says_them(tmp_path):
    vectors, codes = clustered(per_group=3)
    n = len(codes)
    ids, texts = [f"cap{i}" for i in range(n)], [f"caption {i}" for i in range(n)]
    data = write_jsonl(tmp_path / "data.jsonl", ids, [f"img{c}" for c in codes], texts)
    np.savez(tmp_path / "vectors.npz", vectors=vectors, ids=np.array(ids))
    encoder = f"vectors:{tmp_path / 'vectors.npz'}"
    for options, per_image, margin in ((["--per-image", "0", "--margin", "0.05"], None, 0.05), ([], 1, None)):
        out = tmp_path / "n.jsonl"
        result = run("negatives", data, "--encoder", encoder, "-o", out, "-k", 4, *options, "--json",
                     tmp_path / "s.json", "--force")
        assert result.exit_code == 0, result.output
        summary = json.loads((tmp_path / "s.json").read_text())
        assert (summary["per_image"], summary["margin"]) == (per_image, margin)
        expected, _ = brute_negatives(vectors, codes, 4, -1.0, 0.95, per_image=per_image, texts=texts, margin=margin)
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert [row["negative_ids"] for row in rows] == [[ids[j] for j in row if j >= 0] for row in expected]
        assert ("any number per image" if per_image is None else "at most 1 per image") in result.stdout


def test_the_export_returns_its_typed_summary_with_k_capped(tmp_path):
    """export_negatives returns a frozen NegativesExport: its rules with k capped at what any caption
    can have, counts matching the file it wrote, and to_dict() the `negatives --json` object."""
    import dataclasses
    from types import SimpleNamespace

    from _action_fixtures import caption_set
    from capgeo.findings.negatives import NegativesExport, export_negatives

    vectors, codes = clustered(n_groups=4, per_group=2)
    captions = caption_set([f"g{code}" for code in codes])
    out = tmp_path / "negatives.jsonl"
    summary = export_negatives(captions, SimpleNamespace(vectors=vectors), str(out),
                               rules=NegativeOptions(k=50, per_image=None), block_size=16)
    assert isinstance(summary, NegativesExport) and summary.rules.k == 6  # 8 captions, 2 of them its own image
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert summary.n_anchors == len(rows) == 8
    assert summary.n_negatives == sum(len(row["negative_ids"]) for row in rows)
    written = summary.to_dict()
    assert list(written) == ["schema", "output", "n_anchors", "k", "min_cosine", "max_cosine", "per_image", "margin",
                             "n_anchors_short", "n_negatives", "encoder", "cosines"]
    assert written["k"] == 6 and written["encoder"] is None and written["cosines"][-1]["rank"] == "all"
    with pytest.raises(dataclasses.FrozenInstanceError):
        summary.n_anchors = 3
