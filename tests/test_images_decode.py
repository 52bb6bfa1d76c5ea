"""Odd images: converted to 8-bit RGB as a viewer shows them, or refused with a reason."""

from __future__ import annotations

import io

import numpy as np
import pytest

from capgeo.images import decode
from capgeo.images.decode import Undecodable, decode_rgb, thumbnail_jpeg

Image = pytest.importorskip("PIL.Image")


def saved(image, format: str, **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=format, **options)
    return buffer.getvalue()


def pixels(image) -> np.ndarray:
    return np.asarray(image, dtype=np.int64)


def test_rgb_png_is_returned_pixel_for_pixel():
    array = np.random.default_rng(0).integers(0, 256, (9, 13, 3), dtype=np.uint8)
    out = decode_rgb(saved(Image.fromarray(array), "PNG"))
    assert out.mode == "RGB" and (pixels(out) == array).all()


def test_cmyk_jpeg_becomes_rgb():
    cmyk = Image.new("CMYK", (8, 6), (0, 255, 255, 0))  # pure red in CMYK
    out = decode_rgb(saved(cmyk, "JPEG", quality=100))
    assert out.mode == "RGB" and out.size == (8, 6)
    red, green, blue = pixels(out).reshape(-1, 3).mean(axis=0)
    assert red > 200 and green < 60 and blue < 60


def test_16_bit_greyscale_png_is_scaled_not_clipped():
    values = np.array([[0, 257 * 64, 65535]], dtype=np.uint16)
    image = Image.fromarray(values)  # mode I;16
    out = decode_rgb(saved(image, "PNG"))
    assert out.mode == "RGB"
    assert pixels(out)[0, :, 0].tolist() == [0, 64, 255]  # value / 257, not min(value, 255)


def test_alpha_is_composited_over_white():
    rgba = np.zeros((2, 2, 4), dtype=np.uint8)
    rgba[..., 0] = 255          # red
    rgba[0, 0, 3] = 255         # opaque
    rgba[0, 1, 3] = 0           # transparent
    rgba[1, :, 3] = 128         # half
    out = pixels(decode_rgb(saved(Image.fromarray(rgba, "RGBA"), "PNG")))
    assert out[0, 0].tolist() == [255, 0, 0]
    assert out[0, 1].tolist() == [255, 255, 255]
    assert 120 <= out[1, 0, 1] <= 135  # half red over white


def test_greyscale_alpha_and_palette_with_transparency():
    la = Image.fromarray(np.dstack([np.full((3, 3), 10, np.uint8), np.zeros((3, 3), np.uint8)]), "LA")
    assert pixels(decode_rgb(saved(la, "PNG")))[0, 0].tolist() == [255, 255, 255]
    palette = Image.new("P", (4, 4), 0)
    palette.putpalette([0, 0, 255] + [0] * 765)
    palette.info["transparency"] = 0
    assert pixels(decode_rgb(saved(palette, "PNG", transparency=0)))[0, 0].tolist() == [255, 255, 255]
    opaque = Image.new("P", (4, 4), 0)
    opaque.putpalette([0, 0, 255] + [0] * 765)
    assert pixels(decode_rgb(saved(opaque, "GIF")))[0, 0].tolist() == [0, 0, 255]


def test_greyscale_and_one_bit():
    assert pixels(decode_rgb(saved(Image.new("L", (3, 2), 77), "PNG")))[0, 0].tolist() == [77, 77, 77]
    assert pixels(decode_rgb(saved(Image.new("1", (3, 2), 1), "PNG")))[0, 0].tolist() == [255, 255, 255]


@pytest.mark.parametrize("data, reason", [
    (b"", "empty"),
    (b"this is not an image", "not an image"),
])
def test_not_an_image_is_refused_with_a_reason(data, reason):
    with pytest.raises(Undecodable, match=reason):
        decode_rgb(data)


def test_truncated_jpeg_is_refused():
    array = np.random.default_rng(1).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    data = saved(Image.fromarray(array), "JPEG")
    with pytest.raises(Undecodable, match="cannot decode"):
        decode_rgb(data[: len(data) // 2])


def test_decompression_bomb_is_refused_and_the_limit_restored(monkeypatch):
    monkeypatch.setattr(decode, "MAX_PIXELS", 100)
    before = Image.MAX_IMAGE_PIXELS
    with pytest.raises(Undecodable, match="over the limit of 100"):
        decode_rgb(saved(Image.new("RGB", (20, 20)), "PNG"))
    with pytest.raises(Undecodable, match="limit"):  # far over: PIL's own error, named alike
        decode_rgb(saved(Image.new("RGB", (200, 200)), "PNG"))
    assert Image.MAX_IMAGE_PIXELS == before
    assert decode_rgb(saved(Image.new("RGB", (10, 10)), "PNG")).size == (10, 10)


def test_thumbnail_is_a_small_jpeg_of_the_long_side():
    image = Image.fromarray(np.random.default_rng(2).integers(0, 256, (300, 120, 3), dtype=np.uint8))
    data = thumbnail_jpeg(image)
    small = Image.open(io.BytesIO(data))
    assert small.format == "JPEG" and max(small.size) == 64 and small.size[0] < small.size[1]
    assert len(data) < 4000
