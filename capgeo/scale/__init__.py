"""capgeo on a Ray cluster (the optional ``[ray]`` extra).

Ray is the engine: encoding runs in a pool of Ray actors, the exact pairwise
pass as Ray tasks over the tile grid, merged with the local pass's own merge.
Results are identical to a single-machine run. Nothing here imports ray at
module level, so commands without ``--ray`` never pay for it.
"""

from capgeo.scale.session import active_ray, ray_session

__all__ = ["active_ray", "ray_session"]
