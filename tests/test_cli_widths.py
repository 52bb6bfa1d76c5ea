"""Terminal output at a fixed narrow width: specs are never broken, long sentences wrap."""

from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from capgeo.cli import main
from capgeo.encoders.registry import list_encoder_kinds


def test_encoders_table_never_breaks_a_spec():
    result = CliRunner().invoke(main, ["encoders"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    cells = [cell.strip() for line in result.output.splitlines() for cell in line.split("│")]
    for kind in list_encoder_kinds():
        for example in kind.examples:
            assert example in cells, example
    assert max(len(line) for line in result.output.splitlines()) <= 80


def test_gamma_why_line_wraps_at_the_terminal_width(tmp_path):
    rows = [{"id": f"c{i}", "image": f"img{i}", "caption": f"caption {i}"} for i in range(64)]
    data = tmp_path / "captions.jsonl"
    data.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    np.save(tmp_path / "emb.npy", np.random.default_rng(0).normal(size=(64, 16)).astype(np.float32))
    args = ["gamma", str(data), "--encoder", f"vectors:{tmp_path / 'emb.npy'}", "--batch-size", "16",
            "--n-batches", "4"]
    result = CliRunner().invoke(main, args, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    saved = tmp_path / "gamma.json"
    assert CliRunner().invoke(main, args + ["--json", str(saved)]).exit_code == 0
    why = json.loads(saved.read_text())["gamma"]["batches"][0]["why"]
    assert len(why) > 80 and " ".join(f"why: {why}".split()) in " ".join(result.stdout.split())


def test_the_encoders_notes_are_whole_at_80_columns():
    """A note ended "(Hugging Face BeichenZhang/LongCLIP…": the hub id had no space to wrap at."""
    result = CliRunner().invoke(main, ["encoders"], env={"COLUMNS": "80"})
    assert result.exit_code == 0 and "…" not in result.output
    words = [word for line in result.output.splitlines() for cell in line.split("│")[3:4] for word in cell.split()]
    for kind in list_encoder_kinds():  # every word of every note, in the notes column
        assert set(kind.notes.split()) <= set(words) | {"BeichenZhang/LongCLIP-*)"}, kind.kind
    assert "BeichenZhang/LongCLIP-" in words and "*)" in words


def test_a_narrow_terminal_keeps_every_number(tmp_path):
    """At 40 columns every table cell was cut to one character ("n…", "4…"): tables are laid out at
    80 columns at least, and the terminal wraps the lines."""
    rows = [{"id": f"c{i}", "image": f"img{i // 2}", "caption": f"caption {i}"} for i in range(64)]
    data = tmp_path / "captions.jsonl"
    data.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    np.save(tmp_path / "emb.npy", np.random.default_rng(0).normal(size=(64, 16)).astype(np.float32))
    for command in (["profile", str(data), "--encoder", f"vectors:{tmp_path / 'emb.npy'}", "--batch-size", "8",
                     "--n-batches", "4", "--no-gamma"], ["info", str(data)], ["encoders"]):
        result = CliRunner().invoke(main, command, env={"COLUMNS": "40"})
        assert result.exit_code == 0, result.output
        assert "…" not in result.stdout, command


def test_gamma_grid_with_image_losses_keeps_every_number_whole_at_80_columns(tmp_path):
    """At 80 columns the eleven-column grid cut a loss of 3.0e-05 to "3.01…", which reads as 3.01."""
    rng = np.random.default_rng(0)
    rows = [{"id": f"c{i}", "image": f"img{i // 2}", "caption": f"caption {i}"} for i in range(64)]
    data = tmp_path / "captions.jsonl"
    data.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    vectors = rng.normal(size=(64, 16))
    np.save(tmp_path / "emb.npy", vectors.astype(np.float32))
    images = vectors.reshape(32, 2, 16).mean(axis=1)  # each image at its captions' mean: tiny losses
    np.save(tmp_path / "img.npy", images.astype(np.float32))
    args = ["gamma", str(data), "--encoder", f"vectors:{tmp_path / 'emb.npy'}", "--image-embeddings",
            str(tmp_path / "img.npy"), "--batch-size", "16", "--n-batches", "4", "--grid", "0,0.5,1"]
    result = CliRunner().invoke(main, args, env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "…" not in result.stdout
    saved = tmp_path / "gamma.json"
    assert CliRunner().invoke(main, args + ["--json", str(saved)]).exit_code == 0
    image = json.loads(saved.read_text())["gamma"]["batches"][0]["image"]
    for loss in [image["plain"]["mean_loss"]] + [row["mean_loss"] for row in image["boosted"]]:
        assert f"{loss:.3g}" in result.stdout


def test_profile_says_when_its_gamma_is_clipped(tmp_path):
    """Identical captions: no gamma up to the clip concentrates the softmax; the profile printed
    "2.00 (range 2.00-2.00)" as if it were a match, while `capgeo gamma` said it was clipped."""
    rows = [{"id": f"c{i}", "image": f"img{i}", "caption": f"caption {i}"} for i in range(64)]
    data = tmp_path / "captions.jsonl"
    data.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    np.save(tmp_path / "emb.npy", np.tile(np.random.default_rng(0).normal(size=(1, 16)), (64, 1)).astype(np.float32))
    args = ["profile", str(data), "--encoder", f"vectors:{tmp_path / 'emb.npy'}", "--batch-size", "16",
            "--n-batches", "4"]
    result = CliRunner().invoke(main, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    saved = tmp_path / "p.json"
    assert CliRunner().invoke(main, args + ["--json", str(saved)]).exit_code == 0
    note = json.loads(saved.read_text())["gamma"]["batches"][0]["suggestion"]["clip_note"]
    assert note and f"clipped: {note}" in " ".join(result.stdout.split())


def test_the_command_list_cuts_no_summary():
    """Nine of twelve command summaries ended in "..." even at 200 columns."""
    for columns in ("80", "200"):
        result = CliRunner().invoke(main, ["--help"], env={"COLUMNS": columns})
        assert result.exit_code == 0
        commands = result.output.split("Commands:")[1]
        assert "..." not in commands and "…" not in commands, commands


def test_a_ten_digit_pair_count_is_printed_whole_at_80_columns(tmp_path):
    """Above about 45,000 captions the negatives' count has 10 digits; at 80 columns it read '3,199,920,0…'."""
    from io import StringIO

    from rich.console import Console

    from capgeo.geometry.typed_profile import Profile
    from capgeo.terminal.profile import print_profile

    rows = [{"id": f"c{i}", "image": f"img{i // 2}", "caption": f"caption {i}"} for i in range(64)]
    data = tmp_path / "captions.jsonl"
    data.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    np.save(tmp_path / "emb.npy", np.random.default_rng(0).normal(size=(64, 16)).astype(np.float32))
    result = CliRunner().invoke(main, ["profile", str(data), "--encoder", f"vectors:{tmp_path / 'emb.npy'}",
                                       "--batch-size", "8", "--n-batches", "4", "--no-gamma", "--json", "-"])
    profile = json.loads(result.stdout)
    profile["pairwise"]["count"] = profile["pairwise"]["n"] = 3_199_920_000
    out = StringIO()
    print_profile(Profile.from_dict(profile), console=Console(file=out, width=80, force_terminal=False))
    assert "3,199,920,000" in out.getvalue()
