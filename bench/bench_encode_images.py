"""Benchmark: capgeo's image encoding against open_clip's own ``encode_image`` loop.

Same random-weight open_clip model (no downloads; saved as a checkpoint with its config
beside it), same generated JPEG images in a COCO layout, same batch size, same device:

    python bench/bench_encode_images.py                      # ViT-B-32, 256 images of 640 x 480
    python bench/bench_encode_images.py --model ViT-B-16 --images 128
    python bench/bench_encode_images.py --images 64 --repeats 1   # quicker

The baseline is what an open_clip user writes: for each batch of image files,
``preprocess(Image.open(path).convert("RGB"))``, ``torch.stack``, ``model.encode_image``,
normalise. capgeo's side is the whole of :func:`capgeo.images.image_vectors` with the cache
off: locating the images from the captions, reading and hashing their bytes, decoding,
preprocessing (beside the encoding, in a thread) and encoding. Each side runs --repeats
times, alternating, and its best time counts. Printed: seconds, images/s, the speed ratio
(baseline time / capgeo time; goal >= 0.95) and the largest absolute difference between the
two sets of vectors (should be < 1e-5 in fp32).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOAL = 0.95


def make_model(name: str, folder: Path, seed: int):
    """A random-weight open_clip model saved as <folder>/<name>.pt with <name>.json beside it."""
    import open_clip
    import torch

    torch.manual_seed(seed)
    config = open_clip.get_model_config(name)
    model = open_clip.create_model(name, pretrained=None).eval()
    checkpoint = folder / "bench-model.pt"
    torch.save(model.state_dict(), checkpoint)
    (folder / "bench-model.json").write_text(json.dumps(config))
    preprocess = open_clip.image_transform(model.visual.image_size, is_train=False)
    return model, preprocess, checkpoint


def make_images(folder: Path, count: int, seed: int, size=(640, 480)) -> tuple[Path, list[Path]]:
    """A COCO layout (annotations/captions_val2017.json, val2017/<id>.jpg) of random-pixel JPEGs."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    (folder / "val2017").mkdir(parents=True)
    (folder / "annotations").mkdir()
    paths = []
    for index in range(count):
        # smooth noise compresses like a photo (a few tens of KB), pure noise would not
        small = rng.integers(0, 256, (size[1] // 8, size[0] // 8, 3), dtype=np.uint8)
        image = Image.fromarray(small).resize(size, Image.Resampling.BILINEAR)
        path = folder / "val2017" / f"{index:012d}.jpg"
        image.save(path, quality=90)
        paths.append(path)
    annotations = folder / "annotations" / "captions_val2017.json"
    annotations.write_text(json.dumps({
        "images": [{"id": index, "file_name": path.name} for index, path in enumerate(paths)],
        "annotations": [{"id": index, "image_id": index, "caption": f"caption {index}"} for index in range(count)]}))
    return annotations, paths


def run_baseline(model, preprocess, paths: list[Path], batch_size: int, device: str):
    import torch
    from PIL import Image

    chunks = []
    with torch.inference_mode():
        for start in range(0, len(paths), batch_size):
            pixels = torch.stack([preprocess(Image.open(path).convert("RGB")) for path in paths[start:start + batch_size]])
            features = model.encode_image(pixels.to(device))
            chunks.append(torch.nn.functional.normalize(features.float(), dim=-1).cpu())
    return torch.cat(chunks).numpy()


def run_capgeo(captions, checkpoint: Path, device: str):
    from capgeo.images import image_vectors
    from capgeo.pipeline import EncodeOptions

    made = image_vectors(captions, EncodeOptions(encoder=str(checkpoint), device=device, use_cache=False),
                         progress=False)
    return made.vectors


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="ViT-B-32")
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import numpy as np

    from capgeo.captions import load_captions
    from capgeo.images.vectors import CHUNK_IMAGES

    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        model, preprocess, checkpoint = make_model(args.model, folder, args.seed)
        model = model.to(args.device)
        annotations, paths = make_images(folder / "coco", args.images, args.seed)
        captions = load_captions(annotations)
        run_capgeo(captions, checkpoint, args.device)  # builds the tower once (as the baseline's is built)
        run_baseline(model, preprocess, paths[:8], CHUNK_IMAGES, args.device)  # and warms the baseline alike
        times = {"open_clip": [], "capgeo": []}
        for _ in range(args.repeats):
            started = time.perf_counter()
            reference = run_baseline(model, preprocess, paths, CHUNK_IMAGES, args.device)
            times["open_clip"].append(time.perf_counter() - started)
            started = time.perf_counter()
            ours = run_capgeo(captions, checkpoint, args.device)
            times["capgeo"].append(time.perf_counter() - started)
    best = {side: min(values) for side, values in times.items()}
    for side, seconds in best.items():
        print(f"{side:>9}: {seconds:7.2f} s  {args.images / seconds:8.1f} images/s")
    ratio = best["open_clip"] / best["capgeo"]
    print(f"speed ratio (open_clip time / capgeo time): {ratio:.3f}  (goal >= {GOAL})")
    print(f"largest |difference| between the vectors: {float(np.abs(ours - reference).max()):.2e}")
    print(f"model {args.model} (random weights), {args.images} images of 640 x 480, batch {CHUNK_IMAGES}, "
          f"device {args.device}, best of {args.repeats}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
