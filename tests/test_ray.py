"""capgeo on a local multi-node Ray cluster: the same results as one machine, work on both nodes.

One cluster (a head and one more node, one CPU each) serves the whole module:
starting it costs seconds.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="ray is an optional extra: pip install -e '.[ray]'")
import torch  # noqa: E402

from _clip_fixtures import coco_captions, tiny_clip, tiny_config  # noqa: E402
from capgeo.encoders import embed  # noqa: E402
from capgeo.scale import ray_session  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    local = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    local.add_node(num_cpus=1)
    ray.init(address=local.address, logging_level="ERROR", log_to_driver=False)
    local.wait_for_nodes()
    assert len([node for node in ray.nodes() if node["Alive"]]) == 2
    yield local
    ray.shutdown()
    local.shutdown()


@pytest.fixture(scope="module")
def tiny_encoder_spec(tmp_path_factory) -> str:
    """A random-weight open_clip text tower in open_clip's hub layout, loadable by every worker."""
    folder = tmp_path_factory.mktemp("tiny-clip")
    config = {"model_cfg": tiny_config(77), "preprocess_cfg": {}}
    (folder / "open_clip_config.json").write_text(json.dumps(config))
    torch.save(tiny_clip(tiny_config(77), seed=7).state_dict(), folder / "open_clip_pytorch_model.bin")
    return f"local-dir:{folder}"


@pytest.mark.slow
def test_encoding_on_ray_resumes_and_fills_the_cache_a_local_run_reuses(cluster, tiny_encoder_spec, shared_data,
                                                                        tmp_path):
    captions = coco_captions(shared_data, images=60)  # 300 real captions
    reference = embed(captions, tiny_encoder_spec, device="cpu", use_cache=False, progress=False)

    with ray_session(cluster.address) as session:
        on_ray = embed(captions, tiny_encoder_spec, device="cpu", cache_dir=tmp_path, chunk_rows=32, progress=False)
        assert on_ray.origin == "encoded"
        assert len(session.nodes_used) == 2  # one actor per CPU: shards ran on both nodes
        np.testing.assert_array_equal(on_ray.token_counts, reference.token_counts)
        # other processes and thread counts than the reference: the same floats up to matmul rounding
        assert np.abs(on_ray.vectors - reference.vectors).max() < 1e-5

        chunks = sorted(tmp_path.glob("embeddings/*/chunk-*.npy"))
        assert len(chunks) == 10
        for lost in chunks[::3]:  # as if the run had died before these shards came back
            lost.unlink()
        next(tmp_path.glob("embeddings/*/manifest.json")).unlink()
        resumed = embed(captions, tiny_encoder_spec, device="cpu", cache_dir=tmp_path, chunk_rows=32,
                        progress=False)
        assert resumed.origin == "resumed"
        assert sorted(tmp_path.glob("embeddings/*/chunk-*.npy")) == chunks
        np.testing.assert_array_equal(resumed.vectors, on_ray.vectors)

    local = embed(captions, tiny_encoder_spec, device="cpu", cache_dir=tmp_path, chunk_rows=32, progress=False)
    assert local.origin == "cache"
    np.testing.assert_array_equal(local.vectors, on_ray.vectors)


def seeded_captions(n_groups: int = 800, per_group: int = 3, width: int = 24, seed: int = 5):
    """n_groups x per_group unit vectors (captions of a group adjacent and alike), with exact
    copies across groups so that cosine ties decide the top-k order, and group codes."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n_groups, width))
    vectors = np.repeat(centres, per_group, axis=0) + 0.6 * rng.standard_normal((n_groups * per_group, width))
    vectors[1::97] = vectors[0]  # one caption copied into 25 other groups: tied cosines everywhere
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors.astype(np.float32), np.repeat(np.arange(n_groups), per_group)


@pytest.mark.slow
def test_exact_pass_on_ray_is_identical_to_the_local_pass(cluster):
    from capgeo.geometry.pairwise import scan_pairs

    vectors, groups = seeded_captions()  # 2,400 captions
    options = dict(top_k=5, block_size=200, device="cpu", threshold=0.8, progress=False)
    local = scan_pairs(vectors, groups, **options)
    with ray_session(cluster.address) as session:
        on_ray = scan_pairs(vectors, groups, **options)

    assert on_ray.extra["ray"]["tasks"] == 12 * 13 // 2  # every tile of the upper triangle was its own task
    assert len(session.nodes_used) == 2
    for name in ("negatives", "same_group"):
        mine, theirs = getattr(on_ray, name), getattr(local, name)
        np.testing.assert_array_equal(mine.counts, theirs.counts)
        assert (mine.n, mine.total, mine.total_squares, mine.min, mine.max) == \
               (theirs.n, theirs.total, theirs.total_squares, theirs.min, theirs.max)
    np.testing.assert_array_equal(on_ray.companion_index, local.companion_index)
    np.testing.assert_array_equal(on_ray.companion_cosine, local.companion_cosine)
    for mine, theirs in zip(on_ray.extra["pairs"], local.extra["pairs"]):
        np.testing.assert_array_equal(mine, theirs)

    # and both are right: brute force in float64
    cosine = vectors.astype(np.float64) @ vectors.T.astype(np.float64)
    cosine[groups[:, None] == groups[None, :]] = -np.inf
    assert np.abs(on_ray.companion_cosine[:, 0] - cosine.max(axis=1)).max() < 1e-6
    upper = np.triu(np.ones_like(cosine, dtype=bool), 1) & np.isfinite(cosine)
    assert on_ray.negatives.n == int(upper.sum())
    # the pass sums float32 cosines (each within ~1e-7 of the float64 one) in float64
    assert on_ray.negatives.total == pytest.approx(cosine[upper].sum(), abs=1e-7 * upper.sum())
    assert len(on_ray.extra["pairs"][0]) == int((cosine[upper] >= 0.8).sum())


def test_reduced_precision_on_ray_matches_the_local_reduced_pass(cluster):
    from capgeo.geometry.pairwise import scan_pairs

    vectors, groups = seeded_captions(n_groups=200)
    options = dict(top_k=3, block_size=200, device="cpu", threshold=0.8, precision="bf16", progress=False)
    local = scan_pairs(vectors, groups, **options)
    with ray_session(cluster.address):
        on_ray = scan_pairs(vectors, groups, **options)
    np.testing.assert_array_equal(on_ray.negatives.counts, local.negatives.counts)
    np.testing.assert_array_equal(on_ray.companion_index, local.companion_index)
    np.testing.assert_array_equal(on_ray.companion_cosine, local.companion_cosine)
    # the error stated is the same; the work counters depend on how the tiles were split
    work = ("rows_too_close_to_call", "pairs_rescored")
    assert {key: value for key, value in on_ray.extra["precision"].items() if key not in work} == \
           {key: value for key, value in local.extra["precision"].items() if key not in work}
    assert on_ray.extra["precision"]["mode"] == "bf16"


@pytest.fixture(scope="module")
def vector_dataset(tmp_path_factory):
    """2,400 captions of 800 images as JSONL, and their seeded vectors as an .npz by caption id."""
    from capgeo.encoders.precomputed import write_vector_file

    folder = tmp_path_factory.mktemp("vector-dataset")
    vectors, groups = seeded_captions()
    ids = [f"c{row}" for row in range(len(groups))]
    with open(folder / "captions.jsonl", "w", encoding="utf-8") as handle:
        for row, group in enumerate(groups):
            handle.write(json.dumps({"id": ids[row], "image": f"img{group}", "caption": f"caption {row} of {group}"})
                         + "\n")
    write_vector_file(folder / "vectors.npz", vectors, ids, [f"img{group}" for group in groups])
    return folder / "captions.jsonl", f"vectors:{folder / 'vectors.npz'}"


def run_cli(*args):
    from click.testing import CliRunner

    from capgeo.cli import main

    result = CliRunner().invoke(main, [str(arg) for arg in args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def test_profile_and_dupes_with_ray_print_what_the_local_commands_print(cluster, vector_dataset):
    data, encoder = vector_dataset
    common = ["--encoder", encoder, "--id-column", "id", "--group-column", "image", "--text-column", "caption"]
    profile_options = [*common, "--block-size", 256, "--batch-size", 32, "--n-batches", 20, "--no-gamma", "--json"]
    local = json.loads(run_cli("profile", data, *profile_options).stdout)
    ray_run = run_cli("profile", data, *profile_options, "--ray", cluster.address)
    assert "Ray: 55 task(s) on 2 of 2 node(s)" in ray_run.stderr  # 10 blocks of 256 rows: 55 tiles
    on_ray = json.loads(ray_run.stdout)
    local.pop("provenance"), on_ray.pop("provenance")  # the command line and timings
    assert on_ray == local
    assert local["near_duplicates"]["n_pairs_cross_group"] > 0 and local["batches"]

    dupes_options = [*common, "--block-size", 256, "--threshold", 0.8, "--top", 0, "--output-format", "jsonl"]
    local_pairs = run_cli("dupes", data, *dupes_options).stdout
    ray_pairs = run_cli("dupes", data, *dupes_options, "--ray", cluster.address)
    assert "on 2 of 2 node(s)" in ray_pairs.stderr
    assert ray_pairs.stdout == local_pairs
    assert len(local_pairs.splitlines()) > 25


def test_ray_option_without_ray_installed_is_one_error_line(vector_dataset, monkeypatch):
    import sys

    from click.testing import CliRunner

    from capgeo.cli import main

    data, encoder = vector_dataset
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now fails as if not installed
    result = CliRunner().invoke(main, ["encode", str(data), "--encoder", encoder, "--id-column", "id",
                                       "--group-column", "image", "--text-column", "caption", "--ray"])
    assert result.exit_code == 2
    assert result.stderr.strip() == "Error: --ray needs Ray, which is not installed: pip install 'capgeo[ray]'"


def crash_at_tiles_once(marker_folder: str, doomed: set):
    """A Ray worker set-up hook: the worker process dies (as on a lost node) the first time
    any worker reaches a tile of ``doomed``; marker files make it happen once per tile."""

    def hook():
        import os

        import capgeo.geometry.pairwise as pairwise

        original = pairwise.tile_partial

        def tile_partial_or_die(matrix, groups, grid, tiles, *options, **keywords):
            for row, column in tiles:
                if (row, column) in doomed:
                    try:
                        os.close(os.open(os.path.join(marker_folder, f"{row}-{column}"), os.O_CREAT | os.O_EXCL))
                    except FileExistsError:
                        continue
                    os._exit(1)
            return original(matrix, groups, grid, tiles, *options, **keywords)

        pairwise.tile_partial = tile_partial_or_die

    return hook


@pytest.mark.slow
def test_tiles_whose_worker_died_are_retried_and_counted_once(cluster, tmp_path):
    import sys

    from capgeo.geometry.pairwise import scan_pairs

    vectors, groups = seeded_captions(n_groups=300)
    options = dict(top_k=3, block_size=300, device="cpu", threshold=0.8, progress=False)
    local = scan_pairs(vectors, groups, **options)
    doomed = {(0, 2)}  # each death costs a new worker process (seconds on 2 cores)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this test module
    ray.shutdown()
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False,
             runtime_env={"worker_process_setup_hook": crash_at_tiles_once(str(tmp_path), doomed)})
    try:
        with ray_session(cluster.address):
            on_ray = scan_pairs(vectors, groups, **options)
    finally:
        ray.shutdown()
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    assert [path.name for path in tmp_path.iterdir()] == ["0-2"]  # the worker died there once
    np.testing.assert_array_equal(on_ray.negatives.counts, local.negatives.counts)
    assert (on_ray.negatives.n, on_ray.negatives.total) == (local.negatives.n, local.negatives.total)
    np.testing.assert_array_equal(on_ray.companion_index, local.companion_index)
    for mine, theirs in zip(on_ray.extra["pairs"], local.extra["pairs"]):
        np.testing.assert_array_equal(mine, theirs)


@pytest.mark.slow
def test_a_worker_that_cannot_load_the_encoder_is_one_error(cluster, tmp_path):
    from capgeo.errors import CapgeoError
    from capgeo.scale.encode import encode_shards

    missing = tmp_path / "not-on-this-node"
    with ray_session(cluster.address) as session, pytest.raises(CapgeoError) as raised:
        list(encode_shards(session, f"local-dir:{missing}", "cpu", ["a caption", "another"], np.arange(2),
                           [(0, 2)], 77))
    assert str(raised.value) == (f"on a Ray worker: local-dir:{missing}: expected a folder with "
                                 "open_clip_config.json and a weights file")


@pytest.mark.parametrize("address, expected", [
    ("127.0.0.1:1", "Error: --ray 127.0.0.1:1: no Ray head answers there (Connection refused); "
                    "start one with `ray start --head` or give its address"),
    ("nonsense", "Error: --ray nonsense: expected HOST:PORT of a Ray head (e.g. 10.0.0.1:6379), 'auto', "
                 "or no address for a local Ray instance"),
])
def test_a_ray_address_nobody_answers_at_is_one_error_line_at_once(vector_dataset, monkeypatch, address, expected):
    from click.testing import CliRunner

    from capgeo.cli import main

    data, encoder = vector_dataset
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a fresh process, whatever ran before
    monkeypatch.setattr(ray, "init", lambda *args, **kwargs: pytest.fail("Ray would retry for minutes"))
    result = CliRunner().invoke(main, ["encode", str(data), "--encoder", encoder, "--id-column", "id",
                                       "--group-column", "image", "--text-column", "caption", "--ray", address])
    assert (result.exit_code, result.stderr.strip()) == (2, expected)


def test_gpu_clusters_get_one_encoder_actor_and_one_tile_per_gpu_unless_told_cpu():
    from capgeo.scale.encode import actor_count
    from capgeo.scale.session import RaySession

    gpus = RaySession(address="auto", nodes=2, cpus=32, gpus=4)
    assert [gpus.uses_gpus(device) for device in (None, "cuda", "cuda:0", "cpu")] == [True, True, True, False]
    assert (actor_count(gpus, None, 100), actor_count(gpus, "cpu", 100), actor_count(gpus, None, 3)) == (4, 32, 3)
    cpus = RaySession(address="auto", nodes=2, cpus=2, gpus=0)
    assert not cpus.uses_gpus(None) and actor_count(cpus, None, 100) == 2


def test_ray_without_an_address_starts_its_own_instance_unless_ray_address_names_one(monkeypatch):
    """Ray's default (None) joins the last cluster anyone started on the machine, which ran two
    QA commands as jobs of another user's session that then died with OwnerDiedError."""
    from capgeo.scale.session import LOCAL, _init_address

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert _init_address(LOCAL) == "local"
    assert _init_address("auto") == "auto" and _init_address("10.0.0.1:6379") == "10.0.0.1:6379"
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.2:6379")
    assert _init_address(LOCAL) == "10.0.0.2:6379"
