"""capgeo.HNCLIPLoss against the numpy loss of the profile and against the paper's formula written out."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from capgeo.findings.hnclip_loss import boosted_caption_cosine, hnclip_loss as numpy_hnclip_loss  # noqa: E402
from capgeo.training.loss import HNCLIPLoss, hnclip_loss  # noqa: E402


def _pairs(batch: int = 12, width: int = 16, seed: int = 0, dtype=torch.float64):
    rng = np.random.default_rng(seed)
    image = rng.standard_normal((batch, width))
    text = image + 0.8 * rng.standard_normal((batch, width))
    image /= np.linalg.norm(image, axis=1, keepdims=True)
    text /= np.linalg.norm(text, axis=1, keepdims=True)
    return torch.tensor(image, dtype=dtype), torch.tensor(text, dtype=dtype)


def _written_formula(image, text, gamma, scale, boost):
    """The paper's loss written out: logits = s (S + gamma Gbar), -log softmax of the diagonal by rows
    and by columns, averaged; ``boost`` is Gbar, given (a constant: what the detach makes it)."""
    logits = scale * (image @ text.T + gamma * boost)
    diagonal = torch.diagonal(logits)
    rows = torch.logsumexp(logits, dim=1) - diagonal
    columns = torch.logsumexp(logits, dim=0) - diagonal
    return 0.5 * (rows.mean() + columns.mean())


@pytest.mark.parametrize("gamma", [0.0, 0.25, 0.5, 1.0])
@pytest.mark.parametrize("scale", [1.0, 30.0, 100.0])
def test_equals_the_numpy_loss(gamma, scale):
    image, text = _pairs(dtype=torch.float32)
    mine = HNCLIPLoss(gamma, scale)(image, text).item()
    a, t = image.double().numpy(), text.double().numpy()
    theirs = numpy_hnclip_loss(a @ t.T, boosted_caption_cosine(t), scale, gamma)
    assert mine == pytest.approx(theirs, rel=1e-6, abs=1e-6)
    assert hnclip_loss(image.double(), text.double(), gamma, scale).item() == pytest.approx(theirs, rel=1e-12)


def test_gradients_are_those_of_the_written_formula_with_gbar_detached():
    image, text = _pairs(seed=1)
    gamma, scale = 0.5, 20.0   # a batch far from saturated: every gradient well above rounding
    boost = (text @ text.T).fill_diagonal_(0.0)
    image_a, text_a = image.clone().requires_grad_(), text.clone().requires_grad_()
    HNCLIPLoss(gamma, scale)(image_a, text_a).backward()
    image_b, text_b = image.clone().requires_grad_(), text.clone().requires_grad_()
    _written_formula(image_b, text_b, gamma, scale, boost).backward()
    assert torch.allclose(image_a.grad, image_b.grad, rtol=1e-10, atol=1e-13)
    assert torch.allclose(text_a.grad, text_b.grad, rtol=1e-10, atol=1e-13)
    # the detach matters: with Gbar left in the graph the text gradient is another one
    text_c = text.clone().requires_grad_()
    live_boost = text_c @ text_c.T * (1 - torch.eye(len(text_c), dtype=text_c.dtype))
    _written_formula(image, text_c, gamma, scale, live_boost).backward()
    assert (text_c.grad - text_a.grad).abs().max() > 1e-2 * text_a.grad.abs().max()


def test_gradcheck_in_float64():
    """Finite differences against the analytic gradient; the image side (Gbar does not depend on it), and
    the text side through the function with Gbar computed outside it (what the detach means)."""
    image, text = _pairs(batch=6, width=5, seed=3)
    loss = HNCLIPLoss(0.75, 10.0)
    assert torch.autograd.gradcheck(lambda a: loss(a, text), (image.clone().requires_grad_(),))
    boost = (text @ text.T).fill_diagonal_(0.0)
    assert torch.autograd.gradcheck(lambda t: _written_formula(image, t, 0.75, 10.0, boost),
                                    (text.clone().requires_grad_(),))
    # the module's text gradient is the one gradcheck just confirmed for the constant-Gbar formula
    text_a, text_b = text.clone().requires_grad_(), text.clone().requires_grad_()
    loss(image, text_a).backward()
    _written_formula(image, text_b, 0.75, 10.0, boost).backward()
    assert torch.allclose(text_a.grad, text_b.grad, rtol=1e-10, atol=1e-13)


def test_gamma_zero_is_clip_infonce_and_the_logit_scale_can_be_a_tensor():
    image, text = _pairs()
    target = torch.arange(len(image))
    logits = 100.0 * image @ text.T
    clip = 0.5 * (torch.nn.functional.cross_entropy(logits, target)
                  + torch.nn.functional.cross_entropy(logits.T, target))
    assert HNCLIPLoss(0.0)(image, text).item() == pytest.approx(clip.item(), rel=1e-12)
    scale = torch.tensor(4.6, dtype=torch.float64, requires_grad=True)
    HNCLIPLoss(0.5)(image, text, logit_scale=scale.exp()).backward()
    assert scale.grad is not None and torch.isfinite(scale.grad)


def test_refuses_bad_arguments_and_is_exported():
    import capgeo

    assert capgeo.HNCLIPLoss is HNCLIPLoss
    with pytest.raises(ValueError):
        HNCLIPLoss(gamma=-0.1)
    with pytest.raises(ValueError):
        HNCLIPLoss(logit_scale=0)
    with pytest.raises(ValueError):
        HNCLIPLoss()(torch.zeros(3, 4), torch.zeros(4, 4))
