"""Hostile input, output side (issue 46): output paths and marks, cache tampering, the Python API,
CSV formula injection and options. Each case asserts exit status 2 and one `Error:` line without
a traceback (commands), one CapgeoError (library), or the right result; and that every file that
existed before is byte-identical afterwards."""

from __future__ import annotations

import hashlib
import json
import shlex
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from _action_fixtures import unit
from capgeo.cli import main
from capgeo.errors import CapgeoError

N_CAPTIONS = 12


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with a hash of its bytes."""
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file() and not path.is_symlink()}


def run(command: str | list[str]):
    args = shlex.split(command) if isinstance(command, str) else [str(part) for part in command]
    return CliRunner().invoke(main, args, env={"COLUMNS": "200"})


def assert_one_error(result, *fragments: str) -> str:
    """Exit 2, one `Error:` line holding each of ``fragments``, no traceback; the line."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, result.output
    assert all(fragment in errors[0] for fragment in fragments), errors[0]
    return errors[0]


def assert_one_line(error: BaseException, *fragments: str) -> None:
    """A library refusal: capgeo's error class, one line holding each of ``fragments``."""
    assert isinstance(error, CapgeoError), repr(error)
    message = str(error)
    assert "\n" not in message and all(fragment in message for fragment in fragments), message


@pytest.fixture
def workspace(tmp_path, monkeypatch) -> Path:
    """12 captions of 6 images (d.jsonl) and their vectors (v.npy, row i for caption i), in the current folder."""
    monkeypatch.chdir(tmp_path)
    rows = [{"id": f"c{i}", "image": f"g{i // 2}", "caption": f"a photo of thing {i} on a table"}
            for i in range(N_CAPTIONS)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    np.save(tmp_path / "v.npy", vectors())
    return tmp_path


def vectors() -> np.ndarray:
    return unit(np.random.default_rng(0).normal(size=(N_CAPTIONS, 8)))


@pytest.fixture
def made_profile(workspace):
    """A profile of d.jsonl made from Python, of the vectors in v.npy."""
    import capgeo

    return capgeo.profile("d.jsonl", encoder="vectors:v.npy", batch_size=4, gamma=False, progress=False)


USER_PAGE = b"<!DOCTYPE html>\n<html><head><title>my notes</title></head><body>mine</body></html>\n"


class TestPythonWritersObeyTheOutputRule:
    """Profile.to_json / to_html, and the library's write_* functions, as every command: never over
    an input, never over a file capgeo did not write unless force=True."""

    @pytest.mark.parametrize("writer", ["to_json", "to_html"])
    def test_never_over_the_dataset_even_with_force(self, workspace, made_profile, writer):
        before = snapshot(workspace)
        for force in (False, True):
            with pytest.raises(CapgeoError) as caught:
                getattr(made_profile, writer)("d.jsonl", force=force)
            assert_one_line(caught.value, "d.jsonl", "would overwrite the input DATA")
        assert snapshot(workspace) == before

    @pytest.mark.parametrize("writer, name", [("to_json", "notes.json"), ("to_html", "page.html")])
    def test_a_users_file_only_with_force(self, workspace, made_profile, writer, name):
        (workspace / name).write_bytes(USER_PAGE)
        before = snapshot(workspace)
        with pytest.raises(CapgeoError) as caught:
            getattr(made_profile, writer)(name)
        assert_one_line(caught.value, name, "capgeo did not write it", "force=True")
        assert snapshot(workspace) == before
        getattr(made_profile, writer)(name, force=True)
        assert (workspace / name).read_bytes() != USER_PAGE

    @pytest.mark.parametrize("writer, name", [("to_json", "p.json"), ("to_html", "p.html")])
    def test_an_earlier_capgeo_output_is_replaced(self, workspace, made_profile, writer, name):
        from capgeo.paths import written_by_capgeo

        getattr(made_profile, writer)(name)
        older = (workspace / name).read_bytes() + b"\n"  # an earlier output, still marked
        (workspace / name).write_bytes(older)
        getattr(made_profile, writer)(name)
        assert (workspace / name).read_bytes() != older and written_by_capgeo(workspace / name)

    def test_write_report_from_python_refuses_a_users_page(self, workspace):
        from capgeo.pipeline import EncodeOptions
        from capgeo.report.build import ReportOptions, write_report

        (workspace / "page.html").write_bytes(USER_PAGE)
        before = snapshot(workspace)
        with pytest.raises(CapgeoError) as caught:
            write_report("d.jsonl", "page.html", encode=EncodeOptions("vectors:v.npy"),
                         report=ReportOptions(gamma=False, caption_map=False))
        assert_one_line(caught.value, "page.html", "force=True")
        assert snapshot(workspace) == before

    def test_map_refuses_a_users_page(self, workspace):
        pytest.importorskip("openTSNE")
        (workspace / "page.html").write_bytes(USER_PAGE)
        before = snapshot(workspace)
        assert_one_error(run("map d.jsonl --encoder vectors:v.npy -o page.html"), "page.html", "--force")
        assert snapshot(workspace) == before

    @pytest.mark.slow  # the projection's first run compiles (30 s on the 2-core machine)
    def test_map_takes_force_as_its_error_says(self, workspace):
        pytest.importorskip("openTSNE")
        (workspace / "page.html").write_bytes(USER_PAGE)
        result = run("map d.jsonl --encoder vectors:v.npy -o page.html --force")
        assert result.exit_code == 0, result.output
        assert (workspace / "page.html").read_bytes() != USER_PAGE


class TestMarks:
    """Only capgeo's own mark, where capgeo writes it, makes a file replaceable without --force."""

    META = '<meta name="generator" content="capgeo 0.1.0">'
    PAGES = {
        "comment": f"<!DOCTYPE html>\n<html><head><!-- {META} --><title>mine</title></head><body>x</body></html>\n",
        "script": (f"<!DOCTYPE html>\n<html><head><script>const tag = '{META}';</script></head>"
                   "<body>mine</body></html>\n"),
        "body": f"<!DOCTYPE html>\n<html><head><title>mine</title></head><body>{META}</body></html>\n",
        # capgeo's first lines, then a comment that opens before the mark and closes after it
        "commented-out": "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<!--\n" + META + "\n-->\n</head></html>\n",
    }

    @pytest.mark.parametrize("kind", sorted(PAGES))
    def test_a_users_page_quoting_the_mark_is_not_replaced(self, workspace, kind):
        page = workspace / "page.html"
        page.write_text(self.PAGES[kind], encoding="utf-8")
        before = snapshot(workspace)
        assert_one_error(run("report d.jsonl --encoder vectors:v.npy --no-gamma --no-map --batch-size 4 -o page.html"),
                         "page.html", "capgeo did not write it", "--force")
        assert snapshot(workspace) == before

    def test_capgeos_own_page_is_still_replaced(self, workspace):
        command = "report d.jsonl --encoder vectors:v.npy --no-gamma --no-map --batch-size 4 -o page.html"
        assert run(command).exit_code == 0
        first = (workspace / "page.html").read_bytes()
        assert run(command).exit_code == 0
        assert (workspace / "page.html").read_bytes().startswith(first[:200])

    @pytest.mark.parametrize("schema", ["capgeo.", "capgeo.notes", "capgeo.profile/1 (my copy)", "Capgeo.profile/1"])
    def test_a_json_naming_no_real_schema_is_not_a_result(self, workspace, schema):
        notes = workspace / "notes.json"
        notes.write_text(json.dumps({"schema": schema, "mine": [1, 2]}), encoding="utf-8")
        before = snapshot(workspace)
        assert_one_error(run("info d.jsonl --json notes.json"), "notes.json", "--force")
        assert snapshot(workspace) == before


FORMULAS = ["=HYPERLINK(\"http://x\",\"y\")", "+1+1", "-2+3", "@SUM(A1)", "\tx=1", "\r=1", "=cmd|' /C calc'!A0"]


@pytest.fixture
def formula_workspace(workspace):
    """d.jsonl again, its captions and ids starting like spreadsheet formulas."""
    rows = [{"id": f"-id{i}" if i % 3 == 0 else f"c{i}", "image": f"@g{i // 2}",
             "caption": f"{FORMULAS[i % len(FORMULAS)]} caption {i}"} for i in range(N_CAPTIONS)]
    (workspace / "d.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return workspace


def csv_rows(path: Path) -> list[dict]:
    import csv

    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def assert_no_formula(rows: list[dict]) -> None:
    cells = [value for row in rows for value in row.values() if value]
    assert cells
    bad = [value for value in cells if value.startswith(("=", "+", "@", "\t", "\r"))
           or (value.startswith("-") and not _is_number(value))]
    assert not bad, bad


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class TestCsvInjection:
    """Every CSV capgeo writes neutralises cells that start like a formula (OWASP); numbers stay numbers."""

    def test_dupes_pairs(self, formula_workspace):
        before = snapshot(formula_workspace)
        result = run("dupes d.jsonl --encoder vectors:v.npy --top 0 --threshold -1 -o o.csv")
        assert result.exit_code == 0, result.output
        rows = csv_rows(formula_workspace / "o.csv")
        assert_no_formula(rows)
        assert len(rows) == N_CAPTIONS * (N_CAPTIONS - 2) // 2  # every pair of different images
        cosines = sorted(float(row["cosine"]) for row in rows)
        assert cosines[0] < 0  # a negative cosine, written as a number and read back as one
        texts = {row["text_a"] for row in rows} | {row["text_b"] for row in rows}
        assert "'=HYPERLINK(\"http://x\",\"y\") caption 0" in texts  # the text kept, after one quote
        assert "'-id0" in {row["id_a"] for row in rows} | {row["id_b"] for row in rows}
        assert snapshot(formula_workspace) == {**before, "o.csv": snapshot(formula_workspace)["o.csv"]}

    def test_dupes_examples_to_stdout(self, formula_workspace):
        result = run("dupes-examples d.jsonl --encoder vectors:v.npy --output-format csv")
        assert result.exit_code == 0, result.output
        (formula_workspace / "e.csv").write_text(result.stdout, encoding="utf-8")
        assert_no_formula(csv_rows(formula_workspace / "e.csv"))

    def test_per_caption(self, formula_workspace):
        result = run("profile d.jsonl --encoder vectors:v.npy --no-gamma --batch-size 4 --per-caption p.csv")
        assert result.exit_code == 0, result.output
        rows = csv_rows(formula_workspace / "p.csv")
        assert len(rows) == N_CAPTIONS
        assert_no_formula(rows)
        assert rows[0]["caption_id"] == "'-id0"

    def test_jsonl_rows_keep_the_text_as_it_is(self, formula_workspace):
        result = run("dupes d.jsonl --encoder vectors:v.npy --top 0 -o o.jsonl")
        assert result.exit_code == 0, result.output
        texts = {json.loads(line)["text_a"] for line in (formula_workspace / "o.jsonl").read_text().splitlines()}
        assert any(text.startswith("=") for text in texts)


class TestCacheTampering:
    """Cache files are bound to their entry's key: copied from another dataset's entry, with the same
    caption count and token counts, they are refused and re-encoded, never served as a hit."""

    @staticmethod
    def twin_sets():
        """Two caption lists of the same length and the same word counts (so the same token counts)."""
        from test_cache import make_texts

        first = make_texts(40)
        second = [" ".join("other" for _ in text.split()) for text in first]
        return first, second

    def test_an_entry_folder_copied_from_another_dataset_is_re_encoded(self, tmp_path, capfd):
        import shutil

        from capgeo.encoders import embed
        from test_cache import CountingEncoder, expected

        first, second = self.twin_sets()
        embed(first, CountingEncoder(), cache_dir=tmp_path, chunk_rows=8)
        [entry] = (tmp_path / "embeddings").iterdir()
        encoder = CountingEncoder()
        # where the second set's entry goes: found by embedding it once elsewhere
        embed(second, encoder, cache_dir=tmp_path / "elsewhere", chunk_rows=8)
        [target] = (tmp_path / "elsewhere" / "embeddings").iterdir()
        shutil.copytree(entry, tmp_path / "embeddings" / target.name)
        capfd.readouterr()
        encoder = CountingEncoder()
        result = embed(second, encoder, cache_dir=tmp_path, chunk_rows=8)
        np.testing.assert_array_equal(result.vectors, expected(second))
        assert encoder.encoded_texts == len(second) and result.origin != "cache"
        assert "fails its checksum" in capfd.readouterr().err

    def test_a_chunk_copied_from_another_dataset_is_re_encoded(self, tmp_path):
        from capgeo.encoders import embed
        from test_cache import CountingEncoder, expected

        first, second = self.twin_sets()
        embed(first, CountingEncoder(), cache_dir=tmp_path / "a", chunk_rows=8)
        embed(second, CountingEncoder(), cache_dir=tmp_path / "b", chunk_rows=8)
        [theirs] = sorted((tmp_path / "a").glob("embeddings/*/chunk-000000008-*.npy"))
        [ours] = sorted((tmp_path / "b").glob("embeddings/*/chunk-000000008-*.npy"))
        ours.unlink()
        (ours.parent / theirs.name).write_bytes(theirs.read_bytes())  # with the checksum name it has there
        encoder = CountingEncoder()
        result = embed(second, encoder, cache_dir=tmp_path / "b", chunk_rows=8)
        np.testing.assert_array_equal(result.vectors, expected(second))
        assert encoder.encoded_texts == 8  # that one chunk, encoded again


class TestPythonApi:
    """A wrong value or keyword from Python is one CapgeoError naming the function called and the
    argument, before any work; nothing is written."""

    CASES = [
        ("profile", {"batch_size": 16.5}, "batch_size"),
        ("profile", {"batch_size": []}, "batch_size"),
        ("profile", {"batch_size": "8"}, "batch_size"),
        ("profile", {"seed": 1.5}, "seed"),
        ("profile", {"n_batches": True}, "n_batches"),
        ("profile", {"text_column": 5}, "text_column"),
        ("profile", {"limit": 2.5}, "limit"),
        ("profile", {"bogus": 1}, "unknown keyword argument 'bogus'"),
        ("near_duplicates", {"top": 2.5}, "top"),
        ("near_duplicates", {"threshold": "high"}, "threshold"),
        ("near_duplicates", {"threshold": float("nan")}, "threshold"),
        ("near_duplicates", {"bogus": 1}, "unknown keyword argument 'bogus'"),
        ("suggest_gamma", {"grid": []}, "grid"),
        ("suggest_gamma", {"grid": [0.5, float("inf")]}, "grid"),
        ("suggest_gamma", {"batch_size": []}, "batch_size"),
        ("suggest_gamma", {"seed": 1.5}, "seed"),
        ("suggest_gamma", {"logit_scale": "100"}, "logit_scale"),
        ("suggest_gamma", {"bogus": 1}, "unknown keyword argument 'bogus'"),
        ("leak", {"top": 2.5}, "top"),
        ("leak", {"bogus": 1}, "unknown keyword argument 'bogus'"),
    ]

    @pytest.mark.parametrize("function, arguments, named", CASES,
                             ids=[f"{f}-{next(iter(a))}={a[next(iter(a))]!r}" for f, a, _ in CASES])
    def test_a_wrong_argument_is_one_error_naming_the_call(self, workspace, function, arguments, named):
        import capgeo

        data = ("d.jsonl", "d.jsonl") if function == "leak" else ("d.jsonl",)
        before = snapshot(workspace)
        with pytest.raises(CapgeoError) as caught:
            getattr(capgeo, function)(*data, encoder="vectors:v.npy", **arguments)
        assert_one_line(caught.value, f"{function}()", named)
        assert "load_captions" not in str(caught.value)
        assert snapshot(workspace) == before

    def test_options_objects_check_their_fields(self):
        from capgeo.geometry.profile_options import ProfileOptions

        with pytest.raises(CapgeoError) as caught:
            ProfileOptions(seed=1.5)
        assert_one_line(caught.value, "ProfileOptions", "seed")
        assert ProfileOptions(batch_sizes=[8, 16], seed=np.int64(3)).seed == 3  # numpy integers are whole numbers

    def test_right_arguments_still_work(self, workspace):
        import capgeo

        suggestion = capgeo.suggest_gamma("d.jsonl", encoder="vectors:v.npy", batch_size=np.int64(4), grid=[0.25, 0.5])
        assert suggestion.batch_size == 4
        assert [row["gamma"] for row in suggestion.batches[0]["grid"]] == [0.25, 0.5]
        found = capgeo.near_duplicates("d.jsonl", encoder="vectors:v.npy", top=3, threshold=-1)
        assert len(found.pairs) == 3

    def test_per_caption_refuses_what_the_profile_was_not_made_from(self, workspace, made_profile):
        import capgeo
        from capgeo.encoders import embed

        captions = capgeo.load_captions("d.jsonl")
        embeddings = embed(captions, "vectors:v.npy")
        assert len(made_profile.per_caption(captions, embeddings)) == N_CAPTIONS
        other = capgeo.load_captions([{"caption": f"other {i}", "image": f"x{i // 2}"} for i in range(N_CAPTIONS)])
        for wrong_captions, wrong_embeddings, named in [(vectors(), embeddings, "CaptionSet"),
                                                        (captions, vectors(), "Embeddings"),
                                                        (other, embeddings, "not the")]:
            with pytest.raises(CapgeoError) as caught:
                made_profile.per_caption(wrong_captions, wrong_embeddings)
            assert_one_line(caught.value, "per_caption", named)


LONG_NAME = "a" * 300


class TestOptionsAndNames:
    """Options at their limits, file names the system cannot take or that are not UTF-8, a flag that
    would do nothing, a reader that goes away: one error line (or the right result), never a traceback."""

    @pytest.mark.parametrize("command, named", [
        ("gamma d.jsonl --encoder vectors:v.npy --batch-size 4 --grid 1e308", "--grid"),
        ("gamma d.jsonl --encoder vectors:v.npy --batch-size 4 --grid 0.5,inf", "--grid"),
        ("gamma d.jsonl --encoder vectors:v.npy --batch-size 4 --logit-scale 1e308", "--logit-scale"),
        ("profile d.jsonl --encoder vectors:v.npy --batch-size 4 --logit-scale 1e308", "--logit-scale"),
        (f"info {LONG_NAME}.jsonl", LONG_NAME),
        (f"profile d.jsonl --encoder vectors:{LONG_NAME}.npy --json o.json", LONG_NAME),
        ("report d.jsonl --encoder vectors:v.npy --batch-size 4 --no-map --fill-missing -o r.html", "--fill-missing"),
    ])
    def test_refused_in_one_line(self, workspace, command, named):
        before = snapshot(workspace)
        assert_one_error(run(command), named)
        assert snapshot(workspace) == before

    def test_the_largest_scale_and_gamma_taken_give_numbers_without_warnings(self, workspace):
        import warnings

        import capgeo

        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a numpy overflow warning fails the test
            suggestion = capgeo.suggest_gamma("d.jsonl", encoder="vectors:v.npy", batch_size=4,
                                              logit_scale=10_000, grid=[0, 1_000])
        assert np.isfinite(suggestion.gamma)
        with pytest.raises(CapgeoError):
            capgeo.suggest_gamma("d.jsonl", encoder="vectors:v.npy", batch_size=4, grid=[1e308])

    def test_a_name_that_is_not_utf8_is_reported_and_given_back(self, workspace):
        import os

        name = os.fsdecode(b"caf\xe9.jsonl")   # a Latin-1 name
        (workspace / name).write_bytes((workspace / "d.jsonl").read_bytes())
        vectors_name = os.fsdecode(b"v\xfe.npy")
        (workspace / vectors_name).write_bytes((workspace / "v.npy").read_bytes())
        result = run(["report", name, "--encoder", f"vectors:{vectors_name}", "--batch-size", "4", "--no-map",
                      "--save-profile", "p.json", "-o", "r.html"])
        assert result.exit_code == 0, result.output
        saved = json.loads((workspace / "p.json").read_text(encoding="utf-8"))
        assert os.fsencode(saved["dataset"]["source"]).endswith(b"caf\xe9.jsonl")  # the bytes, given back
        assert "caf\\udce9.jsonl" in (workspace / "r.html").read_text(encoding="utf-8")
        result = run(["profile", "d.jsonl", "--encoder", f"vectors:{vectors_name}", "--batch-size", "4",
                      "--json", "o.json"])
        assert result.exit_code == 0, result.output
        assert os.fsencode(json.loads((workspace / "o.json").read_text())["encoder"]["spec"]).endswith(b"v\xfe.npy")

    @pytest.mark.parametrize("output", ["--output-format jsonl", "", "--json"])
    def test_a_reader_that_goes_away_ends_quietly_with_status_141(self, workspace, output):
        import subprocess
        import sys

        rows = [{"id": f"c{i}", "image": f"g{i // 2}", "caption": f"caption number {i}"} for i in range(400)]
        (workspace / "big.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        np.save(workspace / "big.npy", unit(np.random.default_rng(1).normal(size=(400, 8))))
        command = [sys.executable, "-m", "capgeo", "dupes", "big.jsonl", "--encoder", "vectors:big.npy",
                   "--top", "3000", *output.split()]
        env = {**__import__("os").environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        process.stdout.readline()
        process.stdout.close()   # as `| head -1` does
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == 141, stderr
        assert b"Traceback" not in stderr and b"Error" not in stderr and b"Exception ignored" not in stderr


class TestLibraryWritersOfRows:
    """encode_dataset and negatives_dataset, the library's `encode -o` and `negatives -o`, under the same rule."""

    def test_plan_batches_never_writes_over_the_dataset_or_a_users_file(self, workspace):
        import capgeo

        (workspace / "mine.jsonl").write_bytes(b"mine\n")
        before = snapshot(workspace)
        for output, force, named in [("d.jsonl", True, "would overwrite the input"), ("mine.jsonl", False, "force=True")]:
            with pytest.raises(CapgeoError) as caught:
                capgeo.plan_batches("d.jsonl", batch_size=4, encoder="vectors:v.npy", output=output, force=force)
            assert_one_line(caught.value, output, named)
        assert snapshot(workspace) == before
        capgeo.plan_batches("d.jsonl", batch_size=4, encoder="vectors:v.npy", output="mine.jsonl", force=True)
        assert (workspace / "mine.jsonl").read_bytes() != b"mine\n"
        with pytest.raises(CapgeoError) as caught:
            capgeo.plan_batches("d.jsonl", batch_size=4.5, encoder="vectors:v.npy")
        assert_one_line(caught.value, "plan_batches()", "batch_size")

    @pytest.mark.parametrize("call, output", [("encode_dataset", "mine.npy"), ("negatives_dataset", "mine.jsonl")])
    def test_a_users_file_only_with_force(self, workspace, call, output):
        import capgeo
        import capgeo.pipeline as pipeline

        (workspace / output).write_bytes(b"mine\n")
        captions = capgeo.load_captions("d.jsonl")
        encode = pipeline.EncodeOptions("vectors:v.npy")
        run_it = ((lambda **force: pipeline.encode_dataset(captions, encode, output=output, **force))
                  if call == "encode_dataset" else
                  (lambda **force: pipeline.negatives_dataset(captions, output, encode, k=2, **force)))
        before = snapshot(workspace)
        with pytest.raises(CapgeoError) as caught:
            run_it()
        assert_one_line(caught.value, output, "force=True")
        assert snapshot(workspace) == before
        run_it(force=True)
        assert (workspace / output).read_bytes() != b"mine\n"
        with pytest.raises(CapgeoError) as caught:  # and never the vectors it reads, even with force
            (pipeline.encode_dataset(captions, encode, output="v.npy", force=True) if call == "encode_dataset"
             else pipeline.negatives_dataset(captions, "d.jsonl", encode, force=True))
        assert_one_line(caught.value, "would overwrite the input")
