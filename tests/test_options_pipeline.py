"""One pipeline and one set of options: EncodeOptions and ProfileOptions (their fields' defaults are
the only defaults, the CLI's included), checked once; report and compare profile through
capgeo.pipeline.run_profile; capgeo.profile() is `capgeo profile --json` in one call."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from click.testing import CliRunner

import capgeo
from capgeo.cli import main
from capgeo.errors import CapgeoError
from capgeo.geometry.profile_options import ProfileOptions
from capgeo.pipeline import EncodeOptions

N_GROUPS, PER_GROUP = 24, 2


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """24 images of 2 captions each as a list of dicts, a JSONL file of them, and random unit
    vectors aligned with them by row."""
    folder = tmp_path_factory.mktemp("options")
    words = ("red", "blue", "green", "small", "large", "old", "new", "wet")
    records = [{"caption_id": f"c{i}", "image_id": f"img{i // PER_GROUP}",
                "caption": f"a {words[i % 8]} {words[(i // 3) % 8]} bus number {i} by a {words[(i // 5) % 8]} kerb"}
               for i in range(N_GROUPS * PER_GROUP)]
    data = folder / "captions.jsonl"
    data.write_text("".join(json.dumps(record) + "\n" for record in records))
    vectors = np.random.default_rng(3).normal(size=(len(records), 12)).astype(np.float32)
    np.save(folder / "emb.npy", vectors)
    return records, data, folder / "emb.npy"


def without_provenance(profile: dict) -> dict:
    return {key: value for key, value in profile.items() if key != "provenance"}


def cli_json(*args) -> dict:
    result = CliRunner().invoke(main, ["profile", *map(str, args), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# --------------------------------------------------------------------------- one default each


#: click options whose default is a ProfileOptions field's: (command, option name, field)
SHARED = [("profile", name, name) for name in ("n_batches", "top_k", "seed", "near_duplicate_threshold", "mode",
                                               "sampled_above", "sampled_pairs", "companions", "precision",
                                               "buckets", "block_size")]
SHARED += [(command, name, name) for command in ("report", "compare", "gamma") for name in ("n_batches", "seed")]
SHARED += [("truncation", name, name) for name in ("n_batches", "seed", "top_k", "buckets", "block_size")]


@pytest.mark.parametrize("command, option, field", SHARED)
def test_each_cli_default_is_the_dataclass_field(command, option, field):
    import click

    with click.Context(main) as ctx:
        cli = main.get_command(ctx, command)
    param = next(p for p in cli.params if p.name == option)
    with click.Context(cli) as ctx:
        default = param.get_default(ctx)
        if param.callback is not None and isinstance(default, str):
            default = param.callback(ctx, param, default)   # "0.7,0.8,0.9" -> (0.7, 0.8, 0.9)
    assert default == getattr(ProfileOptions(), field)


def test_help_shows_the_dataclass_default_when_it_changes(monkeypatch):
    """The help reads the field: a changed field default is what --help shows (the module re-read)."""
    import importlib

    import capgeo.cli.profile as profile_cli
    import capgeo.geometry.profile_options as profile_options

    changed = dataclasses.make_dataclass("ProfileOptions", [("top_k", int, 17), ("sampled_above", int, 123_456)],
                                         bases=(profile_options.ProfileOptions,), frozen=True)
    monkeypatch.setattr(profile_options, "ProfileOptions", changed)
    try:
        reloaded = importlib.reload(profile_cli)
        text = CliRunner().invoke(reloaded.profile, ["--help"], env={"COLUMNS": "200"}).output
    finally:
        monkeypatch.undo()
        importlib.reload(profile_cli)
    top_k = " ".join(text.split("--top-k", 1)[1].split("--block-size", 1)[0].split())
    assert "[default: 17; x>=1]" in top_k
    assert "auto: sampled above 123,456 captions" in " ".join(text.split())


def test_no_command_repeats_a_profile_default():
    """The literals of the shared defaults appear in no command module nor in the report's orchestration."""
    import re
    from pathlib import Path

    root = Path(capgeo.__file__).parent
    for path in [*(root / "cli").glob("*.py"), root / "report" / "build.py", root / "pipeline.py"]:
        if path.name in ("dupes.py", "map.py"):  # other owners' commands
            continue
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"n_batches: int = 200|default=200\b|top_k: int = 10|default=10\b|"
                             r'default="0\.7,0\.8,0\.9"|default=0, show_default|default=20, show_default|'
                             r"default=0\.9, show_default", text), path


# --------------------------------------------------------------------------- checked once, one error


@pytest.mark.parametrize("options, field", [
    (EncodeOptions(max_tokens=1), "max_tokens"),
    (EncodeOptions(max_tokens=2.5), "max_tokens"),
    (EncodeOptions(device=""), "device"),
    (EncodeOptions(cache_dir=3), "cache_dir"),
    (EncodeOptions(use_cache="no"), "use_cache"),
])
def test_encode_options_refuse_a_bad_field_by_name(options, field):
    with pytest.raises(CapgeoError, match=field):
        options.checked()


def test_encode_options_pass_good_values():
    options = EncodeOptions("vectors:x.npy", device="cpu", cache_dir="/tmp/c", use_cache=False, max_tokens=77)
    assert options.checked() is options


@pytest.mark.parametrize("values, named", [
    ({"top_k": 0}, "top-k"),
    ({"n_batches": 0}, "n-batches"),
    ({"seed": -1}, "seed"),
    ({"mode": "fast"}, "mode"),
    ({"companions": "annoy"}, "companions"),
    ({"precision": "fp8"}, "precision"),
    ({"bins": 0}, "bins"),
    ({"near_duplicate_threshold": 1.5}, "near-duplicate threshold"),
    ({"batch_sizes": (1000,)}, "batch"),
])
def test_profile_options_refuse_a_bad_field_by_name(values, named):
    with pytest.raises(CapgeoError, match=named):
        ProfileOptions(**values).resolved(N_GROUPS)


def test_an_unknown_profile_option_is_named():
    with pytest.raises(CapgeoError, match="unknown profile option 'top_kk'"):
        ProfileOptions.of(None, top_kk=3)


def test_resolved_options_are_not_resolved_again(dataset, monkeypatch):
    """The batch sizes are resolved once per profile (they were three times: command, pipeline, build)."""
    import capgeo.geometry.batch_size as batch_size
    from capgeo.pipeline import profile_dataset

    records, _, vectors = dataset
    calls = []
    original = batch_size.resolve_batch_sizes
    monkeypatch.setattr(batch_size, "resolve_batch_sizes", lambda *a, **k: calls.append(a) or original(*a, **k))
    profile_dataset(records, f"vectors:{vectors}", batch_sizes=(8,), n_batches=3, gamma=False, progress=False)
    assert len(calls) == 1


def test_options_are_checked_before_the_encoding(dataset, monkeypatch):
    import capgeo.encoders as encoders
    from capgeo.pipeline import profile_dataset

    records, _, vectors = dataset
    monkeypatch.setattr(encoders, "embed", lambda *a, **k: pytest.fail("encoded before refusing"))
    with pytest.raises(CapgeoError, match="top-k"):
        profile_dataset(records, f"vectors:{vectors}", top_k=0, progress=False)
    with pytest.raises(CapgeoError, match="max_tokens"):
        profile_dataset(records, f"vectors:{vectors}", max_tokens=1, progress=False)


# --------------------------------------------------------------------------- capgeo.profile()


def test_capgeo_profile_of_a_path_is_the_cli_json(dataset):
    from capgeo.geometry.typed_profile import Profile

    _, data, vectors = dataset
    typed = capgeo.profile(str(data), f"vectors:{vectors}", 8, n_batches=5, seed=2, progress=False)
    assert isinstance(typed, Profile)
    from_cli = cli_json(data, "--encoder", f"vectors:{vectors}", "--batch-size", 8, "--n-batches", 5, "--seed", 2)
    assert without_provenance(typed.to_dict()) == without_provenance(from_cli)
    assert typed.gamma.batches[0].batch_size == 8   # gamma included, at the headline batch


def test_capgeo_profile_of_a_list_of_dicts_is_the_cli_json_of_its_file(dataset):
    records, data, vectors = dataset
    typed = capgeo.profile(records, f"vectors:{vectors}", batch_size=[8, 4], n_batches=5, progress=False)
    from_cli = cli_json(data, "--encoder", f"vectors:{vectors}", "--batch-size", 8, "--batch-size", 4,
                        "--n-batches", 5)
    from_memory = without_provenance(typed.to_dict())
    # read from memory: the dataset section says so; everything computed is the same
    assert from_memory.pop("dataset")["n_captions"] == from_cli.pop("dataset")["n_captions"] == len(records)
    assert from_memory == without_provenance(from_cli)
    # independently: the mean negative cosine by brute force
    unit = np.load(vectors).astype(np.float64)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    groups = np.arange(len(records)) // PER_GROUP
    mask = np.triu(groups[:, None] != groups[None, :], k=1)
    assert typed.pairwise.mean == pytest.approx((unit @ unit.T)[mask].mean(), abs=1e-6)


def test_capgeo_profile_refuses_bad_options_with_capgeo_errors(dataset):
    records, _, vectors = dataset
    with pytest.raises(CapgeoError, match=r"profile\(\) got an unknown keyword argument 'topk'"):
        capgeo.profile(records, f"vectors:{vectors}", topk=3)
    with pytest.raises(CapgeoError, match="not both"):
        capgeo.profile(records, f"vectors:{vectors}", 8, batch_sizes=(8,))


def test_import_capgeo_loads_only_the_api_module():
    import subprocess
    import sys

    code = ("import sys, capgeo; capgeo.profile; "
            "print(sorted(m for m in sys.modules if m.startswith('capgeo.') or m in ('numpy', 'polars')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert loaded.returncode == 0, loaded.stderr
    # the one-call functions live in capgeo.api, which imports nothing numerical until called (its
    # argument checks and their error class are plain Python)
    assert loaded.stdout.strip() == "['capgeo.api', 'capgeo.arguments', 'capgeo.defaults', 'capgeo.errors']"


# --------------------------------------------------------------------------- one path


@pytest.fixture
def counted_runs(monkeypatch):
    import capgeo.pipeline as pipeline

    calls = []
    original = pipeline.run_plan

    def counting(plan, **kwargs):  # every profile run, checked (plan_profile) or not, is run by run_plan
        calls.append((plan.encode, plan.options))
        return original(plan, **kwargs)

    monkeypatch.setattr(pipeline, "run_plan", counting)
    return calls


def test_report_goes_through_the_pipeline(dataset, tmp_path, counted_runs):
    _, data, vectors = dataset
    result = CliRunner().invoke(main, ["report", str(data), "--encoder", f"vectors:{vectors}", "--batch-size", "8",
                                       "--n-batches", "3", "--seed", "5", "--no-cache", "--no-map",
                                       "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    [(encode, options)] = counted_runs
    assert encode == EncodeOptions(f"vectors:{vectors}", use_cache=False)
    assert (options.batch_sizes, options.n_batches, options.seed, options.relative_buckets) == ((8,), 3, 5, True)


def test_compare_goes_through_the_pipeline_once_per_encoder(dataset, tmp_path, counted_runs):
    _, data, vectors = dataset
    result = CliRunner().invoke(main, ["compare", str(data), "--encoder", f"vectors:{vectors}",
                                       "--encoder", f"vectors:{vectors}", "--batch-size", "8", "--n-batches", "3",
                                       "-o", str(tmp_path / "c.html")])
    assert result.exit_code == 0, result.output
    assert len(counted_runs) == 2
    assert all(options.batch_sizes == (8,) and options.n_batches == 3 for _, options in counted_runs)


def test_profile_goes_through_the_pipeline(dataset, counted_runs):
    _, data, vectors = dataset
    cli_json(data, "--encoder", f"vectors:{vectors}", "--batch-size", 8, "--n-batches", 3, "--top-k", 4)
    [(encode, options)] = counted_runs
    assert encode.encoder == f"vectors:{vectors}" and options.top_k == 4


def test_gamma_goes_through_the_pipeline(dataset, monkeypatch):
    import capgeo.pipeline as pipeline

    _, data, vectors = dataset
    calls = []
    original = pipeline.gamma_dataset
    monkeypatch.setattr(pipeline, "gamma_dataset", lambda *a, **k: calls.append((a, k)) or original(*a, **k))
    result = CliRunner().invoke(main, ["gamma", str(data), "--encoder", f"vectors:{vectors}", "--batch-size", "8",
                                       "--n-batches", "3", "--seed", "4", "--json"])
    assert result.exit_code == 0, result.output
    [(args, _)] = calls
    assert args[1] == EncodeOptions(f"vectors:{vectors}")
    assert (args[2].batch_sizes, args[2].n_batches, args[2].seed) == ((8,), 3, 4)
    section = json.loads(result.stdout)["gamma"]
    assert (section["n_batches"], section["seed"], section["batches"][0]["batch_size"]) == (3, 4, 8)


def test_truncation_goes_through_the_pipeline(dataset, monkeypatch):
    import capgeo.pipeline as pipeline

    _, data, _ = dataset
    calls = []

    def stop(*args, **kwargs):
        calls.append((args, kwargs))
        raise CapgeoError("stopped here")

    monkeypatch.setattr(pipeline, "truncation_dataset", stop)
    result = CliRunner().invoke(main, ["truncation", str(data), "--batch-size", "8", "--top-k", "3",
                                       "--lengths", "8,16", "--no-cache"])
    assert result.exit_code == 2 and "Error: stopped here" in result.output
    [(args, kwargs)] = calls
    assert args[1] == EncodeOptions(use_cache=False)
    assert (args[2].batch_sizes, args[2].top_k, args[2].n_batches) == ((8,), 3, ProfileOptions().n_batches)
    assert kwargs["lengths"] == [8, 16] or tuple(kwargs["lengths"]) == (8, 16)
