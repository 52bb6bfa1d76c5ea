"""`capgeo profile` and `capgeo report` with --image-embeddings, end to end through click's CliRunner,
on real COCO Karpathy captions, caption vectors of a file (vectors:FILE, so no model loads) and image
vectors made near their captions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from capgeo.cli import main

KARPATHY = Path(__file__).resolve().parents[2] / "shared" / "data" / "coco-karpathy-test" / "mscoco_test.json"
N_CAPTIONS = 60
WIDTH = 32


def data(folder) -> list:
    """DATA and the options that read it with the fixture's caption vectors."""
    return [KARPATHY, "--limit", N_CAPTIONS, "--encoder", f"vectors:{folder / 'captions.npy'}"]


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def coco(tmp_path_factory):
    """60 real captions of 12 images, and image vectors at the mean of each image's captions."""
    if not KARPATHY.exists():
        pytest.skip(f"COCO Karpathy test captions not found at {KARPATHY}")
    from capgeo.captions import load_captions

    folder = tmp_path_factory.mktemp("pairs")
    captions = load_captions(KARPATHY, limit=N_CAPTIONS)
    codes = np.asarray(captions.group_codes)
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((captions.n_groups, WIDTH))
    vectors = centres[codes] + 0.8 * rng.standard_normal((N_CAPTIONS, WIDTH))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    np.save(folder / "captions.npy", vectors.astype(np.float32))
    images = np.stack([vectors[codes == g].mean(axis=0) for g in range(captions.n_groups)])
    images[3] = -images[3]   # planted: image 3 matches none of its captions
    np.save(folder / "images.npy", images.astype(np.float32))
    return folder, captions


def test_profile_adds_the_pairs_section(coco):
    folder, captions = coco
    out, rows = folder / "profile.json", folder / "negatives.jsonl"
    result = run("profile", *data(folder), "--batch-size", 8,
                 "--image-embeddings", folder / "images.npy", "--delta", 0.05, "--false-negatives", rows,
                 "--json", out)
    assert result.exit_code == 0, result.output
    profile = json.loads(out.read_text(encoding="utf-8"))
    pairs = profile["pairs"]
    assert pairs["n_pairs"] == N_CAPTIONS and pairs["n_images"] == 12
    # the planted image: every one of its captions mismatched, the image listed first
    assert pairs["mismatched"]["pairs"][0]["image"] == captions.groups[15]
    written = [json.loads(line) for line in rows.read_text(encoding="utf-8").splitlines()]
    assert len(written) == pairs["false_negatives"]["n_rows"] == pairs["false_negatives"]["n_written"]
    assert pairs["saturation"]["batch_size"] == 8 and len(pairs["saturation"]["gammas"]) == 2
    from capgeo.geometry.typed_profile import Profile

    assert Profile.from_dict(profile).to_dict() == profile
    # and on the terminal
    result = run("profile", *data(folder), "--batch-size", 8,
                 "--image-embeddings", folder / "images.npy")
    assert result.exit_code == 0, result.output
    assert "Pairs: 60 image-caption pairs, 12 images" in result.output
    assert "retrieval at initialisation (exact)" in result.output


def test_report_draws_the_pairs_section(coco):
    folder, _ = coco
    page = folder / "report.html"
    result = run("report", *data(folder), "--batch-size", 8,
                 "--image-embeddings", folder / "images.npy", "--no-map", "-o", page)
    assert result.exit_code == 0, result.output
    html = page.read_text(encoding="utf-8")
    assert 'id="pairs"' in html and "Mismatched pairs" in html and "hardest wrong caption" in html
    assert page.stat().st_size < 3_000_000


def test_options_without_image_vectors_are_noted_and_bad_files_are_one_error(coco):
    folder, _ = coco
    result = run("profile", *data(folder), "--batch-size", 8,
                 "--delta", 0.1)
    assert result.exit_code == 0 and "--delta applies to the pairs section" in result.output
    np.save(folder / "short.npy", np.ones((5, WIDTH), dtype=np.float32))
    result = run("profile", *data(folder),
                 "--image-embeddings", folder / "short.npy")
    assert result.exit_code == 2 and "short.npy" in result.output and "Traceback" not in result.output


def test_report_inlines_the_listed_images_thumbnails(coco, tmp_path):
    import io

    from PIL import Image

    from capgeo.images import ImageVectors
    from capgeo.pipeline import EncodeOptions, PairOptions, ProfileSections, run_profile

    folder, captions = coco
    images = np.load(folder / "images.npy")

    def thumbnail(g: int) -> bytes:
        pixels = np.random.default_rng(g).integers(0, 255, (48, 64, 3), dtype=np.uint8)
        out = io.BytesIO()
        Image.fromarray(pixels).save(out, format="JPEG", quality=60)
        return out.getvalue()

    vectors = ImageVectors(vectors=images / np.linalg.norm(images, axis=1, keepdims=True),
                           present=np.ones(len(images), bool), source="tower", thumbnail=thumbnail)
    run = run_profile(captions, EncodeOptions(f"vectors:{folder / 'captions.npy'}"),
                      sections=ProfileSections(gamma=False, pairs=PairOptions(vectors)))
    thumbnails = run.profile.pairs.thumbnails
    assert captions.groups[15] in thumbnails
    page = run.profile.to_html(tmp_path / "page.html").read_text(encoding="utf-8")
    assert f'src="data:image/jpeg;base64,{thumbnails[captions.groups[15]]}"' in page
    assert len(page.encode()) < 3_000_000


def test_thumbnails_stop_at_their_byte_budget():
    from capgeo.defaults import PAIRS_THUMBNAIL_BYTES
    from capgeo.findings.pairs import thumbnails_for
    from capgeo.geometry.typed_profile import ImageTwins, PairCard, PairFalseNegatives, PairMismatched
    from capgeo.images import ImageVectors

    big = b"\xff\xd8" + bytes(200_000)
    images = ImageVectors(np.eye(10, dtype=np.float32), np.ones(10, bool), "t", thumbnail=lambda g: big)
    names = [f"i{g}" for g in range(10)]
    listed = PairMismatched(pairs=tuple(PairCard(image=name) for name in names))
    kept = thumbnails_for(images, np.arange(10), names, listed, PairFalseNegatives(rows=()),
                          ImageTwins(near_pairs=(), exact_sets=()))
    assert len(kept) == PAIRS_THUMBNAIL_BYTES // len(big) < 10


def test_gallery_shows_hash_ids_shortened_with_the_whole_id_on_hover():
    from capgeo.geometry.typed_profile import Dupes
    from capgeo.report.gallery import gallery_html

    group = "sha256:" + "0123456789abcdef" * 4
    pair = {"id_a": f"{group}#0", "id_b": "b#1", "group_a": group, "group_b": "b", "text_a": "a dog",
            "text_b": "a cat", "cosine": 0.9, "spans_a": [], "spans_b": []}
    html = gallery_html(Dupes.from_dict({"pairs": [pair]}))
    assert "sha256:0123456789…#0" in html and f'title="{group}#0"' in html
    assert f">{group}" not in html


def test_capgeo_profile_from_python_takes_image_vectors(coco):
    import capgeo

    folder, captions = coco
    profile = capgeo.profile(captions, f"vectors:{folder / 'captions.npy'}", batch_size=8, n_batches=5,
                             image_embeddings=np.load(folder / "images.npy"))
    assert profile.pairs.n_pairs == N_CAPTIONS and profile.pairs.saturation.batch_size == 8
    assert profile.pairs.source == "image embeddings"
