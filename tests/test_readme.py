"""The README tells the truth: its test command is CI's, and its Python example works."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from _gamma_oracle import check_suggestion

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_ci_runs_the_readme_test_command():
    setup = README.split("## Set up", 1)[1].split("\n## ", 1)[0]
    commands = [line for line in re.findall(r"```bash\n(.*?)```", setup, re.S)[0].splitlines()
                if line and not line.startswith("#")]
    assert len(commands) == 2, commands
    assert "capgeo profile data/" in commands[0]
    assert "pytest" in commands[1]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert commands[1] in ci.splitlines()


@pytest.mark.slow
def test_python_example_runs_and_agrees_with_brute_force(monkeypatch, tmp_path):
    code = README.split("## From Python", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").symlink_to(ROOT / "data")
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    profile = namespace["profile"]
    assert json.loads((tmp_path / "docci.profile.json").read_text(encoding="utf-8")) == profile.to_dict()
    assert "<html" in (tmp_path / "docci.html").read_text(encoding="utf-8")

    from capgeo.captions import load_captions
    from capgeo.encoders import embed

    captions = load_captions(ROOT / "data" / "docci_sample.jsonlines")
    embeddings = embed(captions, None, progress=False)   # the snippet's, from the cache
    vectors = embeddings.vectors.astype(np.float64)
    similarity = vectors @ vectors.T
    groups = np.asarray(captions.group_codes)
    similarity[groups[:, None] == groups[None, :]] = -np.inf  # a caption's own image is no companion
    assert abs(profile.hardest_companion.mean - similarity.max(axis=1).mean()) < 1e-5
    upper = np.triu(np.ones_like(similarity, dtype=bool), k=1) & np.isfinite(similarity)
    assert profile.near_duplicates.n_pairs_cross_group == int((similarity[upper] >= 0.95).sum())
    assert [entry.batch_size for entry in profile.batches] == [128, 16]
    # the suggested gamma, recomputed by brute force on the same in-batch rows
    gamma = profile.gamma.to_dict()
    assert not gamma["batches"][0]["suggestion"]["clipped"]
    check_suggestion(gamma, embeddings.vectors, captions.group_codes)


@pytest.mark.slow
def test_the_end_of_what_command_1_prints_is_the_readme_block(tmp_path):
    """The block under "The end of what README command 1 prints" is that command's output at 110
    columns, to the character (trailing spaces aside)."""
    from click.testing import CliRunner

    from capgeo.cli import main

    block = README.split("The end of what README command 1 prints", 1)[1].split("```\n", 2)[1]
    command = README.split("## Set up", 1)[1].split("```bash\n", 1)[1].splitlines()[1]
    data = command.split("capgeo profile ", 1)[1].split()[0]
    result = CliRunner().invoke(main, ["profile", str(ROOT / data), "--cache-dir", str(tmp_path / "cache")],
                                env={"COLUMNS": "110"})
    assert result.exit_code == 0, result.output
    printed = [line.rstrip() for line in result.stdout.splitlines()]
    expected = [line.rstrip() for line in block.splitlines()]
    assert printed[-len(expected):] == expected
