"""Hand-offs to the training run: the HN-CLIP loss (:mod:`capgeo.training.loss`) and a batch sampler,
importable without the CLI. torch is imported by the submodules only, so ``import capgeo.training``
stays light."""

__all__ = ["HNCLIPLoss", "hnclip_loss"]


def __getattr__(name: str):
    if name in __all__:
        from capgeo.training import loss

        return getattr(loss, name)
    raise AttributeError(f"module 'capgeo.training' has no attribute {name!r}")
