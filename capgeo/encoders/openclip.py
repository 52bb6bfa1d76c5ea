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
from contextlib import nullcontext
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from capgeo import _json
from capgeo.encoders.base import EncoderInfo, missing_file_reason
from capgeo.encoders.checkpoint import first_line, key_shapes, read_state_dict, state_dict_mismatch
from capgeo.encoders.open_clip_import import import_open_clip, libraries_needed
from capgeo.encoders.registry import model_at_checkpoint
from capgeo.encoders.weight_memo import check_unchanged, record_of, version_of, weight_facts, weight_fingerprint
from capgeo.errors import EncoderError

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pth", ".pt")
_MEMO_LIMIT = 200_000  # token-id rows remembered between token_counts() and encode()


class OpenClipTextEncoder:
    """The text tower of an open_clip model (or a bare TextTransformer) with its tokenizer.

    ``encode`` runs the length-trimmed forward of :mod:`capgeo.encoders.trimmed`
    when the tower allows it (exact), otherwise open_clip's ``encode_text``.
    ``last_stats`` tells which path the last call took.
    """

    def __init__(self, model, tokenizer, info: EncoderInfo, device: str | None, *,
                 build_model: Callable[[], object] | None = None,
                 build_tokenizer: Callable[[], object] | None = None):
        # model and tokenizer may be None with a builder: a run whose vectors all come from the
        # cache then never builds them (see load_open_clip_encoder(lazy=True))
        self._model = model
        self._tokenizer = tokenizer
        self._build_model = build_model
        self._build_tokenizer = build_tokenizer
        self._tower = None
        self._device = device
        self.info = info
        self.last_stats = None
        self._memo: dict[str, np.ndarray] = {}
        self._bpe = None

    @property
    def device(self) -> str:
        if self._device is None:
            from capgeo.device import default_device

            self._device = default_device()
        return self._device

    @property
    def model(self):
        if self._model is None:
            from capgeo.device import check_device

            check_device(self._device)
            self._model = self._build_model()
        return self._model

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            self._tokenizer = self._build_tokenizer()
        return self._tokenizer

    @property
    def tower(self):
        if self._tower is None:
            from capgeo.encoders.trimmed import text_tower

            self._tower = text_tower(self.model)
        return self._tower

    # -- tokens ---------------------------------------------------------------------------------

    def _is_clip_bpe(self) -> bool:
        # the tokenizer first: its builder imports open_clip without the libraries this model does
        # not need (capgeo.encoders.open_clip_import); importing open_clip.tokenizer before it would
        # import open_clip whole, transformers included, when no first-run hash has imported it yet
        tokenizer = self.tokenizer
        from open_clip.tokenizer import SimpleTokenizer

        return isinstance(tokenizer, SimpleTokenizer) and tokenizer.reduction_fn is None

    def _full_ids(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Untruncated ids, start and end tokens included, exactly as open_clip's tokenizer builds them."""
        from capgeo.encoders.bpe import WordMemoBpe

        tokenizer = self.tokenizer
        if self._bpe is None:
            self._bpe = WordMemoBpe(tokenizer)
        rows = []
        for text in texts:
            row = self._memo.get(text)
            if row is None:
                row = np.asarray([tokenizer.sot_token_id, *self._bpe.encode(text), tokenizer.eot_token_id],
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

        max_tokens = self._checked_length(max_tokens)
        if len(texts) == 0:
            return np.zeros((0, self.info.width), dtype=np.float32)
        vectors, self.last_stats = encode_token_rows(
            self.tower, self._rows(texts, max_tokens), batch_size=max(1, int(batch_size)),
            device=self.device, progress=progress, trim=trim)
        return vectors

    @property
    def prefix_refusal(self) -> str:
        """Why :meth:`encode_lengths` cannot run for this tower ('' when it can, exactly)."""
        if not self._is_clip_bpe():
            return "its tokenizer is not open_clip's CLIP BPE, whose cut the reuse repeats"
        from capgeo.encoders.prefix import why_not_reusable

        return why_not_reusable(self.tower)

    def encode_lengths(self, texts: Sequence[str], lengths: Sequence[int], *, batch_size: int = 64,
                       progress: bool | None = None) -> dict[int, np.ndarray]:
        """``encode(texts, max_tokens=L)`` for every L of ``lengths``, from one forward of the
        whole captions (:mod:`capgeo.encoders.prefix`); an EncoderError where :attr:`prefix_refusal`
        says it would not be exact."""
        from capgeo.encoders.prefix import encode_prefix_lengths

        lengths = sorted({self._checked_length(length) for length in lengths})
        reason = self.prefix_refusal
        if reason:
            raise EncoderError(f"encoder {self.info.spec!r} cannot encode several lengths in one forward: {reason}")
        if len(texts) == 0:
            return {length: np.zeros((0, self.info.width), dtype=np.float32) for length in lengths}
        vectors, self.last_stats = encode_prefix_lengths(
            self.tower, self._rows(texts, self.info.context_length), lengths, eot_id=self.tokenizer.eot_token_id,
            batch_size=max(1, int(batch_size)), device=self.device, progress=progress)
        return vectors

    def _checked_length(self, max_tokens: int | None) -> int:
        context = self.info.context_length
        max_tokens = context if max_tokens is None else int(max_tokens)
        if not 2 <= max_tokens <= context:
            raise EncoderError(f"max_tokens={max_tokens} is outside 2..{context}, "
                               f"the context length of {self.info.name}")
        return max_tokens


def _other_tokenizer_counts(tokenizer, texts: Sequence[str]) -> np.ndarray:
    """Untruncated counts for Hugging Face / SentencePiece tokenizers (special tokens included)."""
    inner = getattr(tokenizer, "tokenizer", None)
    clean = getattr(tokenizer, "clean_fn", lambda text: text)
    if inner is None:
        raise EncoderError(f"cannot count tokens with {type(tokenizer).__name__}")
    # verbose=False: counting captions longer than the model's limit is the point, not a mistake to warn of
    ids = inner([clean(text) for text in texts], truncation=False, verbose=False)["input_ids"]
    return np.fromiter((len(row) for row in ids), dtype=np.int64, count=len(texts))


# -- loading ----------------------------------------------------------------------------------------

def load_open_clip_encoder(spec: str, device: str | None = None, *, cache_dir=None,
                           lazy: bool = False) -> OpenClipTextEncoder:
    """An open_clip text encoder for ``spec`` (forms in the module docstring), on ``device``
    (default cuda, then mps, then cpu).

    The encoder's identity comes from facts about the weight file remembered in
    ``cache_dir`` (see :mod:`capgeo.encoders.weight_memo`), so with ``lazy`` the model
    and tokenizer are built only when first used: a run served from the cache builds
    neither. Only the text tower is built and only its weights are read.
    """
    spec = spec.strip()
    config, weights, quick_gelu, name, tokenizer_name = _resolve(spec)
    version = version_of(weights)
    facts = weight_facts(weights, "open_clip_text", lambda: _text_facts(weights), cache_dir, valid=TEXT_FACTS)
    if facts["longclip"]:
        raise EncoderError(f"{weights} is a Long-CLIP checkpoint (it has positional_embedding_res), which no "
                           f"open_clip MODEL config fits; pass the file itself (--encoder {weights}) or "
                           f"longclip-B / longclip-L")
    text_cfg = config.setdefault("text_cfg", {})
    # the positional table's rows: one per token, plus one for a class token appended after the
    # text (CoCa's embed_cls), which is not part of the context the tokenizer fills
    rows = facts["context_length"]
    weights_context = None if rows is None else rows - 1 if text_cfg.get("embed_cls") else rows
    if weights_context is not None and weights_context != text_cfg.get("context_length", 77):
        # never let open_clip interpolate the checkpoint's positional table to the config's length
        text_cfg["context_length"] = weights_context
    context_length = int(text_cfg.get("context_length", 77))
    # a file hashed for the first time is a first run, which will build the model: import its code meanwhile
    weights_sha256 = weight_fingerprint(weights, cache_dir, meanwhile=lambda: import_open_clip(libraries_needed(config)))
    fingerprint = _model_fingerprint(weights_sha256, config, quick_gelu, tokenizer_name)

    def build_model():
        from capgeo.device import default_device

        from capgeo.encoders.hub import cache_only_when_unreachable

        import_open_clip(libraries_needed(config))
        # an HF text tower's config may be fetched from the hub; other towers ask nothing of it
        hub = cache_only_when_unreachable() if config.get("text_cfg", {}).get("hf_model_name") else nullcontext()
        with hub:
            model = _load_text_model(config, quick_gelu, weights, name)
        check_unchanged(weights, version)  # the weights are copied into the model by now
        return model.eval().to(device or default_device())

    def build_tokenizer():
        import_open_clip(libraries_needed(config))
        return _tokenizer(tokenizer_name, config, context_length)

    encoder = OpenClipTextEncoder(None, None, None, device, build_model=build_model, build_tokenizer=build_tokenizer)
    width, logit_scale = facts["width"], facts["logit_scale"]
    if not lazy or width is None:  # towers whose width the weights do not show: ask the model
        model = encoder.model
        width = _output_width(model, encoder.tokenizer, encoder.device)
        logit_scale = _logit_scale(model)
        # not model.context_length: a Hugging Face tower reports its position table there (512, 514, or 0
        # for T5), while it is trained and tokenised at text_cfg's context_length, as open_clip's
        # get_tokenizer does; the tokenizer above was built with the value kept
    encoder.info = EncoderInfo(spec=spec, kind="open_clip", name=name, width=int(width),
                               context_length=context_length, logit_scale=logit_scale, fingerprint=fingerprint)
    return encoder


def is_longclip_file(path: str | Path, cache_dir=None) -> bool:
    """Does the weight file ``path`` hold a Long-CLIP state dict (two positional tables), whatever
    it is called? (The registry, which has found it to be a bare checkpoint file, then sends it to
    the Long-CLIP loader.) The fact is remembered with the file's others."""
    path = Path(path).expanduser()
    return bool(weight_facts(path, "open_clip_text", lambda: _text_facts(path), cache_dir, valid=TEXT_FACTS)["longclip"])


def _model_fingerprint(weights_sha256: str, config: dict, quick_gelu: bool, tokenizer_name: str) -> str:
    """The weights' sha256 together with everything else that changes the output: the same
    file built with another activation or config, or tokenised differently, is another encoder."""
    if tokenizer_name.startswith("local-dir:"):
        # the folder's config (hashed here) says how it tokenises; how its path was spelled does not
        tokenizer_name = "local-dir:"
    build = json.dumps({"weights": weights_sha256, "config": config, "quick_gelu": bool(quick_gelu),
                        "tokenizer": tokenizer_name}, sort_keys=True, default=str)
    return hashlib.sha256(build.encode()).hexdigest()


#: the shape of what _text_facts returns, which a remembered value must have to be used
TEXT_FACTS = record_of(width=(int, None), context_length=(int, None), logit_scale=(float, int, None), longclip=bool)


def _text_facts(weights: Path) -> dict:
    """What the encoder's identity needs from the weights, read without building a model:
    text embedding width, positional rows, exp(logit_scale), and whether it is Long-CLIP."""
    shapes = key_shapes(weights)
    width = None
    for key, column in (("text_projection", 1), ("text.text_projection", 1), ("text.text_projection.weight", 0)):
        if len(shapes.get(key, ())) == 2:
            width = int(shapes[key][column])
            break
    context = None
    for key in ("positional_embedding", "text.positional_embedding"):
        if len(shapes.get(key, ())) == 2:
            context = int(shapes[key][0])
            break
    logit_scale = None
    if "logit_scale" in shapes:
        scale = read_state_dict(weights, keep=lambda key: key == "logit_scale")["logit_scale"]
        logit_scale = float(scale.detach().float().exp().reshape(-1)[0])
    return {"width": width, "context_length": context, "logit_scale": logit_scale,
            "longclip": "positional_embedding_res" in shapes}


def _load_text_model(config: dict, quick_gelu: bool, weights: Path, name: str):
    """The open_clip model with its image tower replaced by Identity, holding the checkpoint's text
    weights. The image tower's weights are never read (the checkpoint is memory-mapped) and, where
    the model allows it, its modules are never allocated either (built on the meta device)."""
    import torch
    from open_clip.convert import convert_state_dict
    from open_clip.model import convert_to_custom_text_state_dict, resize_text_pos_embed

    def not_image(key: str) -> bool:
        return not key.startswith("visual.")

    model = _text_model_skeleton(config, quick_gelu)
    state = convert_state_dict(model, read_state_dict(weights, keep=not_image))
    # the same adjustments open_clip's load_checkpoint makes, minus the image tower's
    if "positional_embedding" in state and not hasattr(model, "positional_embedding"):
        state = convert_to_custom_text_state_dict(state)
    for key in ("logit_scale", "logit_bias"):
        target = getattr(model, key, None)
        if key in state and target is not None and target.ndim != state[key].ndim:
            state[key] = state[key].reshape(target.shape)
    if "logit_bias" not in state and getattr(model, "logit_bias", None) is not None:
        state["logit_bias"] = torch.zeros_like(state["logit_scale"])
    state.pop("text.transformer.embeddings.position_ids", None)
    table, target = state.get("positional_embedding"), getattr(model, "positional_embedding", None)
    if table is not None and target is not None and table.shape[-1] != target.shape[-1]:
        # (open_clip's own check says only "text pos_embed width changed!")
        raise EncoderError(f"checkpoint {weights} does not fit model {name}: its text tower is {table.shape[-1]} "
                           f"wide, the model's is {target.shape[-1]}")
    try:
        resize_text_pos_embed(state, model)
        model.load_state_dict({key: value for key, value in state.items() if not_image(key)}, strict=True)
    except (RuntimeError, KeyError, ValueError, AssertionError) as error:  # open_clip asserts on some shapes
        raise EncoderError(f"checkpoint {weights} does not fit model {name}: {state_dict_mismatch(error)}") from error
    return model


def _text_model_skeleton(config: dict, quick_gelu: bool):
    """The model without its image tower, parameters allocated but not yet loaded."""
    model = allocate_uninitialised(lambda: _build_model(config, quick_gelu), _drop_image_tower)
    if model is None:
        model = _build_model(config, quick_gelu)
        _drop_image_tower(model)
    return model


def allocate_uninitialised(build: Callable[[], object], trim: Callable[[object], None] = lambda module: None):
    """``build()`` on the meta device, ``trim`` applied (e.g. the image tower dropped), then memory
    allocated on the CPU for what is left, without the random initialisation (seconds for a large
    tower) that the checkpoint overwrites anyway. Every parameter must then be loaded (strict).
    None when the module cannot be built this way."""
    import torch

    try:
        with torch.device("meta"):
            module = build()
    except EncoderError:
        raise
    except Exception:  # a tower that cannot be built on the meta device
        return None
    trim(module)
    if not _only_causal_masks_unsaved(module):
        return None
    module.to_empty(device="cpu")
    # non-persistent buffers are not in any checkpoint: rebuild them as open_clip does
    for sub in module.modules():
        mask = sub._buffers.get("attn_mask")
        if mask is not None:
            size = int(mask.shape[0])
            sub._buffers["attn_mask"] = torch.full((size, size), float("-inf")).triu_(1)
    return module


def _only_causal_masks_unsaved(module) -> bool:
    """Whether every buffer that checkpoints do not hold is a causal mask that can be rebuilt;
    other towers (Hugging Face text models) are built the ordinary way."""
    for sub in module.modules():
        for buffer_name in sub._non_persistent_buffers_set:
            buffer = sub._buffers.get(buffer_name)
            if buffer_name != "attn_mask" or buffer is None or buffer.ndim != 2:
                return False
    return True


def _resolve(spec: str) -> tuple[dict, Path, bool, str, str]:
    """(model config, local weights file, quick_gelu, display name, name for get_tokenizer)."""
    prefix = spec.split(":", 1)[0].lower() + ":" if ":" in spec else ""
    if prefix in ("hf-hub:", "local-dir:"):
        spec = prefix + spec.split(":", 1)[1]          # open_clip expects the prefixes in lower case
    if spec.startswith("hf-hub:"):
        repo = spec[len("hf-hub:"):]
        hub = (repo, ("open_clip_config.json", "open_clip_model.safetensors"), "local-dir:/path/to/the-folder")
        config_file = _download(lambda: _hf_file(repo, "open_clip_config.json"), f"config of {spec}", spec, hub=hub)
        weights = _download(lambda: _hf_file(repo, None), f"weights of {spec}", spec, hub=hub)
        return _config_from_json(config_file), Path(weights), False, spec, spec
    if spec.startswith("local-dir:"):
        folder = Path(spec[len("local-dir:"):]).expanduser()
        config_file = folder / "open_clip_config.json"
        if not config_file.is_file():
            raise EncoderError(f"{spec}: expected a folder with open_clip_config.json and a weights file")
        config, nested = _read_config(config_file)
        weights = weights_in_folder(folder)
        if weights is None:
            raise EncoderError(f"{spec}: no weights file ({', '.join(WEIGHT_SUFFIXES)}) in {folder}")
        # open_clip's local-dir tokenizer wants the config nested under "model_cfg"; a flat one, which
        # capgeo builds the model from, is tokenised from that config (it failed as "not available offline")
        # the folder as found ("~" expanded): open_clip's tokenizer does not expand "local-dir:~/m" itself
        return config, weights, False, folder.name, f"local-dir:{folder}" if nested else ""
    at = model_at_checkpoint(spec)
    if at is not None:
        model_name, path = at
        if not str(path).strip():  # (Path("") is ".": "checkpoint file . not found")
            raise EncoderError(f"{spec}: names no checkpoint file after '@'; give MODEL@/path/to/checkpoint.pt")
        weights = Path(path).expanduser()
        if not weights.is_file():
            raise EncoderError(f"{spec}: checkpoint file {weights} {missing_file_reason(weights)}")
        if model_name.lower().endswith(".json"):  # as paths.encoder_input_files reads it
            config_file = Path(model_name).expanduser()
            if not config_file.is_file():
                raise EncoderError(f"{spec}: model config {config_file} not found")
            return _config_from_json(config_file), weights, False, config_file.stem, ""
        return _builtin_config(model_name, spec), weights, False, model_name, model_name
    path = Path(spec).expanduser()
    if path.suffix.lower() in WEIGHT_SUFFIXES:
        if not path.is_file():
            raise EncoderError(f"checkpoint file {path} {missing_file_reason(path)}")
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
    open_clip = import_open_clip(libraries_needed(config))
    pretrained_cfg = open_clip.get_pretrained_cfg(model_name, tag)
    if not pretrained_cfg:
        tags = ", ".join(open_clip.list_pretrained_tags_by_model(model_name)) or "none"
        raise EncoderError(f"{spec}: open_clip has no pretrained tag {tag!r} for {model_name} (tags: {tags})")
    # tags record whether the weights were trained with QuickGELU (OpenAI's were); build to match
    quick_gelu = bool(pretrained_cfg.get("quick_gelu", False))
    source = pretrained_cfg.get("hf_hub") or pretrained_cfg.get("url") or ""
    local_name = model_name if not quick_gelu or model_name.endswith("-quickgelu") else f"{model_name}-quickgelu"
    hub = None
    if pretrained_cfg.get("hf_hub"):
        # "org/repo/file", or "org/repo/" for open_clip's default weights name (its safetensors first)
        org, name, *rest = pretrained_cfg["hf_hub"].split("/")
        filename = "/".join(rest) or "open_clip_model.safetensors"
        hub = (f"{org}/{name}", (filename,), f"{local_name}@/path/to/{filename}")
    weights = _download(lambda: open_clip.download_pretrained(pretrained_cfg),
                        f"weights of {spec} ({source.rstrip('/')})" if source else f"weights of {spec}", spec,
                        model_name=local_name, hub=hub)
    return config, Path(weights), quick_gelu, model_name, model_name


def _builtin_config(model_name: str, spec: str) -> dict:
    config = _packaged_config(model_name)
    if config is None:
        import open_clip

        config = open_clip.get_model_config(model_name)
    if config is None:
        raise EncoderError(f"{spec}: open_clip has no model {model_name!r} "
                           f"(see open_clip.list_models(), or pass a config file: /path/cfg.json@checkpoint)")
    return config


def _packaged_config(model_name: str) -> dict | None:
    """open_clip's own config file for a model name, read without importing open_clip (seconds)."""
    import importlib.util

    found = importlib.util.find_spec("open_clip")
    for folder in (found.submodule_search_locations or []) if found else []:
        path = Path(folder) / "model_configs" / f"{model_name}.json"
        try:
            config = _json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(config, dict) and all(key in config for key in ("embed_dim", "vision_cfg", "text_cfg")):
            return config
    return None


def _config_from_json(path: Path) -> dict:
    return _read_config(path)[0]


def _read_config(path: Path) -> tuple[dict, bool]:
    """(the model config, whether the file nests it under "model_cfg" as open_clip's hub layout does)."""
    try:
        data = _json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise EncoderError(f"{path}: not a readable JSON model config ({error})") from error
    nested = isinstance(data, dict) and "model_cfg" in data
    config = data.get("model_cfg", data) if isinstance(data, dict) else None
    if not isinstance(config, dict) or not all(key in config for key in ("embed_dim", "vision_cfg", "text_cfg")):
        raise EncoderError(f"{path}: expected an open_clip model config with embed_dim, vision_cfg and text_cfg")
    return config, nested


def _hf_file(repo: str, filename: str | None) -> str:
    from open_clip.pretrained import download_pretrained_from_hf

    return download_pretrained_from_hf(repo, filename=filename)


def _download(fetch, what: str, spec: str, model_name: str | None = None,
              hub: tuple[str, tuple[str, ...], str] | None = None) -> str:
    """Run a download; a failure (no network, HF_HUB_OFFLINE=1, not in the cache) becomes a one-line EncoderError.
    ``hub``: (repository, files, the spec that reads a copied file) for the command that fetches them."""
    from capgeo.encoders.hub import cache_only_when_unreachable, fetch_advice, unavailable_reason

    online = True
    try:
        with cache_only_when_unreachable() as online:
            target = fetch()
    except Exception as error:  # huggingface_hub / urllib raise many kinds; all mean "not available here"
        offline = "" if online else f" ({unavailable_reason()})"
        example = f"{model_name or 'MODEL'}@/path/to/checkpoint.pt"
        if hub is not None:
            raise EncoderError(f"{what}: not in the local cache and could not be downloaded{offline}: "
                               f"{type(error).__name__}; {fetch_advice(spec, *hub)}") from error
        raise EncoderError(
            f"{what}: not in the local cache and could not be downloaded{offline}: "
            f"{type(error).__name__}. Download them where a network exists, or pass a local file: "
            f"--encoder {example} (or local-dir:/folder with open_clip_config.json and the weights)") from error
    if not target or not Path(target).is_file():
        raise EncoderError(f"{what} for {spec!r} could not be found")
    return target


#: open_clip's local-dir loader (factory._find_checkpoint_in_dir, open_clip 3.3): these names first,
#: in this order; else .safetensors before the others, then by name. Followed here rather than asked,
#: because asking imports open_clip (5-6 s), which a run served from the cache must not pay.
_OPEN_CLIP_PREFERRED = ("open_clip_model.safetensors", "open_clip_pytorch_model.safetensors",
                        "open_clip_pytorch_model.bin", "open_clip_pytorch_model.pth", "model.safetensors",
                        "pytorch_model.bin", "pytorch_model.pth", "model.pth")


def weights_in_folder(folder: Path) -> Path | None:
    """The weights file open_clip's local-dir loader would pick (or, where it would find none, the
    first file with a weights suffix it does not look for, such as .pt)."""
    entries = list(folder.iterdir())
    found = [path for path in entries if path.suffix in (".safetensors", ".bin", ".pth")]
    preferred = [path for path in found if path.name in _OPEN_CLIP_PREFERRED]
    if preferred:
        return min(preferred, key=lambda path: _OPEN_CLIP_PREFERRED.index(path.name))
    if found:
        return min(found, key=lambda path: (path.suffix != ".safetensors", path.name))
    candidates = sorted(p for p in entries if p.suffix.lower() in WEIGHT_SUFFIXES)
    return candidates[0] if candidates else None


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
        raise EncoderError(f"cannot build the open_clip model from its config ({type(error).__name__}: "
                           f"{first_line(error)})") from error


def _drop_image_tower(model) -> None:
    """Free the image tower: only text is encoded here."""
    import torch

    if isinstance(getattr(model, "visual", None), torch.nn.Module):
        model.visual = torch.nn.Identity()


def _tokenizer(name: str, config: dict, context_length: int):
    """open_clip's tokenizer for the model: by name where open_clip knows it, else from the config."""
    import open_clip

    from capgeo.encoders.hub import cache_only_when_unreachable

    text_cfg = config.get("text_cfg", {})
    # HF tokenizers may need a download: from the local cache at once when the hub cannot be reached,
    # instead of a minute of retries (CLIP's own BPE tokenizer needs nothing)
    may_download = bool(text_cfg.get("hf_tokenizer_name"))
    try:
        with cache_only_when_unreachable() if may_download else nullcontext():
            if name:
                return open_clip.get_tokenizer(name, context_length=context_length)
            kwargs = dict(text_cfg.get("tokenizer_kwargs") or {})
            if text_cfg.get("hf_tokenizer_name"):
                from open_clip.tokenizer import HFTokenizer

                return HFTokenizer(text_cfg["hf_tokenizer_name"], context_length=context_length,
                                   tokenizer_mode=text_cfg.get("tokenizer_mode"), **kwargs)
            return open_clip.SimpleTokenizer(context_length=context_length, **kwargs)
    except Exception as error:
        which = text_cfg.get("hf_tokenizer_name") or name or "this model"
        raise EncoderError(f"the tokenizer {which} is not available offline ({type(error).__name__}); "
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
