"""Wherever a sweep ran, its measured gamma is the headline: `capgeo profile --sweep`'s first screen,
`capgeo report --sweep`'s summary, `capgeo compare`'s table, `capgeo.profile(sweep=...)` and
`capgeo.suggest_gamma(sweep=...)`; the rule beside it as the instant estimate, the margin-matched gamma
on none of them. The sweep's own numbers are checked against gamma_sweep called directly on the vectors."""

from __future__ import annotations

import json
import re

import numpy as np
import polars as pl
import pytest
import torch  # noqa: F401  (required: a broken install fails, never skips)
from click.testing import CliRunner

import capgeo  # noqa: E402
from capgeo.cli import main  # noqa: E402
from capgeo.findings.gamma_sweep import SweepOptions, gamma_sweep  # noqa: E402

SWEEP = ["--sweep", "--sweep-steps", "20", "--sweep-seeds", "2", "--sweep-gammas", "0,0.5,1"]
OPTIONS = SweepOptions(gammas=(0.0, 0.5, 1.0), seeds=(0, 1), steps=20)


def _without_timing(sweep: dict) -> dict:
    return {key: value for key, value in sweep.items() if key != "seconds"}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """60 images x 3 captions as precomputed vectors, and the common arguments of a run on them."""
    folder = tmp_path_factory.mktemp("screens")
    rng = np.random.default_rng(0)
    codes = np.repeat(np.arange(60), 3)
    # a shared direction: a positive mean in-batch cosine, so that the margin-matched gamma exists (and
    # the screens can be checked not to show it)
    vectors = rng.standard_normal((60, 16))[codes] + 0.9 * rng.standard_normal((180, 16)) + 1.2 * rng.standard_normal(16)
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    ids = [f"c{i}" for i in range(180)]
    pl.DataFrame({"caption_id": ids, "image_id": [f"g{c}" for c in codes], "text": [f"caption {i}" for i in ids]}
                 ).write_ndjson(folder / "captions.jsonl")
    np.savez(folder / "vectors.npz", ids=np.array(ids), vectors=vectors)
    common = [str(folder / "captions.jsonl"), "--encoder", f"vectors:{folder / 'vectors.npz'}", "--no-cache",
              "--batch-size", "8", "--n-batches", "4", "--device", "cpu"]
    return folder, common, vectors, codes


@pytest.fixture(scope="module")
def profiled(data):
    """`capgeo profile --sweep`: its terminal screen and its JSON; and a profile without a sweep."""
    folder, common, _, _ = data
    runner = CliRunner()
    shown = runner.invoke(main, ["profile", *common, *SWEEP, "--json", str(folder / "swept.json")],
                          catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    plain = runner.invoke(main, ["profile", *common, "--json", str(folder / "plain.json")], catch_exceptions=False)
    assert plain.exit_code == 0, plain.output
    return shown.stdout, json.loads((folder / "swept.json").read_text()), folder


def test_profile_sweep_is_gamma_sweep_on_the_same_vectors(data, profiled):
    _, _, vectors, codes = data
    _, result, _ = profiled
    section = result["gamma"]
    direct = gamma_sweep(vectors, codes, options=OPTIONS, rule_gamma=section["suggested_gamma"],
                         logit_scale=section["logit_scale"], default_batch_size=section["headline_batch_size"],
                         device="cpu", progress=False).to_dict()
    assert _without_timing(json.loads(json.dumps(direct))) == _without_timing(section["sweep"])
    assert section["sweep"]["mode"] == "caption-caption proxy" and section["sweep"]["device"] == "cpu"


def test_profile_first_screen_headlines_the_measured_gamma(profiled):
    screen, result, _ = profiled
    section, sweep = result["gamma"], result["gamma"]["sweep"]
    assert section["margin_matched_gamma"] is not None
    flat = " ".join(screen.split())
    line = flat[flat.index("Gamma: "):flat.index("Verdict")]
    assert line.startswith(f"Gamma: {sweep['measured_gamma']:g} measured (plateau ")
    assert f"the rule's instant estimate {section['suggested_gamma']:.2f}" in line
    assert "beats gamma 0 beyond the seed spread" in line and "Suggested gamma:" not in flat
    assert f"{section['margin_matched_gamma']:.2f}" not in line and "margin-matched" not in flat


def test_profile_without_sweep_keeps_the_rule_and_sweep_needs_gamma(data, profiled):
    folder, common, _, _ = data
    plain = json.loads((folder / "plain.json").read_text())
    assert "sweep" not in plain["gamma"]
    refused = CliRunner().invoke(main, ["profile", *common, "--sweep", "--no-gamma"])
    assert refused.exit_code == 2 and refused.output.strip().splitlines()[-1].startswith("Error: --sweep")
    noted = CliRunner().invoke(main, ["profile", *common, "--no-gamma", "--sweep-steps", "5"])
    assert noted.exit_code == 0 and "Note: --sweep-steps applies only with --sweep" in noted.stderr


def test_gamma_command_headlines_the_measured_gamma_and_keeps_the_margin_view_lower(data):
    folder, common, _, _ = data
    shown = CliRunner().invoke(main, ["gamma", *common, *SWEEP], catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    flat = " ".join(shown.stdout.split())
    head = flat[:flat.index("B = 8 (headline)")]
    assert re.search(r"gamma \S+ measured \(plateau [^)]*caption-caption proxy, 2 seeds\) at B=8", head)
    assert "margin" not in head
    assert "margin-matched gamma" in flat[len(head):]   # lower, under the rule's own numbers


def test_compare_table_shows_the_measured_gamma_beside_a_rule_only_profile(profiled):
    _, result, folder = profiled
    plain = json.loads((folder / "plain.json").read_text())
    shown = CliRunner().invoke(main, ["compare", str(folder / "swept.json"), str(folder / "plain.json"),
                                      "-o", str(folder / "compare.html")], catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    flat = " ".join(shown.output.replace("│", " ").split())
    row = flat[flat.index("Suggested gamma"):]
    assert f"{result['gamma']['sweep']['measured_gamma']:g} measured (plateau" in row
    assert f"{plain['gamma']['suggested_gamma']:.2f} (range" in row
    for margin_matched in (result["gamma"]["margin_matched_gamma"], plain["gamma"]["margin_matched_gamma"]):
        assert f"{margin_matched:.2f}" not in row


def test_report_sweep_headlines_the_measured_gamma_in_its_summary(data):
    folder, common, _, _ = data
    saved, page = folder / "report.json", folder / "report.html"
    written = CliRunner().invoke(main, ["report", *common, *SWEEP, "--no-map", "--no-dupes", "--save-profile",
                                        str(saved), "-o", str(page)], catch_exceptions=False)
    assert written.exit_code == 0, written.output
    section = json.loads(saved.read_text())["gamma"]
    html = page.read_text()
    summary = re.search(r'<section id="summary".*?</section>', html, re.S).group(0)
    assert f"{section['sweep']['measured_gamma']:g} measured (plateau" in summary
    assert f"instant estimate {section['suggested_gamma']:.2f}" in summary
    assert 'id="fig-gamma-sweep"' in html
    gamma_section = re.search(r'<section id="gamma".*?</section>', html, re.S).group(0)
    lead = gamma_section[:gamma_section.index('id="fig-gamma-sweep"')]
    assert f"Gamma {section['sweep']['measured_gamma']:g} measured" in lead
    for text in (summary, lead):
        assert "margin-matched" not in text and f"{section['margin_matched_gamma']:.2f}" not in text
    refused = CliRunner().invoke(main, ["report", *common, "--sweep", "--no-gamma", "-o", str(page)])
    assert refused.exit_code == 2 and "Error: --sweep (sweep=) measures gamma" in refused.output
    # a saved profile is drawn as it is: its sweep shown, none run, --sweep named as ignored (and only it)
    redrawn = CliRunner().invoke(main, ["report", str(saved), "--sweep", "-o", str(folder / "redrawn.html")])
    assert redrawn.exit_code == 0, redrawn.output
    assert f"{saved} is a saved profile, drawn as it is; ignored: --sweep\n" in redrawn.stderr
    assert 'id="fig-gamma-sweep"' in (folder / "redrawn.html").read_text()


def test_python_profile_and_suggest_gamma_carry_the_measured_gamma(data, profiled):
    folder, _, vectors, codes = data
    _, result, _ = profiled
    encoder = f"vectors:{folder / 'vectors.npz'}"
    typed = capgeo.profile(str(folder / "captions.jsonl"), encoder=encoder, batch_size=8, n_batches=4,
                           use_cache=False, device="cpu", sweep=OPTIONS)
    assert typed.gamma.measured_gamma == result["gamma"]["sweep"]["measured_gamma"]
    assert _without_timing(typed.gamma.to_dict()["sweep"]) == _without_timing(result["gamma"]["sweep"])
    suggestion = capgeo.suggest_gamma(str(folder / "captions.jsonl"), encoder=encoder, batch_size=8, device="cpu",
                                      sweep=OPTIONS, progress=False)
    sweep = suggestion.sweep
    assert suggestion.gamma == suggestion.measured_gamma == sweep["measured_gamma"]
    assert suggestion.rule_gamma == sweep["rule_gamma"] == suggestion.to_dict()["gamma"]["suggested_gamma"]
    assert suggestion.range == (min(sweep["plateau"]), max(sweep["plateau"]))
    assert suggestion.headline.startswith(f"{sweep['measured_gamma']:g} measured")
    rule_only = capgeo.suggest_gamma(str(folder / "captions.jsonl"), encoder=encoder, batch_size=8)
    assert rule_only.measured_gamma is None and rule_only.sweep is None
    assert rule_only.gamma == rule_only.rule_gamma == suggestion.rule_gamma
    with pytest.raises(capgeo.errors.CapgeoError, match="sweep"):
        capgeo.profile(str(folder / "captions.jsonl"), encoder=encoder, gamma=False, sweep=True)


def test_device_reaches_the_sweep_and_cpu_is_deterministic(data, monkeypatch):
    """--device goes to the sweep (recorded around the real gamma_sweep) for gamma, profile and report;
    two cpu runs give the same curve; a GPU that is not there is one Error line."""
    import capgeo.findings.gamma_sweep as module

    folder, common, _, _ = data
    seen = []
    real = module.gamma_sweep

    def recorded(*args, **kwargs):
        seen.append(kwargs["device"])
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "gamma_sweep", recorded)
    runner = CliRunner()
    curves = []
    for command in (["gamma"], ["gamma"], ["profile"], ["report", "--no-map", "--no-dupes", "-o",
                                                        str(folder / "device.html")]):
        out = folder / "device.json"
        extra = ["--save-profile", str(out)] if command[0] == "report" else ["--json", str(out)]
        result = runner.invoke(main, [*command, *common, *SWEEP, *extra], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        curves.append(_without_timing(json.loads(out.read_text())["gamma"]["sweep"]))
    assert seen == ["cpu"] * 4
    assert curves[0] == curves[1] == curves[2] == curves[3]   # one sweep, whichever screen ran it
    import torch

    if not torch.cuda.is_available():
        gpu = runner.invoke(main, ["gamma", *common[:-1], "cuda", *SWEEP])
        assert gpu.exit_code == 2 and "Traceback" not in gpu.output
        assert gpu.output.strip().splitlines()[-1].startswith("Error: --device 'cuda'")


def test_the_sweep_runs_in_fp32_on_the_device_it_is_given(data, monkeypatch):
    """Every run's vectors sit on the device named, in float32 (from float64 input too), with TF32 off
    while it trains and the caller's setting restored after."""
    import torch

    import capgeo.findings.gamma_sweep as module

    _, _, vectors, codes = data
    seen = []
    real = module._train_one

    def recorded(queries, targets, *args, **kwargs):
        seen.append((queries.device.type, targets.device.type, queries.dtype, targets.dtype,
                     torch.backends.cuda.matmul.allow_tf32))
        trace = real(queries, targets, *args, **kwargs)
        seen.append(trace.losses.dtype)
        return trace

    monkeypatch.setattr(module, "_train_one", recorded)
    before = torch.backends.cuda.matmul.allow_tf32   # (a property of torch's, not an attribute monkeypatch can undo)
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        module.gamma_sweep(vectors.astype(np.float64), codes, device="cpu", default_batch_size=8, progress=False,
                           options=SweepOptions(gammas=(0.0, 0.5), seeds=(0, 1), steps=3))
        restored = torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    assert seen[0::2] == [("cpu", "cpu", torch.float32, torch.float32, False)] * 4   # 2 gammas x 2 seeds
    assert seen[1::2] == [np.float64] * 4   # the loss record is read back once, in float64
    assert restored is True


def test_the_pairs_saturation_reads_the_measured_gamma(data):
    """With a sweep and image vectors, the pairs section's saturation is at gamma 0 and the headline
    gamma: the measured one, not the rule's."""
    folder, common, _, _ = data
    rng = np.random.default_rng(1)
    images = rng.standard_normal((60, 16))
    np.save(folder / "images.npy", images / np.linalg.norm(images, axis=1, keepdims=True))
    done = CliRunner().invoke(main, ["profile", *common, *SWEEP, "--sweep-gammas", "0,1",
                                     "--image-embeddings", str(folder / "images.npy"),
                                     "--json", str(folder / "paired.json")], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    result = json.loads((folder / "paired.json").read_text())
    measured, rule = result["gamma"]["sweep"]["measured_gamma"], result["gamma"]["suggested_gamma"]
    assert measured != rule
    assert [entry["gamma"] for entry in result["pairs"]["saturation"]["gammas"]] == [0.0, measured]
