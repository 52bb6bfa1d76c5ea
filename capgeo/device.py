"""The one place that picks a torch device when none is given."""

from __future__ import annotations


def default_device() -> str:
    """"cuda", then "mps", then "cpu": the first that this torch build can use."""
    import torch

    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return "cpu"
