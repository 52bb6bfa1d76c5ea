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
