"""Read a checkpoint's tensors without materialising the ones that are not needed.

PyTorch zip checkpoints are opened memory-mapped (``mmap=True``,
``weights_only=True``): only the pages of the tensors actually used (the text
tower) are ever read from disk. Safetensors files are opened lazily and only
the wanted keys are read. A file that is not a checkpoint at all (random
bytes, a damaged header, a truncated archive) is one :class:`EncoderError`
line naming the file and the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from capgeo.errors import EncoderError

SAFETENSORS_SUFFIX = ".safetensors"


def read_state_dict(path: str | Path, keep: Callable[[str], bool] = lambda key: True) -> dict:
    """The checkpoint's state dict (``state_dict`` wrapper and ``module.`` prefix removed), with the
    tensors of the keys ``keep`` accepts; for ``.pt`` files they stay memory-mapped until used."""
    path = Path(path)
    if path.suffix.lower() == SAFETENSORS_SUFFIX:
        return _read_safetensors(path, keep)
    checkpoint = _torch_load(path)
    if isinstance(checkpoint, dict) and isinstance(checkpoint.get("state_dict"), dict):
        checkpoint = checkpoint["state_dict"]
    elif isinstance(checkpoint, dict) and isinstance(checkpoint.get("model"), dict) \
            and not any(hasattr(value, "shape") for value in checkpoint.values()):
        checkpoint = checkpoint["model"]  # {"model": state_dict, "optimizer": ..., "epoch": ...}, as many trainers save
    if not isinstance(checkpoint, dict) or not checkpoint:
        raise EncoderError(f"{path}: expected a state dict of tensors, found {type(checkpoint).__name__}")
    state = {_unprefixed(key): value for key, value in checkpoint.items()}
    return {key: value for key, value in state.items() if keep(key)}


def _unprefixed(key: str) -> str:
    """The key without the ``module.`` prefix DistributedDataParallel adds, whatever the file format."""
    return key[7:] if key.startswith("module.") else key


def key_shapes(path: str | Path) -> dict[str, tuple[int, ...]]:
    """Key -> shape, reading no tensor data."""
    path = Path(path)
    if path.suffix.lower() == SAFETENSORS_SUFFIX:
        with _safe_open(path) as handle:
            return {_unprefixed(key): tuple(handle.get_slice(key).get_shape()) for key in handle.keys()}
    return {key: tuple(getattr(value, "shape", ())) for key, value in read_state_dict(path).items()}


def _torch_load(path: Path):
    import pickle
    import warnings
    import zipfile

    import torch

    if _is_torchscript(path):
        return _torchscript_state_dict(path)
    try:
        with warnings.catch_warnings():
            # random bytes read as a pickle name a bogus protocol; the error below says what is wrong
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            try:
                return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError as error:
                if "zip" in str(error).lower() and _is_zip(path):
                    raise
                # a legacy (non-zip) torch.save file cannot be memory-mapped: read it whole
                return torch.load(path, map_location="cpu", weights_only=True)
    except OSError as error:
        raise EncoderError(f"{path}: cannot read the checkpoint ({error.strerror or error})") from None
    except Exception as error:  # torch and pickle raise many kinds for malformed files; all mean "unreadable"
        if isinstance(error, pickle.UnpicklingError) and "Unsupported global" in str(error):
            raise EncoderError(f"{path}: the checkpoint holds objects other than tensors, which capgeo does not "
                               f"unpickle (weights_only); re-save it as a plain state dict") from None
        if _is_zip(path) or isinstance(error, zipfile.BadZipFile) or "zip" in str(error).lower():
            raise EncoderError(f"{path}: truncated or damaged PyTorch zip archive "
                               f"({first_line(error)})") from None
        # which exception the unpickler hits first depends on the bytes: the reason must not; and torch's
        # advice to load with weights_only=False is not given on (a file that is no checkpoint at all)
        reason = "" if "weights_only" in str(error) else first_line(error)
        raise EncoderError(f"{path}: not a PyTorch checkpoint (neither a zip archive nor a readable pickle: "
                           f"{type(error).__name__}{': ' + reason if reason else ''})") from None


def _is_torchscript(path: Path) -> bool:
    """A TorchScript archive (torch.jit.save; OpenAI's released CLIP .pt files are these): a zip whose
    folder holds ``constants.pkl`` and compiled ``code/``, which torch.load refuses under weights_only."""
    import zipfile

    if not _is_zip(path):
        return False
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (OSError, zipfile.BadZipFile):
        return False  # damaged: torch.load's error below says so
    return any(name.endswith("/constants.pkl") for name in names) and any("/code/" in name for name in names)


def _torchscript_state_dict(path: Path) -> dict:
    """The tensors of a TorchScript archive, read as open_clip reads OpenAI's checkpoints (torch.jit.load
    runs TorchScript, not arbitrary Python; its parameters carry the names a CLIP state dict has)."""
    import warnings

    import torch

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = torch.jit.load(str(path), map_location="cpu")
    except Exception as error:
        raise EncoderError(f"{path}: a TorchScript archive that torch.jit.load cannot read "
                           f"({type(error).__name__}: {first_line(error)})") from None
    return {key: value for key, value in module.state_dict().items()
            # OpenAI's model facts, and the causal mask open_clip builds itself (a non-persistent buffer there)
            if key not in ("input_resolution", "context_length", "vocab_size", "attn_mask")}


def _read_safetensors(path: Path, keep: Callable[[str], bool]) -> dict:
    with _safe_open(path) as handle:
        try:
            return {_unprefixed(key): handle.get_tensor(key) for key in handle.keys() if keep(_unprefixed(key))}
        except Exception as error:  # a header that promises more bytes than the file has
            raise EncoderError(f"{path}: damaged safetensors file ({first_line(error)})") from None


def _safe_open(path: Path):
    try:
        from safetensors import safe_open

        return safe_open(str(path), framework="pt")
    except OSError as error:
        raise EncoderError(f"{path}: cannot read the checkpoint ({error.strerror or error})") from None
    except Exception as error:  # SafetensorsError: header too large, invalid JSON, ...
        raise EncoderError(f"{path}: not a readable safetensors file ({first_line(error)})") from None


def _is_zip(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(4) == b"PK\x03\x04"
    except OSError:
        return False


def state_dict_mismatch(error: BaseException, shown: int = 3) -> str:
    """torch's load_state_dict error on one line: its first line, then each kind of mismatch with
    a count and the first few keys (the first line alone named no key)."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    parts = []
    for line in lines[1:]:
        kind, _, keys = line.partition(":")
        names = [name.strip().strip('"') for name in keys.split(",") if name.strip()]
        if kind.startswith(("Missing key", "Unexpected key")) and names:
            more = f" and {len(names) - shown} more" if len(names) > shown else ""
            parts.append(f"{kind.lower()} ({len(names)}): {', '.join(names[:shown])}{more}")
        else:
            parts.append(line.rstrip("."))
    size_mismatches = [part for part in parts if part.startswith("size mismatch")]
    others = [part for part in parts if not part.startswith("size mismatch")]
    if len(size_mismatches) > shown:
        size_mismatches = size_mismatches[:shown] + [f"{len(size_mismatches) - shown} more size mismatches"]
    return "; ".join(others + size_mismatches) or lines[0]


def first_line(error: BaseException) -> str:
    """The first line of an exception's message (or its type), for one-line errors."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
