"""The options every command shares: comma-separated numbers and the reproduce command."""

from __future__ import annotations

import json
import shlex

import click
import numpy as np
import pytest
from click.testing import CliRunner

from capgeo.cli import main
from capgeo.cli.options import comma_separated_floats


def test_comma_separated_floats_parses_and_rejects():
    assert comma_separated_floats(None, None, "0.7, 0.8,0.9") == (0.7, 0.8, 0.9)
    assert comma_separated_floats(None, None, None) is None
    with pytest.raises(click.BadParameter, match="comma-separated numbers"):
        comma_separated_floats(None, None, "0.7,high")


def test_the_recorded_command_reproduces_the_run(repo_data, tmp_path):
    """provenance.command, parsed again, gives the same profile (defaults left out, parsed values rewritten)."""
    vectors = np.random.default_rng(1).normal(size=(300, 8)).astype(np.float32)
    np.save(tmp_path / "v.npy", vectors)
    args = ["profile", str(repo_data / "coco_sample.json"), "--encoder", f"vectors:{tmp_path / 'v.npy'}",
            "--batch-size", "8", "--batch-size", "16", "--buckets", "0.1,0.3", "--seed", "5", "--no-gamma",
            "--n-batches", "4", "--json"]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    profile = json.loads(first.stdout)
    command = profile["provenance"]["command"]
    assert command.startswith("capgeo profile ") and "--seed 5" in command and "--buckets 0.1,0.3" in command
    assert "--top-k" not in command  # a default is not repeated
    again = CliRunner().invoke(main, shlex.split(command)[1:])
    assert again.exit_code == 0, again.output
    replay = json.loads(again.stdout)
    assert replay["batches"] == profile["batches"] and replay["pairwise"] == profile["pairwise"]
