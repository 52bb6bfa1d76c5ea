"""The image tower of an encoder spec, with the model's own preprocessing.

The pair analyses compare images with captions in the encoder's joint space, so the
images are encoded by the vision tower of the same weights as the text: an open_clip
model (``MODEL/PRETRAINED``, ``hf-hub:``, ``MODEL@checkpoint``, a checkpoint with its
config beside it, ``local-dir:``), or the visual tower of a Long-CLIP checkpoint. The
preprocessing is the one open_clip's ``create_model_and_transforms`` returns for the
same spec (``image_transform_v2`` of the model's preprocess config: size, mean and std,
interpolation and resize mode of the pretrained tag or hub config); Long-CLIP's is
OpenAI CLIP's.

Only the ``visual.`` weights are read (the checkpoint is memory-mapped), and only when
an image has to be encoded: the identity (:attr:`VisionEncoder.info`) comes from the
weight file's fingerprint, so a run served from the image cache builds no tower.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Callable

import numpy as np

from capgeo.encoders.base import EncoderInfo
from capgeo.errors import EncoderError

#: vision towers built in this process, by (fingerprint, device): loaded once however often asked
_BUILT: dict[tuple[str, str], tuple[object, object]] = {}
_BUILT_LOCK = threading.Lock()


class VisionEncoder:
    """An image tower and its preprocessing; ``encode`` takes RGB PIL images."""

    def __init__(self, info: EncoderInfo, build: Callable[[], tuple[object, object]], device: str | None):
        self.info = info
        self._build = build
        self._device = device
        self._model = None
        self._preprocess = None

    @property
    def device(self) -> str:
        if self._device is None:
            from capgeo.device import default_device

            self._device = default_device()
        return self._device

    def _built(self):
        if self._model is None:
            from capgeo.device import check_device

            check_device(self._device)
            key = (self.info.fingerprint, self.device)
            with _BUILT_LOCK:
                if key not in _BUILT:
                    model, preprocess = self._build()
                    _BUILT[key] = (model.eval().to(self.device), preprocess)
                self._model, self._preprocess = _BUILT[key]
        return self._model, self._preprocess

    @property
    def model(self):
        return self._built()[0]

    @property
    def preprocess(self):
        return self._built()[1]

    @property
    def built(self) -> bool:
        """Whether the tower has been built (a run served from the cache builds none)."""
        return self._model is not None

    def pixels(self, images) -> object:
        """The preprocessed batch of RGB PIL images, as a tensor on the CPU."""
        import torch

        preprocess = self.preprocess
        return torch.stack([preprocess(image) for image in images])

    def encode_pixels(self, pixels) -> np.ndarray:
        """Unit float32 rows of a preprocessed batch (what :meth:`pixels` makes)."""
        import torch

        model = self.model
        with torch.inference_mode():
            features = model(pixels.to(self.device))
            if isinstance(features, (tuple, list)):  # towers that also return their tokens
                features = features[0]
            features = torch.nn.functional.normalize(features.float(), dim=-1)
        return features.cpu().numpy().astype(np.float32, copy=False)

    def encode(self, images) -> np.ndarray:
        if not images:
            return np.zeros((0, self.info.width), dtype=np.float32)
        return self.encode_pixels(self.pixels(images))


def load_vision_encoder(spec: str | None, device: str | None = None, *, cache_dir=None) -> VisionEncoder | None:
    """The vision tower of ``spec``; None for a text-only encoder (the embedded default, vectors
    read from a file). EncoderError when the spec's weights hold no image tower."""
    from capgeo.encoders.registry import _is_checkpoint_file, spec_kind

    kind, argument = spec_kind(spec)
    if kind not in ("open_clip", "longclip"):
        return None
    if kind == "open_clip" and _is_checkpoint_file(argument):
        from capgeo.encoders.openclip import is_longclip_file

        if is_longclip_file(argument, cache_dir):
            kind = "longclip"
    if kind == "longclip":
        return _longclip_vision(argument, device, cache_dir)
    return _open_clip_vision(argument, device, cache_dir)


def _identity(weights_sha256: str, **build) -> str:
    return hashlib.sha256(json.dumps({"weights": weights_sha256, "tower": "visual", **build}, sort_keys=True,
                                     default=str).encode()).hexdigest()


# -- open_clip ----------------------------------------------------------------------------------------

def _open_clip_vision(spec: str, device, cache_dir) -> VisionEncoder:
    from capgeo.encoders.openclip import _resolve
    from capgeo.encoders.weight_memo import check_unchanged, version_of, weight_fingerprint

    spec = spec.strip()
    config, weights, quick_gelu, name, _ = _resolve(spec)
    preprocess_cfg = _preprocess_config(spec, config)
    version = version_of(weights)
    fingerprint = _identity(weight_fingerprint(weights, cache_dir), config={"embed_dim": config["embed_dim"],
                            "vision_cfg": config["vision_cfg"]}, quick_gelu=bool(quick_gelu or config.get("quick_gelu")),
                            preprocess=preprocess_cfg)

    def build():
        from capgeo.encoders.open_clip_import import import_open_clip, libraries_needed

        import_open_clip(libraries_needed(config))
        tower = _open_clip_tower(config, quick_gelu, weights, name)
        check_unchanged(weights, version)
        return tower, _transform(preprocess_cfg, tower)

    info = EncoderInfo(spec=spec, kind="open_clip-vision", name=name, width=int(config["embed_dim"]),
                       context_length=0, logit_scale=None, fingerprint=fingerprint)
    return VisionEncoder(info, build, device)


def _preprocess_config(spec: str, config: dict) -> dict:
    """open_clip's preprocess config for the spec, as create_model builds it (before the size,
    which is the tower's own): defaults, then the hub or folder config's, or the pretrained tag's."""
    from dataclasses import asdict

    from capgeo.encoders.openclip import _hf_file
    from capgeo.encoders.open_clip_import import import_open_clip, libraries_needed

    open_clip = import_open_clip(libraries_needed(config))
    from open_clip.transform import PreprocessCfg, merge_preprocess_dict

    cfg = asdict(PreprocessCfg())
    lowered = spec.lower()
    extra: dict = {}
    if lowered.startswith(("hf-hub:", "local-dir:")):
        rest = spec.split(":", 1)[1]
        file = (Path(_hf_file(rest, "open_clip_config.json")) if lowered.startswith("hf-hub:")
                else Path(rest).expanduser() / "open_clip_config.json")
        try:
            extra = json.loads(file.read_text(encoding="utf-8")).get("preprocess_cfg", {}) or {}
        except (OSError, ValueError, AttributeError):
            extra = {}
    elif "/" in spec and "@" not in spec and Path(spec).suffix.lower() not in (".pt", ".pth", ".bin", ".safetensors"):
        model_name, _, tag = spec.partition("/")
        extra = open_clip.get_pretrained_cfg(model_name, tag) or {}
    cfg = merge_preprocess_dict(cfg, extra)
    vision = config.get("vision_cfg", {})
    size = vision.get("image_size", 224)
    cfg["size"] = tuple(size) if isinstance(size, (list, tuple)) else size
    return cfg


def _transform(preprocess_cfg: dict, tower):
    from open_clip.transform import PreprocessCfg, image_transform_v2

    cfg = dict(preprocess_cfg)
    size = getattr(tower, "image_size", None)
    if size is not None:
        cfg["size"] = size
    return image_transform_v2(PreprocessCfg(**cfg), is_train=False)


def _open_clip_tower(config: dict, quick_gelu: bool, weights: Path, name: str):
    """open_clip's image tower of the model config, holding the checkpoint's ``visual.`` weights."""
    from open_clip.model import CLIPVisionCfg, _build_vision_tower

    from capgeo.encoders.checkpoint import read_state_dict, state_dict_mismatch
    from capgeo.encoders.openclip import allocate_uninitialised

    vision_cfg = dict(config["vision_cfg"])
    if "timm_model_name" in vision_cfg:
        vision_cfg["timm_model_pretrained"] = False  # every weight comes from the checkpoint
    quick = bool(quick_gelu or config.get("quick_gelu", False))

    def make():
        return _build_vision_tower(config["embed_dim"], CLIPVisionCfg(**vision_cfg) if isinstance(vision_cfg, dict)
                                   else vision_cfg, quick_gelu=quick)

    state = {key[len("visual."):]: value for key, value in
             read_state_dict(weights, keep=lambda key: key.startswith("visual.")).items()}
    if not state:
        raise EncoderError(f"{weights}: holds no image tower (no visual.* weights); the pair analyses need a "
                           "checkpoint with both towers, or --image-embeddings FILE")
    try:
        tower = allocate_uninitialised(make) or make()
    except EncoderError:
        raise
    except Exception as error:
        raise EncoderError(f"cannot build the image tower of {name}: {type(error).__name__}: {error}") from error
    try:
        tower.load_state_dict({key: value.float() if value.is_floating_point() else value
                               for key, value in state.items()}, strict=True)
    except (RuntimeError, KeyError, ValueError) as error:
        raise EncoderError(f"checkpoint {weights} does not fit the image tower of {name}: "
                           f"{state_dict_mismatch(error)}") from error
    return tower


# -- Long-CLIP ----------------------------------------------------------------------------------------

def _longclip_vision(spec: str, device, cache_dir) -> VisionEncoder:
    from capgeo.encoders.longclip import _resolve
    from capgeo.encoders.weight_memo import check_unchanged, record_of, version_of, weight_facts, weight_fingerprint

    path, name = _resolve(spec.strip())
    version = version_of(path)
    facts = weight_facts(path, "longclip_vision", lambda: _openai_vision_facts(path), cache_dir,
                         valid=record_of(embed_dim=int, width=int, layers=int, patch_size=int, image_size=int))
    fingerprint = _identity(weight_fingerprint(path, cache_dir), longclip=facts)

    def build():
        import_open_clip_plain()
        tower = _openai_vision_tower(path, facts)
        check_unchanged(path, version)
        from open_clip.transform import image_transform

        return tower, image_transform(facts["image_size"], is_train=False)

    info = EncoderInfo(spec=spec.strip(), kind="longclip-vision", name=(name or "Long-CLIP") + " image tower",
                       width=facts["embed_dim"], context_length=0, logit_scale=None, fingerprint=fingerprint)
    return VisionEncoder(info, build, device)


def import_open_clip_plain():
    from capgeo.encoders.open_clip_import import import_open_clip

    return import_open_clip(())


def _openai_vision_facts(path: Path) -> dict:
    """An OpenAI-layout ViT image tower's shape, read from the key shapes alone (as open_clip's
    build_model_from_openai_state_dict infers it)."""
    from capgeo.encoders.checkpoint import key_shapes

    shapes = key_shapes(path)
    if "visual.conv1.weight" not in shapes or "visual.proj" not in shapes:
        raise EncoderError(f"{path}: holds no ViT image tower (no visual.conv1.weight / visual.proj); the pair "
                           "analyses need a checkpoint with both towers, or --image-embeddings FILE")
    width, _, patch, _ = shapes["visual.conv1.weight"]
    layers = len({key.split(".")[3] for key in shapes if key.startswith("visual.transformer.resblocks.")})
    grid = round((shapes["visual.positional_embedding"][0] - 1) ** 0.5)
    return {"embed_dim": int(shapes["visual.proj"][1]), "width": int(width), "layers": layers,
            "patch_size": int(patch), "image_size": int(patch * grid)}


def _openai_vision_tower(path: Path, facts: dict):
    from open_clip.model import CLIPVisionCfg, _build_vision_tower

    from capgeo.encoders.checkpoint import read_state_dict, state_dict_mismatch
    from capgeo.encoders.openclip import allocate_uninitialised

    cfg = CLIPVisionCfg(layers=facts["layers"], width=facts["width"], patch_size=facts["patch_size"],
                        image_size=facts["image_size"], head_width=64)

    def make():
        return _build_vision_tower(facts["embed_dim"], cfg, quick_gelu=True)  # OpenAI CLIP's activation

    tower = allocate_uninitialised(make) or make()
    state = {key[len("visual."):]: value.float() for key, value in
             read_state_dict(path, keep=lambda key: key.startswith("visual.")).items()}
    try:
        tower.load_state_dict(state, strict=True)
    except RuntimeError as error:
        raise EncoderError(f"{path}: the Long-CLIP image weights do not fit a {facts['layers']}-layer, "
                           f"{facts['width']}-wide ViT: {state_dict_mismatch(error)}") from error
    return tower
