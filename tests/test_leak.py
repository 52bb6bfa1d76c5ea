"""`capgeo leak`: the exact train x eval pass against brute force, a planted overlap in real
COCO captions, paraphrased twins under the real MiniLM, and the command's files and errors."""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter

import numpy as np
import pytest
from click.testing import CliRunner

from _action_fixtures import caption_set, embeddings, unit, write_jsonl
from capgeo.captions import load_captions
from capgeo.cli import main
from capgeo.errors import CapgeoError
from capgeo.findings.leak import exact_twins, leak_section
from capgeo.geometry.cross import scan_cross


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], env={"COLUMNS": "200"})


def planted_vectors(seed=0, n_train=200, n_eval=60, dim=24, twins=((3, 17), (10, 17), (41, 5), (59, 199))):
    """Random train/eval vectors; each (eval row, train row) in ``twins`` is a slightly moved copy."""
    rng = np.random.default_rng(seed)
    train = unit(rng.normal(size=(n_train, dim)))
    evals = unit(rng.normal(size=(n_eval, dim)))
    for e, t in twins:
        evals[e] = unit((train[t] + 0.05 * rng.normal(size=dim))[None])[0]
    return train, evals


@pytest.mark.parametrize("block_size", [16, 64, 4096])
def test_cross_pass_matches_brute_force_at_any_block_size(block_size):
    train, evals = planted_vectors()
    similarity = evals.astype(np.float64) @ train.astype(np.float64).T
    # many pairs above, none within float32 rounding of it
    threshold = next(t for t in np.arange(0.3, 0.5, 0.01) if np.abs(similarity - t).min() > 1e-5)
    scan = scan_cross(evals, train, threshold=threshold, top_k=3, block_size=block_size, device="cpu")
    expected = sorted(zip(*np.nonzero(similarity >= threshold)))
    assert sorted(zip(scan.pair_query.tolist(), scan.pair_reference.tolist())) == expected
    np.testing.assert_allclose(scan.pair_cosine, similarity[scan.pair_query, scan.pair_reference], atol=1e-6)
    np.testing.assert_array_equal(scan.top_index, np.argsort(-similarity, axis=1, kind="stable")[:, :3])
    np.testing.assert_allclose(scan.top_cosine, -np.sort(-similarity, axis=1)[:, :3], atol=1e-6)


@pytest.mark.parametrize("block_size", [2, 64])  # the tied rows in different tiles, and in one tile
def test_cross_pass_orders_equal_cosines_by_lower_reference_row(block_size):
    train = unit(np.eye(4)[[0, 1, 0, 2, 0]])  # rows 0, 2 and 4 are the same vector
    scan = scan_cross(unit(np.eye(4)[[0]]), train, threshold=0.5, top_k=3, block_size=block_size, device="cpu")
    assert scan.top_index.tolist() == [[0, 2, 4]]
    assert scan.pair_reference.tolist() == [0, 2, 4]


def test_leak_section_finds_planted_twins_and_their_drop_list():
    train, evals = planted_vectors()
    train_set = caption_set([f"t{i // 2}" for i in range(200)], ids=[f"train{i}" for i in range(200)])
    eval_set = caption_set([f"e{i}" for i in range(60)], ids=[f"eval{i}" for i in range(60)])
    result = leak_section(train_set, embeddings(train), [(eval_set, embeddings(evals))], threshold=0.9).to_dict()
    similarity = evals.astype(np.float64) @ train.astype(np.float64).T
    entry = result["evals"][0]
    assert entry["leaked_ids"] == [f"eval{e}" for e in np.flatnonzero(similarity.max(axis=1) >= 0.9)]
    assert entry["leaked_ids"] == ["eval3", "eval10", "eval41", "eval59"]
    assert result["train_ids_to_drop"] == ["train5", "train17", "train199"]
    assert entry["share_leaked"] == pytest.approx(4 / 60)
    closest = entry["pairs"][0]
    e, t = int(closest["eval_id"][4:]), int(closest["train_id"][5:])
    assert closest["cosine"] == pytest.approx(similarity.max(axis=1)[[3, 10, 41, 59]].max(), abs=1e-6)
    assert closest["cosine"] == pytest.approx(similarity[e, t], abs=1e-6)


@pytest.mark.parametrize("block_size", [3, 64, 4096])
def test_leak_decisions_are_float64_at_a_threshold_between_float32_and_float64(block_size):
    """A pair whose float32 tile product reached the threshold while its float64 cosine did not was
    listed as leaked, at a cosine below the threshold; pairs just above it in float64 must stay."""
    train, evals = planted_vectors(dim=96)
    train64 = np.asarray(embeddings(train).vectors, dtype=np.float64)
    evals64 = np.asarray(embeddings(evals).vectors, dtype=np.float64)
    similarity = (evals64 @ train64.T) / np.sqrt(np.outer((evals64 ** 2).sum(1), (train64 ** 2).sum(1)))
    train_set = caption_set([f"t{i}" for i in range(200)], ids=[f"train{i}" for i in range(200)])
    eval_set = caption_set([f"e{i}" for i in range(60)], ids=[f"eval{i}" for i in range(60)])
    e, t = 41, 5
    exact = similarity[e, t]
    tile = scan_cross(evals, train, threshold=0.5, block_size=block_size, device="cpu")
    product32 = tile.pair_cosine[(tile.pair_query == e) & (tile.pair_reference == t)][0]
    between = (exact + float(product32)) / 2  # float32 says leaked, float64 not (or the other way)
    assert min(exact, product32) < between < max(exact, product32)
    for threshold in (between, exact - 1e-12):
        result = leak_section(train_set, embeddings(train), [(eval_set, embeddings(evals))],
                              threshold=float(threshold), block_size=block_size).to_dict()
        entry = result["evals"][0]
        expected = np.flatnonzero((similarity >= threshold).any(axis=1))
        assert entry["leaked_ids"] == [f"eval{row}" for row in expected]
        assert all(pair["cosine"] >= threshold for pair in entry["pairs"])
        assert ("eval41" in entry["leaked_ids"]) == (exact >= threshold)


def test_leak_of_a_set_with_itself_scores_copies_exactly_one_in_row_order():
    rng = np.random.default_rng(3)
    vectors = unit(rng.normal(size=(40, 32)))
    captions = caption_set([f"g{i}" for i in range(40)], texts=[f"text {i}" for i in range(40)])
    entry = leak_section(captions, embeddings(vectors), [(captions, embeddings(vectors))], top=40).to_dict()["evals"][0]
    assert [pair["cosine"] for pair in entry["pairs"]] == [1.0] * 40
    assert [pair["eval_id"] for pair in entry["pairs"]] == captions.ids  # ties: lower row first


def test_leak_section_refuses_vectors_that_are_not_one_per_caption():
    """53 training vectors for 150 training captions gave every eval caption a 'twin' at cosine 1.0;
    too few eval vectors an IndexError."""
    train, evals = planted_vectors()
    train_set = caption_set([f"t{i // 2}" for i in range(200)], ids=[f"train{i}" for i in range(200)])
    eval_set = caption_set([f"e{i}" for i in range(60)], ids=[f"eval{i}" for i in range(60)])
    with pytest.raises(CapgeoError, match="TRAIN synthetic: 60 vectors for 200 captions"):
        leak_section(train_set, embeddings(evals), [(eval_set, embeddings(evals))])
    with pytest.raises(CapgeoError, match="EVAL synthetic: 200 vectors for 60 captions"):
        leak_section(train_set, embeddings(train), [(eval_set, embeddings(train))])
    with pytest.raises(CapgeoError, match="--top"):
        leak_section(train_set, embeddings(train), [(eval_set, embeddings(evals))], top=-1)


def test_exact_twins_use_the_normalised_text():
    eval_rows, train_rows = exact_twins(["A dog.", "a cat", "A  DOG."], ["a dog.", "a bird", "A cat"])
    assert sorted(zip(eval_rows.tolist(), train_rows.tolist())) == [(0, 0), (0, 2), (2, 1)]


def bag_of_words(texts, vocabulary):
    """Word-count vectors: identical texts have cosine 1, different COCO captions well below."""
    rows = np.zeros((len(texts), len(vocabulary)), dtype=np.float32)
    for row, text in enumerate(texts):
        for word, count in Counter(re.findall(r"\w+", text.lower())).items():
            rows[row, vocabulary[word]] = count
    return unit(rows + 1e-3)  # no all-zero row


@pytest.mark.slow
def test_planted_overlap_in_real_coco_captions_is_found_exactly(shared_data):
    coco = load_captions(shared_data / "coco-karpathy-test" / "mscoco_test.json")
    texts, groups = coco.texts, coco.groups
    train_rows, pool_rows = np.arange(0, 2000), np.arange(10000, 10600)
    vocabulary = {w: i for i, w in enumerate(sorted({w for t in texts[:2000] + texts[10000:10600]
                                                     for w in re.findall(r"\w+", t.lower())}))}
    train_vectors = bag_of_words([texts[i] for i in train_rows], vocabulary)
    pool_vectors = bag_of_words([texts[i] for i in pool_rows], vocabulary)
    # the eval set: pool captions with no natural twin in train (brute force), plus planted copies
    clean = pool_rows[(pool_vectors @ train_vectors.T).max(axis=1) < 0.9][:400]
    planted = np.random.default_rng(1).choice(train_rows, size=25, replace=False)
    copies = [texts[i].upper() if k % 3 == 0 else texts[i] for k, i in enumerate(planted)]  # case is normalised
    eval_texts = [texts[i] for i in clean] + copies
    eval_ids = [f"eval{k}" for k in range(len(eval_texts))]
    train_set = caption_set([groups[i] for i in train_rows], [texts[i] for i in train_rows],
                            [coco.ids[i] for i in train_rows])
    eval_set = caption_set([f"e{k}" for k in range(len(eval_texts))], eval_texts, eval_ids)
    result = leak_section(train_set, embeddings(train_vectors),
                          [(eval_set, embeddings(bag_of_words(eval_texts, vocabulary)))], threshold=0.95).to_dict()
    entry = result["evals"][0]
    assert entry["leaked_ids"] == eval_ids[len(clean):]
    assert entry["n_exact"] == 25
    planted_ids = {coco.ids[i] for i in planted}
    # a planted text may also have an exact copy elsewhere in train (COCO repeats captions): that copy leaks too
    natural = {coco.ids[i] for i in train_rows
               if texts[i].lower() in {texts[p].lower() for p in planted}}
    assert set(result["train_ids_to_drop"]) == planted_ids | natural
    assert all(pair["exact_duplicate"] for pair in entry["pairs"])


@pytest.mark.slow
def test_paraphrased_twins_under_the_real_minilm(tmp_path):
    train = ["A brown dog runs across a grassy park chasing a red ball.",
             "Two people ride bicycles along a beach at sunset.",
             "A plate of spaghetti with tomato sauce and basil on a wooden table.",
             "A red double-decker bus drives down a busy city street.",
             "A cat sleeps curled up on a blue sofa next to a window.",
             "A snowy mountain peak under a clear blue sky.",
             "A child flies a kite in an open field on a windy day.",
             "An old wooden sailboat is moored in a quiet harbour.",
             "A man in a suit talks on his phone outside an office building.",
             "Fresh oranges and apples are stacked at a market stall.",
             "A giraffe eats leaves from the top of a tall tree.",
             "A laptop and a cup of coffee sit on a cluttered desk."]
    evals = ["A brown dog is running through a grassy park after a red ball.",
             "Two people are riding bikes on the beach as the sun sets.",
             "A red double decker bus driving along a busy street in the city.",
             "A giraffe is eating leaves from the top of a tall tree.",
             "A woman reads a book on a train.",
             "A bowl of soup with bread on the side.",
             "Children play football in a school yard.",
             "A lighthouse stands on a rocky coast at night."]
    train_file = write_jsonl(tmp_path / "train.jsonl", [f"t{i}" for i in range(12)], [f"i{i}" for i in range(12)],
                             train)
    eval_file = write_jsonl(tmp_path / "eval.jsonl", [f"e{i}" for i in range(8)], [f"j{i}" for i in range(8)], evals)
    out = tmp_path / "drop.txt"
    result = run("leak", train_file, eval_file, "--threshold", 0.8, "-o", out, "--json", tmp_path / "leak.json")
    assert result.exit_code == 0, result.output
    leak = json.loads((tmp_path / "leak.json").read_text())
    entry = leak["evals"][0]
    assert entry["leaked_ids"] == ["e0", "e1", "e2", "e3"]
    assert entry["n_exact"] == 0
    assert out.read_text().split() == ["t0", "t1", "t3", "t10"]
    assert [pair["train_id"] for pair in sorted(entry["pairs"], key=lambda p: p["eval_id"])] == ["t0", "t1", "t3", "t10"]
    assert "4 of 8 eval captions (50.0%)" in result.stdout


@pytest.fixture
def tiny_sets(tmp_path):
    train, evals = planted_vectors(n_train=20, n_eval=6, twins=((1, 4), (5, 4)))
    train_file = write_jsonl(tmp_path / "train.jsonl", [f"t{i}" for i in range(20)], [f"g{i}" for i in range(20)],
                             [f"train caption {i}" for i in range(20)])
    eval_file = write_jsonl(tmp_path / "eval.jsonl", [f"e{i}" for i in range(6)], [f"h{i}" for i in range(6)],
                            [f"eval caption {i}" for i in range(6)])
    vectors = tmp_path / "vectors.npz"
    np.savez(vectors, vectors=np.concatenate([train, evals]),
             ids=np.array([f"t{i}" for i in range(20)] + [f"e{i}" for i in range(6)]))
    return train_file, eval_file, f"vectors:{vectors}", train, evals


def test_leak_command_writes_drop_list_and_json(tiny_sets, tmp_path):
    train_file, eval_file, encoder, train, evals = tiny_sets
    out, report = tmp_path / "drop.txt", tmp_path / "leak.json"
    result = run("leak", train_file, eval_file, eval_file, "--encoder", encoder, "--threshold", 0.9,
                 "-o", out, "--json", report)
    assert result.exit_code == 0, result.output
    assert out.read_text() == "t4\n"
    leak = json.loads(report.read_text())
    assert leak["schema"] == "capgeo.leak/1" and len(leak["evals"]) == 2
    assert leak["evals"][0]["leaked_ids"] == ["e1", "e5"]
    assert leak["evals"][0]["pairs"][0]["cosine"] == pytest.approx(float(np.max(evals[[1, 5]] @ train[4])), abs=1e-6)


@pytest.mark.parametrize("args, message", [
    (["--threshold", "1.5"], "--threshold"),
    (["--threshold", "-2"], "--threshold"),
    (["-o", "{train}/drop.txt"], "cannot write"),
])
def test_bad_options_are_one_line_errors_without_output(tiny_sets, tmp_path, args, message):
    train_file, eval_file, encoder, *_ = tiny_sets
    args = [arg.replace("{train}", str(train_file)) for arg in args]  # a folder that is a file
    before = sorted(train_file.parent.iterdir())
    result = run("leak", train_file, eval_file, "--encoder", encoder, *args)
    assert sorted(train_file.parent.iterdir()) == before
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output
    assert [line for line in result.output.splitlines() if line.startswith("Error:")] and \
        len([line for line in result.output.splitlines() if line.startswith("Error:")]) == 1


def test_a_vector_file_that_fits_one_set_names_the_set_it_does_not_fit(tiny_sets, tmp_path):
    """Vectors with the training ids only: the error named the file, not the EVAL set."""
    train_file, eval_file, _, train, _ = tiny_sets
    np.savez(tmp_path / "train-only.npz", vectors=train, ids=np.array([f"t{i}" for i in range(20)]))
    result = run("leak", train_file, eval_file, "--encoder", f"vectors:{tmp_path / 'train-only.npz'}")
    assert result.exit_code == 2
    (line,) = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert line.startswith(f"Error: EVAL {eval_file}: ") and "6 of 6 caption ids have no vector" in line


def test_vectors_aligned_by_row_are_refused_for_two_sets(tmp_path):
    """Two sets of equal size and one .npy: row i of each got the same vector, so every eval
    caption was reported as a twin of an unrelated training caption at cosine 1.0."""
    train = write_jsonl(tmp_path / "a.jsonl", [f"a{i}" for i in range(6)], [f"g{i}" for i in range(6)],
                        [f"a red bus number {i}" for i in range(6)])
    evals = write_jsonl(tmp_path / "b.jsonl", [f"b{i}" for i in range(6)], [f"h{i}" for i in range(6)],
                        [f"two dogs in the snow {i}" for i in range(6)])
    np.save(tmp_path / "v.npy", np.random.default_rng(0).normal(size=(6, 8)).astype(np.float32))
    result = run("leak", train, evals, "--encoder", f"vectors:{tmp_path / 'v.npy'}", "-o", tmp_path / "drop.txt")
    assert result.exit_code == 2 and not (tmp_path / "drop.txt").exists()
    assert "vectors aligned by row belong to one set of captions" in result.output
    # and ids both sets use for different texts
    np.savez(tmp_path / "v.npz", vectors=np.random.default_rng(1).normal(size=(6, 8)).astype(np.float32),
             ids=np.array([f"c{i}" for i in range(6)]))
    same_ids = [f"c{i}" for i in range(6)]
    train = write_jsonl(tmp_path / "a.jsonl", same_ids, [f"g{i}" for i in range(6)], [f"a red bus {i}" for i in range(6)])
    evals = write_jsonl(tmp_path / "b.jsonl", same_ids, [f"h{i}" for i in range(6)], [f"a dog {i}" for i in range(6)])
    result = run("leak", train, evals, "--encoder", f"vectors:{tmp_path / 'v.npz'}")
    assert result.exit_code == 2 and "caption id 'c0' is in TRAIN" in result.output


def test_leak_section_refuses_a_threshold_outside_cosines():
    with pytest.raises(CapgeoError, match="between -1 and 1"):
        leak_section(caption_set(["a"]), embeddings(np.ones((1, 2))), [], threshold=1.01)


def test_report_section_shows_each_eval_set_and_escapes_captions(tiny_sets, tmp_path):
    from capgeo.report.leak import leak_html

    train, evals = planted_vectors(n_train=20, n_eval=6, twins=((1, 4),))
    train_set = caption_set([f"t{i}" for i in range(20)], texts=[f"<b>train</b> {i}" for i in range(20)])
    eval_set = caption_set([f"e{i}" for i in range(6)], texts=[f"<b>eval</b> {i}" for i in range(6)],
                           source="eval.jsonl")
    html = leak_html(leak_section(train_set, embeddings(train), [(eval_set, embeddings(evals))], threshold=0.9))
    assert "eval.jsonl: 1 of 6 captions (16.7%) have a training twin, 0 exact" in html
    assert html.count('class="pair"') == 1
    assert "<b>" not in html and "&lt;/" in html  # the tags are text, escaped


def test_report_leak_option_adds_the_section(tiny_sets, tmp_path):
    train_file, eval_file, encoder, *_ = tiny_sets
    out = tmp_path / "report.html"
    result = run("report", train_file, "--encoder", encoder, "--leak", eval_file, "--no-gamma", "--no-dupes",
                 "--batch-size", 4, "--n-batches", 2, "-o", out, "--save-profile", tmp_path / "profile.json")
    assert result.exit_code == 0, result.output
    assert 'id="leak"' in out.read_text()
    saved = json.loads((tmp_path / "profile.json").read_text())
    assert saved["leak"]["evals"][0]["leaked_ids"] == ["e1", "e5"]
    result = run("report", tmp_path / "profile.json", "--leak", eval_file, "-o", tmp_path / "again.html")
    assert result.exit_code == 2 and "--leak needs DATA to be a dataset" in result.output
    assert not (tmp_path / "again.html").exists()


@pytest.mark.parametrize("command", ["leak", "dupes"])
def test_a_drop_list_refuses_an_id_holding_a_line_break(tmp_path, command):
    """Written as it was, 'x\\ny' came back as two lines, 'x' and 'y', neither an id of the dataset."""
    data = write_jsonl(tmp_path / "d.jsonl", ["z", "x\ny", "w"], ["b", "a", "c"], ["one cat", "one cat", "a dog"])
    np.savez(tmp_path / "v.npz", vectors=np.float32([[1, 0], [1, 0], [0, 1]]), ids=np.array(["z", "x\ny", "w"]))
    encoder = ["--encoder", f"vectors:{tmp_path / 'v.npz'}", "--no-cache"]
    drop = tmp_path / "drop.txt"
    if command == "leak":
        result = run("leak", data, data, *encoder, "-o", drop)
    else:
        result = run("dupes-sets", data, *encoder, "--keep", "first", "--drop-list", drop)
    assert result.exit_code == 2, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert "caption id 'x\\ny' holds a line break" in line
    assert not drop.exists()
    # ids without one are written one a line, as before
    np.savez(tmp_path / "v.npz", vectors=np.float32([[1, 0], [1, 0], [0, 1]]), ids=np.array(["z", "x y", "w"]))
    write_jsonl(tmp_path / "d.jsonl", ["z", "x y", "w"], ["b", "a", "c"], ["one cat", "one cat", "a dog"])
    result = run("leak", data, data, *encoder, "-o", drop) if command == "leak" else \
        run("dupes-sets", data, *encoder, "--keep", "first", "--drop-list", drop)
    assert result.exit_code == 0, result.output
    assert set(drop.read_text().splitlines()) <= {"z", "x y", "w"} and drop.read_text().endswith("\n")


def test_too_many_pairs_names_the_threshold_given_not_the_candidates_margin(monkeypatch):
    """It said "reach cosine 0.949997" for the default 0.95: the float32 candidates' bound."""
    import capgeo.geometry.cross as cross

    scan_cross = cross.scan_cross
    monkeypatch.setattr(cross, "scan_cross", lambda *args, **options: scan_cross(*args, **{**options, "max_pairs": 5}))
    vectors = unit(np.ones((6, 4)) + 1e-3 * np.random.default_rng(0).normal(size=(6, 4)))
    train = caption_set([f"g{i}" for i in range(6)], [f"train {i}" for i in range(6)])
    evals = caption_set([f"h{i}" for i in range(6)], [f"eval {i}" for i in range(6)], ids=[f"e{i}" for i in range(6)])
    with pytest.raises(CapgeoError, match=r"^more than 5 pairs reach cosine 0\.95; raise the twin threshold \(`capgeo leak --threshold T`\)$"):
        leak_section(train, embeddings(vectors), [(evals, embeddings(vectors))], threshold=0.95)


def test_the_leak_result_is_one_typed_class_that_round_trips_its_json():
    """leak_section returns the typed Leak that capgeo.leak returns and a profile's ``leak`` section
    holds; its JSON reads back to an equal result, byte for byte (the encoder written as null
    where the vectors have none)."""
    import capgeo
    from capgeo import api
    from capgeo.geometry import typed_profile
    from capgeo.geometry.typed_profile import EvalLeak, Leak, LeakTwin, Profile

    assert api.Leak is Leak and api.EvalLeak is EvalLeak and Profile.__dataclass_fields__["leak"].type == "Leak | None"
    train, evals = planted_vectors()
    train_set = caption_set([f"t{i // 2}" for i in range(200)], ids=[f"train{i}" for i in range(200)])
    eval_set = caption_set([f"e{i}" for i in range(60)], ids=[f"eval{i}" for i in range(60)])
    result = leak_section(train_set, embeddings(train), [(eval_set, embeddings(evals))], threshold=0.9, top=2)
    assert isinstance(result, Leak) and isinstance(result.evals[0], EvalLeak)
    assert all(isinstance(pair, LeakTwin) for pair in result.evals[0].pairs) and len(result.evals[0].pairs) == 2
    assert result.n_leaked == 4 and result.train_source == str(train_set.source) and result.n_train_captions == 200
    written = result.to_dict()
    assert written["encoder"] is None and list(written) == ["schema", "train", "encoder", "threshold", "normalize",
                                                            "evals", "train_ids_to_drop"]
    assert "images" not in written["evals"][0]   # no way to tell the images apart: left out, not null
    again = Leak.from_dict(json.loads(json.dumps(written)))
    assert again == result and json.dumps(again.to_dict()) == json.dumps(written)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.evals[0].pairs[0].spans_eval[0].start = 0   # read-only, as a loaded one is
    assert typed_profile.EvalLeak.from_dict({"n_leaked": 1, "later": 2}).to_dict() == {"n_leaked": 1, "later": 2}
    found = capgeo.leak(train_set, eval_set, encoder=[train, evals], threshold=0.9, top=2)
    assert isinstance(found, Leak) and found.evals[0].leaked_ids == result.evals[0].leaked_ids
    assert found.to_polars().height == 2 and found.to_polars().columns[0] == "eval_source"
