"""What `capgeo dupes` prints: one near-duplicate threshold, the totals behind the list,
--skip-exact, and plain-text word marks when there is no colour."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

from capgeo.cli import main

CAPTIONS = [
    "a dog on grass",              # 0 \ exact copies (case and spacing differ)
    "A dog on  grass",             # 1 /
    "two brown dogs on grass",     # 2 \ paraphrases, cosine 0.97
    "one brown dog on sand",       # 3 /
    "a red bus on a street",       # 4 \ cosine 0.96
    "a red bus in a street",       # 5 /
    "a cat sleeping on a sofa",    # 6 \ cosine 0.90: similar, not a near-duplicate
    "a kitten sleeping on a couch",  # 7 /
    "a plate of food",             # 8 \ exact copies
    "a plate of food",             # 9 /
    "a man riding a wave",         # 10
    "a clock tower at night",      # 11
]
LINKS = {(0, 1): 1.0, (2, 3): 0.97, (4, 5): 0.96, (6, 7): 0.90, (8, 9): 1.0}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """One caption per image; vectors built so that the designed pairs have the cosines above
    and every other pair is orthogonal."""
    folder = tmp_path_factory.mktemp("dupes")
    rows = [{"id": f"c{i}", "image": f"img{i}", "caption": text} for i, text in enumerate(CAPTIONS)]
    data = folder / "captions.jsonl"
    data.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    basis = np.linalg.qr(np.random.default_rng(0).normal(size=(32, 32)))[0].T
    vectors = basis[:len(CAPTIONS)].copy()
    for (a, b), cosine in LINKS.items():
        vectors[b] = cosine * vectors[a] + np.sqrt(1 - cosine ** 2) * basis[20 + b]
    np.save(folder / "emb.npy", vectors.astype(np.float32))
    return data, folder / "emb.npy"


def invoke(dataset, *args) -> str:
    data, vectors = dataset
    result = CliRunner().invoke(main, ["dupes", str(data), "--encoder", f"vectors:{vectors}", *map(str, args)],
                                env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    return result.stdout


def run(dataset, *args) -> str:
    # rich wraps at the fixed width of 100 columns: compare with whitespace collapsed
    return " ".join(invoke(dataset, *args).split())


def rows(dataset, *args) -> list[dict]:
    return [json.loads(line) for line in invoke(dataset, *args, "--output-format", "jsonl").splitlines()]


def brute_force(dataset, threshold):
    """Pairs of different images at cosine >= threshold, and how many are exact copies."""
    vectors = np.load(dataset[1]).astype(np.float64)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    similarity = vectors @ vectors.T
    pairs = [(a, b) for a in range(len(CAPTIONS)) for b in range(a + 1, len(CAPTIONS))
             if similarity[a, b] >= threshold - 1e-6]
    same = [(a, b) for a, b in pairs if " ".join(CAPTIONS[a].casefold().split()) == " ".join(CAPTIONS[b].casefold().split())]
    return pairs, same


def test_totals_state_every_near_duplicate_not_only_the_shown_ones(dataset):
    pairs, copies = brute_force(dataset, 0.95)
    output = run(dataset, "--top", 1)
    assert (f"Near-duplicates (cosine >= 0.95): {len(pairs)} pairs of different images in all, "
            f"{len(copies)} of them exact copies." in output)
    assert (len(pairs), len(copies)) == (4, 2)
    assert "1 most similar pairs of different images" in output


def test_the_word_near_duplicate_is_kept_for_pairs_at_the_threshold(dataset):
    assert "4 near-duplicate pairs of different images (cosine >= 0.95, top 50)" in run(dataset, "--threshold", 0.95)
    below = run(dataset, "--threshold", 0.85)
    assert "5 most similar pairs of different images (cosine >= 0.85, top 50)" in below
    assert "near-duplicate pairs of" not in below


def test_skip_exact_shows_the_paraphrases_and_counts_what_it_skipped(dataset):
    assert all(row["exact_duplicate"] for row in rows(dataset, "--top", 2))  # without the flag the copies fill the top 2
    output = run(dataset, "--top", 2, "--skip-exact")
    assert "2 most similar pairs of different images (cosine 0.9600 to 0.9700, top 2, exact copies left out)" in output
    assert "2 exact copies ranked above the last pair shown were skipped." in output
    assert "EXACT DUPLICATE" not in output
    scores = [float(value) for value in re.findall(r"cosine (0\.\d{4}) jaccard", output)]
    assert scores == pytest.approx([0.97, 0.96], abs=1e-4)
    listed = rows(dataset, "--top", 2, "--skip-exact")
    assert [(row["index_a"], row["index_b"]) for row in listed] == [(2, 3), (4, 5)]


def test_plain_text_marks_shared_and_differing_words_and_says_which_is_which(dataset):
    output = run(dataset, "--threshold", 0.965)  # CliRunner's stdout is no terminal: no colour
    assert "[word]: in both captions {word}: only in this caption" in output
    # counting words are content: "one" differs from "two" like "sand" from "grass"
    assert "{two} [brown] [dogs] on {grass}" in output
    assert "{one} [brown] [dog] on {sand}" in output


def test_written_file_uses_the_same_marks(dataset, tmp_path):
    out = tmp_path / "pairs.txt"
    run(dataset, "--threshold", 0.965, "-o", out)
    text = out.read_text(encoding="utf-8")
    assert "{one} [brown] [dog] on {sand}" in text and "{word}: only in this caption" in text


def test_report_gallery_states_the_same_totals_as_the_terminal(dataset, tmp_path):
    from capgeo.geometry.typed_profile import Dupes
    from capgeo.report.gallery import gallery_html

    saved = tmp_path / "dupes.json"
    terminal = run(dataset, "--top", 3, "--json", saved)
    section = json.loads(saved.read_text())
    assert section["near_duplicates"] == {"threshold": 0.95, "n_pairs": 4, "more_than": None,
                                          "n_exact_duplicate_pairs": 2}
    line = "Near-duplicates (cosine &gt;= 0.95): 4 pairs of different images in all, 2 of them exact copies."
    assert line in gallery_html(Dupes.from_dict(section))
    assert line.replace("&gt;", ">") in terminal
