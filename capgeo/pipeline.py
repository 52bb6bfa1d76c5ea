"""Dataset in, profile out: the path `capgeo profile` and `capgeo report` share."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from capgeo.geometry.typed_profile import Profile


def profile_dataset(captions, encoder=None, *, device: str | None = None, cache_dir: str | Path | None = None,
                    use_cache: bool = True, max_tokens: int | None = None, progress: bool | None = None,
                    command: str | None = None, gamma: bool = True, logit_scale: float | None = None,
                    per_caption: str | Path | None = None, **profile_options) -> Profile:
    """Load (when given a path), embed and profile a dataset.

    ``captions`` is a CaptionSet or a path read with ``load_captions`` (format
    detected). ``encoder`` is a spec string, a loaded encoder, or None for the
    embedded default. ``profile_options`` go to ``build_profile`` (batch_sizes,
    buckets, relative_buckets, n_batches, top_k, block_size, seed,
    near_duplicate_threshold, mode, include_companions, companion_lists, ...). Returns the typed
    ``capgeo.profile/1`` Profile (docs/profile-schema.md). With ``gamma`` (the
    default) it also holds the ``gamma`` section (`capgeo gamma`, docs/gamma.md) at
    the profile's batch sizes, with ``logit_scale`` overriding the checkpoint's.
    ``per_caption``: also write one row per caption there (Parquet, CSV or JSONL by
    suffix; columns in docs/profile-schema.md).
    """
    from dataclasses import replace

    from capgeo.encoders import embed
    from capgeo.geometry.batch_size import resolve_batch_sizes
    from capgeo.geometry.profile import build_profile

    if isinstance(captions, (str, Path)):
        from capgeo.captions import load_captions

        captions = load_captions(captions)
    resolve_batch_sizes(profile_options.get("batch_sizes"), captions.n_groups)   # fail before the (slow) encoding
    embeddings = embed(captions, encoder, device=device, cache_dir=cache_dir, use_cache=use_cache,
                       max_tokens=max_tokens, progress=progress)
    include_companions = profile_options.pop("include_companions", True)
    # the per-caption file is built from the companion lists
    companion_lists = profile_options.pop("companion_lists", True) or per_caption is not None
    profile = build_profile(captions, embeddings, device=device, progress=progress, command=command,
                            include_companions=include_companions or per_caption is not None,
                            companion_lists=companion_lists, **profile_options)
    if per_caption is not None:
        from capgeo.findings.per_caption import write_per_caption

        write_per_caption(captions, embeddings, profile, str(per_caption))
        if not include_companions:
            # the file has them; the JSON stays as small as asked
            profile = replace(profile, companions=replace(profile.companions, top_ids=None, top_cosines=None),
                              options=replace(profile.options, include_companions=False))
    if gamma:
        profile, left_out = with_gamma(profile, captions, embeddings, logit_scale=logit_scale, progress=progress)
        if left_out:  # asked for and not there (all of it, or some batch sizes): say why, in JSON and on the terminal
            profile = replace(profile, gamma_left_out=left_out)
    return profile


def with_gamma(profile: Profile, captions, embeddings, *, logit_scale: float | None = None,
               progress: bool | None = None) -> tuple[Profile, str | None]:
    """``profile`` with the ``gamma`` section (`capgeo gamma`) at its own batch sizes, batch count and
    seed, and why it, or the gamma of some extra batch sizes, was left out (None when nothing was)."""
    from dataclasses import replace

    from capgeo.findings.gamma import gamma_section
    from capgeo.geometry.batch_size import DEFAULT_N_BATCHES, MIN_GAMMA_BATCH_SIZE, gamma_batch_size_problem
    from capgeo.geometry.typed_profile import Gamma, Options

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
    section = gamma_section(embeddings, captions.group_codes, logit_scale=logit_scale,
                            batch_sizes=[size for size in sizes if size >= MIN_GAMMA_BATCH_SIZE],
                            n_batches=DEFAULT_N_BATCHES if options.n_batches is None else options.n_batches,
                            seed=0 if options.seed is None else options.seed, progress=progress)
    too_small = [size for size in sizes[1:] if size < MIN_GAMMA_BATCH_SIZE]
    note = None
    if too_small:  # extra batch sizes the rule cannot answer: their in-batch rows stay, their gamma is left out
        section["batch_sizes_left_out"] = too_small
        note = (f"Gamma diagnostics: no gamma at B = {', '.join(map(str, too_small))}, "
                f"{gamma_batch_size_problem(too_small[0], captions.n_groups)} (capgeo docs gamma).")
    return replace(profile, gamma=Gamma.from_dict(section)), note


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


def leak_datasets(train, evals, encoder=None, *, device: str | None = None, cache_dir: str | Path | None = None,
                  use_cache: bool = True, progress: bool | None = None, load_options: dict | None = None,
                  train_embeddings=None, max_tokens: int | None = None, on_skipped=None, **leak_options) -> dict:
    """Load (format detected) and embed a training set and evaluation sets with one encoder,
    and find the evaluation captions with a training twin (`capgeo leak`, docs/leak.md).

    ``train`` and each of ``evals`` are a CaptionSet or a path; ``load_options`` go to
    ``load_captions`` for paths; ``leak_options`` to ``leak_section``
    (threshold, top, block_size). ``train_embeddings``: the training set's, when already computed
    (then cut at ``max_tokens`` as the evaluation sets will be). ``on_skipped``: called with each
    Skipped (rows left out while reading a set)."""
    from dataclasses import replace

    from capgeo.encoders import embed
    from capgeo.errors import CapgeoError, EncoderError
    from capgeo.findings.leak import leak_section

    if isinstance(evals, (str, Path)) or hasattr(evals, "texts"):
        # one set where a list of sets belongs: a path would be read character by character ("EVAL l: no such file")
        raise CapgeoError(f"evals is a list of evaluation sets (paths or CaptionSets), got one: pass [{evals!r}]"
                          if isinstance(evals, (str, Path)) else "evals is a list of evaluation sets; pass [eval_set]")

    def loaded(source, role: str):
        return load_set(source, load_options or {}, on_skipped, role) if isinstance(source, (str, Path)) else source

    def embedded(captions, role: str):
        # the spec, not a loaded model, goes to embed: a set found in the cache loads no model
        from capgeo.progress import labelled

        try:
            # several sets are encoded in turn: each bar says whose captions it counts
            with labelled(f"{role} {Path(str(captions.source)).name}"):
                return embed(captions, encoder, device=device, cache_dir=cache_dir, use_cache=use_cache,
                             max_tokens=max_tokens, progress=progress)
        except EncoderError as error:
            # one encoder embeds every set: say which set it failed on (vectors:FILE fits one set at most)
            raise EncoderError(f"{role} {captions.source}: {error}") from error

    train = loaded(train, "TRAIN")
    eval_sets = [loaded(source, "EVAL") for source in evals]
    # a vectors file, once checked, embeds every set as it is: not read again for each
    encoder = vectors_for_different_sets(encoder, train, eval_sets)
    train_vectors = embedded(train, "TRAIN") if train_embeddings is None else train_embeddings
    return leak_section(train, train_vectors, [(captions, embedded(captions, "EVAL")) for captions in eval_sets],
                        device=device, progress=progress, **leak_options)


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
