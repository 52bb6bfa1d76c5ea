"""The HN-CLIP loss and plain InfoNCE on one batch, in numpy.

HN-CLIP (arXiv 2608.18521): logits = s * (S + gamma * Gbar), with S the batch's
image-text cosine matrix (row i = image i, column j = caption j), Gbar the
caption-caption cosine matrix with a zero diagonal (detached in training; here
there is no gradient anyway) and s the logit scale. The loss is the cross-entropy
with target i in both directions (rows: image -> text, columns: text -> image),
averaged. gamma = 0 is plain InfoNCE.

numpy alone (no torch, no scipy) so the CLI can use it without importing either; the
tests check it against torch.nn.functional.cross_entropy and scipy.special.logsumexp.
"""

from __future__ import annotations

import numpy as np


def logsumexp(values, axis=-1, keepdims: bool = False) -> np.ndarray:
    """log(sum(exp(values))) along ``axis``, computed as scipy.special.logsumexp computes it, to the
    bit (tests/test_hnclip_loss.py): the terms equal to the maximum m (c of them) leave the sum, and
    the result is log1p(sum(exp(x - m)) / c) + log(c) + m. Importing scipy.special takes most of a
    second, about as long as a profile's whole gamma grid takes to compute."""
    values = np.asarray(values)
    if values.dtype.kind != "f":
        values = values.astype(np.float64)
    values = values.reshape(1) if values.ndim == 0 else values
    if values.size == 0:
        shape = list(values.shape)
        shape[axis] = 1
        out = np.full(shape, -np.inf, dtype=values.dtype)
    else:
        with np.errstate(divide="ignore", invalid="ignore"):  # log(0): the NaN/inf rows are redone below
            largest = values.max(axis=axis, keepdims=True)
            at_largest = values == largest
            # (scipy sums the 0/1 mask as floats: the same whole number)
            count = np.count_nonzero(at_largest, axis=axis, keepdims=True).astype(values.dtype)
            terms = np.exp(values - largest)
            terms[at_largest] = 0.0   # exp(-inf), as scipy sets those terms
            rest = np.sum(terms, axis=axis, keepdims=True, dtype=values.dtype)
            rest = np.where(rest == 0, rest, rest / count)
            out = np.log1p(rest) + np.log(count) + largest
        finite = np.isfinite(out)
        if not finite.all():
            # an infinite or NaN term: the plain formula gives what IEEE arithmetic says
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                plain = np.log(np.sum(np.exp(values), axis=axis, keepdims=True))
            out = np.where(finite, out, plain)
    out = out if keepdims else np.squeeze(out, axis=axis)
    return out[()] if out.ndim == 0 else out


def boosted_caption_cosine(text_vectors: np.ndarray) -> np.ndarray:
    """Gbar: the batch's caption-caption cosine matrix with its diagonal set to zero.

    The diagonal is zeroed so a caption's own (positive) logit gets no boost."""
    text_vectors = np.asarray(text_vectors, dtype=np.float64)
    gram = text_vectors @ text_vectors.T
    np.fill_diagonal(gram, 0.0)
    return gram


def _symmetric_cross_entropy(logits: np.ndarray) -> np.ndarray:
    """Mean of the row-wise and column-wise cross-entropy with the diagonal as target.

    ``logits`` has shape (..., B, B); returns shape (...)."""
    diagonal = np.diagonal(logits, axis1=-2, axis2=-1)
    image_to_text = (logsumexp(logits, axis=-1) - diagonal).mean(axis=-1)
    text_to_image = (logsumexp(logits, axis=-2) - diagonal).mean(axis=-1)
    return 0.5 * (image_to_text + text_to_image)


def infonce_loss(similarity: np.ndarray, logit_scale: float) -> float:
    """Plain CLIP InfoNCE of one batch: CE(s * S) in both directions, averaged."""
    similarity = np.asarray(similarity, dtype=np.float64)
    return float(_symmetric_cross_entropy(logit_scale * similarity))


def hnclip_loss(similarity: np.ndarray, caption_cosine_zero_diagonal: np.ndarray, logit_scale: float,
                gamma: float) -> float:
    """HN-CLIP loss of one batch: CE(s * (S + gamma * Gbar)) in both directions, averaged.

    ``caption_cosine_zero_diagonal`` is Gbar (see :func:`boosted_caption_cosine`)."""
    return float(hnclip_loss_grid(similarity, caption_cosine_zero_diagonal, logit_scale, [gamma])[0])


def hnclip_loss_grid(similarity: np.ndarray, caption_cosine_zero_diagonal: np.ndarray, logit_scale: float,
                     gammas) -> np.ndarray:
    """HN-CLIP loss of one batch for each gamma of ``gammas``; shape (len(gammas),)."""
    similarity = np.asarray(similarity, dtype=np.float64)
    boost = np.asarray(caption_cosine_zero_diagonal, dtype=np.float64)
    if similarity.ndim != 2 or similarity.shape[0] != similarity.shape[1] or boost.shape != similarity.shape:
        raise ValueError(f"expected two square matrices of one shape, got {similarity.shape} and {boost.shape}")
    gammas = np.asarray(gammas, dtype=np.float64).reshape(-1, 1, 1)
    logits = logit_scale * (similarity[None] + gammas * boost[None])
    return _symmetric_cross_entropy(logits)
