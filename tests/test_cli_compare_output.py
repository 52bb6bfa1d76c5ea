"""`capgeo compare` says where it wrote, also when -o was not given."""

from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from capgeo.cli import main


def _captions_and_two_vector_files(tmp_path):
    """24 captions of 12 images, and two vector files for them, a.npy and b.npy; returns the data."""
    rows = [{"id": f"c{i}", "image": f"img{i // 2}", "caption": f"a photo number {i}"} for i in range(24)]
    data = tmp_path / "captions.jsonl"
    data.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    rng = np.random.default_rng(0)
    for name in ("a", "b"):
        np.save(tmp_path / f"{name}.npy", rng.normal(size=(24, 8)).astype(np.float32))
    return data


def test_compare_without_output_names_the_file_it_wrote(tmp_path, monkeypatch):
    data = _captions_and_two_vector_files(tmp_path)
    folder = tmp_path / "here"
    folder.mkdir()
    monkeypatch.chdir(folder)
    runner = CliRunner()
    encoders = ["--encoder", f"vectors:{tmp_path / 'a.npy'}", "--encoder", f"vectors:{tmp_path / 'b.npy'}",
                "--batch-size", "4", "--n-batches", "5"]
    result = runner.invoke(main, ["compare", str(data), *encoders])
    assert result.exit_code == 0, result.output
    written = folder.resolve() / "compare.html"
    assert written.is_file()
    assert f"Wrote {written} (" in result.stderr
    assert "compare.html is the default name; -o FILE writes elsewhere" in result.stderr
    result = runner.invoke(main, ["compare", str(data), *encoders, "-o", "mine.html"])
    assert result.exit_code == 0, result.output
    assert f"Wrote {folder.resolve() / 'mine.html'} (" in result.stderr
    assert "default name" not in result.stderr


def test_every_encoder_is_checked_before_the_first_one_encodes(tmp_path):
    """A bad second --encoder was found only after the first had encoded the whole dataset."""
    rows = [{"id": f"c{i}", "image": f"img{i // 2}", "caption": f"a photo number {i}"} for i in range(24)]
    data = tmp_path / "captions.jsonl"
    data.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    np.save(tmp_path / "short.npy", np.random.default_rng(0).normal(size=(10, 8)).astype(np.float32))
    cache = tmp_path / "cache"
    for bad, says in (("no-such-spec", "unknown encoder spec"), (f"vectors:{tmp_path / 'short.npy'}",
                                                                 "10 vectors for 24 captions")):
        result = CliRunner().invoke(main, ["compare", str(data), "--encoder", "default", "--encoder", bad,
                                           "--cache-dir", str(cache), "-o", str(tmp_path / "c.html")])
        assert result.exit_code == 2 and says in result.output
        assert not list(cache.rglob("chunk-*"))  # the first encoder encoded nothing
    assert not (tmp_path / "c.html").exists()


def _two_saved_profiles(tmp_path):
    """24 captions of 12 images, and two saved profiles of them, a.json and b.json; returns the data."""
    rows = [{"id": f"c{i}", "image": f"img{i // 2}", "caption": f"a photo number {i}"} for i in range(24)]
    data = tmp_path / "captions.jsonl"
    data.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    np.save(tmp_path / "v.npy", np.random.default_rng(0).normal(size=(24, 8)).astype(np.float32))
    for name in ("a", "b"):
        made = CliRunner().invoke(main, ["profile", str(data), "--encoder", f"vectors:{tmp_path / 'v.npy'}",
                                         "--batch-size", "4", "--n-batches", "3", "--no-gamma",
                                         "--json", str(tmp_path / f"{name}.json")])
        assert made.exit_code == 0, made.output
    return data


def test_dataset_options_given_for_saved_profiles_only_are_named_as_ignored(tmp_path):
    _two_saved_profiles(tmp_path)
    result = CliRunner().invoke(main, ["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"),
                                       "--batch-size", "8", "--limit", "5", "-o", str(tmp_path / "c.html")])
    assert result.exit_code == 0, result.output
    assert "a.json is a saved profile, drawn as it is; ignored: --limit, --batch-size" in result.stderr


def test_saved_profiles_need_no_cache_folder_while_a_dataset_to_encode_does(tmp_path):
    """compare of saved profiles encodes nothing, yet a cache folder it could not write refused it
    (`report SAVED` never did); a dataset still has its cache folder checked before encoding."""
    data = _two_saved_profiles(tmp_path)
    (tmp_path / "a-file").write_text("a file where the cache folder's parent would be")
    unusable = tmp_path / "a-file" / "cache"
    result = CliRunner().invoke(main, ["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"),
                                       "--cache-dir", str(unusable), "-o", str(tmp_path / "c.html")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "c.html").is_file()
    result = CliRunner().invoke(main, ["compare", str(tmp_path / "a.json"), str(data), "--cache-dir", str(unusable),
                                       "-o", str(tmp_path / "d.html")])
    assert result.exit_code == 2 and "cannot write the embedding cache" in result.output
    assert not (tmp_path / "d.html").exists()


def test_a_batch_size_cut_to_a_small_dataset_is_said_on_the_terminal_and_the_page(tmp_path):
    """compare dropped `report`'s notes: a dataset of 12 images got B=12 beside another profile's
    B=128 (a smaller batch asks for a larger gamma) without a word."""
    data = _captions_and_two_vector_files(tmp_path)
    output = tmp_path / "c.html"
    result = CliRunner().invoke(main, ["compare", str(data), "--encoder", f"vectors:{tmp_path / 'a.npy'}",
                                       "--encoder", f"vectors:{tmp_path / 'b.npy'}", "-o", str(output)])
    assert result.exit_code == 0, result.output
    # once a dataset, named by the page's labels (here its two encoders)
    said = (f"vectors:{tmp_path / 'a.npy'}, vectors:{tmp_path / 'b.npy'}: "
            "Batch size 12: the dataset has only 12 images (default 128).")
    assert result.stderr.count("the dataset has only 12 images (default 128)") == 1
    assert said in " ".join(result.stderr.split())
    assert "--no-dupes" not in result.stderr  # compare draws no gallery: nothing was left out by the user
    page = output.read_text(encoding="utf-8")
    assert '<section id="notes"' in page and said in page
    # two datasets of one file name, labelled: a note for each (they were merged under "captions.jsonl")
    (tmp_path / "other").mkdir()
    other = tmp_path / "other" / "captions.jsonl"
    other.write_text(data.read_text().replace("a photo", "another photo"))
    result = CliRunner().invoke(main, ["compare", str(data), str(other), "--encoder", f"vectors:{tmp_path / 'a.npy'}",
                                       "--label", "first", "--label", "second", "-o", str(output)])
    assert result.exit_code == 0, result.output
    assert "note: first: Batch size 12" in result.stderr and "note: second: Batch size 12" in result.stderr
