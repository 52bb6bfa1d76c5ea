"""Dataset in, profile out: the path `capgeo profile` and `capgeo report` share."""

from __future__ import annotations

from pathlib import Path


def profile_dataset(captions, encoder=None, *, device: str | None = None, cache_dir: str | Path | None = None,
                    use_cache: bool = True, max_tokens: int | None = None, progress: bool | None = None,
                    command: str | None = None, gamma: bool = True, logit_scale: float | None = None,
                    **profile_options) -> dict:
    """Load (when given a path), embed and profile a dataset.

    ``captions`` is a CaptionSet or a path read with ``load_captions`` (format
    detected). ``encoder`` is a spec string, a loaded encoder, or None for the
    embedded default. ``profile_options`` go to ``build_profile`` (batch_sizes,
    buckets, relative_buckets, n_batches, top_k, block_size, seed,
    near_duplicate_threshold, mode, include_companions, ...). Returns the
    ``capgeo.profile/1`` dict (docs/profile-schema.md). With ``gamma`` (the
    default) it also holds the ``gamma`` section (`capgeo gamma`, docs/gamma.md) at
    the profile's batch sizes, with ``logit_scale`` overriding the checkpoint's.
    """
    from capgeo.encoders import embed
    from capgeo.geometry.batch_size import resolve_batch_sizes
    from capgeo.geometry.profile import build_profile

    if isinstance(captions, (str, Path)):
        from capgeo.captions import load_captions

        captions = load_captions(captions)
    resolve_batch_sizes(profile_options.get("batch_sizes"), captions.n_groups)   # fail before the (slow) encoding
    embeddings = embed(captions, encoder, device=device, cache_dir=cache_dir, use_cache=use_cache,
                       max_tokens=max_tokens, progress=progress)
    profile = build_profile(captions, embeddings, device=device, progress=progress, command=command,
                            **profile_options)
    if gamma:
        add_gamma_section(profile, captions, embeddings, logit_scale=logit_scale, progress=progress)
    return profile


def add_gamma_section(profile: dict, captions, embeddings, *, logit_scale: float | None = None,
                      progress: bool | None = None) -> str | None:
    """Add the ``gamma`` section (`capgeo gamma`) at the profile's own batch sizes, batch
    count and seed. Returns why it was left out, or None."""
    from capgeo.findings.gamma import gamma_section
    from capgeo.geometry.batch_size import DEFAULT_N_BATCHES, MIN_GAMMA_BATCH_SIZE, gamma_batch_size_problem

    options = profile.get("options") or {}
    sizes = [entry["batch_size"] for entry in profile.get("batches") or []]
    if not sizes or sizes[0] < MIN_GAMMA_BATCH_SIZE:
        # never headline an extra batch size: without the headline there is no gamma to show
        return f"Gamma diagnostics: left out, {gamma_batch_size_problem(sizes[0] if sizes else 0)} (docs/gamma.md)."
    profile["gamma"] = gamma_section(embeddings, captions.group_codes, logit_scale=logit_scale,
                                     batch_sizes=[size for size in sizes if size >= MIN_GAMMA_BATCH_SIZE],
                                     n_batches=options.get("n_batches", DEFAULT_N_BATCHES), seed=options.get("seed", 0),
                                     progress=progress)
    return None
