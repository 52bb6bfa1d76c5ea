"""Image leaks between TRAIN and EVAL (capgeo/findings/image_leak.py): file names on the real COCO
Karpathy test ids, content hashes and image vectors against a numpy brute force, and in `leak`."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from capgeo.captions import load_captions
from capgeo.display import short_id
from capgeo.findings.image_leak import describe_image_leak, image_leak, image_name_key
from capgeo.images import ImageVectors

KARPATHY = Path(__file__).resolve().parents[2] / "shared" / "data" / "coco-karpathy-test" / "mscoco_test.json"


def karpathy_names() -> list[str]:
    if not KARPATHY.exists():
        pytest.skip(f"COCO Karpathy test captions not found at {KARPATHY}")
    return [record["image_name"] for record in json.loads(KARPATHY.read_text(encoding="utf-8"))]


def test_name_keys():
    assert image_name_key("COCO_val2014_000000391895.jpg") == image_name_key("000000391895.jpg") == "391895"
    assert image_name_key("val2014/COCO_val2014_000000391895.JPG") == "391895"
    assert image_name_key("images/Dog.PNG") == "dog.png"
    assert image_name_key("sha256:" + "ab" * 32 + "#3") is None and image_name_key("391895") is None


def test_karpathy_test_and_val2017_names_meet_on_the_shared_images():
    names = karpathy_names()
    assert len(names) == 5000
    numbers = [int(image_name_key(name)) for name in names]
    assert len(set(numbers)) == 5000
    rng = np.random.default_rng(0)
    shared = rng.choice(numbers, 593, replace=False)
    others = [n for n in range(1, 4000) if n not in set(numbers)][:907]
    val2017 = [f"{n:012d}.jpg" for n in [*shared.tolist(), *others]]
    found = image_leak(names, val2017).to_dict()
    assert found["n_name_matches"] == 593 == found["n_shared"]
    assert found["ways"] == ["file name"] and found["n_images"] == 1500
    first = found["name_matches"][0]
    assert image_name_key(first["eval"]) == image_name_key(first["train"])


def unit(rows):
    rows = np.asarray(rows, dtype=np.float64)
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def test_hashes_and_vectors_against_brute_force():
    rng = np.random.default_rng(1)
    train = unit(rng.standard_normal((30, 8)))
    evals = unit(rng.standard_normal((20, 8)))
    evals[:4] = unit(train[[3, 7, 11, 12]] + 0.01 * rng.standard_normal((4, 8)))   # planted near twins
    train_hashes = tuple(f"t{g}" for g in range(30))
    eval_hashes = tuple(["t5", *(f"e{g}" for g in range(1, 20))])                     # planted identical bytes
    found = image_leak([f"sha256:{'cd' * 32}#{g}" for g in range(30)], [f"e{g}" for g in range(20)],
                       train_images=ImageVectors(train, np.ones(30, bool), "t", content_hashes=train_hashes),
                       eval_images=ImageVectors(evals, np.ones(20, bool), "e", content_hashes=eval_hashes),
                       threshold=0.9)
    cosine = evals.astype(np.float64) @ train.astype(np.float64).T
    assert found.n_near_images == int((cosine >= 0.9).any(axis=1).sum()) >= 4
    assert found.n_hash_matches == 1 and found.hash_matches[0].train.endswith("#5")
    assert found.n_name_matches is None and "n_name_matches" not in found.to_dict()
    assert found.n_shared == len(set(np.flatnonzero((cosine >= 0.9).any(axis=1)).tolist()) | {0})
    assert short_id(found.hash_matches[0].train) in describe_image_leak(found)


def test_leak_section_says_which_eval_images_are_training_images():
    from capgeo.findings.leak import leak_section

    names = karpathy_names()[:10]
    train = load_captions(KARPATHY, limit=50)
    eval_set = load_captions([{"id": f"v{k}", "group": group, "text": f"a caption {k}"}
                              for k, group in enumerate(["000000391895.jpg", "000000000001.jpg",
                                                         f"{int(image_name_key(names[4])):012d}.jpg"])],
                             id_column="id", group_column="group", text_column="text")
    rng = np.random.default_rng(0)
    result = leak_section(train, SimpleNamespace(vectors=unit(rng.standard_normal((50, 8)))),
                          [(eval_set, SimpleNamespace(vectors=unit(rng.standard_normal((3, 8)))))])
    images = result.evals[0].images
    assert images.n_name_matches == 2 and images.n_images == 3
