"""Image bytes to an RGB picture, whatever kind the file is, or the reason it cannot be one.

CMYK, greyscale, 16-bit and 32-bit, palette and alpha images are converted to 8-bit RGB
(alpha composited over white, as a viewer shows it; 16-bit scaled, not clipped). An image
that does not decode, is truncated, or holds more than :data:`MAX_PIXELS` pixels (a
decompression bomb) is refused with a short reason; the caller counts and names them.
"""

from __future__ import annotations

import io

import numpy as np

from capgeo.defaults import IMAGE_MAX_PIXELS as MAX_PIXELS, THUMBNAIL_QUALITY, THUMBNAIL_SIDE


class Undecodable(Exception):
    """Why an image's bytes are not a picture (its message is the reason, in a few words)."""


def decode_rgb(data: bytes):
    """An 8-bit RGB PIL image of ``data``; Undecodable with the reason otherwise (over
    :data:`MAX_PIXELS` pixels included)."""
    import warnings

    from PIL import Image, UnidentifiedImageError

    if not data:
        raise Undecodable("empty")
    previous = Image.MAX_IMAGE_PIXELS
    Image.MAX_IMAGE_PIXELS = MAX_PIXELS
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
            width, height = image.size
            if width * height > MAX_PIXELS:
                raise Undecodable(f"{width} x {height} pixels, over the limit of {MAX_PIXELS:,}")
            image.load()
    except Undecodable:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as error:
        raise Undecodable(f"over the limit of {MAX_PIXELS:,} pixels ({error})".split(" could be")[0]) from None
    except UnidentifiedImageError:
        raise Undecodable("not an image PIL can read") from None
    except (OSError, ValueError, SyntaxError, EOFError) as error:  # truncated, corrupt
        raise Undecodable(f"cannot decode: {str(error).splitlines()[0] if str(error) else type(error).__name__}") \
            from None
    finally:
        Image.MAX_IMAGE_PIXELS = previous
    return to_rgb(image)


def to_rgb(image):
    """``image`` as 8-bit RGB: alpha over white, high bit depths scaled down."""
    from PIL import Image

    mode = image.mode
    if mode == "RGB":
        return image
    if mode == "P":
        image = image.convert("RGBA" if "transparency" in image.info else "RGB")
        mode = image.mode
    if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        pixels = np.asarray(image, dtype=np.float64)
        # 16-bit PNGs load as I;16 or I: 0..65535; a float image: 0..1 when it is no more than that
        full_scale = 65535.0 if mode != "F" or pixels.max(initial=0) > 1.0 else 1.0
        if mode == "I" and pixels.max(initial=0) > 65535:
            full_scale = float(pixels.max())
        scaled = np.clip(np.rint(pixels / full_scale * 255.0), 0, 255).astype(np.uint8)
        return Image.fromarray(scaled, "L").convert("RGB")
    if mode in ("RGBA", "LA", "PA", "RGBa", "La") or (mode == "RGBX"):
        rgba = image.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    return image.convert("RGB")  # L, 1, CMYK, YCbCr, LAB, HSV


def thumbnail_jpeg(image, side: int = THUMBNAIL_SIDE, quality: int = THUMBNAIL_QUALITY) -> bytes:
    """A small JPEG of an RGB image, ``side`` pixels on its long side."""
    from PIL import Image

    small = image.copy()
    small.thumbnail((side, side), Image.Resampling.BICUBIC)
    buffer = io.BytesIO()
    small.save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()
