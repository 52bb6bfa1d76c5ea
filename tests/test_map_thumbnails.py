"""The caption map shows each point's image on hover: thumbnails inlined once per image (base64 JPEG),
the points' customdata naming theirs; the most telling images first, within the map's budget and,
in a report, within what the pairs section leaves of the page's, so the page stays under 3 MB."""

from __future__ import annotations

import base64
import io
import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

from _action_fixtures import caption_set, unit
from _clip_fixtures import jpeg_bytes, random_images
from capgeo import map as caption_map
from capgeo.cli import main
from capgeo.defaults import MAP_THUMBNAIL_CHARS, MAP_THUMBNAILS

pytest.importorskip("openTSNE", reason="the map extra (openTSNE) is not installed")


def coco_layout(root, count: int):
    """annotations/captions_val2017.json and val2017/<n>.jpg: ``count`` random images, two captions each."""
    (root / "annotations").mkdir(parents=True)
    (root / "val2017").mkdir()
    for number, image in enumerate(random_images(count, seed=9, size=(80, 60))):
        (root / "val2017" / f"{number:012d}.jpg").write_bytes(jpeg_bytes(image))
    (root / "annotations" / "captions_val2017.json").write_text(json.dumps({
        "images": [{"id": n, "file_name": f"{n:012d}.jpg"} for n in range(count)],
        "annotations": [{"id": k, "image_id": k % count, "caption": f"photo {k % count}, caption {k}"}
                        for k in range(2 * count)]}))
    return root / "annotations" / "captions_val2017.json"


def page_thumbnails(page: str) -> list[str]:
    found = re.search(r'<script type="application/json" id="map-thumbnails">(.*?)</script>', page)
    return json.loads(found.group(1)) if found else []


def test_capgeo_map_inlines_each_images_thumbnail_for_the_hover(tmp_path):
    from PIL import Image

    from capgeo.captions import load_captions
    from capgeo.images.decode import decode_rgb, thumbnail_jpeg

    data = coco_layout(tmp_path / "coco", 6)
    captions = load_captions(data)
    vectors = np.random.default_rng(2).standard_normal((len(captions), 16))
    np.savez(tmp_path / "captions.npz", ids=np.array(captions.ids), vectors=vectors)
    output = tmp_path / "map.html"
    result = CliRunner().invoke(main, ["map", str(data), "--encoder", f"vectors:{tmp_path / 'captions.npz'}",
                                       "-o", str(output)])
    assert result.exit_code == 0, result.output
    page = output.read_text(encoding="utf-8")
    thumbnails = page_thumbnails(page)
    assert len(thumbnails) == 6 and "thumbnail (6 images)." in page
    # each one the image's own thumbnail, as capgeo makes it from the file's bytes
    expected = {base64.b64encode(thumbnail_jpeg(decode_rgb((tmp_path / "coco" / "val2017" / name).read_bytes())))
                .decode("ascii") for name in captions.group_names}
    assert set(thumbnails) == expected
    assert all(Image.open(io.BytesIO(base64.b64decode(text))).format == "JPEG" for text in thumbnails)
    assert "plotly_hover" in page and "customdata" in page


def test_thumbnails_the_flagged_points_first_within_the_budget():
    n_groups = 1_000
    captions = caption_set([f"img{g}" for g in range(n_groups) for _ in range(2)])
    noise = [jpeg_bytes(image, quality=90) for image in random_images(8, seed=3, size=(64, 64))]
    asked = []

    def thumbnail(code: int) -> bytes | None:
        asked.append(code)
        return None if code == 7 else noise[code % len(noise)] + bytes(code % 13)  # one image without one

    hardest = np.linspace(0.0, 1.0, 2 * n_groups)
    codes = np.asarray(captions.group_codes)
    flagged = np.zeros(2 * n_groups, dtype=bool)
    flagged[[10, 11, 500]] = True   # images 5 and 250, in a near-duplicate set
    order = np.lexsort((np.arange(2 * n_groups), -hardest, ~flagged))
    kept = caption_map.map_thumbnails(thumbnail, codes, captions.group_names, order)
    sizes = [len(text) for text in kept.values()]
    assert sum(sizes) <= MAP_THUMBNAIL_CHARS and len(kept) <= MAP_THUMBNAILS
    assert sum(sizes) + max(sizes) > MAP_THUMBNAIL_CHARS or len(kept) == MAP_THUMBNAILS  # stopped by the budget
    # the flagged first, then the highest hardest companion, each by hardest companion; image 7 has none
    assert list(kept)[:3] == ["img250", "img5", f"img{n_groups - 1}"] and "img7" not in kept
    assert len(asked) < n_groups / 2   # made as served, a chunk at a time: not one for every image


def test_the_report_page_stays_under_3_mb_with_every_thumbnail_budget_full(tmp_path):
    """A report's largest page: the pairs section's thumbnails at their budget, the map's 2,000 points
    with 300-character captions, and the map's hover thumbnails at theirs: the map's give way, the last
    served first, until the page is under 3 MB."""
    from dataclasses import replace

    from capgeo.defaults import PAIRS_THUMBNAIL_BYTES, REPORT_PAGE_BYTES
    from capgeo.geometry.typed_profile import CaptionMap
    from capgeo.images import ImageVectors
    from capgeo.pipeline import EncodeOptions, PairOptions, ProfileSections, run_profile
    from capgeo.report.build import ReportInput, build_report

    rng = np.random.default_rng(0)
    n_groups = 300
    captions = caption_set([f"img{g}" for g in range(n_groups) for _ in range(2)])
    centres = rng.standard_normal((n_groups, 16))
    vectors = unit(np.repeat(centres, 2, axis=0) + 2.0 * rng.standard_normal((2 * n_groups, 16)))
    np.save(tmp_path / "captions.npy", vectors)
    big = b"\xff\xd8" + bytes(40_000)   # the pairs cards' thumbnails: their budget spent after a few dozen
    images = ImageVectors(unit(centres), np.ones(n_groups, bool), "tower", thumbnail=lambda g: big)
    run = run_profile(captions, EncodeOptions(f"vectors:{tmp_path / 'captions.npy'}"),
                      sections=ProfileSections(gamma=False, pairs=PairOptions(images, delta=0.5)), progress=False)
    held = sum(map(len, run.profile.pairs.thumbnails.values()))
    assert (PAIRS_THUMBNAIL_BYTES - len(big)) * 4 / 3 < held <= PAIRS_THUMBNAIL_BYTES * 4 / 3

    n = caption_map.REPORT_MAX_POINTS
    groups = [f"sha256:{g:064x}#{g}" for g in range(n)]
    thumbnails = [base64.b64encode(jpeg_bytes(image, quality=95)).decode()
                  for image in random_images(MAP_THUMBNAILS, seed=4, size=(64, 64))]
    full, total = {}, 0
    for group, text in zip(groups, thumbnails):   # as map_thumbnails fills its budget
        if total + len(text) > MAP_THUMBNAIL_CHARS:
            break
        full[group], total = text, total + len(text)
    section = {"method": "openTSNE", "pca_dimensions": 2, "neighbours": 90, "seed": 0, "n_captions": 50_000,
               "n_points": n, "sampled": True, "seconds": 1.0, "near_duplicate_threshold": 0.95, "text_chars": 300,
               "x": rng.normal(size=n).round(4).tolist(), "y": rng.normal(size=n).round(4).tolist(),
               "caption_ids": [str(100_000 + i) for i in range(n)], "groups": groups,
               "texts": [(f"word{i} " * 50)[:299] + "…" for i in range(n)],
               "hardest_companion": rng.random(n).round(4).tolist(), "near_duplicate_set": [None] * n,
               "leaked": None, "thumbnails": full, "n_mapped_images": n}
    profile = replace(run.profile, map=CaptionMap.from_dict(section))
    path = build_report(ReportInput(profile), tmp_path / "page.html")
    page = path.read_text(encoding="utf-8")
    kept = page_thumbnails(page)
    assert path.stat().st_size < REPORT_PAGE_BYTES == 3_000_000
    assert 0 < len(kept) < len(full) and kept == list(full.values())[:len(kept)]   # the first served stay
    assert f"{len(kept):,} of the {n:,} mapped images carry one" in page
    # the pairs section's thumbnails are all there: only the map's gave way
    assert all(f"base64,{text}" in page for text in run.profile.pairs.thumbnails.values())


@pytest.mark.slow
def test_the_report_map_shows_the_image_towers_thumbnails(tmp_path):
    """`capgeo report` with a two-tower checkpoint over a dataset that names its images: the map's points
    carry the thumbnails of the profile's image vectors."""
    from _clip_fixtures import vision_checkpoint

    data = coco_layout(tmp_path / "coco", 8)
    checkpoint, _ = vision_checkpoint(tmp_path / "model", seed=3, name="tiny-map")
    output = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", str(data), "--encoder", str(checkpoint), "--batch-size", "4",
                                       "--no-dupes", "--no-gamma", "-o", str(output)],
                                env={"CAPGEO_CACHE": str(tmp_path / "cache")})
    assert result.exit_code == 0, result.output
    page = output.read_text(encoding="utf-8")
    thumbnails = page_thumbnails(page)
    assert len(thumbnails) == 8 and "thumbnail (8 images)." in page
    # the map's and the pairs cards' thumbnails are the same images' (one Thumbnails made them)
    cards = set(re.findall(r'src="data:image/jpeg;base64,([^"]*)"', page))
    assert cards and cards <= set(thumbnails)
