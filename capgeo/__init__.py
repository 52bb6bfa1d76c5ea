"""capgeo: profile the geometry of an image-caption dataset's captions.

Data flow, one subpackage per stage:
    captions  -> load a benchmark's captions into a CaptionSet
    encoders  -> turn captions into normalised text embeddings (cached)
    geometry  -> pairwise / hardest-companion / in-batch statistics
    findings  -> near-duplicates, gamma suggestion, truncation analysis
    report    -> self-contained HTML

Heavy libraries (torch, open_clip, sentence-transformers) are imported only
inside the functions that need them, so importing capgeo stays fast.
"""

__version__ = "0.1.0"

#: public names of submodules, imported on first use (PEP 562) so that ``import capgeo`` loads nothing
_EXPORTS = {
    "EncodeOptions": "capgeo.pipeline",
    "ProfileOptions": "capgeo.geometry.profile_options",
    "Profile": "capgeo.geometry.typed_profile",
    "load_captions": "capgeo.captions",
}

#: the keyword arguments of profile() that say how to read ``data`` (load_captions'); the rest are ProfileOptions'
_LOAD_OPTIONS = ("format", "text_column", "captions_column", "id_column", "group_column", "split", "limit")


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'capgeo' has no attribute {name!r}")


def profile(data, encoder=None, batch_size=None, *, device: str | None = None, cache_dir=None,
            use_cache: bool = True, max_tokens: int | None = None, gamma: bool = True,
            logit_scale: float | None = None, progress: bool | None = None, **options):
    """The profile of a dataset's captions in one call: what `capgeo profile DATA --json` writes,
    as a typed :class:`capgeo.geometry.typed_profile.Profile` (``plain(profile)`` gives the dict).

    ``data``: anything :func:`capgeo.captions.load_captions` reads (a path, a glob of shards, a
    polars or pandas DataFrame, a list of dicts, a ``datasets.Dataset``...), read as its
    keyword arguments ``format``, ``text_column``, ..., ``limit`` say. ``encoder``: a spec
    (`capgeo encoders`: "ViT-L-14/openai", "longclip-L", "vectors:emb.npy"), a loaded encoder, or
    None for the embedded all-MiniLM-L6-v2. ``batch_size``: your training run's effective
    contrastive batch, or several (headline first); None: the policy's 128, or every image of a
    smaller dataset. With ``gamma`` (the default) the suggested HN-CLIP gamma is included. Other
    keyword arguments are :class:`capgeo.geometry.profile_options.ProfileOptions` fields (seed,
    n_batches, buckets, top_k, near_duplicate_threshold, mode, ...). Raises capgeo's errors
    (capgeo.errors) for bad data or options.
    """
    import numbers

    from capgeo.captions import load_captions
    from capgeo.errors import CapgeoError
    from capgeo.geometry.profile_options import ProfileOptions
    from capgeo.geometry.typed_profile import Profile
    from capgeo.pipeline import EncodeOptions, profile_dataset

    if batch_size is not None:
        if "batch_sizes" in options:
            raise CapgeoError("give batch_size or batch_sizes, not both")
        options["batch_sizes"] = (batch_size,) if isinstance(batch_size, numbers.Integral) else tuple(batch_size)
    load_options = {name: options.pop(name) for name in _LOAD_OPTIONS if name in options}
    captions = load_captions(data, **load_options)
    encode = EncodeOptions(encoder, device=device, cache_dir=cache_dir, use_cache=use_cache, max_tokens=max_tokens)
    result = profile_dataset(captions, encode, ProfileOptions.of(None, **options), gamma=gamma,
                             logit_scale=logit_scale, progress=progress)
    return Profile.from_dict(result)
