"""HN-CLIP's loss in torch, for a training run (arXiv 2608.18521).

    logits = s * (S + gamma * Gbar),  S = image @ text.T,  Gbar = stopgrad(text @ text.T), zero diagonal

with cross-entropy against the diagonal in both directions (image -> text rows, text -> image
columns), averaged. gamma = 0 is CLIP's InfoNCE. Gbar is detached: the boost says which negatives
matter, it is not itself trained. The numpy version the profile uses is
:mod:`capgeo.findings.hnclip_loss`; tests/test_training_loss.py checks the two against each other.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

#: the paper's defaults
DEFAULT_GAMMA = 0.5
DEFAULT_LOGIT_SCALE = 100.0


def hnclip_logits(image_features: torch.Tensor, text_features: torch.Tensor, gamma: float,
                  logit_scale: float | torch.Tensor) -> torch.Tensor:
    """s * (S + gamma * Gbar) for L2-normalised (B, d) features; row i = image i."""
    if image_features.ndim != 2 or image_features.shape != text_features.shape:
        raise ValueError(f"expected two (B, d) feature matrices of one shape, got {tuple(image_features.shape)} "
                         f"and {tuple(text_features.shape)}")
    similarity = image_features @ text_features.T
    if gamma == 0:
        return logit_scale * similarity
    with torch.no_grad():
        boost = text_features @ text_features.T
        boost.fill_diagonal_(0.0)
    return logit_scale * (similarity + gamma * boost)


def symmetric_cross_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Mean of the row-wise and the column-wise cross-entropy with the diagonal as target."""
    target = torch.arange(logits.shape[0], device=logits.device)
    return 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target))


def hnclip_loss(image_features: torch.Tensor, text_features: torch.Tensor, gamma: float = DEFAULT_GAMMA,
                logit_scale: float | torch.Tensor = DEFAULT_LOGIT_SCALE) -> torch.Tensor:
    """HN-CLIP's loss of one batch (a scalar tensor); features L2-normalised, row i of each a pair."""
    return symmetric_cross_entropy(hnclip_logits(image_features, text_features, gamma, logit_scale))


class HNCLIPLoss(nn.Module):
    """HN-CLIP's loss as a module: ``HNCLIPLoss(gamma=0.5, logit_scale=100.0)(image_features, text_features)``.

    ``logit_scale`` is s itself (CLIP's ``logit_scale.exp()``); pass a tensor to the call instead
    (``logit_scale=model.logit_scale.exp()``) to train it."""

    def __init__(self, gamma: float = DEFAULT_GAMMA, logit_scale: float = DEFAULT_LOGIT_SCALE):
        super().__init__()
        if not gamma >= 0:
            raise ValueError(f"gamma must be 0 or more, got {gamma}")
        if not logit_scale > 0:
            raise ValueError(f"logit_scale must be positive, got {logit_scale}")
        self.gamma, self.logit_scale = float(gamma), float(logit_scale)

    def forward(self, image_features: torch.Tensor, text_features: torch.Tensor,
                logit_scale: torch.Tensor | None = None) -> torch.Tensor:
        scale = self.logit_scale if logit_scale is None else logit_scale
        return hnclip_loss(image_features, text_features, self.gamma, scale)

    def extra_repr(self) -> str:
        return f"gamma={self.gamma:g}, logit_scale={self.logit_scale:g}"
