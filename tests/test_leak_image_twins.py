"""`capgeo leak TRAIN EVAL` finds image twins across the sets from the command line: identical bytes
under another file name (content hash) and near-identical images (image cosine >= --image-threshold),
from a random-weight two-tower checkpoint's own image tower and from files of image vectors; every
count equal to a numpy brute force over the same vectors and bytes."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from click.testing import CliRunner

from _clip_fixtures import jpeg_bytes, random_images, vision_checkpoint
from capgeo.captions import load_captions
from capgeo.cli import main
from capgeo.images import image_vectors
from capgeo.pipeline import LEAK_NEEDS_IMAGES, EncodeOptions

#: above every cosine between two unrelated random images under the random tower (they reach 0.99)
THRESHOLD = 0.999


def run(*args, cache=None):
    env = {"COLUMNS": "200", **({"CAPGEO_CACHE": str(cache)} if cache else {})}
    return CliRunner().invoke(main, [str(a) for a in args], env=env)


def coco_layout(root, numbers: list[int], images: list[bytes], first_caption: int = 0):
    """A COCO layout (annotations/captions_val2017.json, val2017/<number>.jpg), two captions per
    image, caption ids from ``first_caption`` on (so that two sets never share one)."""
    (root / "annotations").mkdir(parents=True)
    (root / "val2017").mkdir()
    for number, data in zip(numbers, images):
        (root / "val2017" / f"{number:012d}.jpg").write_bytes(data)
    annotations = [{"id": first_caption + k, "image_id": numbers[k % len(numbers)],
                    "caption": f"picture {numbers[k % len(numbers)]}, caption {k}"} for k in range(2 * len(numbers))]
    (root / "annotations" / "captions_val2017.json").write_text(json.dumps({
        "images": [{"id": number, "file_name": f"{number:012d}.jpg"} for number in numbers],
        "annotations": annotations}))
    return root / "annotations" / "captions_val2017.json"


def planted_sets(tmp_path):
    """TRAIN: 8 random images numbered 0-7. EVAL: 6 numbered 100-105, of which 100 holds TRAIN 2's
    bytes (an identical image under another name) and 101 TRAIN 5's pixels with one pixel changed
    (a near-identical image, other bytes)."""
    from PIL import Image

    pictures = random_images(14, seed=21)
    train_bytes = [jpeg_bytes(image) for image in pictures[:8]]
    changed = np.asarray(pictures[5]).copy()
    changed[0, 0] = 255 - changed[0, 0]
    eval_bytes = [train_bytes[2], jpeg_bytes(Image.fromarray(changed)), *map(jpeg_bytes, pictures[8:12])]
    train = coco_layout(tmp_path / "train", list(range(8)), train_bytes)
    evals = coco_layout(tmp_path / "eval", list(range(100, 106)), eval_bytes, first_caption=1000)
    return train, evals


def brute_force(train_path, eval_path, train_vectors, eval_vectors, threshold):
    """(eval images with a training image of identical bytes, eval images with one at cosine >= threshold)."""
    def digests(path):
        folder = path.parent.parent / "val2017"
        return [hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in load_captions(path).group_names]

    train_hashes = set(digests(train_path))
    exact = sum(digest in train_hashes for digest in digests(eval_path))
    cosine = np.asarray(eval_vectors, np.float64) @ np.asarray(train_vectors, np.float64).T
    return exact, int((cosine >= threshold).any(axis=1).sum()), cosine


def test_the_image_tower_finds_identical_and_near_identical_images(tmp_path):
    train, evals = planted_sets(tmp_path)
    checkpoint, _ = vision_checkpoint(tmp_path / "model", seed=21, name="tiny-leak-a")
    result = run("leak", train, evals, "--encoder", checkpoint, "--image-threshold", THRESHOLD, "--json",
                 tmp_path / "leak.json", cache=tmp_path / "cache")
    assert result.exit_code == 0, result.output
    images = json.loads((tmp_path / "leak.json").read_text())["evals"][0]["images"]

    options = EncodeOptions(encoder=str(checkpoint), device="cpu", use_cache=False)
    train_vectors = image_vectors(load_captions(train), options, progress=False).vectors
    eval_vectors = image_vectors(load_captions(evals), options, progress=False).vectors
    exact, near, cosine = brute_force(train, evals, train_vectors, eval_vectors, THRESHOLD)
    assert (images["n_hash_matches"], images["n_near_images"]) == (exact, near) == (1, 2)
    assert images["hash_matches"] == [{"eval": "000000000100.jpg", "train": "000000000002.jpg"}]
    assert {(pair["eval"], pair["train"]) for pair in images["near_matches"]} == {
        ("000000000100.jpg", "000000000002.jpg"), ("000000000101.jpg", "000000000005.jpg")}
    assert images["near_matches"][0]["cosine"] == pytest.approx(cosine.max(), abs=1e-6)
    assert images["ways"] == ["file name", "content hash", "image vectors"] and images["n_name_matches"] == 0
    assert images["n_shared"] == 2 and images["threshold"] == THRESHOLD
    assert images["vectors"]["train"].endswith("(image tower)")
    # the terminal's line, and at a threshold the unrelated images pass too: still the brute force's count
    lower = float(np.sort(cosine.max(axis=1))[-3]) - 1e-6  # a third eval image is then a near twin
    shown = run("leak", train, evals, "--encoder", checkpoint, "--image-threshold", lower, cache=tmp_path / "cache")
    assert shown.exit_code == 0, shown.output
    assert (f"shared images: 3 of 6 eval images are training images (0 by file name; 1 by identical bytes; "
            f"3 at image cosine >= {lower:g})") in shown.stdout


def test_files_of_image_vectors_find_the_twins_with_any_caption_encoder(tmp_path):
    train, evals = planted_sets(tmp_path)
    train_set, eval_set = load_captions(train), load_captions(evals)
    rng = np.random.default_rng(5)
    train_vectors = rng.standard_normal((8, 16))
    eval_vectors = rng.standard_normal((6, 16))
    eval_vectors[0] = train_vectors[2]                                    # the identical image
    eval_vectors[1] = train_vectors[5] + 0.01 * rng.standard_normal(16)   # the near-identical one
    eval_vectors[4] = train_vectors[7] + 0.3 * rng.standard_normal(16)    # like, below the threshold
    np.savez(tmp_path / "train_images.npz", ids=np.array(train_set.group_names), vectors=train_vectors)
    np.savez(tmp_path / "eval_images.npz", ids=np.array(eval_set.group_names), vectors=eval_vectors)
    captions = rng.standard_normal((len(train_set) + len(eval_set), 8))
    np.savez(tmp_path / "captions.npz", ids=np.array([*train_set.ids, *eval_set.ids]), vectors=captions)
    threshold = 0.98
    result = run("leak", train, evals, "--encoder", f"vectors:{tmp_path / 'captions.npz'}",
                 "--train-image-embeddings", tmp_path / "train_images.npz",
                 "--eval-image-embeddings", tmp_path / "eval_images.npz", "--image-threshold", threshold, "--json")
    assert result.exit_code == 0, result.output
    images = json.loads(result.stdout)["evals"][0]["images"]
    unit = lambda rows: rows / np.linalg.norm(rows, axis=1, keepdims=True)  # noqa: E731
    exact, near, cosine = brute_force(train, evals, unit(train_vectors), unit(eval_vectors), threshold)
    assert (images["n_hash_matches"], images["n_near_images"]) == (exact, near) == (1, 2)
    assert 0.8 < cosine[4, 7] < threshold
    assert images["vectors"] == {"train": str(tmp_path / "train_images.npz"), "eval": str(tmp_path / "eval_images.npz")}


def test_a_text_only_encoder_says_once_what_the_image_twins_need(tmp_path):
    train, evals = planted_sets(tmp_path)
    train_set, eval_set = load_captions(train), load_captions(evals)
    vectors = np.random.default_rng(6).standard_normal((len(train_set) + len(eval_set), 8))
    np.savez(tmp_path / "captions.npz", ids=np.array([*train_set.ids, *eval_set.ids]), vectors=vectors)
    result = run("leak", train, evals, "--encoder", f"vectors:{tmp_path / 'captions.npz'}", "--json",
                 tmp_path / "leak.json")
    assert result.exit_code == 0, result.output
    assert result.stderr.count(LEAK_NEEDS_IMAGES) == 1
    images = json.loads((tmp_path / "leak.json").read_text())["evals"][0]["images"]
    assert images["ways"] == ["file name"] and "n_hash_matches" not in images


def test_bad_image_vector_files_are_one_error_before_the_encoding(tmp_path):
    train, evals = planted_sets(tmp_path)
    train_set, eval_set = load_captions(train), load_captions(evals)
    rng = np.random.default_rng(7)
    np.savez(tmp_path / "train_images.npz", ids=np.array(train_set.group_names), vectors=rng.standard_normal((8, 16)))
    np.savez(tmp_path / "eval_images.npz", ids=np.array(eval_set.group_names), vectors=rng.standard_normal((6, 12)))
    common = ["leak", train, evals, "--encoder", f"vectors:{tmp_path / 'absent.npz'}",
              "--train-image-embeddings", tmp_path / "train_images.npz"]
    two = run(*common, "--eval-image-embeddings", tmp_path / "eval_images.npz",
              "--eval-image-embeddings", tmp_path / "eval_images.npz")
    assert two.exit_code == 2 and "Traceback" not in two.output
    assert "--eval-image-embeddings: 2 files for 1 evaluation sets" in two.output
    wide = run(*common, "--eval-image-embeddings", tmp_path / "eval_images.npz")
    assert wide.exit_code == 2 and "image vectors of different widths" in wide.output
    wrong_set = run(*common[:-1], tmp_path / "eval_images.npz")
    assert wrong_set.exit_code == 2 and "eval_images.npz" in wrong_set.output and "Traceback" not in wrong_set.output


def test_the_report_leak_section_says_which_eval_images_are_training_images(tmp_path):
    """`capgeo report TRAIN --leak EVAL` with a two-tower checkpoint: the profile's own image vectors
    for TRAIN, the tower's for EVAL, and the leak section's line about the shared images."""
    train, evals = planted_sets(tmp_path)
    checkpoint, _ = vision_checkpoint(tmp_path / "model", seed=21, name="tiny-leak-b")
    page = tmp_path / "report.html"
    result = run("report", train, "--leak", evals, "--encoder", checkpoint, "--batch-size", 4, "--no-map",
                 "--no-dupes", "--no-gamma", "--image-threshold", THRESHOLD, "-o", page, cache=tmp_path / "cache")
    assert result.exit_code == 0, result.output
    assert ("shared images: 2 of 6 eval images are training images (0 by file name; 1 by identical bytes; "
            f"2 at image cosine &gt;= {THRESHOLD:g})") in page.read_text(encoding="utf-8")
