"""`capgeo compare` says where it wrote, also when -o was not given."""

from __future__ import annotations

import json

import numpy as np
from click.testing import CliRunner

from capgeo.cli import main


def test_compare_without_output_names_the_file_it_wrote(tmp_path, monkeypatch):
    rows = [{"id": f"c{i}", "image": f"img{i // 2}", "caption": f"a photo number {i}"} for i in range(24)]
    data = tmp_path / "captions.jsonl"
    data.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    rng = np.random.default_rng(0)
    for name in ("a", "b"):
        np.save(tmp_path / f"{name}.npy", rng.normal(size=(24, 8)).astype(np.float32))
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
