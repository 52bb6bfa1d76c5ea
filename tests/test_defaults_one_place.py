"""Issue #29: each default lives in capgeo/defaults.py (or its dataclass field), and the commands'
options, the library's signatures and the help texts read it from there."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import click

from capgeo import defaults

ROOT = Path(__file__).resolve().parents[1]
#: a number written as the default of a tile size or a companion count, in a signature or a click option
#: (0 and 1, "none" and "the closest one", are no shared default)
LITERAL = re.compile(r"\b(block_size|top_k|limit|top|neighbours|per_quantile)\b(: [^=,()]+)? = ([2-9]|\d\d)|"
                     r"\"--(block-size|top-k)\"[^\n]*default=\d")


def test_no_tile_size_or_companion_count_is_written_as_a_number_outside_defaults():
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in sorted((ROOT / "capgeo").rglob("*.py")) if path.name != "defaults.py"
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
             if LITERAL.search(line)]
    assert not found, "\n".join(found)


def _option(command: click.Command, name: str) -> click.Parameter:
    (option,) = [param for param in command.params if param.name == name]
    return option


def test_the_block_sizes_have_one_meaning_each():
    from capgeo.cli.dupes import dupes
    from capgeo.cli.leak import leak
    from capgeo.cli.negatives import negatives
    from capgeo.findings import dedup, leak as leak_findings, negatives as negatives_findings
    from capgeo.geometry import cross, pairwise
    from capgeo.geometry.profile_options import ProfileOptions
    from capgeo.geometry.tile_size import choose_block_size

    # the all-pairs pass: sized from the device, which on a CPU is the CPU tile
    assert defaults.PAIR_BLOCK_SIZE is None and ProfileOptions().block_size is None
    assert _option(dupes, "block_size").default is None
    assert pairwise.ScanOptions().block_size is None  # scan_pairs' options
    assert choose_block_size(10**6, "cpu") == defaults.CPU_BLOCK_SIZE
    # the passes that keep one tile on every device
    assert cross.CrossOptions(threshold=0.5).block_size == defaults.FIXED_BLOCK_SIZE  # scan_cross' options
    assert leak_findings.LeakOptions().block_size == defaults.FIXED_BLOCK_SIZE   # leak_section's, eval_leak's
    for function in (negatives_findings.hard_negatives, negatives_findings.export_negatives, dedup.dedup_section):
        assert inspect.signature(function).parameters["block_size"].default == defaults.FIXED_BLOCK_SIZE, function
    assert _option(leak, "block_size").default == _option(negatives, "block_size").default == defaults.FIXED_BLOCK_SIZE


def test_the_companion_counts_and_the_help_texts_read_defaults():
    from capgeo import map as caption_map
    from capgeo.cli.dupes import dupes, dupes_examples
    from capgeo.cli.truncation import truncation

    assert caption_map.NEAR_DUPLICATE_TOP_K == defaults.TOP_K == _option(dupes, "top_k").default
    assert _option(dupes, "top").default == defaults.DUPES_TOP
    assert "default 0.9," in _option(dupes_examples, "quantiles").help and defaults.DUPES_QUANTILES == (0.9,)
    assert f"the profile's, {defaults.NEAR_DUPLICATE_THRESHOLD:g}." in _option(truncation, "threshold").help
