"""capgeo from Python in one call per question: the profile, near-duplicate pairs, train/eval leakage, a gamma.

Each function takes a dataset as :func:`capgeo.captions.load_captions` does (a path, a glob, a
polars or pandas DataFrame, a pyarrow Table, a ``datasets.Dataset``, a list of captions or of
dicts, or a CaptionSet already loaded; ``load_options`` such as ``text_column`` go to the
loader) and an encoder: a spec string (``"longclip-L"``, ``"vectors:emb.npy"``; None = the
embedded default), Embeddings from :func:`capgeo.encoders.embed`, or precomputed vectors (an
(N, d) array, row i for caption i). Each returns a frozen dataclass whose ``to_dict()`` is the
matching command's ``--json`` object and, where the result is a table, ``to_polars()``.

Results are computed by the same library calls as the commands (capgeo.findings); this module
only loads, embeds and wraps, so ``import capgeo`` stays light: everything numerical is
imported inside the functions.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence, TypedDict

from capgeo.arguments import checked_arguments, keyword_annotations
from capgeo.defaults import DUPES_TOP

if TYPE_CHECKING:
    from typing import Unpack

    from capgeo.geometry.typed_profile import Leak
    from capgeo.training.plan import BatchPlan

__all__ = ["profile", "NearDuplicates", "Leak", "EvalLeak", "GammaSuggestion", "BatchPlan", "near_duplicates", "leak",
           "suggest_gamma", "plan_batches"]


# --------------------------------------------------------------------------- results


def __getattr__(name: str):
    # the results are the commands' own typed classes, imported on first use so that `import capgeo`
    # loads nothing else: NearDuplicates is the `capgeo dupes` result (NearDuplicatePairs), Leak and
    # EvalLeak the `capgeo leak` result that the report's section holds too, BatchPlan the `capgeo
    # batches` result
    if name == "NearDuplicates":
        from capgeo.findings.duplicates import NearDuplicatePairs

        return NearDuplicatePairs
    if name in ("Leak", "EvalLeak"):
        from capgeo.geometry import typed_profile

        return getattr(typed_profile, name)
    if name == "BatchPlan":
        from capgeo.training.plan import BatchPlan

        return BatchPlan
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class GammaSuggestion:
    """A starting HN-CLIP gamma with its plausible range (`capgeo gamma`, docs/gamma.md): the measured
    one where a sweep ran (``sweep=True``), else the rule's instant estimate. A view of the typed
    ``capgeo.profile/1`` Profile the gamma command makes (``profile``), its one source."""

    profile: Any = field(repr=False)   # capgeo.geometry.typed_profile.Profile with its gamma section

    def __repr__(self) -> str:
        return (f"GammaSuggestion(gamma={self.gamma!r}, range={self.range!r}, batch_size={self.batch_size!r}, "
                f"measured_gamma={self.measured_gamma!r})")

    @property
    def gamma(self) -> float:
        """The headline: the measured gamma where a sweep ran, else the rule's."""
        return self.profile.gamma.headline_gamma

    @property
    def range(self) -> tuple[float, float]:
        """The measured plateau where a sweep ran, else the rule's range."""
        sweep = self.profile.gamma.sweep
        if sweep:
            return min(sweep["plateau"]), max(sweep["plateau"])
        low, high = self.profile.gamma.suggested_range
        return low, high

    @property
    def batch_size(self) -> int:
        """The headline batch size it is for."""
        return self.profile.gamma.headline_batch_size

    @property
    def logit_scale(self) -> float:
        return self.profile.gamma.logit_scale

    @property
    def logit_scale_source(self) -> str:
        return self.profile.gamma.logit_scale_source

    @property
    def margin_matched_gamma(self) -> float | None:
        """A diagnostic (docs/gamma.md), not a second suggestion."""
        return self.profile.gamma.margin_matched_gamma

    @property
    def encoder_caution(self) -> str | None:
        """Set when the encoder is not a tower training fine-tunes."""
        return self.profile.gamma.encoder_caution

    @property
    def batches(self) -> tuple[dict, ...]:
        """Per batch size: suggestion, margins, why, grid (docs/gamma.md), as JSON objects."""
        return tuple(entry.to_dict() for entry in self.profile.gamma.batches)

    @property
    def rule_gamma(self) -> float:
        """The rule's instant estimate (concentration view)."""
        return self.profile.gamma.suggested_gamma

    @property
    def measured_gamma(self) -> float | None:
        """The best gamma of the proxy fine-tune sweep; None: none ran."""
        return self.profile.gamma.measured_gamma

    @property
    def sweep(self) -> dict | None:
        """The measured curve (the gamma section's ``sweep``) as a JSON object, or None."""
        return self.profile.gamma.to_dict().get("sweep") if self.profile.gamma.sweep else None

    @property
    def headline(self) -> str:
        """The gamma as every first screen gives it ("0.5 measured (plateau 0.25-1; ...) at B=128; the
        rule's instant estimate 0.13", or the rule's "0.13 (range 0.06-0.19) at B=128")."""
        from capgeo.geometry.typed_profile import Gamma
        from capgeo.report.summary import headline_gamma_text

        return headline_gamma_text(self.profile.gamma)

    def to_dict(self) -> dict:
        """The `capgeo gamma --json` object (a ``capgeo.profile/1`` with its gamma section)."""
        return self.profile.to_dict()

    def to_polars(self):
        """The diagnostics table: one row per (batch size, gamma of the grid)."""
        rows = [{"batch_size": entry["batch_size"], **row} for entry in self.batches for row in entry["grid"]]
        return _frame(rows, ("batch_size",))


def _frame(rows: Sequence[dict], columns: Sequence[str]):
    import polars as pl

    if not rows:
        return pl.DataFrame(schema={column: pl.String for column in columns})
    return pl.DataFrame(list(rows), infer_schema_length=None)


# --------------------------------------------------------------------------- inputs


def _embeddings(captions, encoder, *, device, cache_dir, role: str = "vectors"):
    """Embeddings of ``captions``: ``encoder`` as Embeddings, as (N, d) vectors, or a spec (or an
    encoder already loaded) to embed with (capgeo.pipeline.embed_captions)."""
    from capgeo.pipeline import EncodeOptions, embed_captions

    if _is_spec(encoder):
        return embed_captions(captions, EncodeOptions(encoder, device=device, cache_dir=cache_dir))
    return embed_captions(captions, vectors=encoder, role=role)


def _is_spec(encoder) -> bool:
    """A spec, None (the embedded default) or a loaded encoder: something that embeds the captions,
    not Embeddings or vectors of them."""
    from capgeo.pipeline import is_embeddings

    if is_embeddings(encoder):
        return False
    return encoder is None or isinstance(encoder, str) or hasattr(encoder, "encode")


# --------------------------------------------------------------------------- the calls


class EncodeArguments(TypedDict, total=False):
    """How the captions are embedded (capgeo.pipeline.EncodeOptions' fields, its defaults)."""

    #: cuda, mps or cpu; None: the best available
    device: str | None
    #: the embedding cache folder; None: $CAPGEO_CACHE or ~/.cache/capgeo
    cache_dir: str | os.PathLike | None


class ProfileArguments(EncodeArguments, total=False):
    """:func:`profile`'s keyword arguments beside the reading options and ProfileOptions' fields
    (their defaults: EncodeOptions' and capgeo.pipeline.ProfileSections')."""

    use_cache: bool
    max_tokens: int | None
    gamma: bool
    logit_scale: float | None
    progress: bool | None
    image_embeddings: Any
    sweep: Any


class LeakArguments(TypedDict, total=False):
    """:func:`leak`'s keyword arguments beside the reading options (their defaults: leak_section's,
    capgeo.defaults)."""

    threshold: float
    top: int
    normalize: str
    device: str | None
    cache_dir: str | os.PathLike | None


class GammaArguments(TypedDict, total=False):
    """:func:`suggest_gamma`'s keyword arguments beside the reading options (their defaults:
    gamma_section's)."""

    logit_scale: float | None
    seed: int
    grid: Sequence[float] | None
    device: str | None
    cache_dir: str | os.PathLike | None
    sweep: Any
    progress: bool | None


class BatchArguments(TypedDict, total=False):
    """:func:`plan_batches`' keyword arguments beside the reading options (their defaults:
    capgeo.pipeline.BatchesOptions')."""

    threshold: float | None
    seed: int
    epochs: int
    device: str | None
    cache_dir: str | os.PathLike | None


def _popped(options: dict, names) -> dict:
    """The entries of ``options`` that ``names`` lists (popped), so that the options' own defaults apply
    to the rest."""
    return {name: options.pop(name) for name in list(options) if name in names}


def _load_options() -> dict:
    """The keyword arguments that say how to read ``data``: load_captions', with their annotations."""
    from capgeo.captions import load_captions

    return {name: kind for name, kind in keyword_annotations(load_captions).items() if name != "path"}


def _profile_options() -> dict:
    """ProfileOptions' fields, with their annotations: the rest of profile()'s keyword arguments."""
    import dataclasses

    from capgeo.geometry.profile_options import ProfileOptions

    return {field.name: field.type for field in dataclasses.fields(ProfileOptions)}


@checked_arguments(_load_options, _profile_options)
def profile(data, encoder=None, batch_size: int | Sequence[int] | None = None, **options: Unpack[ProfileArguments]):
    """The profile of a dataset's captions in one call: what `capgeo profile DATA --json` writes,
    as a typed :class:`capgeo.geometry.typed_profile.Profile` (``profile.to_dict()`` gives the dict).

    ``data``: anything :func:`capgeo.captions.load_captions` reads (a path, a glob of shards, a
    polars or pandas DataFrame, a list of dicts, a ``datasets.Dataset``...), read as its
    keyword arguments ``format``, ``text_column``, ..., ``limit`` say. ``encoder``: a spec
    (`capgeo encoders`: "ViT-L-14/openai", "longclip-L", "vectors:emb.npy"), a loaded encoder, or
    None for the embedded all-MiniLM-L6-v2. ``batch_size``: your training run's effective
    contrastive batch, or several (headline first); None: the policy's 128, or every image of a
    smaller dataset. With ``gamma`` (the default) the suggested HN-CLIP gamma is included. Other
    keyword arguments are :class:`capgeo.geometry.profile_options.ProfileOptions` fields (seed,
    n_batches, buckets, top_k, near_duplicate_threshold, mode, ...). ``image_embeddings``: image vectors
    of the same CLIP (a file, an array in group-code order, or capgeo.images.ImageVectors) add the
    ``pairs`` section (docs/pairs.md). ``sweep``: True (or a
    capgeo.findings.gamma_sweep.SweepOptions) measures gamma too, a short proxy fine-tune on the
    vectors (docs/gamma.md); ``profile.gamma.measured_gamma`` is then the headline, the rule's
    ``suggested_gamma`` its instant estimate. Raises capgeo's errors (capgeo.errors) for bad data or options.
    """
    import numbers

    from capgeo.errors import CapgeoError
    from capgeo.geometry.profile_options import ProfileOptions
    from capgeo.pipeline import EncodeOptions, ProfileSections, loaded_captions, options_from, pair_options, run_profile

    if batch_size is not None:
        if "batch_sizes" in options:
            raise CapgeoError("profile(): give batch_size or batch_sizes, not both")
        options["batch_sizes"] = (batch_size,) if isinstance(batch_size, numbers.Integral) else tuple(batch_size)
    load_options = _popped(options, _load_options())
    captions = loaded_captions(data, load_options)
    progress = options.pop("progress", None)
    encode = options_from(EncodeOptions, options, encoder=encoder)
    sections = options_from(ProfileSections, options, pairs=pair_options(options.pop("image_embeddings", None)))
    run = run_profile(captions, encode, ProfileOptions.of(None, **options), sections=sections, progress=progress)
    # kept for profile.per_caption() and profile.to_html(): the one-call user has no captions or embeddings
    return run.profile._keeping(run.captions, run.embeddings)


@checked_arguments(_load_options)
def near_duplicates(data, *, encoder: Any = None, threshold: float | None = None, top: int | None = DUPES_TOP,
                    skip_exact: bool = False, device: str | None = None, cache_dir: str | os.PathLike | None = None,
                    **load_options) -> "NearDuplicates":
    """The ``top`` most similar caption pairs of different images at or above ``threshold``
    (None: no floor), most similar first, exactly as `capgeo dupes` lists them; ``top`` 0 or
    None lists every such pair. ``skip_exact`` leaves exact copies out.

    >>> found = capgeo.near_duplicates("data/docci_sample.jsonlines", threshold=0.8, top=None)
    >>> found.n_near_duplicate_pairs, found.to_polars().select("id_a", "id_b", "cosine")
    """
    from capgeo.pipeline import EncodeOptions, dupes_dataset, loaded_captions

    captions = loaded_captions(data, load_options)
    if _is_spec(encoder):  # embedded (and checked, its cache folder too) by the pipeline
        encode, embeddings = EncodeOptions(encoder, device=device, cache_dir=cache_dir), None
    else:
        encode, embeddings = EncodeOptions(device=device), _embeddings(captions, encoder, device=device,
                                                                       cache_dir=cache_dir)
    return dupes_dataset(captions, "pairs", encode, embeddings=embeddings, threshold=threshold, top=top,
                         skip_exact=skip_exact)


@checked_arguments(_load_options)
def leak(train, eval_set, *more_evals, encoder: Any = None, **options: Unpack[LeakArguments]) -> Leak:
    """The captions of ``eval_set`` (and of each of ``more_evals``) with an exact or near twin
    (cosine >= ``threshold``) in ``train``, under one encoder, as `capgeo leak` finds them.
    ``encoder``: a spec (None: the embedded default) that embeds every set, or one array of
    vectors (or Embeddings) per set, train first (``[train_vectors, eval_vectors]``).

    >>> found = capgeo.leak("train.json", "test.json", encoder="longclip-L")
    >>> found.evals[0].share_leaked, found.train_ids_to_drop[:5]
    """
    from capgeo.findings.leak import leak_section
    from capgeo.pipeline import loaded_captions, vectors_for_different_sets

    device, cache_dir = options.pop("device", None), options.pop("cache_dir", None)
    load_options = _popped(options, _load_options())
    train_set = loaded_captions(train, load_options)
    eval_sets = [loaded_captions(data, load_options) for data in (eval_set, *more_evals)]
    sets = [train_set, *eval_sets]
    if encoder is None or isinstance(encoder, str):
        encoder = vectors_for_different_sets(encoder, train_set, eval_sets)  # a vectors file fits sets by id
        per_set = [encoder] * len(sets)
    else:
        per_set = list(encoder)
        if len(per_set) != len(sets):
            from capgeo.errors import CapgeoError

            raise CapgeoError(f"encoder: {len(per_set)} arrays of vectors for {len(sets)} caption sets; "
                              "give one per set, train first")
    roles = ["train vectors", *(f"eval vectors {k}" for k in range(1, len(eval_sets) + 1))]
    train_embeddings, *eval_embeddings = [_embeddings(captions, vectors, device=device, cache_dir=cache_dir,
                                                      role=role)
                                          for captions, vectors, role in zip(sets, per_set, roles)]
    from capgeo.pipeline import ARRAY_SPEC

    fingerprints = {embeddings.info.fingerprint for embeddings in (train_embeddings, *eval_embeddings)
                    if embeddings.info.spec == ARRAY_SPEC}
    if fingerprints:  # arrays, one per set, stand for one encoder: a fingerprint of them all
        import dataclasses
        import hashlib

        joint = hashlib.sha256("".join(sorted(fingerprints)).encode()).hexdigest()
        train_embeddings, *eval_embeddings = [
            dataclasses.replace(e, info=dataclasses.replace(e.info, fingerprint=joint))
            if e.info.spec == ARRAY_SPEC else e for e in (train_embeddings, *eval_embeddings)]
    return leak_section(train_set, train_embeddings, list(zip(eval_sets, eval_embeddings)), device=device,
                        **options)


@checked_arguments(_load_options)
def suggest_gamma(data, *, encoder: Any = None, batch_size: int | Sequence[int] | None = None,
                  **options: Unpack[GammaArguments]) -> GammaSuggestion:
    """A starting HN-CLIP gamma for these captions under ``encoder``, at the training batch
    ``batch_size`` (default 128, the paper's; several: the first is the headline) and logit
    scale (default: the checkpoint's, else 100), as `capgeo gamma` suggests it; ``grid``: the
    gamma values of the diagnostics table (default: `capgeo gamma`'s). ``sweep``: True (or a
    capgeo.findings.gamma_sweep.SweepOptions) measures gamma too, as `capgeo gamma --sweep` does
    (the caption-caption proxy, on ``device``): ``.gamma`` is then the measured gamma, ``.rule_gamma``
    the rule's instant estimate, ``.sweep`` the curve.

    >>> capgeo.suggest_gamma("captions.json", encoder="longclip-L", batch_size=256).gamma
    """
    from capgeo.findings.gamma import gamma_profile
    from capgeo.geometry.batch_size import check_gamma_batch_size, resolve_batch_sizes
    from capgeo.pipeline import checked_dataset, checked_sweep, loaded_captions, with_sweep

    device, cache_dir = options.pop("device", None), options.pop("cache_dir", None)
    sweep, progress = options.pop("sweep", None), options.pop("progress", None)
    if options.get("grid", 0) is None:  # None: gamma_section's grid
        del options["grid"]
    gamma_options = _popped(options, ("logit_scale", "seed", "grid"))
    captions, _ = checked_dataset(loaded_captions(data, options), cache=False)
    sweep = checked_sweep(sweep)
    resolved = resolve_batch_sizes(batch_size, captions.n_groups)
    for size in resolved.sizes:
        check_gamma_batch_size(size, captions.n_groups)
    embeddings = _embeddings(captions, encoder, device=device, cache_dir=cache_dir)
    profile = gamma_profile(captions, embeddings, batch_sizes=resolved.sizes, **gamma_options)
    if sweep is not None:
        profile = with_sweep(profile, captions, embeddings, sweep, device=device, progress=progress)
    return GammaSuggestion(profile)


@checked_arguments(_load_options)
def plan_batches(data, *, batch_size: int, encoder: Any = None, output: str | os.PathLike | None = None,
                 force: bool = False, **options: Unpack[BatchArguments]) -> BatchPlan:
    """``epochs`` epochs of training batches of ``batch_size`` captions in which no two captions
    describe one image, are exact copies, or are near-duplicates (cosine >= ``threshold``,
    default 0.95) under ``encoder``, as `capgeo batches` plans them; with ``output`` also written
    as batches.jsonl (never over the dataset, nor, unless ``force``, over a file capgeo did not
    write). For a live torch sampler see capgeo.training.sampler.HNCLIPBatchSampler.

    >>> plan = capgeo.plan_batches("captions.json", batch_size=128, encoder="vectors:emb.npy")
    >>> plan.share_not_placed, plan.batches[0][0][:5]
    """
    from capgeo.pipeline import EncodeOptions, batches_dataset, loaded_captions

    device, cache_dir = options.pop("device", None), options.pop("cache_dir", None)
    if options.get("threshold", 0) is None:  # None: BatchesOptions' threshold
        del options["threshold"]
    plan = _popped(options, ("threshold", "seed", "epochs"))
    captions = loaded_captions(data, options)
    if _is_spec(encoder):
        encode, embeddings = EncodeOptions(encoder, device=device, cache_dir=cache_dir), None
    else:
        encode, embeddings = EncodeOptions(device=device), _embeddings(captions, encoder, device=device,
                                                                       cache_dir=cache_dir)
    return batches_dataset(captions, encode, embeddings=embeddings, batch_size=batch_size, output=output,
                           keep_batches=True, force=force, **plan)
