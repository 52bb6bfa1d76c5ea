"""The image side of a dataset: one vector per image, for the pair analyses.

A CaptionSet's groups are its images. :class:`ImageVectors` holds one vector per group
(row g for group code g), from the encoder's own vision tower or from a file of vectors
made elsewhere (``--image-embeddings``); the pair findings (image-text alignment,
cross-modal false negatives, saturation at the training batch, image twins) read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class ImageVectors:
    """One unit vector per image of a CaptionSet, row g for group code g."""

    #: (n_groups, d) float32, unit rows; the rows of images that are not ``present`` are zeros
    vectors: np.ndarray
    #: (n_groups,) bool: False where the image was missing or could not be decoded
    present: np.ndarray
    #: what the vectors came from: the encoder spec, or the --image-embeddings file
    source: str
    #: sha256 hex of each image's bytes, None where unknown (vectors read from a file)
    content_hashes: tuple[str | None, ...] | None = None
    #: images missing or undecodable, and the first few of them named
    n_skipped: int = 0
    skipped_examples: tuple[str, ...] = ()
    #: small JPEG bytes of group g's image, None where there is none; None: no thumbnails at all
    thumbnail: Callable[[int], bytes | None] | None = field(default=None, repr=False, compare=False)

    @property
    def n_images(self) -> int:
        return int(self.present.sum())


def image_vectors(captions, encode_options=None, *, images_root=None, image_embeddings=None, progress=None,
                  notes: list | None = None) -> ImageVectors | None:
    """The images of ``captions`` as :class:`ImageVectors`, from the encoder's vision tower or from
    ``image_embeddings`` (a file); None where there are none (see capgeo.images.vectors)."""
    from capgeo.images.vectors import image_vectors as made

    return made(captions, encode_options, images_root=images_root, image_embeddings=image_embeddings,
                progress=progress, notes=notes)


def image_thumbnails(captions, images_root=None):
    """Group g's thumbnail (small JPEG bytes, or None), read and made when first asked for, for a
    dataset that names its images; None for one that names none. Nothing is encoded: the map's hover
    needs the images, not their vectors."""
    from capgeo.images.sources import locate
    from capgeo.images.vectors import Thumbnails

    located = locate(captions, images_root)
    return None if located is None else Thumbnails(located.refs)
