"""capgeo on a local multi-node Ray cluster: the same results as one machine, work on both nodes.

One cluster (a head and one more node, one CPU each) serves the whole module:
starting it costs seconds.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")

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
