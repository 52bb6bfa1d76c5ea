"""open_clip text encoders: pretrained tags, Hugging Face hub ids, local checkpoints.

Spec forms (see :func:`load_open_clip_encoder`):

- ``MODEL/PRETRAINED``        a built-in open_clip model and pretrained tag, e.g. ``ViT-L-14/openai``
- ``hf-hub:org/repo``         an open_clip model on the Hugging Face hub
- ``MODEL@/path/ckpt.pt``     a local checkpoint for a built-in model name, or for a model config file:
                              ``/path/cfg.json@/path/ckpt.pt``
- ``/path/ckpt.pt``           a local checkpoint with its config beside it (``ckpt.json`` or
                              ``open_clip_config.json`` in the same folder)
- ``local-dir:/path``         a folder laid out like open_clip's hub repos (``open_clip_config.json`` + weights)

Checkpoints may be OpenAI-style state dicts or open_clip training checkpoints
(``{"state_dict": ...}``, with or without a ``module.`` prefix); open_clip's
own ``load_checkpoint`` reads them. Downloads go through open_clip /
huggingface_hub and their cache; without a network (or with
``HF_HUB_OFFLINE=1``) missing weights raise :class:`EncoderError` saying which.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Sequence

import numpy as np

from capgeo.encoders.base import EncoderInfo, file_fingerprint
from capgeo.errors import EncoderError

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pth", ".pt")
_MEMO_LIMIT = 200_000  # token-id rows remembered between token_counts() and encode()


class OpenClipTextEncoder:
    """The text tower of an open_clip model (or a bare TextTransformer) with its tokenizer.

    ``encode`` runs the length-trimmed forward of :mod:`capgeo.encoders.trimmed`
    when the tower allows it (exact), otherwise open_clip's ``encode_text``.
    ``last_stats`` tells which path the last call took.
    """

    def __init__(self, model, tokenizer, info: EncoderInfo, device: str):
        from capgeo.encoders.trimmed import text_tower

        self.model = model
        self.tokenizer = tokenizer
        self.info = info
        self.device = device
        self.tower = text_tower(model)
        self.last_stats = None
        self._memo: dict[str, np.ndarray] = {}

    # -- tokens ---------------------------------------------------------------------------------

    def _is_clip_bpe(self) -> bool:
        from open_clip.tokenizer import SimpleTokenizer

        return isinstance(self.tokenizer, SimpleTokenizer) and self.tokenizer.reduction_fn is None

    def _full_ids(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Untruncated ids, start and end tokens included, exactly as open_clip's tokenizer builds them."""
        tokenizer = self.tokenizer
        rows = []
        for text in texts:
            row = self._memo.get(text)
            if row is None:
                row = np.asarray([tokenizer.sot_token_id, *tokenizer.encode(text), tokenizer.eot_token_id],
                                 dtype=np.int32)  # vocabularies fit; half the memory of int64
                if len(self._memo) >= _MEMO_LIMIT:
                    self._memo.clear()
                self._memo[text] = row
            rows.append(row)
        return rows

    def token_counts(self, texts: Sequence[str]) -> np.ndarray:
        if self._is_clip_bpe():
            return np.fromiter((len(row) for row in self._full_ids(texts)), dtype=np.int64, count=len(texts))
        return _other_tokenizer_counts(self.tokenizer, texts)

    def _rows(self, texts: Sequence[str], max_tokens: int) -> list[np.ndarray]:
        if not self._is_clip_bpe():
            # other tokenizers truncate and pad themselves; rows come back max_tokens wide
            return list(self.tokenizer(list(texts), context_length=max_tokens).numpy())
        eot = self.tokenizer.eot_token_id
        rows = []
        for row in self._full_ids(texts):
            if len(row) > max_tokens:
                # open_clip's truncation: keep the first max_tokens ids, the last one becomes end-of-text
                row = row[:max_tokens].copy()
                row[-1] = eot
            rows.append(row)
        return rows

    # -- embeddings -----------------------------------------------------------------------------

    def encode(self, texts: Sequence[str], *, max_tokens: int | None = None, batch_size: int = 64,
               progress: bool | None = None, trim: bool = True) -> np.ndarray:
        from capgeo.encoders.trimmed import encode_token_rows

        context = self.info.context_length
        max_tokens = context if max_tokens is None else int(max_tokens)
        if not 2 <= max_tokens <= context:
            raise EncoderError(f"max_tokens={max_tokens} is outside 2..{context}, "
                               f"the context length of {self.info.name}")
        if len(texts) == 0:
            return np.zeros((0, self.info.width), dtype=np.float32)
        vectors, self.last_stats = encode_token_rows(
            self.tower, self._rows(texts, max_tokens), batch_size=max(1, int(batch_size)),
            device=self.device, progress=progress, trim=trim)
        return vectors


def _other_tokenizer_counts(tokenizer, texts: Sequence[str]) -> np.ndarray:
    """Untruncated counts for Hugging Face / SentencePiece tokenizers (special tokens included)."""
    inner = getattr(tokenizer, "tokenizer", None)
    clean = getattr(tokenizer, "clean_fn", lambda text: text)
    if inner is None:
        raise EncoderError(f"cannot count tokens with {type(tokenizer).__name__}")
    ids = inner([clean(text) for text in texts], truncation=False)["input_ids"]
    return np.fromiter((len(row) for row in ids), dtype=np.int64, count=len(texts))


# -- loading ----------------------------------------------------------------------------------------

def load_open_clip_encoder(spec: str, device: str | None = None) -> OpenClipTextEncoder:
    """An open_clip text encoder for ``spec`` (forms in the module docstring), on ``device``
    (default cuda, then mps, then cpu)."""
    from capgeo.device import default_device

    spec = spec.strip()
    device = device or default_device()
    config, weights, quick_gelu, name, tokenizer_name = _resolve(spec)
    shapes = _state_dict_keys_and_shapes(weights) or {}
    if "positional_embedding_res" in shapes:
        raise EncoderError(f"{weights} is a Long-CLIP checkpoint (it has positional_embedding_res); "
                           f"pass the file itself or longclip-B/longclip-L as the encoder")
    checkpoint_context = _text_context_length(shapes)
    text_cfg = config.setdefault("text_cfg", {})
    if checkpoint_context is not None and checkpoint_context != text_cfg.get("context_length", 77):
        # never let open_clip interpolate the checkpoint's positional table to the config's length
        text_cfg["context_length"] = checkpoint_context
    model = _build_model(config, quick_gelu)
    try:
        import open_clip

        open_clip.load_checkpoint(model, str(weights), strict=True)
    except (RuntimeError, KeyError, ValueError, AssertionError) as error:  # open_clip asserts on some shapes
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise EncoderError(f"checkpoint {weights} does not fit model {name}: {first_line}") from error
    _drop_image_tower(model)
    model = model.eval().to(device)
    tokenizer = _tokenizer(tokenizer_name, config, int(model.context_length))
    info = EncoderInfo(
        spec=spec, kind="open_clip", name=name, width=_output_width(model, tokenizer, device),
        context_length=int(model.context_length), logit_scale=_logit_scale(model),
        fingerprint=_model_fingerprint(weights, config, quick_gelu, tokenizer_name))
    return OpenClipTextEncoder(model, tokenizer, info, device)


def _model_fingerprint(weights: Path, config: dict, quick_gelu: bool, tokenizer_name: str) -> str:
    """The weights' sha256 together with everything else that changes the output: the same
    file built with another activation or config, or tokenised differently, is another encoder."""
    build = json.dumps({"weights": file_fingerprint(weights), "config": config, "quick_gelu": bool(quick_gelu),
                        "tokenizer": tokenizer_name}, sort_keys=True, default=str)
    return hashlib.sha256(build.encode()).hexdigest()


def _resolve(spec: str) -> tuple[dict, Path, bool, str, str]:
    """(model config, local weights file, quick_gelu, display name, name for get_tokenizer)."""
    import open_clip

    prefix = spec.split(":", 1)[0].lower() + ":" if ":" in spec else ""
    if prefix in ("hf-hub:", "local-dir:"):
        spec = prefix + spec.split(":", 1)[1]          # open_clip expects the prefixes in lower case
    if spec.startswith("hf-hub:"):
        repo = spec[len("hf-hub:"):]
        config_file = _download(lambda: _hf_file(repo, "open_clip_config.json"), f"config of {spec}", spec)
        weights = _download(lambda: _hf_file(repo, None), f"weights of {spec}", spec)
        return _config_from_json(config_file), Path(weights), False, spec, spec
    if spec.startswith("local-dir:"):
        folder = Path(spec[len("local-dir:"):]).expanduser()
        config_file = folder / "open_clip_config.json"
        if not config_file.is_file():
            raise EncoderError(f"{spec}: expected a folder with open_clip_config.json and a weights file")
        weights = _weights_in_folder(folder)
        if weights is None:
            raise EncoderError(f"{spec}: no weights file ({', '.join(WEIGHT_SUFFIXES)}) in {folder}")
        return _config_from_json(config_file), weights, False, folder.name, spec
    if "@" in spec:
        model_name, _, path = spec.partition("@")
        weights = Path(path).expanduser()
        if not weights.is_file():
            raise EncoderError(f"{spec}: checkpoint file {weights} not found")
        if model_name.endswith(".json"):
            config_file = Path(model_name).expanduser()
            if not config_file.is_file():
                raise EncoderError(f"{spec}: model config {config_file} not found")
            return _config_from_json(config_file), weights, False, config_file.stem, ""
        return _builtin_config(model_name, spec), weights, False, model_name, model_name
    path = Path(spec).expanduser()
    if path.suffix in WEIGHT_SUFFIXES:
        if not path.is_file():
            raise EncoderError(f"checkpoint file {path} not found")
        for config_file in (path.with_suffix(".json"), path.parent / "open_clip_config.json"):
            if config_file.is_file():
                return _config_from_json(config_file), path, False, path.stem, ""
        raise EncoderError(f"{path}: cannot tell the model from the file alone; pass MODEL@{path} "
                           f"(e.g. ViT-B-32-quickgelu@{path} for OpenAI-trained weights) "
                           f"or put its config beside it as {path.with_suffix('.json').name}")
    model_name, slash, tag = spec.partition("/")
    if not slash or not tag:
        raise EncoderError(f"open_clip spec {spec!r} needs weights: MODEL/PRETRAINED (e.g. ViT-B-32/openai), "
                           f"MODEL@/path/to/checkpoint.pt, hf-hub:org/repo or local-dir:/path")
    config = _builtin_config(model_name, spec)
    pretrained_cfg = open_clip.get_pretrained_cfg(model_name, tag)
    if not pretrained_cfg:
        tags = ", ".join(open_clip.list_pretrained_tags_by_model(model_name)) or "none"
        raise EncoderError(f"{spec}: open_clip has no pretrained tag {tag!r} for {model_name} (tags: {tags})")
    # tags record whether the weights were trained with QuickGELU (OpenAI's were); build to match
    quick_gelu = bool(pretrained_cfg.get("quick_gelu", False))
    source = pretrained_cfg.get("hf_hub") or pretrained_cfg.get("url") or ""
    local_name = model_name if not quick_gelu or model_name.endswith("-quickgelu") else f"{model_name}-quickgelu"
    weights = _download(lambda: open_clip.download_pretrained(pretrained_cfg),
                        f"weights of {spec} ({source.rstrip('/')})" if source else f"weights of {spec}", spec,
                        model_name=local_name)
    return config, Path(weights), quick_gelu, model_name, model_name


def _builtin_config(model_name: str, spec: str) -> dict:
    import open_clip

    config = open_clip.get_model_config(model_name)
    if config is None:
        raise EncoderError(f"{spec}: open_clip has no model {model_name!r} "
                           f"(see open_clip.list_models(), or pass a config file: /path/cfg.json@checkpoint)")
    return config


def _config_from_json(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise EncoderError(f"{path}: not a readable JSON model config ({error})") from error
    config = data.get("model_cfg", data) if isinstance(data, dict) else None
    if not isinstance(config, dict) or not all(key in config for key in ("embed_dim", "vision_cfg", "text_cfg")):
        raise EncoderError(f"{path}: expected an open_clip model config with embed_dim, vision_cfg and text_cfg")
    return config


def _hf_file(repo: str, filename: str | None) -> str:
    from open_clip.pretrained import download_pretrained_from_hf

    return download_pretrained_from_hf(repo, filename=filename)


def _download(fetch, what: str, spec: str, model_name: str | None = None) -> str:
    """Run a download; a failure (no network, HF_HUB_OFFLINE=1, not in the cache) becomes a one-line EncoderError."""
    from capgeo.encoders.hub import cache_only_when_unreachable, unavailable_reason

    online = True
    try:
        with cache_only_when_unreachable() as online:
            target = fetch()
    except Exception as error:  # huggingface_hub / urllib raise many kinds; all mean "not available here"
        offline = "" if online else f" ({unavailable_reason()})"
        example = f"{model_name or 'MODEL'}@/path/to/checkpoint.pt"
        raise EncoderError(
            f"{what}: not in the local cache and could not be downloaded{offline}: "
            f"{type(error).__name__}. Download them where a network exists, or pass a local file: "
            f"--encoder {example} (or local-dir:/folder with open_clip_config.json and the weights)") from error
    if not target or not Path(target).is_file():
        raise EncoderError(f"{what} for {spec!r} could not be found")
    return target


def _weights_in_folder(folder: Path) -> Path | None:
    """The weights file open_clip's local-dir loader would pick."""
    try:
        from open_clip.factory import _find_checkpoint_in_dir  # open_clip's own choice, when available

        found = _find_checkpoint_in_dir(folder)
        if found:
            return Path(found)
    except ImportError:
        pass
    candidates = sorted(p for p in folder.iterdir() if p.suffix in WEIGHT_SUFFIXES)
    return candidates[0] if candidates else None


def _state_dict_keys_and_shapes(path: Path) -> dict[str, tuple[int, ...]] | None:
    """Key -> shape of a checkpoint without reading its tensors (memory-mapped); None if unreadable."""
    import torch

    try:
        if path.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(path), framework="pt") as handle:
                return {key: tuple(handle.get_slice(key).get_shape()) for key in handle.keys()}
        try:
            checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError:
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:
        return None  # e.g. a TorchScript archive: let open_clip read it
    if isinstance(checkpoint, dict) and isinstance(checkpoint.get("state_dict"), dict):
        checkpoint = checkpoint["state_dict"]
    if not isinstance(checkpoint, dict):
        return None
    return {(key[7:] if key.startswith("module.") else key): tuple(getattr(value, "shape", ()))
            for key, value in checkpoint.items()}


def _text_context_length(shapes: dict[str, tuple[int, ...]]) -> int | None:
    """Rows of the checkpoint's text positional table (CLIP or CustomTextCLIP layout)."""
    for key in ("positional_embedding", "text.positional_embedding"):
        if key in shapes and len(shapes[key]) == 2:
            return int(shapes[key][0])
    return None


def _build_model(config: dict, quick_gelu: bool):
    """The model class open_clip's create_model would pick, without any download for its towers."""
    import copy

    import open_clip

    config = copy.deepcopy(config)
    text_cfg, vision_cfg = config["text_cfg"], config["vision_cfg"]
    if quick_gelu:
        config["quick_gelu"] = True
    # full weights come from the checkpoint: never fetch a tower's base weights
    if "hf_model_name" in text_cfg:
        text_cfg["hf_model_pretrained"] = False
    if "timm_model_name" in vision_cfg:
        vision_cfg["timm_model_pretrained"] = False
    custom_text = config.pop("custom_text", False) or "hf_model_name" in text_cfg
    model_class = open_clip.CLIP
    if custom_text:
        model_class = open_clip.CoCa if "multimodal_cfg" in config else open_clip.CustomTextCLIP
    try:
        return model_class(**config)
    except Exception as error:  # bad config values, or a Hugging Face text tower whose config is not cached
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise EncoderError(f"cannot build the open_clip model from its config ({type(error).__name__}: "
                           f"{first_line})") from error


def _drop_image_tower(model) -> None:
    """Free the image tower: only text is encoded here."""
    import torch

    if isinstance(getattr(model, "visual", None), torch.nn.Module):
        model.visual = torch.nn.Identity()


def _tokenizer(name: str, config: dict, context_length: int):
    """open_clip's tokenizer for the model: by name where open_clip knows it, else from the config."""
    import open_clip

    try:
        if name:
            return open_clip.get_tokenizer(name, context_length=context_length)
        text_cfg = config.get("text_cfg", {})
        kwargs = dict(text_cfg.get("tokenizer_kwargs") or {})
        if text_cfg.get("hf_tokenizer_name"):
            from open_clip.tokenizer import HFTokenizer

            return HFTokenizer(text_cfg["hf_tokenizer_name"], context_length=context_length,
                               tokenizer_mode=text_cfg.get("tokenizer_mode"), **kwargs)
        return open_clip.SimpleTokenizer(context_length=context_length, **kwargs)
    except Exception as error:  # HF tokenizers may need a download too
        raise EncoderError(f"the tokenizer of {name} is not available offline ({type(error).__name__}); "
                           f"download it where a network exists") from error


def _output_width(model, tokenizer, device: str) -> int:
    """Width of the text embedding (the projection's output)."""
    import torch

    tower = getattr(model, "text", model)
    projection = getattr(tower, "text_projection", None)
    if isinstance(projection, torch.nn.Linear):
        return int(projection.out_features)
    if isinstance(projection, torch.Tensor):
        return int(projection.shape[1])
    with torch.inference_mode():  # towers without a readable projection: ask them
        return int(model.encode_text(tokenizer(["a"]).to(device)).shape[-1])


def _logit_scale(model) -> float | None:
    scale = getattr(model, "logit_scale", None)
    if scale is None:
        return None
    return float(scale.detach().float().exp().reshape(-1)[0])
