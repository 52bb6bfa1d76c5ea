"""What a dataset's text can do to a terminal: nothing. Control characters and bidirectional
overrides in captions, ids and file names are shown as escapes, brackets in names are not read as
markup, highlights land on the words they mark, and tables keep their numbers whole."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from rich.console import Console

from capgeo.cli import main
from capgeo.terminal.dupes import DIFFERING_STYLE, SHARED_STYLE, highlighted, is_plain
from capgeo.terminal import shown
from capgeo.display import visible
from capgeo.findings.highlight import highlight_pair

HOSTILE = "A red car \x1b[8mSECRET\x1b[0m parked \x1b[2J\x1b[H near a \u202ehouse\x07"


def run(*args, env=None):
    return CliRunner().invoke(main, [str(a) for a in args], env={"COLUMNS": "80", **(env or {})})


def test_visible_writes_controls_and_bidi_overrides_as_escapes_and_keeps_text():
    assert visible(HOSTILE) == "A red car \\x1b[8mSECRET\\x1b[0m parked \\x1b[2J\\x1b[H near a \\u202ehouse\\x07"
    assert visible("line one\r\nline two\ttab, café, 東京, 🙂") == "line one\nline two\ttab, café, 東京, 🙂"
    assert visible("a\rb\x9bc") == "a\\rb\\x9bc"
    assert shown("caps[train] [/x].jsonl") == "caps\\[train] \\[/x].jsonl"


@pytest.fixture
def hostile_dataset(tmp_path):
    records = [{"id": "a\x1b[31m", "image": "i1", "caption": HOSTILE},
               {"id": "b", "image": "i2", "caption": "A red car parked near a big house"},
               {"id": "c", "image": "i3", "caption": "Two dogs on a beach"}]
    data = tmp_path / "hostile.jsonl"
    data.write_text("".join(json.dumps(record) + "\n" for record in records))
    np.savez(tmp_path / "v.npz", vectors=np.float32([[1, 0, 0], [0.99, 0.14, 0], [0, 0, 1]]),
             ids=np.array(["a\x1b[31m", "b", "c"]))
    return data, f"vectors:{tmp_path / 'v.npz'}"


@pytest.mark.parametrize("command", ["info", "dupes", "leak"])
def test_no_escape_character_of_a_caption_or_id_reaches_the_output(hostile_dataset, command):
    data, encoder = hostile_dataset
    args = {"info": [data], "dupes": [data, "--encoder", encoder, "--threshold", 0],
            "leak": [data, data, "--encoder", encoder, "--threshold", 0.5]}[command]
    wide = {"COLUMNS": "300"}  # no escape cut in two by a line end
    result = run(command, *args, "--no-cache", env=wide) if command != "info" else run(command, *args, env=wide)
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.stdout and "\u202e" not in result.stdout and "\x07" not in result.stdout
    assert "\\x1b[" in result.stdout and "\\u202e" in result.stdout  # shown, not dropped


def test_highlights_land_on_their_words_after_line_breaks_and_bells():
    """Text(caption) drops "\\r" and BEL, and the spans (offsets into the caption) moved right."""
    first = "A wooden bench in a park.\r\nA red bicycle \x07\x07leans against the bench."
    second = "A wooden bench in a park.\r\nA blue bicycle leans against the bench."
    pair = highlight_pair(first, second)
    spans = pair.spans_a
    rendered = highlighted(first, spans)
    styled = {rendered.plain[span.start:span.end].lower(): str(span.style) for span in rendered.spans}
    assert styled["red"] == DIFFERING_STYLE
    assert styled["bicycle"] == styled["leans"] == styled["bench"] == SHARED_STYLE
    assert "\\x07\\x07leans" in rendered.plain
    plain = highlighted(first, spans, plain=True).plain
    assert "{red} [bicycle] \\x07\\x07[leans]" in plain


def test_no_color_marks_words_in_plain_text():
    assert is_plain(Console(force_terminal=True, no_color=True))
    assert not is_plain(Console(force_terminal=True, color_system="truecolor"))


def test_brackets_in_file_names_are_shown_not_read_as_markup(tmp_path):
    data = tmp_path / "caps[train].jsonl"
    data.write_text("".join(json.dumps({"id": f"c{i}", "image": f"i{i // 2}", "caption": f"caption {i}"}) + "\n"
                            for i in range(12)))
    vectors = tmp_path / "v[red].npy"
    np.save(vectors, np.random.default_rng(0).normal(size=(12, 8)).astype(np.float32))
    result = run("profile", data, "--encoder", f"vectors:{vectors}", "--batch-size", 4, "--n-batches", 2,
                 env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert "caps[train].jsonl" in result.stdout and "v[red].npy" in result.stdout
    (tmp_path / "run[").mkdir()
    closing = tmp_path / "run[" / "x[/x].npy"  # a closing tag: rich's MarkupError, a traceback after the work
    result = run("encode", data, "--encoder", f"vectors:{vectors}", "-o", closing, env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert "x[/x].npy" in result.stdout and closing.exists()


def test_a_bucket_table_of_many_edges_keeps_its_numbers_whole_at_80_columns(tmp_path):
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(60, 16))
    np.save(tmp_path / "v.npy", (np.repeat(centres, 5, axis=0) + 0.5 * rng.normal(size=(300, 16))).astype(np.float32))
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"image": f"i{i // 5}", "caption": f"cap {i}"}) + "\n" for i in range(300)))
    result = run("profile", data, "--encoder", f"vectors:{tmp_path / 'v.npy'}", "--batch-size", 32, "--no-gamma",
                 "--buckets", "0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9", "--json", tmp_path / "p.json")
    assert result.exit_code == 0, result.output
    table = result.stdout.split("In-batch negatives by cosine", 1)[1].split("└", 1)[0]
    assert "…" not in table
    shares = json.loads((tmp_path / "p.json").read_text())["batches"][0]["buckets"]["shares"]
    assert all(f"{share:.1%}" in table for share in shares)
    assert "0.8-0.9" in table and all(f" {word} " in table for word in ("batches", "hardest", "0.95"))


def test_a_caption_with_line_breaks_is_one_line_of_a_set(tmp_path):
    records = [{"id": "a", "caption": "A red car parked next to a building"},
               {"id": "b", "caption": "A red car\nparked next\nto a building"},
               {"id": "c", "caption": "A red car parked near a building"}]
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(record) + "\n" for record in records))
    np.save(tmp_path / "v.npy", np.float32([[1, 0], [0.99, 0.14], [0.98, 0.2]]))
    result = run("dupes-sets", data, "--encoder", f"vectors:{tmp_path / 'v.npy'}",
                 "--threshold", 0.8, "--no-cache", env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if "A red car" in line]
    assert len(rows) == 3 and any("A red car parked next to a building" in row for row in rows[1:2] + rows)
    assert not any(line.strip(" │").startswith(("parked next", "to a building")) for line in result.stdout.splitlines())


def test_a_final_backslash_is_shown_once_whether_or_not_a_tag_follows(tmp_path):
    """rich's escape doubles a final backslash against a tag that may follow: a caption ending in one
    was shown with two; an id ending in one, before its [/] tag, must still close the tag."""
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "c\\", "caption": "text ends with backslash\\"}) + "\n"
                    + json.dumps({"id": "d", "caption": "b"}) + "\n")
    result = run("info", data, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    (line,) = [line for line in result.stdout.splitlines() if "example 1" in line]
    assert line.split("example 1", 1)[1].strip() == "c\\ text ends with backslash\\"
    assert shown("end\\") == "end\\" and shown("end\\", before_tag=True) == "end\\\\"


def test_piped_leak_marks_words_in_plain_text_with_a_legend(tmp_path):
    """Piped, leak dropped its colours without marks; then marked words without saying what the marks mean."""
    evals = tmp_path / "ev.jsonl"
    evals.write_text(json.dumps({"id": "a", "caption": "A bell rings near the red car"}) + "\n")
    train = tmp_path / "tr.jsonl"
    train.write_text(json.dumps({"id": "t", "caption": "A bell rings near the blue car"}) + "\n"
                     + json.dumps({"id": "u", "caption": "a dog"}) + "\n")
    np.savez(tmp_path / "v.npz", vectors=np.float32([[1, 0], [0, 1], [0.99, 0.14]]), ids=np.array(["t", "u", "a"]))
    result = run("leak", train, evals, "--encoder", f"vectors:{tmp_path / 'v.npz'}", "--threshold", 0.5,
                 env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "[word]: in both captions" in result.stdout
    assert "[bell] [rings] near the {red} [car]" in result.stdout


def test_the_skipped_rows_warning_shows_file_names_without_acting_on_them(tmp_path):
    folder = tmp_path / "u"
    folder.mkdir()
    for number in (1, 2, 3):
        (folder / f"{number}.txt").write_text(f"caption {number} of a cat")
    (folder / "\x1b]0;PWNED\x07notes.txt").write_text("x")
    result = run("info", folder)
    assert result.exit_code == 0, result.output
    (warning,) = [line for line in result.stderr.splitlines() if line.startswith("Warning: skipped")]
    assert "\x1b" not in warning and "\x07" not in warning and "\\x1b]0;PWNED\\x07notes.txt" in warning


def test_a_set_shows_a_caption_ending_in_a_backslash_once(tmp_path):
    data = tmp_path / "bs.txt"
    data.write_text("dog on the grass\\\ndog on the grass\\\na red car\na blue bicycle\n")
    np.save(tmp_path / "v.npy", np.float32([[1, 0], [1, 0], [0, 1], [0.6, 0.8]]))
    result = run("dupes-sets", data, "--encoder", f"vectors:{tmp_path / 'v.npy'}", "--no-cache",
                 env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    rows = [line for line in result.stdout.splitlines() if "grass" in line]
    assert rows and all("grass\\\\" not in row and "grass\\" in row for row in rows)
