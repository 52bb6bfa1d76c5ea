"""The exact pairwise pass on one machine and as Ray tasks on a local two-node cluster.

Seeded unit vectors (2 captions per group); for each block size, times the local pass and
the Ray pass (``ray.cluster_utils.Cluster``: a head and one more node, ``--cpus-per-node``
CPUs each, on this machine), checks the results are identical (histogram counts, moments,
companions) and prints tasks, nodes and the time per tile. By default both passes run on the CPU;
the Ray pass's time includes shipping the vectors and the merge tree. On a GPU machine,
``--gpus 1 --device cuda`` runs both passes on the GPU (Ray tiles on the head node only).

    python bench/bench_ray.py                       # N = 16,384, width 384, blocks 2048 and 1024
    python bench/bench_ray.py --n 8192 --blocks 512
"""

from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=16_384)
    parser.add_argument("--width", type=int, default=384)
    parser.add_argument("--blocks", type=lambda text: [int(b) for b in text.split(",")], default=[2048, 1024])
    parser.add_argument("--cpus-per-node", type=int, default=1)
    parser.add_argument("--gpus", type=int, default=0, help="GPUs given to the head node (tiles then run there)")
    parser.add_argument("--device", default="cpu", help="device of both passes (cuda with --gpus 1)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import numpy as np
    import ray
    from ray.cluster_utils import Cluster

    from capgeo.geometry.pairwise import scan_pairs
    from capgeo.scale import ray_session

    vectors = np.random.default_rng(args.seed).standard_normal((args.n, args.width), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    groups = np.arange(args.n) // 2

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": args.cpus_per_node,
                                                               "num_gpus": args.gpus})
    cluster.add_node(num_cpus=args.cpus_per_node)
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    cluster.wait_for_nodes()
    rows = []
    # one-off costs out of the first block's times: importing torch and the first tile here, and
    # Ray's worker start-up (each worker imports torch and capgeo once) on the cluster
    scan_pairs(vectors[:2048], groups[:2048], block_size=128, device=args.device, progress=False)
    with ray_session(cluster.address):
        scan_pairs(vectors[:2048], groups[:2048], block_size=128, device=args.device, progress=False)
    try:
        for block in args.blocks:
            started = time.perf_counter()
            local = scan_pairs(vectors, groups, block_size=block, device=args.device, progress=False)
            local_s = time.perf_counter() - started
            with ray_session(cluster.address) as session:
                started = time.perf_counter()
                on_ray = scan_pairs(vectors, groups, block_size=block, device=args.device, progress=False)
                ray_s = time.perf_counter() - started
            identical = (np.array_equal(local.negatives.counts, on_ray.negatives.counts)
                         and local.negatives.total == on_ray.negatives.total
                         and np.array_equal(local.companion_index, on_ray.companion_index)
                         and np.array_equal(local.companion_cosine, on_ray.companion_cosine, equal_nan=True))
            rows.append({"n": args.n, "width": args.width, "block_size": block, "tiles": session.tasks,
                         "nodes": len(session.nodes_used), "local_s": round(local_s, 2), "ray_s": round(ray_s, 2),
                         "local_s_per_tile": round(local_s / session.tasks, 4),
                         "ray_s_per_tile": round(ray_s / session.tasks, 4), "identical": identical})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
