"""Image encoding with the spec's own vision tower and preprocessing, checked against open_clip's
own ``create_model_and_transforms`` + ``encode_image`` on random-weight towers; the image cache."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from _clip_fixtures import (jpeg_bytes, random_images, reference_image_embeddings, tiny_clip, tiny_config,
                            vision_checkpoint)
from capgeo.captions import load_captions
from capgeo.encoders import vision as vision_module
from capgeo.encoders.vision import load_vision_encoder
from capgeo.errors import EncoderError
from capgeo.images import ImageVectors, image_vectors
from capgeo.images.vectors import NEEDS_IMAGES
from capgeo.pipeline import EncodeOptions

import open_clip


def open_clip_reference(name: str, config: dict, checkpoint, folder):
    """open_clip's own model and eval preprocess for a config file and checkpoint."""
    config_file = folder / f"{name}.json"
    config_file.write_text(json.dumps(config))
    open_clip.add_model_config(str(config_file))
    model, _, preprocess = open_clip.create_model_and_transforms(name, pretrained=str(checkpoint))
    return model.eval(), preprocess


def test_checkpoint_with_config_beside_matches_open_clip_encode_image(tmp_path):
    checkpoint, _ = vision_checkpoint(tmp_path / "model", seed=1, name="tiny-vision-a")
    model, preprocess = open_clip_reference("tiny-vision-a", tiny_config(), checkpoint, tmp_path)
    images = random_images(7, seed=1)
    encoder = load_vision_encoder(str(checkpoint), "cpu", cache_dir=tmp_path / "cache")
    assert encoder.info.width == 32 and not encoder.built  # nothing built before an image is encoded
    ours = encoder.encode(images)
    np.testing.assert_allclose(ours, reference_image_embeddings(model, preprocess, images), atol=1e-5)
    assert np.allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)


def test_local_dir_with_its_preprocess_config_matches_open_clip(tmp_path):
    """A hub-layout folder's preprocess_cfg (mean, std, resize mode) is the one applied."""
    config = tiny_config()
    model = tiny_clip(config, seed=2)
    folder = tmp_path / "tiny-hub"
    folder.mkdir()
    preprocess_cfg = {"mean": [0.5, 0.5, 0.5], "std": [0.25, 0.3, 0.35], "resize_mode": "squash",
                      "interpolation": "bilinear"}
    (folder / "open_clip_config.json").write_text(json.dumps({"model_cfg": config, "preprocess_cfg": preprocess_cfg}))
    torch.save(model.state_dict(), folder / "open_clip_pytorch_model.bin")
    reference, _, preprocess = open_clip.create_model_and_transforms(f"local-dir:{folder}")
    images = random_images(5, seed=2, size=(60, 20))
    ours = load_vision_encoder(f"local-dir:{folder}", "cpu", cache_dir=tmp_path / "cache").encode(images)
    np.testing.assert_allclose(ours, reference_image_embeddings(reference.eval(), preprocess, images), atol=1e-5)
    # the default preprocessing gives other vectors: the config is what made them match
    default = open_clip.image_transform(32, is_train=False)
    assert np.abs(ours - reference_image_embeddings(reference, default, images)).max() > 1e-3


def test_longclip_checkpoint_visual_tower_matches_open_clip(tmp_path):
    """Long-CLIP keeps OpenAI CLIP's image tower: its visual.* weights in an open_clip ViT with
    QuickGELU and OpenAI's preprocessing give open_clip's own encode_image."""
    config = tiny_config(context_length=248, quick_gelu=True)
    config["vision_cfg"]["head_width"] = 64  # OpenAI towers: 64-wide heads
    model = tiny_clip(config, seed=3)
    state = model.state_dict()
    state["positional_embedding_res"] = torch.randn_like(state["positional_embedding"])
    path = tmp_path / "longclip-tiny.pt"
    torch.save(state, path)
    encoder = load_vision_encoder(str(path), "cpu", cache_dir=tmp_path / "cache")
    assert encoder.info.kind == "longclip-vision"
    images = random_images(4, seed=3)
    preprocess = open_clip.image_transform(32, is_train=False)
    np.testing.assert_allclose(encoder.encode(images), reference_image_embeddings(model, preprocess, images),
                               atol=1e-5)


def test_text_only_specs_have_no_vision_tower(tmp_path):
    assert load_vision_encoder(None) is None
    assert load_vision_encoder("minilm") is None


def test_a_checkpoint_without_an_image_tower_is_one_encoder_error(tmp_path):
    config = tiny_config()
    model = tiny_clip(config)
    state = {key: value for key, value in model.state_dict().items() if not key.startswith("visual.")}
    torch.save(state, tmp_path / "text-only.pt")
    (tmp_path / "text-only.json").write_text(json.dumps(config))
    encoder = load_vision_encoder(str(tmp_path / "text-only.pt"), "cpu", cache_dir=tmp_path / "cache")
    with pytest.raises(EncoderError, match="no image tower"):
        encoder.encode(random_images(1))


def coco_folder(root, images, *, broken: int | None = None, missing: int = 0):
    """A COCO layout: annotations/captions_val2017.json and val2017/<id>.jpg, two captions per image."""
    (root / "annotations").mkdir(parents=True)
    (root / "val2017").mkdir()
    count = len(images) + missing
    for index, image in enumerate(images):
        data = b"not a picture" if index == broken else jpeg_bytes(image)
        (root / "val2017" / f"{index:012d}.jpg").write_bytes(data)
    (root / "annotations" / "captions_val2017.json").write_text(json.dumps({
        "images": [{"id": index, "file_name": f"{index:012d}.jpg"} for index in range(count)],
        "annotations": [{"id": k, "image_id": k % count, "caption": f"caption {k}"} for k in range(2 * count)]}))
    return root / "annotations" / "captions_val2017.json"


def test_image_vectors_of_a_coco_folder_then_a_cache_hit_that_builds_nothing(tmp_path, monkeypatch, capsys):
    checkpoint, _ = vision_checkpoint(tmp_path / "model", seed=4, name="tiny-vision-c")
    model, preprocess = open_clip_reference("tiny-vision-c", tiny_config(), checkpoint, tmp_path)
    images = random_images(70, seed=4)  # more than one cache chunk
    captions = load_captions(coco_folder(tmp_path / "coco", images, broken=5, missing=2))
    options = EncodeOptions(encoder=str(checkpoint), device="cpu", cache_dir=str(tmp_path / "cache"))
    made = image_vectors(captions, options, progress=False)
    assert isinstance(made, ImageVectors) and made.vectors.shape == (72, 32)
    present = np.ones(72, dtype=bool)
    present[[5, 70, 71]] = False
    assert made.present.tolist() == present.tolist() and made.n_images == 69 and made.n_skipped == 3
    warning = capsys.readouterr().err
    assert warning.count("Warning:") == 1 and "skipped 3 of 72 images" in warning
    assert "000000000005.jpg (not an image PIL can read)" in warning and "000000000070.jpg (not found)" in warning
    # as open_clip decodes (the JPEG bytes read back by PIL, as RGB) and encodes them
    from PIL import Image

    decoded = [Image.open(tmp_path / "coco" / "val2017" / f"{i:012d}.jpg").convert("RGB") for i in range(70) if i != 5]
    np.testing.assert_allclose(made.vectors[present], reference_image_embeddings(model, preprocess, decoded),
                               atol=1e-5)
    assert (made.vectors[~present] == 0).all()
    assert made.content_hashes[0] is not None and made.content_hashes[70] is None
    assert made.thumbnail(0)[:2] == b"\xff\xd8" and made.thumbnail(70) is None

    # again: every vector from the cache; no tower built, no image decoded
    monkeypatch.setattr(vision_module, "_BUILT", {})
    monkeypatch.setattr(vision_module, "_open_clip_tower", lambda *a: pytest.fail("the tower was built again"))
    import capgeo.images.decode as decode

    monkeypatch.setattr(decode, "decode_rgb", lambda data: pytest.fail("an image was decoded on a cache hit"))
    again = image_vectors(captions, options, progress=False)
    assert np.array_equal(again.vectors, made.vectors) and np.array_equal(again.present, made.present)
    assert again.content_hashes == made.content_hashes


def test_the_tower_is_built_once_per_process(tmp_path, monkeypatch):
    checkpoint, _ = vision_checkpoint(tmp_path / "model", seed=5, name="tiny-vision-d")
    calls = []
    original = vision_module._open_clip_tower
    monkeypatch.setattr(vision_module, "_open_clip_tower", lambda *a: calls.append(1) or original(*a))
    captions = load_captions(coco_folder(tmp_path / "coco", random_images(3, seed=5)))
    for _ in range(2):  # --no-cache: encoded twice, the tower read once
        image_vectors(captions, EncodeOptions(encoder=str(checkpoint), device="cpu", use_cache=False), progress=False)
    assert len(calls) == 1


def test_text_only_encoder_says_the_pairs_need_images(tmp_path):
    captions = load_captions(coco_folder(tmp_path / "coco", random_images(2)))
    notes = []
    assert image_vectors(captions, EncodeOptions(), notes=notes) is None
    assert notes == [NEEDS_IMAGES]


def test_image_embeddings_file_gives_image_vectors_with_thumbnails(tmp_path):
    captions = load_captions(coco_folder(tmp_path / "coco", random_images(3, seed=6)))
    vectors = np.random.default_rng(6).normal(size=(3, 8))
    np.save(tmp_path / "images.npy", vectors)
    made = image_vectors(captions, None, image_embeddings=tmp_path / "images.npy")
    expected = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    np.testing.assert_allclose(made.vectors, expected, atol=1e-6)
    assert made.present.all() and made.source.endswith("images.npy")
    import hashlib

    assert made.content_hashes[2] == hashlib.sha256(
        (tmp_path / "coco" / "val2017" / "000000000002.jpg").read_bytes()).hexdigest()
    assert made.thumbnail(2)[:2] == b"\xff\xd8"


def test_run_profile_with_images_adds_image_vectors(tmp_path):
    from capgeo.geometry.profile_options import ProfileOptions
    from capgeo.pipeline import ImageOptions, ProfileSections, run_profile

    checkpoint, _ = vision_checkpoint(tmp_path / "model", seed=7, name="tiny-vision-e")
    captions = load_captions(coco_folder(tmp_path / "coco", random_images(6, seed=7)))
    options = EncodeOptions(encoder=str(checkpoint), device="cpu", cache_dir=str(tmp_path / "cache"))
    run = run_profile(captions, options, ProfileOptions(batch_sizes=(4,)), sections=ProfileSections(images=ImageOptions()),
                      progress=False)
    assert run.image_vectors.n_images == 6 and run.image_notes == ()
    alone = run_profile(captions, EncodeOptions(cache_dir=str(tmp_path / "cache")), ProfileOptions(batch_sizes=(4,)),
                        sections=ProfileSections(images=ImageOptions()), progress=False)
    assert alone.image_vectors is None and alone.image_notes == (NEEDS_IMAGES,)
    plain = run_profile(captions, options, ProfileOptions(batch_sizes=(4,)), progress=False)
    assert plain.image_vectors is None and plain.image_notes == ()


def test_hf_hub_id_from_the_local_hub_cache_matches_open_clip(tmp_path, monkeypatch):
    """hf-hub:org/repo, its files already in the Hugging Face cache (read offline, as a fetched
    model is): the repository's preprocess_cfg applies, as in open_clip's own loading."""
    huggingface_hub = pytest.importorskip("huggingface_hub")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    config = tiny_config()
    model = tiny_clip(config, seed=8)
    revision = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--capgeo-tests--tiny-clip"
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    (snapshot / "open_clip_config.json").write_text(json.dumps(
        {"model_cfg": config, "preprocess_cfg": {"mean": [0.4, 0.4, 0.4], "std": [0.2, 0.2, 0.2]}}))
    safetensors_torch.save_file({key: value.contiguous() for key, value in model.state_dict().items()},
                                str(snapshot / "open_clip_model.safetensors"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    spec = "hf-hub:capgeo-tests/tiny-clip"
    reference, _, preprocess = open_clip.create_model_and_transforms(spec)
    images = random_images(4, seed=8)
    ours = load_vision_encoder(spec, "cpu", cache_dir=tmp_path / "cache").encode(images)
    np.testing.assert_allclose(ours, reference_image_embeddings(reference.eval(), preprocess, images), atol=1e-5)


def test_profile_and_report_take_the_pairs_from_the_image_tower(tmp_path, monkeypatch):
    """`capgeo profile` and `capgeo report` with a two-tower checkpoint over a dataset that names its
    images: the pairs section from the encoder's own image tower, equal to image_vectors' alignment;
    a checkpoint without an image tower leaves the pairs out with one note."""
    from click.testing import CliRunner

    from capgeo.cli import main

    monkeypatch.setenv("CAPGEO_CACHE", str(tmp_path / "cache"))
    checkpoint, _ = vision_checkpoint(tmp_path / "model", seed=8, name="tiny-vision-f")
    data = coco_folder(tmp_path / "coco", random_images(6, seed=8))
    runner = CliRunner()
    done = runner.invoke(main, ["profile", str(data), "--encoder", str(checkpoint), "--batch-size", "4",
                                "--no-gamma", "--json", str(tmp_path / "p.json")])
    assert done.exit_code == 0, done.output
    section = json.loads((tmp_path / "p.json").read_text())["pairs"]
    captions = load_captions(data)
    made = image_vectors(captions, EncodeOptions(encoder=str(checkpoint), device="cpu"), progress=False)
    from capgeo.encoders import embed

    texts = embed(captions, str(checkpoint), device="cpu", progress=False).vectors.astype(np.float64)
    own = np.einsum("ij,ij->i", texts, made.vectors[np.asarray(captions.group_codes)].astype(np.float64))
    assert section is not None and section["n_images"] == 6
    assert json.dumps(section).count("image tower") >= 1
    assert abs(section["alignment"]["mean"] - own.mean()) < 1e-5

    report = runner.invoke(main, ["report", str(data), "--encoder", str(checkpoint), "--batch-size", "4",
                                  "--no-map", "-o", str(tmp_path / "r.html")])
    assert report.exit_code == 0, report.output
    assert 'id="pairs"' in (tmp_path / "r.html").read_text() or "Pairs" in (tmp_path / "r.html").read_text()

    # a checkpoint with the text tower alone: the caption analyses, and one note on the image side
    text_only = tmp_path / "text" / "tiny-text-f.pt"
    text_only.parent.mkdir()
    state = torch.load(checkpoint)
    torch.save({key: value for key, value in state.items() if not key.startswith("visual.")}, text_only)
    (text_only.parent / "tiny-text-f.json").write_text((checkpoint.parent / "tiny-vision-f.json").read_text())
    alone = runner.invoke(main, ["profile", str(data), "--encoder", str(text_only), "--batch-size", "4",
                                 "--no-gamma", "--json", str(tmp_path / "q.json")])
    assert alone.exit_code == 0, alone.output
    assert json.loads((tmp_path / "q.json").read_text()).get("pairs") is None
    assert "holds no image tower" in alone.output
