"""Connecting to Ray for the length of one command.

A command run with ``--ray [ADDRESS]`` wraps its work in :func:`ray_session`; the
two engines that can spread out (encoding in :mod:`capgeo.encoders.embed`, the
exact pairwise pass in :mod:`capgeo.geometry.pairwise`) ask :func:`active_ray`
whether they run inside one. A context variable rather than a parameter keeps the
many callers between the CLI and those engines unchanged.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from dataclasses import dataclass, field
from typing import Iterator

from capgeo.errors import CapgeoError

#: ``--ray`` given without an address: start a local Ray instance (or join RAY_ADDRESS)
LOCAL = "local"

_current: contextvars.ContextVar["RaySession | None"] = contextvars.ContextVar("capgeo_ray_session", default=None)


@dataclass
class RaySession:
    address: str          # what the user gave: "local", "auto", "ray://host:10001", "host:6379"
    nodes: int            # alive nodes when the session began
    cpus: float
    gpus: float
    nodes_used: set[str] = field(default_factory=set)  # Ray node ids that ran capgeo work
    tasks: int = 0  # encoding shards and pairwise tiles run
    # actors kept for the whole command (a loaded model is reused by every embed call), by purpose
    actors: dict[tuple, list] = field(default_factory=dict, repr=False)

    def release_actors(self) -> None:
        """Stop the kept actors, handing their CPUs/GPUs back (to the pairwise tasks, say)."""
        import ray

        for actors in self.actors.values():
            for actor in actors:
                ray.kill(actor)
        self.actors.clear()

    def uses_gpus(self, device) -> bool:
        """Whether work for ``device`` (None: the best available) should ask Ray for a GPU each."""
        return self.gpus >= 1 and (device is None or str(device).startswith("cuda"))

    def summary(self) -> str:
        return f"Ray: {self.tasks} task(s) on {len(self.nodes_used)} of {self.nodes} node(s)"


def active_ray() -> RaySession | None:
    """The Ray session the current command runs in, or None (the single-machine default)."""
    return _current.get()


def import_ray():
    try:
        import ray
    except ImportError:
        raise CapgeoError("--ray needs Ray, which is not installed: pip install 'capgeo[ray]'") from None
    return ray


def _init_address(address: str) -> str:
    """What ``ray.init`` is given for ``--ray [ADDRESS]``. Without an address: $RAY_ADDRESS when set,
    else a new local instance ("local"). Ray's own default (None) would also join the last cluster
    anyone started on this machine (/tmp/ray/ray_current_cluster), perhaps another user's."""
    if address != LOCAL:
        return address
    return os.environ.get("RAY_ADDRESS") or "local"


@contextlib.contextmanager
def ray_session(address: str | None) -> Iterator[RaySession | None]:
    """Run the body on Ray at ``address`` (None: no Ray, the body runs locally).

    Joins an already initialised Ray connection (a notebook, a test's cluster) and
    leaves it open; a connection this function opened is closed on exit.
    """
    if address is None:
        yield None
        return
    ray = import_ray()
    opened = False
    if not ray.is_initialized():
        _check_reachable(address)
        try:
            ray.init(address=_init_address(address), logging_level="ERROR", log_to_driver=False)
            # Ray's core worker installs a SIGTERM handler that dumps native stacks; the command's own
            # (clean up, one line, 143) comes back
            from capgeo.termination import terminate_like_interrupt

            terminate_like_interrupt()
        except (ConnectionError, ValueError, RuntimeError) as error:
            raise CapgeoError(f"--ray {address}: cannot start or join a Ray cluster: "
                              f"{str(error).splitlines()[0] if str(error) else type(error).__name__}") from None
        opened = True
    resources = ray.cluster_resources()
    session = RaySession(address=address, nodes=sum(1 for node in ray.nodes() if node.get("Alive")),
                         cpus=float(resources.get("CPU", 0)), gpus=float(resources.get("GPU", 0)))
    import functools

    from capgeo.geometry.pairwise import running_passes_with
    from capgeo.scale.pairwise import scan_pairs_on_ray

    token = _current.set(session)
    try:
        with running_passes_with(functools.partial(scan_pairs_on_ray, session)):
            yield session
    finally:
        _current.reset(token)
        session.release_actors()
        if opened:
            ray.shutdown()


def _check_reachable(address: str, seconds: float = 5.0) -> None:
    """A head address that does not answer fails at once: Ray itself would retry for minutes."""
    import socket

    if address in (LOCAL, "auto") or "://" in address:
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise CapgeoError(f"--ray {address}: expected HOST:PORT of a Ray head (e.g. 10.0.0.1:6379), 'auto', "
                          "or no address for a local Ray instance")
    try:
        socket.create_connection((host, int(port)), timeout=seconds).close()
    except OSError as error:
        raise CapgeoError(f"--ray {address}: no Ray head answers there ({error.strerror or error}); "
                          "start one with `ray start --head` or give its address") from None
