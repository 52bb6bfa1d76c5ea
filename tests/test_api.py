"""capgeo.near_duplicates, capgeo.leak and capgeo.suggest_gamma: against numpy brute force, and
their to_dict() against the matching command's --json."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

import capgeo
from capgeo.cli import main
from capgeo.errors import CapgeoError

from _action_fixtures import unit, write_jsonl
from _gamma_oracle import check_suggestion

TOLERANCE = 1e-5  # float32 products against float64 brute force


@pytest.fixture
def dataset(tmp_path):
    """40 captions of 20 images, near-twins across images, an exact copy, and their vectors (.npy)."""
    rng = np.random.default_rng(7)
    n = 40
    centres = rng.normal(size=(8, 12))
    vectors = unit(centres[np.arange(n) % 8] + 0.25 * rng.normal(size=(n, 12)))
    texts = [f"a {['red', 'blue', 'green'][i % 3]} bus number {i} near the {['park', 'cafe'][i % 2]}"
             for i in range(n)]
    texts[21] = texts[4]  # an exact copy, of another image
    vectors[21] = vectors[4]
    ids, groups = [f"c{i:02d}" for i in range(n)], [f"img{i // 2:02d}" for i in range(n)]
    data = write_jsonl(tmp_path / "d.jsonl", ids, groups, texts)
    np.save(tmp_path / "v.npy", vectors)
    return data, vectors, ids, groups, texts


def brute_pairs(vectors, groups):
    similarity = vectors.astype(np.float64) @ vectors.astype(np.float64).T
    n = len(groups)
    pairs = [(similarity[i, j], i, j) for i in range(n) for j in range(i + 1, n) if groups[i] != groups[j]]
    return sorted(pairs, key=lambda t: (-t[0], t[1], t[2]))


def cli_json(*args) -> dict:
    result = CliRunner().invoke(main, [str(arg) for arg in args] + ["--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_near_duplicates_against_brute_force_from_vectors_a_frame_and_dicts(dataset):
    data, vectors, ids, groups, texts = dataset
    expected = brute_pairs(vectors, groups)
    found = capgeo.near_duplicates(data, encoder=vectors, top=12)
    assert [(row["index_a"], row["index_b"]) for row in found.pairs] == [(i, j) for _, i, j in expected[:12]]
    assert np.allclose([row["cosine"] for row in found.pairs], [c for c, _, _ in expected[:12]], atol=TOLERANCE)
    assert found.n_near_duplicate_pairs == sum(c >= 0.95 for c, _, _ in expected)
    assert found.n_exact_duplicate_pairs == 1 and found.top == 12 and found.threshold is None
    every = capgeo.near_duplicates(data, encoder=vectors, threshold=0.5, top=None)
    assert len(every.pairs) == sum(c >= 0.5 for c, _, _ in expected)
    frame = every.to_polars()
    assert frame.height == len(every.pairs) and frame["cosine"].is_sorted(descending=True)
    # the same captions given as a DataFrame and as a list of dicts
    records = [{"id": i, "image": g, "caption": t} for i, g, t in zip(ids, groups, texts)]
    for given in (pl.DataFrame(records), records):
        again = capgeo.near_duplicates(given, encoder=vectors, top=12, id_column="id", group_column="image",
                                       text_column="caption")
        assert again.pairs == found.pairs
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.top = 3


def test_near_duplicates_to_dict_is_the_dupes_json(dataset, tmp_path):
    data, *_ = dataset
    spec = f"vectors:{tmp_path / 'v.npy'}"
    for options, cli in (({"top": 5, "skip_exact": True}, ["--top", 5, "--skip-exact"]),
                         ({"threshold": 0.6, "top": 0}, ["--threshold", 0.6, "--top", 0])):
        result = capgeo.near_duplicates(data, encoder=spec, **options)
        expected = cli_json("dupes", data, "--encoder", spec, *cli)
        assert result.to_dict() == expected
        assert json.dumps(result.to_dict()) == json.dumps(expected)  # the same keys in the same order
    assert result.to_dict() is not result.to_dict()  # a copy: changing it changes no result


def test_leak_against_brute_force_and_its_to_dict_is_the_leak_json(tmp_path):
    rng = np.random.default_rng(3)
    train_vectors = unit(rng.normal(size=(30, 10)))
    eval_vectors = unit(rng.normal(size=(12, 10)))
    eval_vectors[:4] = unit(train_vectors[[2, 5, 9, 11]] + 0.05 * rng.normal(size=(4, 10)))  # near twins
    train_texts = [f"train caption {i}" for i in range(30)]
    eval_texts = [f"eval caption {i}" for i in range(12)]
    eval_texts[7] = train_texts[20]  # an exact twin whose vectors are far apart
    train = write_jsonl(tmp_path / "train.jsonl", [f"t{i}" for i in range(30)], [f"ti{i // 3}" for i in range(30)],
                        train_texts)
    evaluation = write_jsonl(tmp_path / "eval.jsonl", [f"e{i}" for i in range(12)], [f"ei{i}" for i in range(12)],
                             eval_texts)
    threshold = 0.9
    found = capgeo.leak(train, evaluation, encoder=[train_vectors, eval_vectors], threshold=threshold)
    cosine = eval_vectors.astype(np.float64) @ train_vectors.astype(np.float64).T
    leaked = sorted({int(i) for i in np.flatnonzero(cosine.max(axis=1) >= threshold)} | {7})
    (entry,) = found.evals
    assert entry.leaked_ids == tuple(f"e{i}" for i in leaked) and entry.n_exact == 1
    twins = {int(j) for i in leaked for j in np.flatnonzero(cosine[i] >= threshold)} | {20}
    assert found.train_ids_to_drop == tuple(f"t{j}" for j in sorted(twins))
    assert found.to_polars().height == len(entry.pairs) == len(leaked)
    # the counts the terminal prints, read by attribute: one caption per eval image, three per training image
    assert found.n_train_captions == 30 and entry.n_train_twins == len(twins)
    assert (entry.n_groups, entry.n_groups_leaked, entry.n_groups_all_leaked) == (12, len(leaked), len(leaked))
    assert entry.n_train_groups_twinned == len({j // 3 for j in twins})

    ids = [f"t{i}" for i in range(30)] + [f"e{i}" for i in range(12)]
    np.savez(tmp_path / "both.npz", vectors=np.vstack([train_vectors, eval_vectors]), ids=np.array(ids))
    spec = f"vectors:{tmp_path / 'both.npz'}"
    by_spec = capgeo.leak(train, evaluation, encoder=spec, threshold=threshold, top=3)
    assert by_spec.to_dict() == cli_json("leak", train, evaluation, "--encoder", spec, "--threshold", threshold,
                                         "--top", 3)
    assert by_spec.evals[0].leaked_ids == entry.leaked_ids


def test_suggest_gamma_follows_the_rule_and_its_to_dict_is_the_gamma_json(dataset, tmp_path):
    data, vectors, ids, groups, _ = dataset
    spec = f"vectors:{tmp_path / 'v.npy'}"
    found = capgeo.suggest_gamma(data, encoder=spec, batch_size=[8, 4], seed=2)
    profile = found.to_dict()
    codes = np.unique(groups, return_inverse=True)[1]
    check_suggestion(profile["gamma"], vectors, codes)  # the brute-force rule
    assert found.batch_size == 8 and found.gamma == profile["gamma"]["batches"][0]["suggestion"]["gamma"]
    assert found.to_polars().height == 2 * len(profile["gamma"]["gamma_grid"])
    expected = cli_json("gamma", data, "--encoder", spec, "--batch-size", 8, "--batch-size", 4, "--seed", 2)
    for result in (profile, expected):
        result.pop("provenance")  # the time, the command line and the working folder of each run
    assert profile == expected


def test_bad_inputs_are_capgeo_errors(dataset):
    data, vectors, *_ = dataset
    with pytest.raises(CapgeoError, match="39 rows for 40 captions"):
        capgeo.near_duplicates(data, encoder=vectors[:-1])
    with pytest.raises(CapgeoError, match="expected an \\(N, d\\) array"):
        capgeo.near_duplicates(data, encoder=vectors[0])
    with pytest.raises(CapgeoError, match="2 arrays of vectors for 3 caption sets"):
        capgeo.leak(data, data, data, encoder=[vectors, vectors])
    with pytest.raises(CapgeoError, match="gamma"):
        capgeo.suggest_gamma(data, encoder=vectors, batch_size=2)


def test_import_capgeo_stays_light_and_loads_the_api_when_asked():
    code = ("import sys, capgeo; before = sorted(m for m in ('numpy', 'polars', 'capgeo.api') if m in sys.modules); "
            "capgeo.near_duplicates; print(before, 'capgeo.api' in sys.modules, "
            "sorted(m for m in ('numpy', 'polars') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[] True []"
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        capgeo.nothing_here


@pytest.mark.slow
def test_the_readme_block_runs_and_agrees_with_brute_force(monkeypatch, tmp_path):
    from capgeo.captions import load_captions
    from capgeo.encoders import embed

    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text(encoding="utf-8")
    code = readme.split("## From Python", 1)[1].split("```python\n")[1].split("```", 1)[0]
    assert "capgeo.near_duplicates" in code and "capgeo.leak" in code
    assert len(code.strip().splitlines()) <= 12
    monkeypatch.chdir(tmp_path)   # the block writes its files where it runs
    (tmp_path / "data").symlink_to(root / "data")
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    found, leaked = namespace["found"], namespace["leaked"]
    docci = load_captions(root / "data/docci_sample.jsonlines")
    vectors = embed(docci, None).vectors
    expected = brute_pairs(vectors, list(docci.groups))
    assert len(found.pairs) == sum(c >= 0.8 for c, _, _ in expected) > 0
    coco = load_captions(root / "data/coco_sample.json")
    cosine = vectors.astype(np.float64) @ embed(coco, None).vectors.astype(np.float64).T
    exact = {" ".join(t.split()).casefold() for t in coco.texts}
    assert leaked.evals[0].n_leaked == int(((cosine.max(axis=1) >= 0.95)
                                            | [" ".join(t.split()).casefold() in exact for t in docci.texts]).sum())
