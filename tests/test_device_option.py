"""--device means the same in every command: checked the same way (precomputed vectors included),
and obeyed by the pairwise pass of dupes and negatives, not only by the encoder."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from capgeo.cli import main


@pytest.fixture
def vectors_dataset(tmp_path):
    rows = [{"id": f"c{i}", "image": f"img{i // 2}", "caption": f"caption {i}"} for i in range(40)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    np.save(tmp_path / "v.npy", np.random.default_rng(0).normal(size=(40, 16)).astype(np.float32))
    return tmp_path / "d.jsonl", f"vectors:{tmp_path / 'v.npy'}"


@pytest.mark.parametrize("command", [["profile", "--no-gamma"], ["dupes", "--top", "2"], ["gamma"],
                                     ["negatives", "-o", "NEG"]])
def test_a_device_name_capgeo_does_not_run_on_is_one_line_with_precomputed_vectors(vectors_dataset, tmp_path,
                                                                                   command):
    data, encoder = vectors_dataset
    args = [command[0], str(data), "--encoder", encoder, "--device", "gpu",
            *[str(tmp_path / "n.jsonl") if a == "NEG" else a for a in command[1:]]]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert "Error: --device 'gpu': expected cpu, cuda, cuda:N or mps" in result.output


def test_a_missing_cuda_is_one_line_with_precomputed_vectors(vectors_dataset):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    data, encoder = vectors_dataset
    result = CliRunner().invoke(main, ["profile", str(data), "--encoder", encoder, "--device", "cuda", "--no-gamma"])
    assert result.exit_code == 2 and "no cuda device on this machine" in result.output


def test_dupes_and_negatives_run_their_pass_on_the_device_given(vectors_dataset, tmp_path, monkeypatch):
    """On a GPU machine (here: the default device made to be one that cannot run) an explicit
    --device cpu must be obeyed; dupes and negatives used to run on the default anyway."""
    import capgeo.device

    monkeypatch.setattr(capgeo.device, "default_device", lambda: "meta")  # any pass that falls back fails
    data, encoder = vectors_dataset
    dupes = CliRunner().invoke(main, ["dupes", str(data), "--encoder", encoder, "--device", "cpu", "--top", "3",
                                      "--json", str(tmp_path / "d.json")])
    assert dupes.exit_code == 0, dupes.output
    assert len(json.loads((tmp_path / "d.json").read_text())["pairs"]) == 3
    components = CliRunner().invoke(main, ["dupes-sets", str(data), "--encoder", encoder, "--device", "cpu",
                                           "--threshold", "0.3", "--keep", "first"])
    assert components.exit_code == 0, components.output
    negatives = CliRunner().invoke(main, ["negatives", str(data), "--encoder", encoder, "--device", "cpu",
                                          "-o", str(tmp_path / "n.jsonl")])
    assert negatives.exit_code == 0, negatives.output


def test_negatives_k_is_bounded_and_capped_at_the_captions_there_are(vectors_dataset, tmp_path):
    data, encoder = vectors_dataset
    result = CliRunner().invoke(main, ["negatives", str(data), "--encoder", encoder, "-k", "3000",
                                       "-o", str(tmp_path / "n.jsonl")])
    assert result.exit_code == 2 and "-k/--negatives: expected at most 1,000" in result.output
    assert not (tmp_path / "n.jsonl").exists()
    # 40 captions, 2 an image: none has more than 38 of other images, or 19 at one an image (the default)
    for per_image, most in (("0", 38), ("1", 19), ("2", 38)):
        result = CliRunner().invoke(main, ["negatives", str(data), "--encoder", encoder, "-k", "100",
                                           "--min-cosine", "-1", "--max-cosine", "1", "--per-image", per_image,
                                           "-o", str(tmp_path / "n.jsonl"), "--json", str(tmp_path / "n.json"),
                                           "--force"])
        assert result.exit_code == 0, result.output
        summary = json.loads((tmp_path / "n.json").read_text())
        assert summary["k"] == most
        assert summary["n_anchors_short"] == 0 and f"capped at {most}" in result.output
        rows = [json.loads(line) for line in (tmp_path / "n.jsonl").read_text().splitlines()]
        assert all(len(row["negative_ids"]) == most for row in rows)


def test_a_one_image_dataset_in_compare_is_told_of_its_group_column_option(vectors_dataset, tmp_path):
    data, _ = vectors_dataset
    one = tmp_path / "one.jsonl"
    one.write_text("".join(json.dumps({"id": f"o{i}", "image": "same", "caption": f"one {i}"}) + "\n"
                           for i in range(3)))
    np.save(tmp_path / "one.npy", np.random.default_rng(1).normal(size=(3, 16)).astype(np.float32))
    result = CliRunner().invoke(main, ["compare", str(one), str(data), "--encoder", f"vectors:{tmp_path / 'one.npy'}",
                                       "-o", str(tmp_path / "c.html")])
    assert result.exit_code == 2 and "belong to one group" in result.output
    assert "give --group-column" in result.output  # compare takes the dataset options too
    profile = CliRunner().invoke(main, ["profile", str(one), "--encoder", f"vectors:{tmp_path / 'one.npy'}"])
    assert profile.exit_code == 2 and "give --group-column" in profile.output


def test_example_options_belong_to_dupes_examples_and_profile_takes_threshold(vectors_dataset):
    data, encoder = vectors_dataset
    for extra in (["--quantile", "0.5"], ["--neighbours", "2"], ["--per-quantile", "1"]):
        result = CliRunner().invoke(main, ["dupes", str(data), "--encoder", encoder, "--top", "1", *extra])
        assert result.exit_code == 2 and "No such option" in result.output and extra[0] in result.output
        assert CliRunner().invoke(main, ["dupes-examples", str(data), "--encoder", encoder,
                                         *extra]).exit_code == 0
    short = CliRunner().invoke(main, ["profile", str(data), "--encoder", encoder, "--threshold", "0.5", "--no-gamma",
                                      "--json"])
    assert short.exit_code == 0, short.output
    assert json.loads(short.stdout)["near_duplicates"]["threshold"] == 0.5


def _missing_device() -> str | None:
    import torch

    if not torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    return "mps" if mps is None or not mps.is_available() else None


def test_the_passes_ask_for_the_hardware_themselves():
    """A run whose vectors all come from the cache loads no model, which was the only thing that
    asked whether --device exists: `--device cuda` then died in the pass with a torch traceback."""
    from capgeo.errors import CapgeoError
    from capgeo.geometry.cross import scan_cross
    from capgeo.geometry.pairwise import scan_pairs

    device = _missing_device()
    if device is None:
        pytest.skip("every device kind is present here")
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(20, 8)).astype(np.float32)
    with pytest.raises(CapgeoError, match=f"--device '{device}': no {device} device on this machine"):
        scan_pairs(vectors, np.arange(20) // 2, top_k=2, device=device)
    with pytest.raises(CapgeoError, match=f"--device '{device}': no {device} device on this machine"):
        scan_cross(vectors, vectors, threshold=0.9, device=device)


def test_a_torch_device_from_a_library_caller_is_taken():
    import torch

    from capgeo.geometry.pairwise import scan_pairs

    vectors = np.random.default_rng(2).normal(size=(20, 8)).astype(np.float32)
    scan = scan_pairs(vectors, np.arange(20) // 2, top_k=2, device=torch.device("cpu"))
    assert scan.negatives.n == 20 * 19 // 2 - 10


@pytest.mark.parametrize("name", ["cuda:01", "cuda:00", "cuda:\u0663", "cpu:1"])
def test_device_names_torch_refuses_are_one_line_here(name):
    """'cuda:01' passed the name check and torch.device raised a traceback in every command."""
    from capgeo.device import check_device_name
    from capgeo.errors import CapgeoError

    with pytest.raises(CapgeoError, match="expected cpu, cuda, cuda:N or mps"):
        check_device_name(name)


def test_the_default_device_of_a_linux_machine_without_gpu_files_needs_no_torch(monkeypatch):
    """With no GPU device file, default_device says cpu without importing torch; with one, it asks torch."""
    import subprocess
    import sys

    import capgeo.device

    code = ("import sys, capgeo.device as d; d.os.path.exists = lambda path: False; d.sys.platform = 'linux'; "
            "print(d.default_device(), 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["cpu", "False"]
    # torch is consulted once it is loaded, or where a GPU device file exists
    import torch

    expected = "cuda" if torch.cuda.is_available() else (
        "mps" if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available() else "cpu")
    monkeypatch.setattr(capgeo.device.os.path, "exists", lambda path: True)
    assert capgeo.device.default_device() == expected
