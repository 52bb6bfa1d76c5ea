"""What capgeo hands to a training run: HN-CLIP's loss in torch (:mod:`capgeo.training.loss`).

torch is imported by the submodules only, so ``import capgeo.training`` stays light."""

__all__ = ["HNCLIPLoss", "hnclip_loss"]


def __getattr__(name: str):
    if name in __all__:
        from capgeo.training import loss

        return getattr(loss, name)
    raise AttributeError(f"module 'capgeo.training' has no attribute {name!r}")
