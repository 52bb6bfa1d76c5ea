"""Dataset in, profile out: :func:`run_profile`, the one path from captions to a profile, which
`capgeo profile`, `report`, `compare`, `gamma`, `truncation` and :func:`capgeo.profile` share
(`gamma` and `truncation` ask it for their section alone: :class:`GammaPasses`,
:class:`TruncationPasses`).

Captions become embeddings in one place, :func:`embed_captions` (a spec, a loaded encoder, the
cache, precomputed vectors, the bar), and at several lengths in :func:`embed_captions_at_lengths`:
every command and Python call (capgeo.api, capgeo.map, the report's --fill-missing) embeds
through them.

What a run is asked for comes in frozen objects, each checked once before the encoding:
:class:`EncodeOptions` (how the captions become vectors),
:class:`capgeo.geometry.profile_options.ProfileOptions` (what is computed from them) and
:class:`ProfileSections` (what a whole profile holds beside them). Their fields' defaults are
the only defaults of those options; the command line's --help reads them.
:func:`plan_profile` does every check of a run (a :class:`ProfilePlan`), :func:`run_plan` the
encoding and the rest, so that a command reading several datasets checks them all first.

The commands that encode one dataset without profiling it have one call each here, which
checks (:func:`checked_dataset`), embeds and computes: :func:`dupes_dataset` (`dupes`,
`dupes-examples`, `dupes-sets`), :func:`negatives_dataset`, :func:`batches_dataset`,
:func:`encode_dataset`, and :func:`leak_datasets` for `leak`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from capgeo.defaults import BATCHES_EPOCHS, NEAR_DUPLICATE_THRESHOLD, TOP_K
from capgeo.errors import CapgeoError, EncoderError

if TYPE_CHECKING:
    from capgeo.encoders.embed import EncodeSummary
    from capgeo.findings.leak import LeakImageVectors
    from capgeo.geometry.typed_profile import Leak, Profile
    from capgeo.training.plan import BatchPlan


@dataclass(frozen=True)
class EncodeOptions:
    """How captions become vectors: every command that encodes takes these (--encoder, --device,
    --cache-dir, --no-cache, --max-tokens, --ray)."""

    #: a spec string (`capgeo encoders`), a loaded encoder, or None: the embedded all-MiniLM-L6-v2
    encoder: Any = None
    #: cuda, mps or cpu; None: the best available
    device: str | None = None
    #: the embedding cache folder; None: $CAPGEO_CACHE or ~/.cache/capgeo
    cache_dir: str | Path | None = None
    #: read and write the embedding cache
    use_cache: bool = True
    #: cut captions to this many tokens (start and end tokens included); None: the encoder's context
    max_tokens: int | None = None
    #: encode and run the exact pass on Ray: "local", "auto" or host:port (docs/scale.md); None: no Ray
    ray_address: str | None = None

    def checked(self) -> "EncodeOptions":
        """These options, or one CapgeoError naming the field that is wrong."""
        if self.max_tokens is not None and (isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int)
                                            or self.max_tokens < 2):
            raise CapgeoError(f"max_tokens must be a whole number of at least 2 (the start and end tokens), "
                              f"got {self.max_tokens!r}")
        for name in ("device", "ray_address"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise CapgeoError(f"{name} must be a non-empty string or None, got {value!r}")
        if self.cache_dir is not None and not isinstance(self.cache_dir, (str, Path)):
            raise CapgeoError(f"cache_dir must be a folder path or None, got {self.cache_dir!r}")
        if not isinstance(self.use_cache, bool):
            raise CapgeoError(f"use_cache must be True or False, got {self.use_cache!r}")
        return self

    def check_cache(self) -> None:
        """Before the encoding: the embedding cache these options read and write can be written
        (CapgeoError otherwise). Vectors of a file (vectors:FILE) are never cached, and an encoder
        passed already loaded is the caller's to place."""
        from capgeo.encoders.registry import spec_kind
        from capgeo.preflight import check_cache_folder

        if self.encoder is None or (isinstance(self.encoder, str) and spec_kind(self.encoder)[0] != "precomputed"):
            check_cache_folder(self.cache_dir, self.use_cache)

    def embed(self, captions, *, progress: bool | None = None, encoder=None):
        """The captions' Embeddings under these options (:func:`embed_captions`)."""
        return embed_captions(captions, self, encoder=encoder, progress=progress)


def embed_captions(captions, encode: EncodeOptions | None = None, *, vectors=None, encoder=None,
                   role: str = "vectors", progress: bool | None = None):
    """The one place captions become Embeddings (capgeo.encoders.base.Embeddings), for every
    command and Python call: ``vectors`` given (Embeddings, or an (N, d) array of precomputed
    vectors, row i for caption i; ``role`` names them in errors) are checked to hold one row per
    caption and used as they are; otherwise the captions are embedded under ``encode`` (its spec,
    device, cache and max_tokens; ``encoder``: the encoder of its spec already loaded, so that its
    files are not read twice), with a bar unless ``progress`` is False."""
    if vectors is not None:
        embeddings = vectors if is_embeddings(vectors) else embeddings_from_array(vectors, role)
        if len(embeddings.vectors) != len(captions):
            raise CapgeoError(f"{role}: {len(embeddings.vectors):,} rows for {len(captions):,} captions; expected one "
                              "row per caption, in the dataset's order")
        return embeddings
    from capgeo.encoders import embed

    encode = encode or EncodeOptions()
    return embed(captions, encode.encoder if encoder is None else encoder, device=encode.device,
                 cache_dir=encode.cache_dir, use_cache=encode.use_cache, max_tokens=encode.max_tokens,
                 progress=progress)


def embed_captions_at_lengths(captions, encode: EncodeOptions, lengths: Sequence[int] | None, *,
                              progress: bool | None = None):
    """(the text encoder, the captions' Embeddings at each of ``lengths`` and at the full context,
    keyed by length): :func:`embed_captions` for `capgeo truncation`, which embeds from the encoder
    itself at each length (``encode.max_tokens`` does not apply; None: the lengths below the
    context), through the same cache (:func:`embed_at_lengths`)."""
    from capgeo.findings.truncation import resolve_lengths

    text_encoder = truncation_encoder(encode.encoder, device=encode.device, cache_dir=encode.cache_dir)
    return text_encoder, embed_at_lengths(captions, text_encoder, resolve_lengths(lengths, text_encoder.info),
                                          cache_dir=encode.cache_dir, use_cache=encode.use_cache, progress=progress)


def truncation_encoder(encoder=None, *, device: str | None = None, cache_dir=None):
    """The text encoder that embeds at each length: ``encoder`` when loaded already, else the one its
    spec names (None: the embedded default), refused when it cannot cut captions itself."""
    from capgeo.encoders import get_encoder
    from capgeo.encoders.embed import _is_encoder
    from capgeo.findings.truncation import check_encoder

    text_encoder = encoder if _is_encoder(encoder) else get_encoder(encoder, device=device, cache_dir=cache_dir)
    check_encoder(text_encoder)
    return text_encoder


def embed_at_lengths(captions, encoder, lengths: Sequence[int], *, cache_dir=None, use_cache: bool = True,
                     progress: bool | None = None) -> Mapping[int, Any]:
    """Embeddings of ``captions`` at each length and at the full context, keyed by length (a loaded
    ``encoder``): :func:`capgeo.encoders.lengths.embed_lengths`. Only the captions a length cuts
    are encoded at it; CLIP and Long-CLIP towers give every length from one forward (exact, see
    :mod:`capgeo.encoders.prefix`); each length is cached as ``embed(..., max_tokens=L)`` is."""
    from capgeo.encoders.lengths import embed_lengths
    from capgeo.findings.truncation import check_encoder, resolve_lengths

    check_encoder(encoder)
    resolve_lengths(lengths, encoder.info)  # a length above the context (or below 2) is an error here too
    return embed_lengths(captions, encoder, lengths, cache_dir=cache_dir, use_cache=use_cache, progress=progress)


def is_embeddings(value) -> bool:
    """Embeddings (of any encoder), not a spec, an encoder or an array of vectors."""
    return hasattr(value, "vectors") and hasattr(value, "info")


#: the encoder spec results name for vectors given as an array
ARRAY_SPEC = "vectors (array)"


def embeddings_from_array(vectors, role: str = "vectors"):
    """Precomputed vectors as Embeddings: unit rows, of unknown encoder and token counts."""
    import hashlib

    import numpy as np

    from capgeo.encoders.base import EncoderInfo, Embeddings
    from capgeo.encoders.precomputed import KIND, normalise_rows

    array = np.asarray(vectors)
    if array.ndim != 2 or array.shape[0] == 0 or not np.issubdtype(array.dtype, np.number):
        raise CapgeoError(f"{role}: expected an (N, d) array of numbers, one row per caption, got "
                          f"{array.dtype} of shape {array.shape}")
    unit = np.ascontiguousarray(normalise_rows(array, role))
    info = EncoderInfo(spec=ARRAY_SPEC, kind=KIND, name="array", width=int(unit.shape[1]), context_length=0,
                       logit_scale=None, fingerprint=hashlib.sha256(unit.tobytes()).hexdigest())
    return Embeddings(vectors=unit, token_counts=np.full(len(unit), -1, dtype=np.int64), max_tokens=0, info=info,
                      origin="precomputed")


@dataclass(frozen=True)
class GammaPasses:
    """`capgeo gamma`'s work in :func:`run_profile`: the ``gamma`` section alone, without the
    pairwise pass (docs/gamma.md); the batch sizes, ``n_batches`` and ``seed`` are ProfileOptions'."""

    #: the logit scale s; None: the checkpoint's, else 100
    logit_scale: float | None = None
    #: the gamma values of the diagnostics table; None: gamma_section's
    grid: Sequence[float] | None = None
    #: the caption cosine of the hardest bucket; None: gamma_section's
    hard_edge: float | None = None
    #: a file of image vectors (read and checked before the encoding) for the loss at initialisation
    image_embeddings: str | Path | None = None
    #: a measured gamma too: the proxy fine-tune sweep's options (capgeo.findings.gamma_sweep), or None
    sweep: Any = None


@dataclass(frozen=True)
class ImageOptions:
    """The images' vectors from the encoder's own image tower, for the pair analyses
    (capgeo.images.image_vectors), over the images the dataset names (``images_root``: their folder,
    where not beside the captions). A file of vectors made elsewhere is PairOptions.image_embeddings."""

    images_root: str | Path | None = None


@dataclass(frozen=True)
class TruncationPasses:
    """`capgeo truncation`'s work in :func:`run_profile`: the geometry at several maximum token
    lengths (docs/truncation.md), from ProfileOptions' headline batch size, ``n_batches``,
    ``buckets``, ``seed``, ``top_k`` and ``block_size``. Each length is embedded from the encoder
    itself (EncodeOptions.max_tokens does not apply: the lengths are the point)."""

    #: the maximum token lengths; None: the section's, those below the context
    lengths: Sequence[int] | None = None
    #: the near-duplicate cosine; None: the profile's default
    threshold: float | None = None
    #: truncation-only pairs listed per length; None: the section's default
    max_listed: int | None = None


@dataclass(frozen=True)
class PairOptions:
    """The ``pairs`` section of a whole profile (docs/pairs.md): the image side, from image vectors."""

    #: a file of image vectors (npy/npz/parquet, read and checked before the encoding), an (n_groups, d)
    #: array in group-code order, or capgeo.images.ImageVectors
    image_embeddings: Any = None
    #: a caption of another image within this cosine of the pair's own counts as a false negative
    delta: float | None = None
    #: image-image cosine at or above which two images of different ids are twins
    image_threshold: float | None = None
    #: also write every false-negative row here (Parquet, CSV or JSONL by suffix)
    false_negatives: str | Path | None = None


@dataclass(frozen=True)
class ProfileSections:
    """What a whole profile holds beside ProfileOptions' geometry, and what else its run writes
    (:func:`run_profile`); the fields' defaults are the only defaults of these options."""

    #: the ``gamma`` section at the profile's batch sizes (what of it is left out, and why: ``gamma_left_out``)
    gamma: bool = True
    #: the logit scale s of the gamma and pairs sections; None: the checkpoint's, else 100
    logit_scale: float | None = None
    #: a measured gamma too: capgeo.findings.gamma_sweep.SweepOptions (or True: its defaults), run where the
    #: gamma section is (docs/gamma.md); None: the rule alone
    sweep: Any = None
    #: the ``pairs`` section (:class:`PairOptions` with image vectors; docs/pairs.md), or None
    pairs: PairOptions | None = None
    #: also the images' vectors, for the pair analyses (ProfileRun.image_vectors), or None
    images: ImageOptions | None = None
    #: also write one row per caption here (Parquet, CSV or JSONL by suffix)
    per_caption: str | Path | None = None
    #: False: the N x k companion lists are left out (nothing saves them)
    companion_lists: bool = True
    #: extra batch sizes added when ProfileOptions names none (the report's micro-batch)
    extra_batch_sizes: Sequence[int] = ()


def options_from(cls, fields: dict, **given):
    """An options object of the dataclass ``cls`` from ``given`` and the keys of ``fields`` that
    name its fields (popped from ``fields``); the fields not named keep ``cls``'s defaults, their
    one place."""
    import dataclasses

    names = {field.name for field in dataclasses.fields(cls)}
    return cls(**given, **{name: fields.pop(name) for name in list(fields) if name in names and name not in given})


@dataclass
class ProfileRun:
    """What :func:`run_profile` made: the Profile and what it was made from, for callers that
    add sections of their own (the report's dupes, map, leak)."""

    captions: Any
    embeddings: Any
    profile: Profile
    #: the resolved batch sizes (capgeo.geometry.batch_size.BatchSizes), with their notes
    batch_sizes: Any
    #: the all-pairs pass of these embeddings (a PairScan), or None
    scan: Any = None
    #: one unit vector per image (capgeo.images.ImageVectors) where the plan asked for images and
    #: they could be had; ``image_notes`` says why not where they could not
    image_vectors: Any = None
    image_notes: tuple[str, ...] = ()


@contextlib.contextmanager
def _on_ray(address: str | None):
    """Ray for the body when ``address`` is given and no command has joined it already (the CLI's
    --ray opens the session, and prints its summary, around the whole command)."""
    if address is None:
        yield
        return
    from capgeo.scale.session import active_ray, ray_session

    if active_ray() is not None:
        yield
        return
    with ray_session(address):
        yield


def loaded_captions(captions, load_options: dict | None = None):
    """A CaptionSet as it is; anything else read by load_captions with ``load_options`` (its keyword
    arguments; format detected unless they name one)."""
    if isinstance(captions, (str, Path)) or not hasattr(captions, "group_codes"):
        from capgeo.captions import load_captions

        return load_captions(captions, **(load_options or {}))
    return captions


@dataclass(frozen=True)
class ProfilePlan:
    """A profile run checked and ready (:func:`plan_profile`): every check that needs no vectors is
    done, the options are resolved against the dataset; :func:`run_plan` encodes and computes.
    Callers that run several datasets (`capgeo compare`) check them all before the first encoding."""

    captions: Any
    #: checked; its cache folder too, where anything is to be encoded
    encode: EncodeOptions
    #: resolved against the dataset (ProfileOptions.resolved)
    options: Any
    #: the resolved batch sizes (capgeo.geometry.batch_size.BatchSizes), with their notes
    batch_sizes: Any
    passes: GammaPasses | TruncationPasses | None = None
    embeddings: Any = None
    extra_batch_sizes: Sequence[int] = ()
    gamma: bool = True
    logit_scale: float | None = None
    per_caption: str | Path | None = None
    companion_lists: bool = True
    #: GammaPasses' or PairOptions' image vectors, read and checked
    image_vectors: Any = None
    #: ask for the images' vectors (ProfileRun.image_vectors); None: the caption analyses alone
    images: ImageOptions | None = None
    #: the pairs section's options (with image vectors), or None
    pairs: PairOptions | None = None
    #: a measured gamma too: the proxy fine-tune sweep's options (capgeo.findings.gamma_sweep.SweepOptions,
    #: checked), run where the gamma section is; None: the rule alone
    sweep: Any = None

    def with_passes(self, passes: GammaPasses | TruncationPasses | None) -> "ProfilePlan":
        """This plan for other passes over the same captions and options (the report's truncation
        section beside its profile): only what those passes add is checked."""
        image_vectors = _check_passes(self.captions, self.encode, self.options, self.batch_sizes, passes)
        if self.embeddings is not None and passes is not None:
            self.encode.check_cache()  # these passes encode, where this plan had its vectors given
        return replace(self, passes=passes, embeddings=None, image_vectors=image_vectors)


def plan_profile(captions, encode: EncodeOptions | None = None, options=None, *,
                 sections: ProfileSections | None = None, passes: GammaPasses | TruncationPasses | None = None,
                 embeddings=None) -> ProfilePlan:
    """Every check of a :func:`run_profile` run before its (slow) encoding, once: the captions
    loaded (a path or data in memory), ``encode`` and ``options`` checked, the batch sizes resolved
    against the dataset, what ``passes`` need, and the embedding cache (unless ``embeddings`` are
    given). The arguments are :func:`run_profile`'s; :func:`run_plan` runs the plan."""
    from capgeo.geometry.profile_options import ProfileOptions
    from capgeo.preflight import check_has_negatives

    sections = sections or ProfileSections()
    pairs, images = sections.pairs, sections.images
    encode = (encode or EncodeOptions()).checked()
    options = options or ProfileOptions()
    captions = loaded_captions(captions)
    check_has_negatives(captions)
    options, resolved = options.resolved(captions.n_groups, extra_defaults=sections.extra_batch_sizes)
    image_vectors = _check_passes(captions, encode, options, resolved, passes)
    if passes is None and pairs is not None and pairs.image_embeddings is not None:
        image_vectors = _checked_pair_images(captions, pairs)
    elif pairs is not None and pairs.false_negatives is not None:
        _check_false_negatives_output(pairs)
    if images is not None:
        _check_images(captions, images)
    if embeddings is None or passes is not None:  # (the passes embed the captions themselves)
        encode.check_cache()
    # checked once, here; the runs read plan.sweep
    sweep = checked_sweep(passes.sweep if isinstance(passes, GammaPasses) else sections.sweep, gamma=sections.gamma)
    return ProfilePlan(captions, encode, options, resolved, passes, embeddings, tuple(sections.extra_batch_sizes),
                       sections.gamma, sections.logit_scale, sections.per_caption, sections.companion_lists,
                       image_vectors, images, pairs if passes is None else None, sweep)


def checked_sweep(sweep, *, gamma: bool = True):
    """The sweep's options from what a caller passes: a SweepOptions, True (the defaults) or
    None/False (no sweep); checked, and refused where the gamma section is left out (``gamma``
    False): there is no rule to set the measurement beside."""
    from capgeo.findings.gamma_sweep import SweepOptions

    if sweep is None or sweep is False:
        return None
    if not gamma:
        raise CapgeoError("--sweep (sweep=) measures gamma, which --no-gamma (gamma=False) leaves out: give one of them")
    if sweep is True:
        return SweepOptions()
    if not isinstance(sweep, SweepOptions):
        raise CapgeoError(f"sweep must be True, False, None or a SweepOptions, got {sweep!r}")
    return sweep.checked()


def _check_images(captions, images: ImageOptions) -> None:
    """Before the encoding: the images folder exists."""
    if images.images_root is not None and not Path(images.images_root).expanduser().is_dir():
        raise CapgeoError(f"--images {images.images_root}: no such folder; expected the folder holding the "
                          "dataset's images")


def plan_image_vectors(plan: ProfilePlan, *, progress: bool | None = None):
    """(ImageVectors or None, notes): the plan's images as vectors, where it asks for them; the
    notes say why there are none (a text-only encoder, a dataset that names no images)."""
    if plan.images is None:
        return None, ()
    from capgeo.images import image_vectors

    notes: list[str] = []
    try:
        vectors = image_vectors(plan.captions, plan.encode, images_root=plan.images.images_root,
                                progress=progress, notes=notes)
    except EncoderError as error:
        if plan.images.images_root is not None:
            raise  # images asked for by name: a tower that cannot encode them is the user's to know at once
        # images not asked for (a profile looks for them): a text-only checkpoint leaves the pairs out
        return None, (str(error),)
    return vectors, tuple(notes)


def _checked_pair_images(captions, pairs: PairOptions):
    """PairOptions' image vectors before the encoding: a file read and checked, an array checked for its
    rows, ImageVectors as they are; the false-negative output checked to be writable."""
    import numpy as np

    from capgeo.images import ImageVectors

    _check_false_negatives_output(pairs)
    images = pairs.image_embeddings
    if isinstance(images, ImageVectors):
        return images
    if isinstance(images, np.ndarray):
        from capgeo.findings.gamma import check_image_vectors

        check_image_vectors(images, captions.n_groups, images.shape[-1] if images.ndim == 2 else 0)
        return images
    from capgeo.findings.gamma import checked_image_embeddings

    return checked_image_embeddings(images, captions)


def _check_false_negatives_output(pairs: PairOptions) -> None:
    """--false-negatives names a table format capgeo writes."""
    if pairs.false_negatives is not None:
        from capgeo.defaults import PER_CAPTION_SUFFIXES
        from capgeo.findings.per_caption import table_format

        table_format(str(pairs.false_negatives), PER_CAPTION_SUFFIXES)


def _check_passes(captions, encode: EncodeOptions, options, resolved, passes) -> Any:
    """What ``passes`` check before the encoding, the options already resolved; returns GammaPasses'
    image vectors (read and checked), else None."""
    if isinstance(passes, TruncationPasses):
        from capgeo.findings.truncation import DEFAULT_LISTED_PAIRS, check_options

        check_options(captions, passes.threshold, options.buckets, resolved.headline,
                      DEFAULT_LISTED_PAIRS if passes.max_listed is None else passes.max_listed)
        return None
    if isinstance(passes, GammaPasses):
        from capgeo.findings.gamma import checked_image_embeddings
        from capgeo.geometry.batch_size import check_gamma_batch_size

        for size in resolved.sizes:
            check_gamma_batch_size(size, captions.n_groups)
        # read once, before the (slow) encoding; the profile names the file they came from
        return (checked_image_embeddings(passes.image_embeddings, captions)
                if passes.image_embeddings is not None else None)
    from capgeo.geometry.estimate import resolved_mode
    from capgeo.preflight import check_faiss

    if options.companions == "faiss" and resolved_mode(options.mode, captions.group_codes, options.sampled_above,
                                                       options.sampled_pairs) == "sampled":
        check_faiss()  # (a sample covering every negative pair runs the exact pass, which needs no faiss)
    return None


def run_profile(captions, encode: EncodeOptions | None = None, options=None, *,
                sections: ProfileSections | None = None, passes: GammaPasses | TruncationPasses | None = None,
                embeddings=None, progress: bool | None = None, command: str | None = None) -> ProfileRun:
    """Load (when given a path or data in memory), embed and profile a dataset: the one path from
    captions to a profile (:func:`plan_profile`, then :func:`run_plan`; a caller that checked its
    plan before its first encoding, as `compare` checks every dataset first, calls :func:`run_plan`).

    ``captions``: a CaptionSet, or anything :func:`capgeo.captions.load_captions` reads (a path, a
    DataFrame, a list of dicts, a ``datasets.Dataset``...). ``encode``: an :class:`EncodeOptions`;
    ``options``: a ``ProfileOptions``; both checked here, once, before the encoding, with the batch
    sizes resolved against the dataset. ``embeddings``: vectors already computed for these captions
    (nothing is encoded). ``passes``: None for the whole profile; :class:`GammaPasses` for the
    ``gamma`` section alone (`capgeo gamma`), :class:`TruncationPasses` for the ``truncation``
    section alone (`capgeo truncation`, which embeds at each length itself). ``sections``
    (:class:`ProfileSections`) says what the whole profile holds beside the geometry: the ``gamma``
    section at the profile's batch sizes (what of it is left out, and why, is ``gamma_left_out``),
    its logit scale and ``sweep`` (a measured gamma), the ``pairs`` section (:class:`PairOptions`
    with image vectors, docs/pairs.md), the images' vectors (``images``: :class:`ImageOptions`,
    ProfileRun.image_vectors), a per-caption file, the companion lists, extra batch sizes.
    """
    return run_plan(plan_profile(captions, encode, options, sections=sections, passes=passes, embeddings=embeddings),
                    progress=progress, command=command)


def run_plan(plan: ProfilePlan, *, progress: bool | None = None, command: str | None = None) -> ProfileRun:
    """Encode and compute what a :class:`ProfilePlan` holds (:func:`plan_profile` checked it)."""
    if isinstance(plan.passes, TruncationPasses):
        return _truncation_run(plan, progress=progress, command=command)
    if isinstance(plan.passes, GammaPasses):
        return _gamma_run(plan, progress=progress, command=command)
    from capgeo.geometry.profile import build_profile

    captions, encode, options = plan.captions, plan.encode, plan.options
    embeddings, per_caption, companion_lists = plan.embeddings, plan.per_caption, plan.companion_lists
    include_companions = options.include_companions
    if per_caption is not None:
        # the per-caption file is built from the companion lists; the JSON stays as small as asked
        options = options.with_checked(include_companions=True)
        companion_lists = True
    scans = []
    with _on_ray(encode.ray_address):
        if embeddings is None:
            embeddings = encode.embed(captions, progress=progress)
        profile = build_profile(captions, embeddings, options, device=encode.device, progress=progress,
                                command=command, companion_lists=companion_lists, on_scan=scans.append)
    if per_caption is not None:
        from capgeo.findings.per_caption import write_per_caption

        write_per_caption(captions, embeddings, profile, str(per_caption))
        if not include_companions:
            # the file has them; the JSON stays as small as asked
            profile = replace(profile, companions=replace(profile.companions, top_ids=None, top_cosines=None),
                              options=replace(profile.options, include_companions=False))
    if plan.gamma:
        profile, left_out = with_gamma(profile, captions, embeddings, logit_scale=plan.logit_scale,
                                       progress=progress)
        if left_out:  # asked for and not there (all of it, or some batch sizes): say why, in JSON and on the terminal
            profile = replace(profile, gamma_left_out=left_out)
    image_vectors, image_notes = plan_image_vectors(plan, progress=progress)
    pair_images = plan.image_vectors if plan.image_vectors is not None else image_vectors
    if plan.sweep is not None:   # (checked_sweep refused it without the gamma section)
        profile = with_sweep(profile, captions, embeddings, plan.sweep, image_vectors=pair_images,
                             device=encode.device, progress=progress)
    if plan.pairs is not None:
        if pair_images is not None:
            profile = with_pairs(profile, captions, embeddings, pair_images, plan.pairs,
                                 batch_size=plan.batch_sizes.headline, logit_scale=plan.logit_scale, progress=progress)
    return ProfileRun(captions, embeddings, profile, plan.batch_sizes, scans[0] if scans else None, image_vectors,
                      image_notes)


def _gamma_run(plan: ProfilePlan, *, progress: bool | None, command: str | None) -> ProfileRun:
    """:func:`run_plan` with :class:`GammaPasses`."""
    from capgeo.findings.gamma import DEFAULT_GRID, gamma_profile

    captions, encode, options, passes = plan.captions, plan.encode, plan.options, plan.passes
    with _on_ray(encode.ray_address):
        embeddings = encode.embed(captions, progress=progress)
    profile = gamma_profile(
        captions, embeddings, image_embeddings=plan.image_vectors, image_source=passes.image_embeddings,
        command=command, logit_scale=passes.logit_scale, batch_sizes=plan.batch_sizes.sizes,
        grid=passes.grid or DEFAULT_GRID, n_batches=options.n_batches, seed=options.seed, progress=progress,
        **({} if passes.hard_edge is None else {"hard_edge": passes.hard_edge}))
    if plan.sweep is not None:
        profile = with_sweep(profile, captions, embeddings, plan.sweep, image_vectors=plan.image_vectors,
                             device=encode.device, progress=progress)
    return ProfileRun(captions, embeddings, profile, plan.batch_sizes)


def with_sweep(profile: Profile, captions, embeddings, sweep, *, image_vectors=None, device: str | None = None,
               progress: bool | None = None) -> Profile:
    """``profile`` with its gamma section's ``sweep``: the proxy fine-tune (``sweep``, a SweepOptions)
    at the rule's headline batch size and logit scale, the rule's suggestion among its gammas, on
    ``device`` (the run's --device). With ``image_vectors`` (an (n_groups, d) array or ImageVectors)
    image -> text, else the caption-caption proxy. A profile without a gamma section is returned as
    it is (its ``gamma_left_out`` says why; there is no rule to set beside a measurement)."""
    gamma = profile.gamma
    if gamma is None or gamma.suggested_gamma is None:
        return profile
    return replace(profile, gamma=gamma.with_sweep(
        measured_sweep(gamma, captions, embeddings, sweep, image_vectors=image_vectors, device=device,
                       progress=progress).to_dict()))


def measured_sweep(gamma, captions, embeddings, sweep, *, image_vectors=None, device: str | None = None,
                   progress: bool | None = None) -> "GammaSweep":
    """The proxy fine-tune sweep (a capgeo.findings.gamma_sweep.GammaSweep) set beside the rule's gamma
    section ``gamma`` (a Gamma or its dict): at its headline batch size and logit scale, its suggestion
    among the gammas. ``sweep``: SweepOptions as :func:`checked_sweep` returns them."""
    from capgeo.findings.gamma_sweep import RuleSetting, gamma_sweep
    from capgeo.geometry.typed_profile import Gamma

    gamma = Gamma.from_dict(gamma) if isinstance(gamma, dict) else gamma
    return gamma_sweep(getattr(embeddings, "vectors", embeddings), captions.group_codes, image_vectors=image_vectors,
                       options=sweep, setting=RuleSetting(gamma.suggested_gamma, gamma.logit_scale,
                                                          gamma.headline_batch_size),
                       device=device, progress=progress)


def _truncation_run(plan: ProfilePlan, *, progress: bool | None, command: str | None) -> ProfileRun:
    """:func:`run_plan` with :class:`TruncationPasses`; the run's embeddings are those at each
    length (a dict), the last the reference."""
    import time

    from capgeo.findings.truncation import DEFAULT_LISTED_PAIRS, TruncationOptions, truncation_result

    started = time.perf_counter()
    captions, encode, options, passes = plan.captions, plan.encode, plan.options, plan.passes
    section_options = TruncationOptions(
        batch_size=plan.batch_sizes.headline, n_batches=options.n_batches, seed=options.seed,
        threshold=passes.threshold, edges=options.buckets, top_k=options.top_k, block_size=options.block_size,
        max_listed=DEFAULT_LISTED_PAIRS if passes.max_listed is None else passes.max_listed, device=encode.device)
    with _on_ray(encode.ray_address):
        text_encoder, embeddings = embed_captions_at_lengths(captions, encode, passes.lengths, progress=progress)
        profile = truncation_result(captions, text_encoder, embeddings, section_options, progress=progress,
                                    command=command, started=started)
    return ProfileRun(captions, embeddings, profile, plan.batch_sizes)


def profile_dataset(captions, encoder=None, options=None, *, progress: bool | None = None,
                    command: str | None = None, **fields) -> Profile:
    """Load, embed and profile a dataset (:func:`run_profile`); returns the typed ``capgeo.profile/1``
    Profile (docs/profile-schema.md).

    ``encoder`` is an :class:`EncodeOptions`, or a spec string, a loaded encoder or None (the
    embedded default) with EncodeOptions' other fields (``device``, ``cache_dir``, ``use_cache``,
    ``max_tokens``) among ``fields``. ``options`` is a ``ProfileOptions``, or its fields come among
    ``fields`` (batch_sizes, buckets, relative_buckets, n_batches, top_k, block_size, seed,
    near_duplicate_threshold, mode, include_companions, ...); so do :class:`ProfileSections`' (with
    ``gamma``, the default, the ``gamma`` section at the profile's batch sizes: `capgeo gamma`,
    docs/gamma.md). With ``image_embeddings`` (a file, an (n_groups, d) array in group-code order,
    ImageVectors, or a :class:`PairOptions`) it also holds the ``pairs`` section (docs/pairs.md).
    """
    from capgeo.geometry.profile_options import ProfileOptions

    encode = encoder if isinstance(encoder, EncodeOptions) else options_from(EncodeOptions, fields, encoder=encoder)
    sections = options_from(ProfileSections, fields, pairs=pair_options(fields.pop("image_embeddings", None)))
    options = ProfileOptions.of(options, **fields)
    return run_profile(captions, encode, options, sections=sections, progress=progress, command=command).profile


def pair_options(image_embeddings) -> PairOptions | None:
    """The pairs section's options from Python's ``image_embeddings`` (a file, an (n_groups, d) array,
    ImageVectors or PairOptions); None: no pairs section."""
    if image_embeddings is None or isinstance(image_embeddings, PairOptions):
        return image_embeddings
    return PairOptions(image_embeddings)


def gamma_dataset(captions, encode: EncodeOptions | None = None, options=None, *, progress: bool | None = None,
                  command: str | None = None, **passes) -> ProfileRun:
    """`capgeo gamma` in one call (docs/gamma.md): :func:`run_profile` with :class:`GammaPasses` of
    ``passes`` (its fields: logit_scale, grid, hard_edge, image_embeddings, sweep).

    ``options`` is a ProfileOptions, of which the gamma rule reads the batch sizes (each one it can
    answer: at least capgeo.geometry.batch_size.MIN_GAMMA_BATCH_SIZE), ``n_batches`` and ``seed``.
    The profile holds ``dataset``, ``encoder``, ``gamma``, ``options`` and ``provenance``, without
    the pairwise pass. ``sweep``: a capgeo.findings.gamma_sweep.SweepOptions to measure gamma too
    (the section's ``sweep``).
    """
    return run_profile(captions, encode, options, passes=GammaPasses(**passes), progress=progress, command=command)


def truncation_dataset(captions, encode: EncodeOptions | None = None, options=None, *,
                       lengths: Sequence[int] | None = None, threshold: float | None = None,
                       max_listed: int | None = None, progress: bool | None = None,
                       command: str | None = None) -> ProfileRun:
    """`capgeo truncation` in one call (docs/truncation.md): :func:`run_profile` with
    :class:`TruncationPasses`; the profile holds ``dataset``, ``encoder``, ``truncation``,
    ``options`` and ``provenance``."""
    return run_profile(captions, encode, options, passes=TruncationPasses(lengths, threshold, max_listed),
                       progress=progress, command=command)


def truncation_profile(captions, encoder=None, encoding=None, options=None, *, progress: bool | None = None,
                       command: str | None = None, **fields) -> Profile:
    """`capgeo truncation` in one call on loaded captions: a typed ``capgeo.profile/1`` Profile with
    ``dataset``, ``encoder``, ``truncation``, ``options`` and ``provenance``
    (capgeo.findings.truncation.truncation_result of :func:`embed_captions_at_lengths`).
    ``encoder`` is a spec, a loaded encoder or None (the embedded default); ``encoding`` a
    LengthEncoding (lengths, cache_dir, use_cache), ``options`` a TruncationOptions (both
    capgeo.findings.truncation); ``fields`` set theirs by name."""
    import time

    from capgeo.findings.truncation import check_options, split_options, truncation_result

    started = time.perf_counter()
    encoding, options = split_options(encoding, options, **fields)
    # fail on bad options before loading a model and encoding
    check_options(captions, options.threshold, options.edges, options.batch_size, options.max_listed)
    encode = EncodeOptions(encoder, device=options.device, cache_dir=encoding.cache_dir, use_cache=encoding.use_cache)
    text_encoder, embeddings = embed_captions_at_lengths(captions, encode, encoding.lengths, progress=progress)
    return truncation_result(captions, text_encoder, embeddings, options, progress=progress, command=command,
                             started=started)


def with_gamma(profile: Profile, captions, embeddings, *, logit_scale: float | None = None,
               progress: bool | None = None) -> tuple[Profile, str | None]:
    """``profile`` with the ``gamma`` section (`capgeo gamma`) at its own batch sizes, batch count and
    seed, and why it, or the gamma of some extra batch sizes, was left out (None when nothing was)."""
    from capgeo.findings.gamma import gamma_section
    from capgeo.geometry.batch_size import DEFAULT_N_BATCHES, MIN_GAMMA_BATCH_SIZE, gamma_batch_size_problem
    from capgeo.geometry.typed_profile import Options

    options = profile.options or Options()
    sizes = [entry.batch_size for entry in profile.batches or ()]
    if not sizes and profile.truncation and profile.truncation.batch_size:  # a `capgeo truncation` result
        sizes = [int(profile.truncation.batch_size)]
    if not sizes:
        return profile, ("Gamma diagnostics: left out, the profile has no in-batch section to take a batch size "
                         "from (capgeo docs gamma).")
    if sizes[0] < MIN_GAMMA_BATCH_SIZE:
        # never headline an extra batch size: without the headline there is no gamma to show
        return profile, (f"Gamma diagnostics: left out, {gamma_batch_size_problem(sizes[0], captions.n_groups)} "
                         "(capgeo docs gamma).")
    gamma = gamma_section(embeddings, captions.group_codes, logit_scale=logit_scale,
                          batch_sizes=[size for size in sizes if size >= MIN_GAMMA_BATCH_SIZE],
                          n_batches=DEFAULT_N_BATCHES if options.n_batches is None else options.n_batches,
                          seed=0 if options.seed is None else options.seed, progress=progress)
    too_small = [size for size in sizes[1:] if size < MIN_GAMMA_BATCH_SIZE]
    note = None
    if too_small:  # extra batch sizes the rule cannot answer: their in-batch rows stay, their gamma is left out
        gamma = replace(gamma, batch_sizes_left_out=tuple(too_small))
        note = (f"Gamma diagnostics: no gamma at B = {', '.join(map(str, too_small))}, "
                f"{gamma_batch_size_problem(too_small[0], captions.n_groups)} (capgeo docs gamma).")
    return replace(profile, gamma=gamma), note


def with_pairs(profile: Profile, captions, embeddings, images, pairs: PairOptions | None = None, *,
               batch_size: int | None = None, logit_scale: float | None = None,
               progress: bool | None = None) -> Profile:
    """``profile`` with the ``pairs`` section (docs/pairs.md) for ``images`` (ImageVectors, or an
    (n_groups, d) array in group-code order: :func:`pair_image_vectors`),
    at the profile's headline batch size, batch count, seed and suggested gamma."""
    from capgeo.findings.pairs import pairs_section
    from capgeo.geometry.typed_profile import Options

    pairs = pairs or PairOptions()
    images = pair_image_vectors(images, captions, embeddings, pairs)
    options = profile.options or Options()
    headline = batch_size or (profile.batches[0].batch_size if profile.batches else None)
    extra = {key: value for key, value in (("delta", pairs.delta), ("image_threshold", pairs.image_threshold))
             if value is not None}
    section = pairs_section(captions, embeddings, images, batch_size=headline, n_batches=options.n_batches,
                            seed=0 if options.seed is None else options.seed, logit_scale=logit_scale,
                            gamma=profile.gamma.headline_gamma if profile.gamma else None,
                            false_negatives_output=None if pairs.false_negatives is None else str(pairs.false_negatives),
                            progress=progress, **extra)
    return replace(profile, pairs=section)


def pair_image_vectors(images, captions, embeddings, pairs: PairOptions | None = None, *,
                       progress: bool | None = None):
    """``images`` as ImageVectors: as they are, or an (n_groups, d) array (PairOptions' file, read
    and checked by the plan, or an array from Python) through capgeo.images.vectors.from_array,
    named by the file it came from; None stays None."""
    from capgeo.images import ImageVectors

    if images is None or isinstance(images, ImageVectors):
        return images
    from capgeo.images.vectors import from_array

    source = getattr(pairs, "image_embeddings", None)
    return from_array(captions, images, str(source if isinstance(source, (str, Path)) else "image embeddings"),
                      width=getattr(embeddings, "vectors", embeddings).shape[1], progress=progress)


#: the loader's advice to use a column option -> what a set read by detection can do instead
_COLUMN_ADVICE = (
    (r"; name it with --text-column or --captions-column",
     "; it is read by detection, without column options: name the caption column `caption` or `text`"),
    (r" \(name another column with --\w+-column\)", ""),
    (r", or pass --id-column with a unique column\)", ")"),
    (r"; is the caption column the right one \(--text-column\)\?", ""),
    (r"; a list of captions is read with --captions-column", "; name a column of caption lists `captions`"),
    (r"; name the one to use with --\w+-column", "; rename one of them"),
)


def _without_column_advice(message: str) -> str:
    import re

    for advice, instead in _COLUMN_ADVICE:
        message = re.sub(advice, instead, message)
    return message


def load_set(source, load_options: dict, on_skipped=None, role: str | None = None, *, columns: bool = True):
    """Load one caption set, each Skipped (rows left out) passed to ``on_skipped``. ``role``: the set's
    name in a command that reads several (TRAIN, EVAL, SOURCE, --leak EVAL), put before its errors;
    ``columns=False`` for a set read by detection only (--leak EVAL), whose errors then do not send
    the user to column options it cannot take."""
    from capgeo.captions import load_captions
    from capgeo.errors import DataError

    try:
        captions = load_captions(source, **load_options)
    except DataError as error:
        if role is None:
            raise
        raise DataError(f"{role} {str(error) if columns else _without_column_advice(str(error))}") from error
    for skipped in captions.skipped if on_skipped else ():
        on_skipped(skipped)
    return captions


@dataclass(frozen=True)
class LeakImages:
    """Where `leak`'s image vectors come from, for the image twins across TRAIN and EVAL
    (capgeo.findings.image_leak): per set a file of vectors made elsewhere, else, with ``tower``,
    the encoder's own image tower over the images the set names (capgeo.images.image_vectors)."""

    #: a file of the training set's image vectors (npy/npz/parquet keyed by image id), or ImageVectors
    train: Any = None
    #: one per evaluation set, in order (a file, ImageVectors, or None: that set's from the tower); () for none
    evals: Sequence = ()
    #: encode the images of the sets without a file with the encoder's image tower, where it has one
    tower: bool = True

    def checked(self, train, eval_sets: Sequence) -> "LeakImages":
        """Before any encoding: one file per evaluation set where any is given, and each file
        read and checked to hold one vector per image of its set, all of one width."""
        from capgeo.images import ImageVectors

        if self.evals and len(self.evals) != len(eval_sets):
            raise CapgeoError(f"--eval-image-embeddings: {len(self.evals)} files for {len(eval_sets)} evaluation "
                              "sets; give one per EVAL, in the order of the EVAL arguments")
        widths = {}
        for captions, given in ((train, self.train), *zip(eval_sets, self.evals)):
            if isinstance(given, ImageVectors):
                widths[str(captions.source)] = given.vectors.shape[1]
            elif given is not None:
                from capgeo.findings.gamma import checked_image_embeddings

                widths[str(given)] = checked_image_embeddings(given, captions).shape[1]
        if len(set(widths.values())) > 1:
            raise CapgeoError("image vectors of different widths ("
                              + ", ".join(f"{name}: {width}" for name, width in widths.items())
                              + "); the sets' image vectors must come from one image encoder")
        return self


#: what `leak` says where the encoder has no image tower and no vectors file is given
LEAK_NEEDS_IMAGES = ("image twins by content and by image cosine need a CLIP-style encoder with an image tower "
                     "(--encoder) or image vectors (--train-image-embeddings FILE and --eval-image-embeddings FILE); "
                     "the images were compared by file name alone")


def leak_datasets(train, evals, encoder=None, *, load_options: dict | None = None, on_skipped=None,
                  progress: bool | None = None, notes: list | None = None, **options) -> Leak:
    """Load (format detected) and embed a training set and evaluation sets with one encoder,
    and find the evaluation captions with a training twin (`capgeo leak`, docs/leak.md).

    ``train`` and each of ``evals`` are a CaptionSet or a path; ``load_options`` go to
    ``load_captions`` for paths. ``encoder``: an :class:`EncodeOptions`, or a spec, a loaded
    encoder or None (the embedded default) with EncodeOptions' other fields (``device``,
    ``cache_dir``, ``use_cache``, ``max_tokens``) among ``options``; checked, with its cache
    folder, before any set is read. The rest of ``options`` go to :func:`leak_sets`:
    ``train_embeddings`` (the training set's, when already computed; then cut at ``max_tokens``
    as the evaluation sets will be), ``images`` (also compare the sets' images by content hash
    and image cosine: :class:`LeakImages`) and ``leak_section``'s (threshold, top, block_size,
    normalize, image_threshold). ``on_skipped``: called with each Skipped (rows left out while
    reading a set). ``notes`` receives the lines that say why a set has no image vectors."""
    from capgeo.errors import CapgeoError

    if isinstance(evals, (str, Path)) or hasattr(evals, "texts"):
        # one set where a list of sets belongs: a path would be read character by character ("EVAL l: no such file")
        raise CapgeoError(f"evals is a list of evaluation sets (paths or CaptionSets), got one: pass [{evals!r}]"
                          if isinstance(evals, (str, Path)) else "evals is a list of evaluation sets; pass [eval_set]")
    encode = (encoder if isinstance(encoder, EncodeOptions)
              else options_from(EncodeOptions, options, encoder=encoder)).checked()
    encode.check_cache()

    def loaded(source, role: str):
        return load_set(source, load_options or {}, on_skipped, role) if isinstance(source, (str, Path)) else source

    train = loaded(train, "TRAIN")
    eval_sets = [loaded(source, "EVAL") for source in evals]
    return leak_sets(train, eval_sets, encode, progress=progress, notes=notes, **options)


def leak_sets(train, eval_sets: Sequence, encode: EncodeOptions, *, train_embeddings=None,
              progress: bool | None = None, images: LeakImages | None = None, notes: list | None = None,
              **leak_options) -> Leak:
    """:func:`leak_datasets` of sets already read (CaptionSets) under options already checked
    (``encode``, its cache folder included): embed them and find the leaked captions; with
    ``images`` (:class:`LeakImages`, its files checked here before any encoding) the sets' image
    vectors too, for the image twins across them (``notes``: why a set has none)."""
    from capgeo.errors import EncoderError
    from capgeo.findings.leak import leak_section

    if images is not None:
        images = images.checked(train, eval_sets)

    def embedded(captions, role: str):
        # the spec, not a loaded model, goes to embed: a set found in the cache loads no model
        from capgeo.progress import labelled

        try:
            # several sets are encoded in turn: each bar says whose captions it counts
            with labelled(f"{role} {Path(str(captions.source)).name}"):
                return embed_captions(captions, encode, encoder=encoder, progress=progress)
        except EncoderError as error:
            # one encoder embeds every set: say which set it failed on (vectors:FILE fits one set at most)
            raise EncoderError(f"{role} {captions.source}: {error}") from error

    # a vectors file, once checked, embeds every set as it is: not read again for each
    encoder = vectors_for_different_sets(encode.encoder, train, eval_sets)
    train_vectors = embedded(train, "TRAIN") if train_embeddings is None else train_embeddings
    evals = [(captions, embedded(captions, "EVAL")) for captions in eval_sets]
    image_vectors = None if images is None else _leak_image_vectors(train, eval_sets, encode, images, progress,
                                                                     notes if notes is not None else [])
    return leak_section(train, train_vectors, evals, images=image_vectors, device=encode.device, progress=progress,
                        **leak_options)


def _leak_image_vectors(train, eval_sets: Sequence, encode: EncodeOptions, images: LeakImages, progress,
                        notes: list) -> LeakImageVectors | None:
    """leak_section's ``images``: each set's ImageVectors (capgeo.images.image_vectors) from its file, else
    from the encoder's image tower where the set names its images, else None; None for no set."""
    from capgeo.findings.leak import LeakImageVectors
    from capgeo.images import ImageVectors, image_vectors
    from capgeo.images.vectors import has_image_tower
    from capgeo.progress import labelled

    sets = [train, *eval_sets]
    files = [images.train, *(images.evals or [None] * len(eval_sets))]
    named = [given is not None or getattr(captions, "image_source", None) is not None
             for captions, given in zip(sets, files)]
    if not any(named):  # no set names its images: nothing to compare, nothing to say
        return None
    has_tower = images.tower and has_image_tower(encode)
    if not has_tower and all(given is None for given in files):
        notes.append(LEAK_NEEDS_IMAGES)
        return None
    made = []
    for role, captions, given in zip(["TRAIN", *["EVAL"] * len(eval_sets)], sets, files):
        name = f"{role} {Path(str(captions.source)).name}"
        if isinstance(given, ImageVectors):
            made.append(given)
            continue
        if given is None and not (has_tower and getattr(captions, "image_source", None) is not None):
            why = "it names no images" if has_tower else "no image tower and no file of image vectors"
            notes.append(f"{name}: no image vectors ({why}); its images are compared by file name alone")
            made.append(None)
            continue
        set_notes: list[str] = []
        try:
            with labelled(name):  # several sets' images are read in turn: each bar says whose
                made.append(image_vectors(captions, encode, image_embeddings=given, progress=progress,
                                          notes=set_notes))
        except EncoderError as error:
            if given is not None:
                raise
            made.append(None)  # a checkpoint without an image tower: the captions' leak stands alone
            set_notes.append(str(error))
            has_tower = False  # (the next sets are not tried again)
        notes.extend(f"{name}: {note}" for note in dict.fromkeys(set_notes))
    return LeakImageVectors(train=made[0], evals=tuple(made[1:]))


def checked_dataset(captions, encode: EncodeOptions | None = None, *, needs_negatives: bool = True,
                    cache: bool = True, top_k: int | None = None, negatives: int | None = None):
    """The checks of a command that encodes one dataset, before its (slow) encoding, in one place:
    ``encode``'s fields, the counts that run away (``top_k``, ``negatives``:
    capgeo.preflight.check_counts), that the captions have negatives (captions of other images;
    unless ``needs_negatives`` is False) and the embedding cache folder (unless ``cache`` is False:
    nothing is encoded). Returns (captions, encode): the captions loaded when given as a path or
    data, ``encode`` checked (default: EncodeOptions())."""
    from capgeo.preflight import check_counts, check_has_negatives

    encode = (encode or EncodeOptions()).checked()
    captions = loaded_captions(captions)
    check_counts(top_k=top_k, negatives=negatives)
    if needs_negatives:
        check_has_negatives(captions)
    if cache:
        encode.check_cache()
    return captions, encode


#: the three near-duplicate questions (`capgeo dupes`, `dupes-examples`, `dupes-sets`), each a
#: function of capgeo.findings.duplicates: pairs_section, examples_section, sets_section
DUPES_KINDS = ("pairs", "examples", "sets")


def dupes_dataset(captions, kind: str = "pairs", encode: EncodeOptions | None = None, *, embeddings=None,
                  top_k: int = TOP_K, progress: bool | None = None, **section_options):
    """`capgeo dupes` (``kind`` "pairs"), `dupes-examples` ("examples") or `dupes-sets` ("sets") in
    one call: check (:func:`checked_dataset`), embed under ``encode`` (unless ``embeddings`` are
    given) and return the typed ``capgeo.dupes/1`` result that capgeo.findings.duplicates'
    ``pairs_section``, ``examples_section`` or ``sets_section`` makes with ``section_options``
    (docs/dupes.md); ``top_k``: companions kept per caption by the scan."""
    from capgeo.errors import CapgeoError

    if kind not in DUPES_KINDS:
        raise CapgeoError(f"kind must be one of {', '.join(DUPES_KINDS)}, got {kind!r}")
    captions, encode = checked_dataset(captions, encode, top_k=top_k, cache=embeddings is None)
    from capgeo.findings import duplicates

    section = getattr(duplicates, f"{kind}_section")
    with _on_ray(encode.ray_address):
        if embeddings is None:
            embeddings = encode.embed(captions, progress=progress)
        return section(captions, embeddings, top_k=top_k, device=encode.device, **section_options)


def negatives_dataset(captions, output: str | Path, encode: EncodeOptions | None = None, *, embeddings=None,
                      progress: bool | None = None, force: bool = False, **options):
    """`capgeo negatives` in one call (docs/negatives.md): check the options (``options``:
    capgeo.findings.negatives.NegativeOptions' fields, and ``block_size``, the mining pass's rows per
    block) and the dataset (:func:`checked_dataset`), embed it under ``encode`` (unless
    ``embeddings`` are given), write each caption's ``k`` hardest negatives to ``output`` (.jsonl or
    .parquet) and return the typed summary (capgeo.findings.negatives.export_negatives; ``force``:
    replace a file capgeo did not write)."""
    from capgeo.findings.negatives import NegativeOptions, check_range, check_rules, export_negatives
    from capgeo.paths import check_outputs

    rules = options_from(NegativeOptions, options)
    block = {name: options.pop(name) for name in ("block_size",) if name in options}  # export_negatives' default
    if options:
        raise CapgeoError(f"negatives_dataset() got an unknown keyword argument {next(iter(options))!r}")
    check_outputs({"DATA": getattr(captions, "source", None)}, {"output": output}, force=force)  # before encoding
    check_range(rules.min_cosine, rules.max_cosine)
    check_rules(rules.per_image, rules.margin)
    captions, encode = checked_dataset(captions, encode, negatives=rules.k, cache=embeddings is None)
    with _on_ray(encode.ray_address):
        embeddings = embed_captions(captions, encode, vectors=embeddings, progress=progress)
        return export_negatives(captions, embeddings, str(output), rules=rules, device=encode.device, force=force,
                                **block)


@dataclass(frozen=True)
class BatchesOptions:
    """How `capgeo batches` plans its batches (docs/batches.md); the fields' defaults are the only
    defaults of these options (capgeo.defaults)."""

    #: captions per batch
    batch_size: int
    #: two captions of different images at or above this cosine never share a batch
    threshold: float = NEAR_DUPLICATE_THRESHOLD
    #: the first epoch's order (epoch e: seed + e)
    seed: int = 0
    #: epochs planned, each in its own order
    epochs: int = BATCHES_EPOCHS


def batches_dataset(captions, encode: EncodeOptions | None = None, *, embeddings=None,
                    output: str | Path | None = None, keep_batches: bool = False, progress: bool | None = None,
                    force: bool = False, **plan) -> BatchPlan:
    """`capgeo batches` in one call (docs/batches.md): check the options and the dataset
    (:func:`checked_dataset`), embed it under ``encode`` (unless ``embeddings`` are given), plan
    ``epochs`` epochs of batches of ``batch_size`` with no two captions of one image, exact copies
    or near-duplicates (cosine >= ``threshold``) in one batch (capgeo.training.plan; ``plan``:
    :class:`BatchesOptions`' fields), write them to ``output`` (batches.jsonl) when given, and
    return the ``capgeo.batches/1`` result (capgeo.training.plan.BatchPlan); with ``keep_batches``
    it also holds the batches (``batches[epoch][k]``: row numbers). ``output`` never replaces the
    dataset, nor, unless ``force``, an existing file capgeo did not write."""
    from capgeo.paths import check_outputs
    from capgeo.preflight import check_pair_threshold
    from capgeo.training.plan import (check_batch_size, check_epochs, check_seed, conflicts_of, plan_epochs,
                                      plan_section)

    planned = BatchesOptions(**plan)
    check_outputs({"DATA": getattr(captions, "source", None)}, {"output": output}, force=force)
    check_pair_threshold(planned.threshold)
    check_epochs(planned.epochs)
    check_seed(planned.seed)
    captions, encode = checked_dataset(captions, encode, cache=embeddings is None)
    check_batch_size(planned.batch_size, len(captions))
    with _on_ray(encode.ray_address):
        embeddings = embed_captions(captions, encode, vectors=embeddings, progress=progress)
        conflicts = conflicts_of(captions, embeddings, planned.threshold, device=encode.device)
    plans = plan_epochs(conflicts, planned.batch_size, seed=planned.seed, epochs=planned.epochs)
    if output is not None:
        from capgeo.training.batches_export import write_batches

        write_batches(str(output), plans, captions.ids)
    encoder = embeddings.info.to_dict() if getattr(embeddings, "info", None) is not None else None
    return plan_section(conflicts, plans, n_groups=captions.n_groups, encoder=encoder,
                        output=None if output is None else str(output), keep_batches=keep_batches)


def encode_dataset(captions, encode: EncodeOptions | None = None, *, output: str | Path | None = None,
                   progress: bool | None = None, force: bool = False) -> EncodeSummary:
    """`capgeo encode` in one call: check (:func:`checked_dataset`; a dataset of one image is
    fine), embed under ``encode`` and return the ``capgeo.encode/1`` summary
    (capgeo.encoders.embed.encode_summary); with ``output`` (.npy, .npz or .parquet) the vectors
    are written there too, and the summary says how they are aligned. ``output`` never replaces the
    dataset or the encoder's files, nor, unless ``force``, an existing file capgeo did not write."""
    import dataclasses
    import time

    from capgeo.encoders.embed import encode_summary
    from capgeo.paths import check_outputs, encoder_input_files

    encoder = (encode or EncodeOptions()).encoder
    check_outputs({"DATA": getattr(captions, "source", None),
                   "--encoder": encoder_input_files(encoder) if isinstance(encoder, str) else []},
                  {"output": output}, force=force)

    captions, encode = checked_dataset(captions, encode, needs_negatives=False)
    started = time.perf_counter()
    with _on_ray(encode.ray_address):
        embeddings = encode.embed(captions, progress=progress)
    summary = encode_summary(captions, embeddings, time.perf_counter() - started)
    if output:
        from capgeo.encoders.precomputed import write_vector_file

        alignment = write_vector_file(str(output), embeddings.vectors, captions.ids, captions.groups)
        summary = dataclasses.replace(summary, output={"path": str(output), "aligned_by": alignment})
    return summary


def vectors_for_different_sets(encoder, train, eval_sets):
    """``encoder``, loaded when it is a vectors file, which embeds TRAIN and EVAL only through
    caption ids that say which row is whose.

    Aligned by row, it would give the i-th training and the i-th eval caption the same vector
    whenever the sets have as many captions (a 100% leak at cosine 1.0 between unrelated texts);
    by id, an id that both sets use for different texts would do the same for that pair.
    """
    from capgeo.encoders.registry import get_encoder, spec_kind
    from capgeo.errors import EncoderError

    if not isinstance(encoder, str) or spec_kind(encoder)[0] != "precomputed":
        return encoder
    vectors = get_encoder(encoder)
    if vectors.ids is None:
        raise EncoderError(f"{vectors.path}: vectors aligned by row belong to one set of captions, and leak embeds "
                           "TRAIN and EVAL with one encoder; give a .npz or .parquet whose caption ids cover both "
                           "sets, or an encoder that computes the vectors")
    train_texts = dict(zip(train.ids, train.texts))
    for eval_set in eval_sets:
        clash = next((caption_id for caption_id, text in zip(eval_set.ids, eval_set.texts)
                      if caption_id in train_texts and train_texts[caption_id] != text), None)
        if clash is not None:
            raise EncoderError(f"{vectors.path}: caption id {clash!r} is in TRAIN {train.source} and in EVAL "
                               f"{eval_set.source} with different texts, so one vector would stand for both; "
                               "give the sets distinct ids")
    return vectors
