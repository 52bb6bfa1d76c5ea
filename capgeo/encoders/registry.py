"""Turn an ``--encoder`` spec string into a text encoder.

One place decides which kind of encoder a spec names (like open_clip's
``factory.py``); the loaders live in their own modules and are imported only
when that kind is asked for, so listing the kinds never imports torch.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

from capgeo.encoders.base import TextEncoder
from capgeo.device import check_device, check_device_name  # noqa: F401 (re-exported)
from capgeo.errors import EncoderError

DEFAULT_ALIASES = ("default", "minilm", "all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2")
LONGCLIP_NAMES = ("longclip-b", "longclip-l")
VECTOR_SUFFIXES = (".npy", ".npz", ".parquet")
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".bin", ".safetensors")


@dataclass(frozen=True)
class EncoderKind:
    """One row of `capgeo encoders`."""

    kind: str
    examples: tuple[str, ...]
    notes: str


KINDS = (
    EncoderKind("sentence-transformers", ("(no --encoder)", "default", "minilm"),
                "Embedded all-MiniLM-L6-v2 (384-d, 256 tokens); works offline. Geometry depends on the encoder: "
                "estimate gamma with the encoder you will fine-tune."),
    EncoderKind("open_clip", ("ViT-L-14/openai", "hf-hub:timm/ViT-B-16-SigLIP", "ViT-B-32@ckpt.pt",
                              "local-dir:./my-model"),
                "MODEL/PRETRAINED tag, a Hugging Face hub id, MODEL@checkpoint file, or a local model folder."),
    EncoderKind("longclip", ("longclip-B", "longclip-L", "./longclip-L.pt"),
                "Long-CLIP text tower at 248 tokens (Hugging Face BeichenZhang/LongCLIP-*) or a local state dict."),
    EncoderKind("precomputed", ("vectors:emb.npy", "emb.parquet", "emb.npz"),
                ".npy rows aligned with the captions; .parquet/.npz with an id column aligned by caption id."),
)


def list_encoder_kinds() -> list[EncoderKind]:
    return list(KINDS)


def spec_kind(spec: str | None) -> tuple[str, str]:
    """(kind, argument) for a spec, without loading anything.

    The argument is what the kind's loader takes (the spec itself, or the path
    after a ``vectors:`` prefix). Raises EncoderError for a spec no kind accepts.
    """
    if spec is not None and not isinstance(spec, str):
        raise EncoderError(f"an encoder spec is text (see `capgeo encoders`), got {type(spec).__name__}")
    if spec is None or spec.strip().lower() in DEFAULT_ALIASES:
        return "sentence-transformers", "minilm"
    spec = spec.strip()
    lowered = spec.lower()
    if lowered.startswith("vectors:"):
        return "precomputed", spec[len("vectors:"):]
    if lowered.startswith(("hf-hub:", "local-dir:")):
        return "open_clip", spec
    if lowered in LONGCLIP_NAMES:
        return "longclip", spec
    suffix = Path(lowered).suffix
    if suffix in VECTOR_SUFFIXES:
        return "precomputed", spec
    if model_at_checkpoint(spec) is not None:
        return "open_clip", spec              # MODEL@checkpoint, whatever the file is called
    if suffix in (".pt", ".pth") and "longclip" in Path(lowered).name:
        return "longclip", spec
    if suffix in CHECKPOINT_SUFFIXES:
        return "open_clip", spec              # a bare checkpoint file: the loader infers the model
    if spec.count("/") == 1 and all(spec.split("/")):
        return "open_clip", spec              # MODEL/PRETRAINED
    raise EncoderError(f"unknown encoder spec {spec!r}; expected one of: {describe_kinds()}")


def model_at_checkpoint(spec: str) -> tuple[str, str] | None:
    """(MODEL, checkpoint path) of a ``MODEL@checkpoint`` spec, else None: hub and folder specs,
    and a path that is itself an existing file although an ``@`` is in its name (a folder
    called ``run@3``), are not. With several ``@``, the split is at the first one after which
    an existing file is named (else at the first, for the error that follows)."""
    if "@" not in spec or spec.lower().startswith(("hf-hub:", "local-dir:")) or Path(spec).expanduser().is_file():
        return None
    splits = [(spec[:at], spec[at + 1:]) for at, char in enumerate(spec) if char == "@"]
    return next((split for split in splits if Path(split[1]).expanduser().is_file()), splits[0])


def describe_kinds() -> str:
    """The kinds with examples, on one line, for error messages."""
    def examples(kind: EncoderKind) -> str:
        return ", ".join([example for example in kind.examples if not example.startswith("(")][:3])

    return "; ".join(f"{kind.kind} (e.g. {examples(kind)})" for kind in KINDS)


def get_encoder(spec: str | None, device: str | None = None, cache_dir: str | Path | None = None) -> TextEncoder:
    """The text encoder a spec names. ``None`` means the embedded all-MiniLM-L6-v2.

    Models load on first use: the encoder's identity (what the embedding cache is keyed on)
    comes from its files, with weight-file facts remembered in ``cache_dir``, so a run whose
    vectors are all cached loads no model.
    """
    kind, argument = spec_kind(spec)
    if kind in ("open_clip", "longclip"):
        # their models load on first use, which checks the hardware: a cache hit needs no
        # device, and importing torch only to check one costs seconds
        check_device_name(device)
    else:  # precomputed vectors too: the pairwise pass runs on --device (with torch imported for it anyway)
        check_device(device)
    if kind == "sentence-transformers":
        from capgeo.encoders.minilm import load_minilm_encoder

        return load_minilm_encoder(spec=spec or "default", device=device)
    if kind == "precomputed":
        from capgeo.encoders.precomputed import load_precomputed_encoder

        return load_precomputed_encoder(argument, spec=spec)
    if kind == "open_clip" and _is_checkpoint_file(argument) and _optional_loader(
            "capgeo.encoders.openclip", "is_longclip_file", kind)(argument, cache_dir):
        kind = "longclip"  # a Long-CLIP state dict is known by its contents, whatever the file is called
    module, function = {"longclip": ("capgeo.encoders.longclip", "load_longclip_encoder"),
                        "open_clip": ("capgeo.encoders.openclip", "load_open_clip_encoder")}[kind]
    return _optional_loader(module, function, kind)(argument, device=device, cache_dir=cache_dir, lazy=True)


def _is_checkpoint_file(spec: str) -> bool:
    """A bare weight file (not MODEL@checkpoint, a hub id or a folder), which exists."""
    path = Path(spec).expanduser()
    return (model_at_checkpoint(spec) is None and not spec.lower().startswith(("hf-hub:", "local-dir:"))
            and path.suffix.lower() in CHECKPOINT_SUFFIXES and path.is_file())


def _optional_loader(module_name: str, function_name: str, kind: str):
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        # only the loader module itself being absent means "not in this build";
        # a missing dependency inside it is reported as such
        if error.name == module_name:
            raise EncoderError(f"{kind} encoders are not available in this build of capgeo") from error
        raise EncoderError(f"{kind} encoders need the Python package {error.name!r}, which is not installed") from error
    return getattr(module, function_name)


#: Long-CLIP's published checkpoints (github.com/beichenzbc/Long-CLIP): spec -> (hub repository, file, name)
LONGCLIP_REPOS = {
    "longclip-b": ("BeichenZhang/LongCLIP-B", "longclip-B.pt", "Long-CLIP-B"),
    "longclip-l": ("BeichenZhang/LongCLIP-L", "longclip-L.pt", "Long-CLIP-L"),
}


@dataclass(frozen=True)
class Download:
    """One row of `capgeo encoders`' downloads: what a spec fetches on first use."""

    spec: str
    repo: str
    files: tuple[str, ...]
    what: str
    offline_spec: str
    #: how much it downloads, from the architecture: float32 weights of both towers
    size: str

    def to_dict(self) -> dict:
        from capgeo.encoders.hub import HUB_CACHE, fetch_command

        return {"spec": self.spec, "repository": self.repo, "files": list(self.files), "what": self.what,
                "size": self.size, "cache": HUB_CACHE, "fetch_command": fetch_command(self.repo, self.files),
                "offline_spec": self.offline_spec}


#: ViT-L/14 CLIP (428M parameters) and ViT-B/16 CLIP (150M) as float32 state dicts
VIT_L_14_SIZE = "about 1.7 GB (428M float32 parameters)"
VIT_B_16_SIZE = "about 0.6 GB (150M float32 parameters)"


def _longclip_download(spec: str) -> Download:
    repo, filename, name = LONGCLIP_REPOS[spec.lower()]
    return Download(spec, repo, (filename,), f"{name}'s state dict (both towers; only the text tower is read)",
                    f"/path/to/{filename}", VIT_L_14_SIZE if spec.lower().endswith("-l") else VIT_B_16_SIZE)


DOWNLOADS = (
    _longclip_download("longclip-L"),
    _longclip_download("longclip-B"),
    # open_clip's pretrained registry: hf_hub "timm/vit_large_patch14_clip_224.openai/", whose weights
    # open_clip reads as open_clip_model.safetensors (open_clip_pytorch_model.bin where that is missing)
    Download("ViT-L-14/openai", "timm/vit_large_patch14_clip_224.openai", ("open_clip_model.safetensors",),
             "OpenAI's ViT-L/14 weights as open_clip's pretrained registry names them (both towers)",
             "ViT-L-14-quickgelu@/path/to/open_clip_model.safetensors", VIT_L_14_SIZE),
    Download("hf-hub:ORG/REPO", "ORG/REPO", ("open_clip_config.json", "open_clip_model.safetensors"),
             "an open_clip model's config and weights (open_clip_pytorch_model.bin where the repository has "
             "no safetensors)", "local-dir:/path/to/folder-with-both-files", "the model's (the repository lists it)"),
)


def list_downloads() -> list[Download]:
    return list(DOWNLOADS)
