"""Hand-offs to the training run: the HN-CLIP loss and a batch sampler, importable without the CLI."""
