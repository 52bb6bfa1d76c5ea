"""One batch-size policy: the same headline batch and the same headline gamma in every command."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from capgeo.cli import main
from capgeo.errors import CapgeoError
from capgeo.geometry.batch_size import DEFAULT_BATCH_SIZE, resolve_batch_sizes

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_gamma import common_direction_vectors  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data" / "docci_sample.jsonlines"   # 300 captions of 300 images


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_default_is_the_paper_effective_batch_and_extras_never_lead():
    assert resolve_batch_sizes(None, 5000).sizes == [DEFAULT_BATCH_SIZE] == [128]
    assert resolve_batch_sizes(None, 5000, extra_defaults=(16,)).sizes == [128, 16]
    given = resolve_batch_sizes([32, 256, 32], 5000, extra_defaults=(16,))
    assert (given.headline, given.extra, given.notes) == (32, (256,), ())


def test_small_dataset_uses_every_image_and_says_why():
    resolved = resolve_batch_sizes(None, 40, extra_defaults=(16, 64))
    assert resolved.sizes == [40, 16]
    assert any("only 40 images" in note and "128" in note for note in resolved.notes)
    assert any("64 left out" in note for note in resolved.notes)


@pytest.mark.parametrize("sizes, n_groups", [([1], 10), ([11], 10), ([4, 11], 10), (None, 1)])
def test_impossible_sizes_are_one_clear_error(sizes, n_groups):
    with pytest.raises(CapgeoError, match="--batch-size|group"):
        resolve_batch_sizes(sizes, n_groups)


@pytest.mark.parametrize("command", ["profile", "gamma", "report", "truncation"])
def test_every_command_words_a_too_large_batch_the_same_way(command, tmp_path):
    result = run(command, DATA, "--batch-size", 999, "--cache-dir", tmp_path / "cache",
                 *(["-o", tmp_path / "r.html"] if command == "report" else []))
    assert result.exit_code == 2, result.output
    assert ("Error: --batch-size 999: a batch needs captions of B different images, so B must be between 2 and the "
            "number of groups (images) in the dataset, 300") in result.output
    assert "Traceback" not in result.output


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """profile, gamma and report on the same captions, vectors and seed (precomputed: no model)."""
    folder = tmp_path_factory.mktemp("headline")
    vectors = folder / "vectors.npy"
    np.save(vectors, common_direction_vectors(300, 40, rho_sd=0.03, seed=3))
    common = ["--encoder", vectors, "--seed", 5, "--n-batches", 40, "--cache-dir", folder / "cache"]
    profile = run("profile", DATA, *common, "--json", folder / "p.json")
    assert profile.exit_code == 0, profile.output
    gamma = run("gamma", DATA, *common, "--json", folder / "g.json")
    assert gamma.exit_code == 0, gamma.output
    report = run("report", DATA, *common, "--no-dupes", "-o", folder / "r.html", "--save-profile", folder / "r.json")
    assert report.exit_code == 0, report.output
    shown = {"profile": run("profile", DATA, *common).output, "gamma": run("gamma", DATA, *common).output}
    loaded = {name: json.loads((folder / f"{name[0]}.json").read_text(encoding="utf-8"))["gamma"]
              for name in ("profile", "gamma", "report")}
    return loaded, shown, (folder / "r.html").read_text(encoding="utf-8")


def test_profile_gamma_and_report_headline_the_same_gamma(runs):
    sections, _, _ = runs
    headlines = {name: (s["headline_batch_size"], s["suggested_gamma"], s["batches"][0]["suggestion"]["gamma_exact"])
                 for name, s in sections.items()}
    assert headlines["profile"] == headlines["gamma"] == headlines["report"]
    assert headlines["profile"][0] == 128
    # the report's extra batch size is an extra row, never the headline
    assert [entry["batch_size"] for entry in sections["report"]["batches"]] == [128, 16]


def test_the_caution_and_both_views_are_shown_everywhere(runs):
    sections, shown, html = runs
    suggested = sections["gamma"]["suggested_gamma"]
    for section in sections.values():
        assert "precomputed vectors of unknown origin" in section["encoder_caution"]
        assert section["margin_matched_gamma"] == pytest.approx(0.42 / section["batches"][0]["mean_cosine"])
    for output in shown.values():
        assert "Caution:" in output and "--encoder longclip-L" in output
        assert f"{suggested:.2f}" in output and "83.86" in output
    # one gamma on profile's screen (issue #30); the margin view is `capgeo gamma`'s
    assert "argin-matched gamma" in shown["gamma"] and "argin-matched" not in shown["profile"]
    assert 'data-alert="encoder_caution"' in html or "encoder_caution" in html
    assert f"Suggested gamma {suggested:.2f}" in html and "83.86" in html
