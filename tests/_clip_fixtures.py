"""Tiny random-weight open_clip models and real captions for the open_clip / Long-CLIP / trimmed-forward tests.

The models have the real vocabulary (49,408 BPE tokens, so real captions
tokenise as they would for ViT-B-32) but are 64-128 wide and 2 layers deep,
so a test builds, saves and runs one in well under a second.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np

import torch

# these models are tiny: one thread is fastest, and on a shared 2-core CI machine
# more threads mostly wait for each other
torch.set_num_threads(1)


def tiny_config(context_length: int = 77, *, quick_gelu: bool = True, **text_overrides) -> dict:
    text_cfg = {"context_length": context_length, "vocab_size": 49408, "width": 64, "heads": 2, "layers": 2}
    text_cfg.update(text_overrides)
    return {
        "embed_dim": 32,
        "quick_gelu": quick_gelu,
        "vision_cfg": {"image_size": 32, "layers": 1, "width": 64, "patch_size": 16, "head_width": 32},
        "text_cfg": text_cfg,
    }


def tiny_clip(config: dict, seed: int = 0):
    """A random-weight open_clip model built from ``config`` (CLIP, or CustomTextCLIP when custom_text)."""
    import open_clip
    import torch

    config = copy.deepcopy(config)
    torch.manual_seed(seed)
    model_class = open_clip.CustomTextCLIP if config.pop("custom_text", False) else open_clip.CLIP
    model = model_class(**config).eval()
    # open_clip initialises the positional table with std 0.01; make position matter so a
    # wrong table (or a wrong slice of it) shows up clearly in the embeddings
    with torch.no_grad():
        tower = getattr(model, "text", model)
        tower.positional_embedding.normal_(std=0.5)
    return model


def reference_embeddings(model, token_ids) -> np.ndarray:
    """open_clip's own full-length encode_text, L2-normalised."""
    import torch

    with torch.no_grad():
        return torch.nn.functional.normalize(model.encode_text(token_ids), dim=-1).numpy()


def coco_captions(shared_data: Path, images: int = 8) -> list[str]:
    records = json.loads((shared_data / "coco-karpathy-test" / "mscoco_test.json").read_text(encoding="utf-8"))
    return [caption for record in records[:images] for caption in record["captions"]]


def docci_captions(shared_data: Path, count: int = 24) -> list[str]:
    records = json.loads((shared_data / "docci-test" / "docci_test.json").read_text(encoding="utf-8"))
    return [record["caption"] for record in records[:count]]


def vision_checkpoint(folder: Path, seed: int = 0, *, name: str = "tiny-vision", config: dict | None = None):
    """(checkpoint path, model): a random-weight tiny CLIP saved as ``<name>.pt`` with its config
    beside it as ``<name>.json``, the form ``--encoder /path/<name>.pt`` reads (both towers)."""
    config = config or tiny_config()
    model = tiny_clip(config, seed=seed)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.pt"
    torch.save(model.state_dict(), path)
    (folder / f"{name}.json").write_text(json.dumps(config), encoding="utf-8")
    return path, model


def reference_image_embeddings(model, preprocess, images) -> np.ndarray:
    """open_clip's own encode_image over its own preprocess of each PIL image, L2-normalised."""
    with torch.no_grad():
        pixels = torch.stack([preprocess(image) for image in images])
        return torch.nn.functional.normalize(model.encode_image(pixels), dim=-1).numpy()


def random_images(count: int, seed: int = 0, size: tuple[int, int] = (48, 40)) -> list:
    """RGB PIL images of random pixels, each a different size near ``size`` (width, height)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (size[1] + index % 5, size[0] + index % 7, 3), dtype=np.uint8))
            for index in range(count)]


def jpeg_bytes(image, quality: int = 95) -> bytes:
    import io

    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()
