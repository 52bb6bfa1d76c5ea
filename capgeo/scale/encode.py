"""Encoding on Ray: shards of captions go to a pool of actors, one model each.

The driver keeps the cache (decides which chunks are missing, writes each chunk as
it comes back), so the cache format, resuming and later local reuse are those of
a single-machine run; the workers need the encoder's weights, not the captions
file or the cache.
"""

from __future__ import annotations

import os
from typing import Iterator, Sequence

import numpy as np

from capgeo.errors import CapgeoError
from capgeo.scale.session import RaySession, import_ray

#: an actor that dies (node lost, out of memory) is restarted and its shard re-run this often
RETRIES = 3


class ShardEncoder:
    """One loaded encoder in one Ray worker; encodes shards of caption texts."""

    def __init__(self, spec: str | None, device: str | None, cache_dir: str | None = None):
        from capgeo.encoders.registry import get_encoder
        from capgeo.errors import CapgeoError

        self.encoder = self.load_error = None
        try:
            # the user's cache folder holds the weight memo: a worker on the driver's node (or one
            # sharing its file system) then hashes no checkpoint the driver hashed; a node without
            # that folder keeps its own memo in its default folder, as before
            memo_dir = cache_dir if cache_dir is not None and os.path.isdir(os.path.expanduser(cache_dir)) else None
            self.encoder = get_encoder(spec, device=device, cache_dir=memo_dir)
        except CapgeoError as error:
            # raised by encode() instead: Ray hands a method's exception to the driver as it is,
            # while a failed constructor only kills the actor (and Ray would restart it in vain)
            self.load_error = error

    def encode(self, start: int, stop: int, texts: list[str], max_tokens: int):
        import ray

        if self.load_error is not None:
            raise self.load_error
        vectors = np.asarray(self.encoder.encode(texts, max_tokens=max_tokens), dtype=np.float32)
        return start, stop, vectors, ray.get_runtime_context().get_node_id()


def actor_count(session: RaySession, device: str | None, shards: int) -> int:
    """One actor per GPU in the cluster, else one per CPU; never more than there are shards."""
    slots = int(session.gpus) if session.uses_gpus(device) else max(1, int(session.cpus))
    return max(1, min(shards, slots))


def encode_shards(session: RaySession, spec: str | None, device: str | None, texts: Sequence[str],
                  order: np.ndarray, pending: Sequence[tuple[int, int]],
                  max_tokens: int, cache_dir=None) -> Iterator[tuple[int, int, np.ndarray]]:
    """Vectors of each pending chunk ``(start, stop)`` of ``order`` (rows sorted longest first),
    yielded as actors finish them, in no fixed order."""
    if not pending:
        return
    ray = import_ray()
    from ray.util import ActorPool

    pool = ActorPool(_encoder_actors(ray, session, spec, device, actor_count(session, device, len(pending)),
                                    cache_dir))
    shards = [(start, stop, [texts[i] for i in order[start:stop]]) for start, stop in pending]
    try:
        for start, stop, vectors, node in pool.map_unordered(
                lambda actor, shard: actor.encode.remote(*shard, max_tokens), shards):
            session.nodes_used.add(node)
            session.tasks += 1
            yield start, stop, vectors
    except ray.exceptions.RayTaskError as error:
        if isinstance(error.cause, CapgeoError):  # e.g. the weights are not at that path on a worker's node
            raise CapgeoError(f"on a Ray worker: {error.cause}") from None
        raise


def _encoder_actors(ray, session: RaySession, spec: str | None, device: str | None, count: int,
                    cache_dir=None) -> list:
    """``count`` actors holding the encoder, started once per command and reused by later calls."""
    actors = session.actors.setdefault(("encoder", spec, device), [])
    if len(actors) < count:
        resources = {"num_gpus": 1} if session.uses_gpus(device) else {"num_cpus": 1}
        actor_class = ray.remote(ShardEncoder).options(max_restarts=RETRIES, max_task_retries=RETRIES, **resources)
        memo_dir = None if cache_dir is None else str(cache_dir)
        actors += [actor_class.remote(spec, device, memo_dir) for _ in range(count - len(actors))]
    return actors[:count]
