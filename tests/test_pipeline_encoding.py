"""The one place captions become embeddings (capgeo.pipeline.embed_captions) and image vectors
from an array become ImageVectors (capgeo.images.vectors.from_array), and the option objects
built from keyword arguments (capgeo.pipeline.options_from)."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from _action_fixtures import caption_set
from capgeo.errors import CapgeoError


def test_vectors_given_become_unit_embeddings_row_for_row():
    from capgeo.pipeline import ARRAY_SPEC, embed_captions

    captions = caption_set(["a", "a", "b", "c"])
    raw = np.random.default_rng(0).normal(size=(4, 6))
    embeddings = embed_captions(captions, vectors=raw)
    expected = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    np.testing.assert_allclose(embeddings.vectors, expected, atol=1e-6)
    assert embeddings.info.spec == ARRAY_SPEC and embeddings.origin == "precomputed"
    # Embeddings already made pass as they are, checked for their rows
    assert embed_captions(captions, vectors=embeddings) is embeddings
    with pytest.raises(CapgeoError, match=r"train vectors: 3 rows for 4 captions"):
        embed_captions(captions, vectors=raw[:3], role="train vectors")


def test_a_spec_is_embedded_under_the_encode_options(tmp_path):
    from capgeo.pipeline import EncodeOptions, embed_captions

    captions = caption_set(["a", "b", "c"])
    raw = np.random.default_rng(1).normal(size=(3, 5)).astype(np.float32)
    np.save(tmp_path / "v.npy", raw)
    embeddings = embed_captions(captions, EncodeOptions(f"vectors:{tmp_path / 'v.npy'}"), progress=False)
    np.testing.assert_allclose(embeddings.vectors, raw / np.linalg.norm(raw, axis=1, keepdims=True), atol=1e-6)


def test_options_from_takes_its_fields_and_leaves_the_rest():
    from capgeo.pipeline import EncodeOptions, ProfileSections, options_from

    fields = {"device": "cpu", "gamma": False, "seed": 3}
    encode = options_from(EncodeOptions, fields, encoder="vectors:x.npy")
    sections = options_from(ProfileSections, fields)
    assert encode == EncodeOptions("vectors:x.npy", device="cpu")
    assert sections == ProfileSections(gamma=False)
    assert fields == {"seed": 3}  # left for ProfileOptions


def test_an_array_of_image_vectors_gets_the_hashes_of_the_images_the_dataset_names(tmp_path):
    from capgeo.captions import load_captions
    from capgeo.images.vectors import from_array
    from _clip_fixtures import jpeg_bytes, random_images

    (tmp_path / "pics").mkdir()
    payloads = [jpeg_bytes(image) for image in random_images(2, seed=4)]
    for k, payload in enumerate(payloads):
        (tmp_path / "pics" / f"p{k}.jpg").write_bytes(payload)
    table = tmp_path / "pairs.jsonl"
    table.write_text("\n".join(json.dumps({"caption": f"c{k}", "image_id": str(k % 2), "file": f"pics/p{k % 2}.jpg"})
                               for k in range(4)))
    captions = load_captions(table, group_column="image_id", image_column="file")
    raw = np.array([[3.0, 4.0], [0.0, 2.0]])
    images = from_array(captions, raw, "img.npy", width=2)
    np.testing.assert_allclose(images.vectors, [[0.6, 0.8], [0.0, 1.0]], atol=1e-7)
    assert images.present.all() and images.source == "img.npy"
    assert images.content_hashes == tuple(hashlib.sha256(payload).hexdigest() for payload in payloads)
    with pytest.raises(CapgeoError, match="img.npy: image vectors have 2 dimensions but the text embeddings have 3"):
        from_array(captions, raw, "img.npy", width=3)


def test_an_array_of_image_vectors_without_readable_images_has_no_hashes():
    from capgeo.images.vectors import from_array

    captions = caption_set(["a", "a", "b"])
    images = from_array(captions, np.eye(2), "image embeddings")
    assert images.content_hashes is None and images.thumbnail is None


def test_typed_keywords_of_the_python_api_are_checked(tmp_path):
    import capgeo

    with pytest.raises(CapgeoError, match=r"profile\(\): use_cache must be True or False"):
        capgeo.profile(["a caption", "another"], use_cache="yes")
    with pytest.raises(CapgeoError, match=r"plan_batches\(\): epochs must be a whole number"):
        capgeo.plan_batches(["a caption", "another"], batch_size=2, epochs=1.5)
