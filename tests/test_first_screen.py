"""Issue #30, items 3-5: one gamma on the first screen, counts in one voice, compare's table on the
terminal, progress bars that name their pass, and the way to the real encoder."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from capgeo.cli import main
from capgeo.display import counted

REPORTS = Path(__file__).resolve().parents[1] / "reports"


def saved(name: str = "docci_sample") -> dict:
    return json.loads((REPORTS / f"{name}.profile.json").read_text(encoding="utf-8"))


def printed(profile: dict, width: int = 110) -> str:
    from rich.console import Console

    from capgeo.geometry.typed_profile import Profile
    from capgeo.terminal.profile import print_profile

    screen = io.StringIO()
    print_profile(Profile.from_dict(profile), Console(file=screen, width=width, color_system=None))
    return screen.getvalue()


def test_counts_in_one_voice():
    assert counted(1, "pair") == "1 pair"
    assert counted(0, "pair") == "0 pairs"
    assert counted(1999, "caption") == "1,999 captions"
    assert counted(1, "batch", "batches") == "1 batch" and counted(3, "batch", "batches") == "3 batches"


def test_profile_shows_one_gamma_with_its_range_and_the_caution():
    profile = saved()
    text = printed(profile)
    gamma = profile["gamma"]
    low, high = gamma["suggested_range"]
    assert f"Suggested gamma: {gamma['suggested_gamma']:.2f} (range {low:.2f}-{high:.2f}) at B=128" in text
    # the margin view is `capgeo gamma`'s: its gamma is nowhere on the first screen
    assert "argin-matched" not in text and f"{gamma['margin_matched_gamma']:.2f}" not in text
    assert "Caution: this gamma is for all-MiniLM-L6-v2's geometry" in text
    assert "Verdict: 1 warning, 0 notices" in text
    # the caution's full words once, in the verdict, with the command that fetches the real tower
    assert text.count("capgeo's default encoder, not a CLIP text tower") == 1
    assert "hf download BeichenZhang/LongCLIP-L longclip-L.pt" in " ".join(text.split())


def test_a_clipped_range_says_which_end_in_a_few_words():
    from capgeo.geometry.typed_profile import Gamma
    from capgeo.report.summary import headline_gamma_text

    gamma = copy.deepcopy(saved()["gamma"])
    suggestion = gamma["batches"][0]["suggestion"]
    suggestion.update(range_clipped=[True, False], clipped=False)
    assert headline_gamma_text(Gamma.from_dict(gamma)).endswith("; lower end clipped) at B=128")
    suggestion.update(range_clipped=[True, True])
    assert "; both ends clipped)" in headline_gamma_text(Gamma.from_dict(gamma))
    suggestion.update(clipped=True, clip_note="even gamma = 0.05 concentrates the softmax more; clipped to 0.05")
    text = headline_gamma_text(Gamma.from_dict(gamma))
    assert "ends clipped" not in text and text.endswith(", clipped: even gamma = 0.05 concentrates the softmax more; "
                                                        "clipped to 0.05")


def test_the_duplicate_lines_give_one_number_each_in_the_singular_for_one():
    profile = saved()
    profile["exact_duplicates"].update(n_pairs_cross_group=1, n_pairs_within_group=0, n_sets=1, n_captions=2,
                                       n_redundant_cross_group=1)
    profile["near_duplicates"].update(n_pairs_cross_group=1, n_captions_hardest_above=2)
    text = printed(profile)
    assert "Exact duplicates: 1 pair of identical captions across images, 0 within one" in text
    assert "Near-duplicates (cosine >= 0.95): 1 pair across images; 2 captions have one" in text
    warning = next(line for line in text.splitlines() if "identical captions describes" in line)
    assert "times" not in warning and "1 pair of identical captions describes different images" in warning
    from capgeo.geometry.typed_profile import Profile
    from capgeo.report.summary import summary_rows

    rows = dict(summary_rows(Profile.from_dict(profile)))
    assert rows["Exact duplicates"] == "1 pair across images"
    assert rows["Near-duplicate pairs"] == "1 pair at cosine >= 0.95; 2 captions have one"
    assert "Margin-matched gamma" not in rows


def test_compare_prints_the_headline_numbers_side_by_side(tmp_path):
    profiles = [REPORTS / "docci_sample.profile.json", REPORTS / "coco_sample.profile.json"]
    result = CliRunner().invoke(main, ["compare", *map(str, profiles), "-o", str(tmp_path / "c.html")],
                                env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "docci_sample.jsonlines" in result.stdout and "coco_sample.json" in result.stdout
    for name in ("docci_sample", "coco_sample"):
        gamma = saved(name)["gamma"]["suggested_gamma"]
        assert f"{gamma:.2f} (range" in result.stdout
    row = next(line for line in lines if "Captions / groups" in line)
    expected = [f"{saved(name)['dataset']['n_captions']:,} / {saved(name)['dataset']['n_groups']:,}"
                for name in ("docci_sample", "coco_sample")]
    assert row.index(expected[0]) < row.index(expected[1])
    # the headline batch sizes differ (128, 60): one row, each value naming its B
    row = next(line for line in lines if line.lstrip("│ ").startswith("In-batch negatives"))
    assert "B=128:" in row and "B=60:" in row
    assert "Wrote" in result.stderr


# ------------------------------------------------------------------------------------------- progress


def test_bars_say_which_pass_and_count_them():
    from capgeo.progress import bar_description, counted_passes, labelled, pass_label

    assert bar_description("pairwise cosines") == "pairwise cosines"  # outside a command: as before
    with counted_passes():
        assert bar_description("Encoding") == "[pass 1] Encoding"
        with labelled(pass_label("length 64", 2, 6)), labelled("pairs"):
            assert bar_description("pairwise cosines") == "[pass 2] length 64 (2/6): pairs: pairwise cosines"
        with counted_passes(4):  # inside another: counted in the outer one
            assert bar_description("x") == "[pass 3] x"
    with counted_passes(2):
        assert [bar_description("a"), bar_description("b")] == ["[1/2] a", "[2/2] b"]


def test_dupes_skip_exact_names_each_pass_and_no_bar_reads_as_another_running_backwards(monkeypatch):
    """`dupes --skip-exact` names each bar (the pairs, the pass that leaves exact copies out, a
    re-search of crowded captions, the totals), numbered in order, so none reads as another running
    backwards (22/36 -> 21/36 -> 14/36 under one name)."""
    import capgeo.progress as progress
    from capgeo.findings.dupes_options import MiningOptions, PairListOptions
    from capgeo.findings.duplicates import dupes_section
    from capgeo.progress import counted_passes

    opened = []
    real = progress.bar_description

    def recording(description):
        opened.append(real(description))
        return opened[-1]

    monkeypatch.setattr(progress, "bar_description", recording)
    # 20 texts, each repeated in 4 images: every caption's nearest companions are exact copies
    rows = [{"id": f"c{i}", "image": f"img{i}", "caption": f"text number {i % 20} " + "word " * (i % 20)}
            for i in range(80)]
    captions = load_captions_from_rows(rows)
    rng = np.random.default_rng(0)
    base = rng.normal(size=(20, 16))
    vectors = (base[np.arange(80) % 20] + 1e-3 * rng.normal(size=(80, 16))).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    with counted_passes():
        section = dupes_section(captions, vectors, pairs=PairListOptions(limit=3, skip_exact=True), examples=None,
                                mining=MiningOptions(block_size=16, top_k=2))
    assert section.n_exact_skipped > 0
    labels = opened
    assert labels[0] == "[pass 1] pairs: pairwise cosines"
    assert any("most similar pairs, exact copies left out" in label for label in labels)
    assert any("re-searching" in label and "crowded caption" in label for label in labels)
    assert any("near-duplicate totals" in label for label in labels)
    # numbered in order, each name once: a new bar is a new pass
    assert [int(label.split("]")[0].split()[-1]) for label in labels] == list(range(1, len(labels) + 1))
    assert len(set(labels)) == len(labels)


def load_captions_from_rows(rows):
    import tempfile

    from capgeo.captions import load_captions

    folder = Path(tempfile.mkdtemp())
    path = folder / "captions.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n", encoding="utf-8")
    return load_captions(str(path))


# ------------------------------------------------------------------------------------ the real encoder


@pytest.mark.parametrize("command", ["profile", "gamma", "dupes", "leak", "report"])
def test_every_help_ends_with_examples_a_long_clip_one_among_them(command):
    result = CliRunner().invoke(main, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    examples = result.output.rsplit("Examples:", 1)
    assert len(examples) == 2 and "Options:" not in examples[1]
    lines = [line.strip() for line in examples[1].strip().splitlines()]
    commands = [line for line in lines if line.startswith("capgeo ")]
    assert 2 <= len(commands) <= 3 and all(line.startswith(f"capgeo {command} ") for line in commands)
    assert any("longclip" in line.lower() for line in commands)
    assert len(lines) == 2 * len(commands)  # each under its one-line comment


def test_the_examples_parse_as_their_commands_do():
    """Every example's options exist: click parses each (with --help, so nothing runs)."""
    import shlex

    from capgeo.cli.examples import EXAMPLES

    for command, examples in EXAMPLES.items():
        for _, line in examples:
            words = shlex.split(line)[1:]
            result = CliRunner().invoke(main, [*words, "--help"])
            assert result.exit_code == 0, (line, result.output)


def test_encoders_say_what_is_downloaded_where_and_how_to_fetch_it():
    result = CliRunner().invoke(main, ["encoders"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = result.output
    assert "~/.cache/huggingface/hub" in text and "HF_HOME" in text
    for line in ("hf download BeichenZhang/LongCLIP-L longclip-L.pt", "hf download BeichenZhang/LongCLIP-B longclip-B.pt",
                 "hf download timm/vit_large_patch14_clip_224.openai open_clip_model.safetensors",
                 "--encoder /path/to/longclip-L.pt", "--encoder ViT-L-14-quickgelu@/path/to/open_clip_model.safetensors",
                 "hf-hub:ORG/REPO", "huggingface-cli download"):
        assert line in text, line
    result = CliRunner().invoke(main, ["encoders", "--json"])
    downloads = {row["spec"]: row for row in json.loads(result.stdout)["downloads"]}
    assert downloads["longclip-L"]["repository"] == "BeichenZhang/LongCLIP-L"
    assert downloads["longclip-L"]["files"] == ["longclip-L.pt"]
    assert downloads["longclip-L"]["size"].startswith("about 1.7 GB") and downloads["longclip-B"]["size"].startswith("about 0.6 GB")


def test_the_vit_l_14_row_is_open_clips_own_registry_entry():
    """Checked against open_clip's pretrained registry, read as text (importing it takes seconds)."""
    import importlib.util
    import re

    from capgeo.encoders.registry import list_downloads

    spec = importlib.util.find_spec("open_clip")
    if spec is None:
        pytest.skip("open_clip is not installed")
    source = (Path(spec.origin).parent / "pretrained.py").read_text(encoding="utf-8")
    block = source[source.index("_VITL14 = dict("):]
    hub = re.search(r'openai=_pcfg\(.*?hf_hub="([^"]+)"', block, re.S).group(1)
    row = next(download for download in list_downloads() if download.spec == "ViT-L-14/openai")
    assert hub == f"{row.repo}/"  # open_clip's default weights name: its safetensors first
    constants = (Path(spec.origin).parent / "constants.py").read_text(encoding="utf-8")
    assert f'HF_SAFE_WEIGHTS_NAME = "{row.files[0]}"' in constants


def test_the_offline_error_gives_the_command_and_the_file_to_pass(tmp_path):
    """In its own process: huggingface_hub reads HF_HOME and HF_HUB_OFFLINE when it is imported."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "PYTHONPATH": str(root)}
    result = subprocess.run([sys.executable, "-m", "capgeo", "encode", str(root / "data" / "docci_sample.jsonlines"),
                             "--limit", "3", "--encoder", "longclip-L", "--cache-dir", str(tmp_path / "cache")],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "`hf download BeichenZhang/LongCLIP-L longclip-L.pt`" in lines[0]
    assert "~/.cache/huggingface/hub" in lines[0] and "--encoder /path/to/longclip-L.pt" in lines[0]


def test_compare_to_standard_output_keeps_the_table_off_the_page(tmp_path):
    profiles = [REPORTS / "docci_sample.profile.json", REPORTS / "coco_sample.profile.json"]
    result = CliRunner().invoke(main, ["compare", *map(str, profiles), "-o", "/dev/stdout"])
    assert result.exit_code == 0, result.output
    assert "Side by side" in result.stderr and "Side by side" not in result.stdout
