"""The torch device: the one place that picks it when none is given, and checks one that is."""

from __future__ import annotations

import os
import re
import sys

from capgeo.errors import EncoderError

#: device files that a Linux machine with a GPU torch can use has (NVIDIA, WSL2's GPU bridge, ROCm)
GPU_DEVICE_FILES = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia", "/dev/dxg", "/dev/kfd")


def default_device() -> str:
    """"cuda", then "mps", then "cpu": the first that this torch build can use.

    A Linux machine with none of :data:`GPU_DEVICE_FILES` runs on the CPU whatever torch says,
    so that a run that needs no model (a cache hit, precomputed vectors) never imports torch."""
    if "torch" not in sys.modules and sys.platform.startswith("linux") and not any(
            os.path.exists(path) for path in GPU_DEVICE_FILES):
        return "cpu"
    import torch

    if torch.cuda.is_available():
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return "cpu"


#: the --device values capgeo runs on (torch knows more; none of them is useful here)
DEVICE_NAME = re.compile(r"cpu(:0)?|mps(:0)?|cuda(:(0|[1-9][0-9]*))?", re.ASCII)  # torch refuses cuda:01


def check_device_name(device: str | None) -> None:
    """A --device that is not cpu, cuda, cuda:N or mps is a one-line error (no torch needed)."""
    if device is not None and not DEVICE_NAME.fullmatch(device):
        raise EncoderError(f"--device {device!r}: expected cpu, cuda, cuda:N or mps")


def check_device(device) -> None:
    """A --device that torch does not know, or whose hardware is missing, is a one-line error
    (``device``: a name, or a torch.device a library caller passes)."""
    if device is not None and not isinstance(device, str):
        device = str(device)
    check_device_name(device)
    if device is None or device == "cpu":
        return  # always there; and a cached run then never imports torch
    import torch

    kind = torch.device(device).type
    available = {"cpu": True, "cuda": torch.cuda.is_available(),
                 "mps": getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()}
    if not available.get(kind, False):
        raise EncoderError(f"--device {device!r}: no {kind} device on this machine; use cpu, or leave --device out")
