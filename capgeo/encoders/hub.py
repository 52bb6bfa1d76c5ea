"""Hugging Face hub downloads that fail fast on a machine without a network.

huggingface_hub retries a failed connection with back-off, so on an offline
machine a missing checkpoint takes about a minute to turn into an error. When
the hub's host cannot be reached at all, capgeo switches huggingface_hub to its
offline mode for the download: files in the local cache are still found, and a
missing one fails at once.
"""

from __future__ import annotations

import contextlib
import os
import socket
from typing import Iterator
from urllib.parse import urlparse

DEFAULT_ENDPOINT = "https://huggingface.co"


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether a TCP connection to the hub's host (``HF_ENDPOINT``) can be opened."""
    endpoint = urlparse(os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT)
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        with socket.create_connection((endpoint.hostname, port), timeout=timeout):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def cache_only_when_unreachable() -> Iterator[bool]:
    """Inside the block, huggingface_hub answers from its local cache alone when the hub
    cannot be reached. Yields whether the hub is being used (False: cache only)."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        yield False
        return
    if hub_reachable():
        yield True
        return
    # read at call time by huggingface_hub (constants.is_offline_mode / hf_hub_download)
    constants.HF_HUB_OFFLINE = True
    try:
        yield False
    finally:
        constants.HF_HUB_OFFLINE = False


def unavailable_reason() -> str:
    """Why a download could not happen, for error messages."""
    if os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0"):
        return "HF_HUB_OFFLINE is set"
    return "the Hugging Face hub cannot be reached from this machine"


#: where huggingface_hub keeps what it downloads, as the docs and messages name it
HUB_CACHE = "$HF_HOME/hub, by default ~/.cache/huggingface/hub"


def fetch_command(repo: str, files: tuple[str, ...] = ()) -> str:
    """The one command that puts a hub repository's files in the Hugging Face cache ahead of time.
    ``hf`` is huggingface_hub's command line since 1.0 (before it: ``huggingface-cli download``,
    with the same arguments)."""
    return " ".join(("hf download", repo, *files))


def fetch_advice(spec: str, repo: str, files: tuple[str, ...], offline_spec: str) -> str:
    """What to do when ``spec``'s files are neither cached nor downloadable, in one sentence: the
    command that fetches them, where they land, and the spec that reads a copied file."""
    return (f"fetch them where a network exists with `{fetch_command(repo, files)}` (into the Hugging Face "
            f"cache, {HUB_CACHE}; --encoder {spec} then finds them offline, also in that folder copied "
            f"here), or copy the file here and pass --encoder {offline_spec}; `capgeo docs encoders` says more")
