"""End to end on real captions: the real pipeline (embed, profile, dupes, gamma) into the report and the CLI."""

from __future__ import annotations

import copy
import json

import pytest
from click.testing import CliRunner

from _report_fixtures import REPO_DATA, real_report_input
from capgeo.cli import main
from capgeo.report.build import save_profile
from capgeo.errors import CapgeoError
from capgeo.geometry.typed_profile import Profile
from capgeo.report.build import ReportInput, fill_missing
from capgeo.report.compare import COMPARE_FIGURE_IDS, COMPARE_OPTIONAL_FIGURE_IDS, render_compare
from capgeo.report.html import highlight
from capgeo.report.single import FIGURE_IDS, OPTIONAL_FIGURE_IDS, render_report
from test_report_html import SECTIONS, caption_texts, parse

pytestmark = pytest.mark.skipif(not (REPO_DATA / "docci_sample.jsonlines").exists(),
                                reason="data/docci_sample.jsonlines (the repository's sample) is missing")


@pytest.fixture(scope="module")
def docci():
    return real_report_input("docci")


@pytest.fixture(scope="module")
def coco():
    return real_report_input("coco")


def test_real_report_has_every_section_and_figure(docci):
    profile = docci.profile.to_dict()
    assert profile["dupes"]["examples"] and profile["gamma"]["batches"]
    page = render_report(docci.profile, command="capgeo report data/docci_sample.jsonlines --limit 40")
    parser = parse(page)
    for element_id in (*SECTIONS, *FIGURE_IDS, *OPTIONAL_FIGURE_IDS):
        assert element_id in parser.ids, f"{element_id} missing"
    assert "notes" not in parser.ids  # nothing left out
    assert f"{profile['pairwise']['mean']:.3f} ± {profile['pairwise']['std']:.3f}" in page
    assert profile["dataset"]["fingerprint"] in page
    assert f"{profile['gamma']['suggested_gamma']:.3g}" in page
    # real DOCCI captions are shown whole (clamped only by CSS), character for character
    shown = caption_texts(page)
    for example in profile["dupes"]["examples"]:
        assert example["query"]["text"] in shown
        for neighbour in example["neighbours"]:
            assert neighbour["text_b"] in shown


def test_real_dupes_spans_render_on_their_words(docci):
    for row in docci.profile.to_dict()["dupes"]["pairs"]:
        parser = parse(f"<div>{highlight(row['text_a'], row['spans_a'])}</div>")
        assert parser.marks == [row["text_a"][s["start"]:s["end"]] for s in row["spans_a"]]


def test_real_compare_of_datasets_of_different_sizes(docci, coco):
    assert docci.profile.dataset.n_captions != coco.profile.dataset.n_captions
    page = render_compare([docci.profile, coco.profile])
    parser = parse(page)
    for figure_id in COMPARE_FIGURE_IDS + COMPARE_OPTIONAL_FIGURE_IDS:
        assert figure_id in parser.ids
    assert "docci_sample.jsonlines" in page and "coco_sample.json" in page
    assert "different numbers of captions" in page


def test_cli_report_from_a_saved_profile_recomputes_nothing(tmp_path, docci, monkeypatch):
    bare = docci.profile.without("dupes").without("gamma")
    saved = save_profile(bare, tmp_path / "docci.json")

    def no_embedding(*args, **kwargs):
        raise AssertionError("a saved profile must not be re-embedded")

    monkeypatch.setattr("capgeo.encoders.embed", no_embedding)
    output = tmp_path / "out" / "docci.html"
    result = CliRunner().invoke(main, ["report", str(saved), "-o", str(output)])
    assert result.exit_code == 0, result.output
    page = output.read_text(encoding="utf-8")
    parser = parse(page)
    assert "gallery" not in parser.ids and "fig-gamma" not in parser.ids and "notes" in parser.ids
    assert "has no dupes section" in page and "has no dupes section" in result.output
    assert f"capgeo report {saved} --output {output}" in page


@pytest.mark.slow
def test_cli_report_and_compare_on_real_data(tmp_path):
    runner = CliRunner()
    report_path = tmp_path / "coco.html"
    saved = tmp_path / "coco.json"
    result = runner.invoke(main, ["report", str(REPO_DATA / "coco_sample.json"), "--limit", "60", "--batch-size", "8",
                                  "--n-batches", "10", "--save-profile", str(saved), "-o", str(report_path)])
    assert result.exit_code == 0, result.output
    parser = parse(report_path.read_text(encoding="utf-8"))
    assert {"gallery", "gamma", "fig-gamma", "fig-hardest-negative"} <= set(parser.ids)
    profile = json.loads(saved.read_text(encoding="utf-8"))
    assert profile["dupes"] and profile["gamma"] and profile["dataset"]["n_groups"] == 12
    compare_path = tmp_path / "compare.html"
    result = runner.invoke(main, ["compare", str(saved), str(REPO_DATA / "docci_sample.jsonlines"), "--limit", "40",
                                  "--batch-size", "8", "--n-batches", "10", "-o", str(compare_path)])
    assert result.exit_code == 0, result.output
    page = compare_path.read_text(encoding="utf-8")
    assert "<th>coco_sample.json</th><th>docci_sample.jsonlines</th>" in page


def test_cli_errors_are_one_line(tmp_path):
    runner = CliRunner()
    not_a_profile = tmp_path / "bad.json"
    not_a_profile.write_text('{"schema": "capgeo.profile/9", "dataset": {}}')
    result = runner.invoke(main, ["report", str(not_a_profile), "-o", str(tmp_path / "x.html")])
    assert result.exit_code == 2 and "Error:" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "x.html").exists()
    result = runner.invoke(main, ["compare", str(REPO_DATA / "coco_sample.json"), "--limit", "10",
                                  "-o", str(tmp_path / "c.html")])
    assert result.exit_code == 2 and "at least two profiles" in result.output
    result = runner.invoke(main, ["report", str(REPO_DATA / "coco_sample.json"), "--limit", "10", "--batch-size", "64",
                                  "-o", str(tmp_path / "y.html")])
    assert result.exit_code == 2 and "Error:" in result.output and "64" in result.output


@pytest.mark.slow
def test_fill_missing_computes_only_the_missing_sections(coco, tmp_path):
    bare = coco.profile.without("gamma")
    kept_dupes = bare.dupes
    filled = fill_missing(ReportInput(bare, ["note"])).profile
    assert filled.dupes is kept_dupes  # present sections are never recomputed
    assert filled.gamma.suggested_gamma == coco.profile.gamma.suggested_gamma
    assert [b.batch_size for b in filled.gamma.batches] == [8]
    assert bare.gamma is None  # filled by replacing, never by editing

    changed = copy.deepcopy(coco.profile.to_dict())
    changed.pop("gamma")
    changed["dataset"]["texts_digest"] = "0" * 64
    with pytest.raises(CapgeoError, match="does not hold the captions"):
        fill_missing(ReportInput(Profile.from_dict(changed)))
    changed["dataset"]["source"] = str(tmp_path / "gone.json")
    with pytest.raises(CapgeoError, match="is not found"):
        fill_missing(ReportInput(Profile.from_dict(changed)))


@pytest.mark.slow
def test_cli_report_with_the_truncation_section(tmp_path):
    output = tmp_path / "docci.html"
    result = CliRunner().invoke(main, ["report", str(REPO_DATA / "docci_sample.jsonlines"), "--limit", "20",
                                       "--batch-size", "8", "--n-batches", "5", "--no-dupes", "--truncation",
                                       "-o", str(output)])
    assert result.exit_code == 0, result.output
    page = output.read_text(encoding="utf-8")
    parser = parse(page)
    assert {"truncation", "fig-truncation"} <= set(parser.ids)
    assert "--truncation" in page  # the command to reproduce names it


def test_fill_missing_works_for_a_profile_of_precomputed_vectors(tmp_path):
    """Precomputed vectors have no token limit (max_tokens 0): --fill-missing must not try to re-cut them."""
    import numpy as np

    vectors = np.random.default_rng(0).normal(size=(300, 16)).astype(np.float32)
    np.save(tmp_path / "v.npy", vectors)
    saved = tmp_path / "p.json"
    made = CliRunner().invoke(main, ["profile", str(REPO_DATA / "coco_sample.json"), "--encoder",
                                     f"vectors:{tmp_path / 'v.npy'}", "--batch-size", "16", "--n-batches", "5",
                                     "--no-gamma", "--json", str(saved)])
    assert made.exit_code == 0, made.output
    assert "gamma" not in json.loads(saved.read_text())
    output = tmp_path / "r.html"
    result = CliRunner().invoke(main, ["report", str(saved), "--fill-missing", "-o", str(output)])
    assert result.exit_code == 0, result.output
    page = output.read_text(encoding="utf-8")
    assert 'id="gamma"' in page and 'id="gallery"' in page


def test_fill_missing_from_another_folder_finds_relative_dataset_and_vectors(tmp_path, monkeypatch):
    """The profile stores the paths as typed ('data.json', 'vectors:v.npy'): run from another folder,
    --fill-missing said the dataset was not on this machine. They are found through the folder the
    profile was made in (provenance.working_directory)."""
    import shutil

    import numpy as np

    made_in = tmp_path / "project"
    made_in.mkdir()
    shutil.copy(REPO_DATA / "coco_sample.json", made_in / "data.json")
    np.save(made_in / "v.npy", np.random.default_rng(0).normal(size=(300, 16)).astype(np.float32))
    monkeypatch.chdir(made_in)
    made = CliRunner().invoke(main, ["profile", "data.json", "--encoder", "vectors:v.npy", "--batch-size", "16",
                                     "--n-batches", "5", "--no-gamma", "--json", "p.json"])
    assert made.exit_code == 0, made.output
    assert json.loads((made_in / "p.json").read_text())["provenance"]["working_directory"] == str(made_in)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    result = CliRunner().invoke(main, ["report", str(made_in / "p.json"), "--fill-missing", "-o", "r.html"])
    assert result.exit_code == 0, result.output
    assert 'id="gamma"' in (elsewhere / "r.html").read_text(encoding="utf-8")


def test_fill_missing_leaves_out_what_no_gamma_and_no_dupes_leave_out(tmp_path):
    """It computed both sections whatever --no-gamma / --no-dupes said."""
    import numpy as np

    np.save(tmp_path / "v.npy", np.random.default_rng(0).normal(size=(300, 16)).astype(np.float32))
    saved = tmp_path / "p.json"
    made = CliRunner().invoke(main, ["profile", str(REPO_DATA / "coco_sample.json"), "--encoder",
                                     f"vectors:{tmp_path / 'v.npy'}", "--batch-size", "16", "--n-batches", "5",
                                     "--no-gamma", "--json", str(saved)])
    assert made.exit_code == 0, made.output
    filled = tmp_path / "filled.json"
    result = CliRunner().invoke(main, ["report", str(saved), "--fill-missing", "--no-gamma", "--save-profile",
                                       str(filled), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    profile = json.loads(filled.read_text())
    assert "dupes" in profile and "gamma" not in profile


def test_report_says_when_an_extra_batch_size_has_no_gamma(tmp_path):
    """--batch-size 16 --batch-size 3: the profile has rows at 3 but the gamma rule cannot answer there,
    which passed without a word (capgeo gamma refuses B = 3 outright)."""
    import numpy as np

    np.save(tmp_path / "v.npy", np.random.default_rng(0).normal(size=(300, 16)).astype(np.float32))
    saved = tmp_path / "p.json"
    result = CliRunner().invoke(main, ["report", str(REPO_DATA / "coco_sample.json"), "--encoder",
                                       f"vectors:{tmp_path / 'v.npy'}", "--batch-size", "16", "--batch-size", "3",
                                       "--n-batches", "5", "--no-dupes", "--save-profile", str(saved),
                                       "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    profile = json.loads(saved.read_text())
    assert [entry["batch_size"] for entry in profile["gamma"]["batches"]] == [16]
    assert profile["gamma"]["batch_sizes_left_out"] == [3]
    assert "no gamma at B = 3" in result.output


def test_library_writers_refuse_to_overwrite_their_inputs(tmp_path):
    """The commands refused it, the library functions behind them did not: write_report replaced
    the dataset with HTML, write_compare a compared profile, export_negatives the mined dataset."""
    import shutil

    import numpy as np

    from capgeo.captions import load_captions
    from capgeo.encoders import embed
    from capgeo.findings.negatives import export_negatives
    from capgeo.geometry.profile_options import ProfileOptions
    from capgeo.pipeline import EncodeOptions
    from capgeo.report.build import write_compare, write_report

    data = tmp_path / "coco.json"
    shutil.copy(REPO_DATA / "coco_sample.json", data)
    np.save(tmp_path / "v.npy", np.random.default_rng(0).normal(size=(300, 16)).astype(np.float32))
    before = data.read_bytes()
    with pytest.raises(CapgeoError, match="would overwrite the input DATA"):
        write_report(data, data, encode=EncodeOptions(f"vectors:{tmp_path / 'v.npy'}"),
                     options=ProfileOptions(batch_sizes=(8,)))
    with pytest.raises(CapgeoError, match="would overwrite the input --encoder"):
        write_report(data, tmp_path / "v.npy", encode=EncodeOptions(f"vectors:{tmp_path / 'v.npy'}"),
                     options=ProfileOptions(batch_sizes=(8,)))
    profile = tmp_path / "p.json"
    shutil.copy(REPO_DATA.parent / "reports" / "coco_sample.profile.json", profile)
    with pytest.raises(CapgeoError, match="would overwrite the input SOURCES"):
        write_compare([profile, REPO_DATA.parent / "reports" / "coco_sample.profile.json"], profile)
    assert data.read_bytes() == before
    lines = tmp_path / "coco.jsonl"
    lines.write_text("".join(json.dumps({"id": f"c{i}", "image": f"i{i // 5}", "caption": f"caption {i}"}) + "\n"
                             for i in range(300)))
    before = lines.read_bytes()
    captions = load_captions(lines)
    with pytest.raises(CapgeoError, match="would overwrite the input DATA"):
        export_negatives(captions, embed(captions, f"vectors:{tmp_path / 'v.npy'}"), str(lines))
    assert lines.read_bytes() == before


def test_the_saved_profile_is_announced_when_written_not_after_the_page(tmp_path, monkeypatch):
    """Interrupted while drawing, report left --save-profile written without a word."""
    import numpy as np

    from capgeo.report import build

    np.save(tmp_path / "v.npy", np.random.default_rng(0).normal(size=(300, 16)).astype(np.float32))

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(build, "build_report", interrupted)
    result = CliRunner().invoke(main, ["report", str(REPO_DATA / "coco_sample.json"), "--encoder",
                                       f"vectors:{tmp_path / 'v.npy'}", "--batch-size", "8", "--n-batches", "3",
                                       "--no-dupes", "--save-profile", str(tmp_path / "p.json"),
                                       "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 130
    assert (tmp_path / "p.json").is_file() and f"Wrote {tmp_path / 'p.json'}" in result.stderr
    assert not (tmp_path / "r.html").exists()


def test_fill_missing_counts_the_gallery_at_the_profiles_own_threshold(tmp_path):
    """The filled gallery counted near-duplicates at the default 0.95 while the summary of the same
    page counted them at the profile's --near-duplicate-threshold (0 pairs against 29)."""
    import numpy as np

    np.save(tmp_path / "v.npy", np.random.default_rng(0).normal(size=(300, 16)).astype(np.float32))
    saved, filled = tmp_path / "p.json", tmp_path / "filled.json"
    made = CliRunner().invoke(main, ["profile", str(REPO_DATA / "coco_sample.json"), "--encoder",
                                     f"vectors:{tmp_path / 'v.npy'}", "--batch-size", "16", "--n-batches", "5",
                                     "--near-duplicate-threshold", "0.6", "--no-gamma", "--json", str(saved)])
    assert made.exit_code == 0, made.output
    result = CliRunner().invoke(main, ["report", str(saved), "--fill-missing", "--no-gamma", "--save-profile",
                                       str(filled), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    profile = json.loads(filled.read_text())
    summary, gallery = profile["near_duplicates"], profile["dupes"]["near_duplicates"]
    assert gallery["threshold"] == summary["threshold"] == 0.6
    assert gallery["n_pairs"] == summary["n_pairs_cross_group"] > 0


def test_fill_missing_finds_a_local_dir_folder_and_a_config_where_the_profile_was_made(tmp_path):
    """Only the checkpoint or vectors path was taken from the profile's folder: a local-dir: folder
    and the CONFIG.json of CONFIG.json@ckpt were looked for here."""
    from capgeo.report.build import _encoder_as_made

    made_in = tmp_path / "project"
    (made_in / "ck" / "model").mkdir(parents=True)
    for name in ("tiny.json", "tiny.pt"):
        (made_in / "ck" / name).write_text("x")
    assert _encoder_as_made("local-dir:ck/model", str(made_in)) == f"local-dir:{made_in / 'ck' / 'model'}"
    assert _encoder_as_made("ck/tiny.json@ck/tiny.pt", str(made_in)) == \
        f"{made_in / 'ck' / 'tiny.json'}@{made_in / 'ck' / 'tiny.pt'}"
    assert _encoder_as_made("ViT-B-32@ck/tiny.pt", str(made_in)) == f"ViT-B-32@{made_in / 'ck' / 'tiny.pt'}"
    assert _encoder_as_made("local-dir:elsewhere", str(made_in)) == "local-dir:elsewhere"  # not there: as given
