"""The exact pairwise pass as Ray tasks.

Each task runs the local pass's own tile code (:func:`capgeo.geometry.pairwise.tile_partial`)
on one tile of the upper-triangular block grid, on a GPU where the cluster has them, and
returns a :class:`~capgeo.geometry.partials.PairPartial`; merge tasks combine partials in a
tree with the local pass's merge (:func:`~capgeo.geometry.partials.merge_partials`), which
is associative and commutative bit for bit. So the result (histograms, moments,
companions, threshold pairs) is the one a single machine computes on the same tile grid
and device kind, whatever node ran which tile and in whatever order tasks finished.

A task that fails (its worker or node died) is retried by Ray; its result is one object
that is consumed once, so a retry never counts a tile twice.
"""

from __future__ import annotations

import dataclasses
import time
import uuid

import numpy as np

from capgeo.progress import progress_bar

#: Ray re-runs a task whose worker or node died this many times before giving up
RETRIES = 3
#: partials combined per merge task: a tree of depth log_8(tiles)
MERGE_FAN_IN = 8
#: how long the driver collects finished tasks before starting merges and updating the bar
WAIT_SECONDS = 0.2


def scan_pairs_on_ray(session, vectors, group_codes, options, *, exclude_codes=None):
    """:func:`capgeo.geometry.pairwise.scan_pairs` with ``options`` (a ScanOptions), the tiles run as
    Ray tasks of ``session`` (a :class:`capgeo.scale.session.RaySession`, which installs this function
    as the engine's runner)."""
    from capgeo.geometry.pairwise import finish_scan, make_grid, prepare_inputs

    import ray  # a session exists, so Ray is installed (capgeo.scale.session.import_ray checked it)
    session.release_actors()  # encoder actors would hold the CPUs/GPUs the tiles need
    started = time.perf_counter()
    # checked and normalised once, on the driver; every task reads the same unit vectors
    matrix, groups, _ = prepare_inputs(vectors, group_codes, "cpu")  # numpy arrays
    device = options.device
    use_gpus = session.uses_gpus(device)
    worker_device = str(device) if device is not None else ("cuda" if use_gpus else "cpu")
    resources = {"num_gpus": 1} if use_gpus else {"num_cpus": 1}
    block_size, top_k = options.block_size, options.top_k
    if block_size is None:
        block_size = ray.get(ray.remote(_block_size_on_worker).options(**resources).remote(
            matrix.shape[0], worker_device, top_k))
    grid = make_grid(matrix.shape[0], block_size, "cpu", top_k=top_k)
    matrix_ref, groups_ref = ray.put(matrix), ray.put(groups)
    # tf32 / bf16: every task prepares the reduced-precision vectors again (the tile API takes
    # the whole matrix), a cost per task that fp32 does not have
    # (the tiles run where their inputs are: no task reads the driver's device)
    tile_options = dataclasses.replace(options, progress=False, device=None)
    # SPREAD: tiles go round the nodes, not first to fill the driver's node (Ray's default)
    tile_task = ray.remote(_tile_task).options(num_returns=2, max_retries=RETRIES, scheduling_strategy="SPREAD",
                                               **resources)
    merge_task = ray.remote(_merge_task).options(max_retries=RETRIES, num_cpus=1)

    pass_id = uuid.uuid4().hex
    tiles = grid.tiles()
    pending: dict = {}  # object ref -> is it a tile's partial (else a merge's)
    node_refs = []
    for tile in tiles:
        partial_ref, node_ref = tile_task.remote(matrix_ref, groups_ref, grid, tile, worker_device, tile_options,
                                                 exclude_codes, pass_id)
        pending[partial_ref] = True
        node_refs.append(node_ref)
    ready: list = []
    with progress_bar("pairwise cosines on Ray", len(tiles), enabled=options.progress) as bar:
        while pending or len(ready) > 1:
            if pending:
                # everything finished within a short wait, in one call: with tens of thousands of tiles,
                # a call per few results would spend the driver's time listing the pending ones;
                # partials stay where they are (the merges fetch them), not pulled to the driver
                done, _ = ray.wait(list(pending), num_returns=len(pending), timeout=WAIT_SECONDS, fetch_local=False)
                for ref in done:
                    if pending.pop(ref):
                        bar.advance(1)
                    ready.append(ref)
            while len(ready) >= MERGE_FAN_IN or (not pending and len(ready) > 1):
                batch, ready = ready[:MERGE_FAN_IN], ready[MERGE_FAN_IN:]
                pending[merge_task.remote(*batch)] = False
    partial = ray.get(ready[0])
    max_pairs, threshold = options.max_pairs, options.threshold
    if max_pairs is not None and threshold is not None and partial.pair_rows.size > max_pairs:
        from capgeo.geometry.partials import TooManyPairs

        raise TooManyPairs(max_pairs, threshold)  # each task checked its own tile; this is the whole pass
    nodes = set(ray.get(node_refs))
    session.nodes_used |= nodes
    session.tasks += len(tiles)
    scan = finish_scan(partial, group_codes, device=worker_device, seconds=time.perf_counter() - started)
    scan.extra["ray"] = {"tasks": len(tiles), "nodes": len(nodes)}
    return scan


def _block_size_on_worker(n: int, device: str, top_k: int) -> int:
    """The block size the local pass would choose on a worker's device."""
    from capgeo.geometry.pairwise import make_grid

    if device.split(":")[0] == "cpu":
        return make_grid(n, None, "cpu", top_k=top_k).block_size
    import torch

    return make_grid(n, None, torch.device(device), top_k=top_k).block_size


def _tile_task(matrix: np.ndarray, groups: np.ndarray, grid, tile: tuple[int, int], device: str, options,
               exclude_codes, pass_id: str):
    """One tile of the pass on this worker's device: (its PairPartial, this node's id)."""
    import ray

    from capgeo.geometry.pairwise import tile_partial

    on_device, groups_on_device = _inputs_on_device(matrix, groups, device, pass_id)
    partial = tile_partial(on_device, groups_on_device, grid, [tile], options, exclude_codes=exclude_codes)
    return partial, ray.get_runtime_context().get_node_id()


#: (pass id, vectors, group codes) on this worker's GPU from its previous tile: a worker runs many
#: tiles of one pass, and copying the vectors to the GPU for every tile would cost more than the tile.
#: Workers belong to the command's Ray job, so the copy goes when the command ends.
_gpu_inputs: tuple | None = None


def _inputs_on_device(matrix: np.ndarray, groups: np.ndarray, device: str, pass_id: str):
    import warnings

    global _gpu_inputs
    if device.split(":")[0] == "cpu":  # the numpy pass (and torch's tf32 / bf16, which wraps these arrays)
        return matrix, groups
    import torch

    with warnings.catch_warnings():
        # object-store arrays are read-only; the tile code only reads them
        warnings.simplefilter("ignore", UserWarning)
        if _gpu_inputs is None or _gpu_inputs[0] != pass_id:
            _gpu_inputs = None  # free the previous pass's copy first
            _gpu_inputs = (pass_id, torch.from_numpy(matrix).to(device), torch.from_numpy(groups).to(device))
    return _gpu_inputs[1], _gpu_inputs[2]


def _merge_task(*partials):
    from capgeo.geometry.partials import merge_partials

    return merge_partials(partials)
