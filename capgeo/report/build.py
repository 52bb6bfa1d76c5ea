"""Report orchestration: a dataset or a saved profile in, one HTML file out.

- :func:`report_dataset` profiles a dataset (capgeo.pipeline.run_profile, the path of
  `capgeo profile`) and adds the ``dupes`` and ``gamma`` sections (the library calls of
  `capgeo dupes` and `capgeo gamma`), returning one complete profile; it is
  :func:`plan_report` (every check, before any encoding) then :func:`run_report`.
- :func:`load_report_source` reads a saved profile (never recomputing what it
  holds) or, given a dataset, calls :func:`report_dataset`.
- :func:`build_report` / :func:`build_compare` render and write atomically.
- :func:`write_report` / :func:`write_compare`: all of `capgeo report` / `capgeo compare`
  in one call each (the CLI only parses options and prints what they return).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from capgeo.captions.shards import is_pattern
from capgeo.encoders.checkpoint import first_line
from capgeo.errors import CapgeoError
from capgeo.geometry.profile_options import ProfileOptions
from capgeo.geometry.typed_profile import CaptionMap, Dataset, Dupes, Encoder, Lengths, Profile, Provenance
from capgeo.paths import check_output_paths, check_outputs, encoder_input_file, encoder_input_files, result_schema
from capgeo.pipeline import EncodeOptions, load_set

#: Extra row the report adds when the caller gives no batch size: the paper's micro-batch. The
#: headline is the policy's (capgeo.geometry.batch_size: 128, the paper's effective batch).
EXTRA_BATCH_SIZES = (16,)
#: Gallery content computed for a report: example queries at these quantiles of the
#: hardest-companion distribution (a typical, a hard and a very hard caption), and the top pairs.
DUPES_QUANTILES = (0.5, 0.9, 0.99)
DUPES_PAIRS = 20


@dataclass
class ReportInput:
    """A profile to draw, plus what the page should say is missing and why."""

    profile: Profile
    notes: list[str] = field(default_factory=list)


def is_profile_file(path: str | Path) -> bool:
    """True when ``path`` is a saved capgeo profile (a JSON object whose "schema" names it, whatever the
    file is called). Another capgeo result (dupes, leak, ...) is refused in one line: read as a
    dataset, its columns would be reported as a missing caption column."""
    path = Path(path)
    if not path.is_file():
        return False
    schema = result_schema(path) or ""
    if schema and not schema.startswith("capgeo.profile/"):
        raise CapgeoError(f"{path}: a {schema} result, not a profile; report and compare draw profiles "
                          "(capgeo.profile/1: `capgeo profile --json`, `capgeo gamma --json`, "
                          "`capgeo report --save-profile`) and datasets")
    return schema.startswith("capgeo.profile/")


NO_DUPES_NOTE = "Near-duplicate gallery: left out (--no-dupes)."


def add_sections(profile: Profile, captions, embeddings, *, dupes: bool = True, gamma: bool = True,
                 progress: bool | None = None, scan=None) -> tuple[Profile, list[str]]:
    """``profile`` with the ``dupes`` and ``gamma`` sections it lacks, from its captions and embeddings,
    and notes for what was not added. Sections already present are kept as they are.
    ``scan``: the profile's pairwise scan of these embeddings, reused by dupes when its
    companions are exact.
    """
    if scan is not None and (scan.companion_mode != "exact" or not scan.top_k):
        scan = None
    notes = []
    if dupes and not profile.dupes:
        from capgeo.findings.duplicates import gallery_section

        # the profile's own near-duplicate threshold: a filled gallery counted at the default 0.95 beside
        # a summary counted at the profile's (0 pairs at >= 0.95 against 29 at >= 0.5, on one page)
        threshold = _threshold(profile)
        profile = replace(profile, dupes=gallery_section(
            captions, embeddings, pairs=DUPES_PAIRS, quantiles=DUPES_QUANTILES, scan=scan,
            **({} if threshold is None else {"near_duplicate_threshold": threshold})))
    elif not dupes and not profile.dupes:
        notes.append(NO_DUPES_NOTE)
    if gamma and not profile.gamma:
        from capgeo.pipeline import with_gamma

        profile, note = with_gamma(profile, captions, embeddings, progress=progress)
        if note:
            notes.append(note)
    elif not gamma and not profile.gamma:
        notes.append("Gamma diagnostics: left out (--no-gamma).")
    return profile, notes


def _threshold(profile: Profile) -> float | None:
    """The profile's near-duplicate threshold, None when its options do not say."""
    return profile.options.near_duplicate_threshold if profile.options else None


@dataclass(frozen=True)
class ReportOptions:
    """What a report holds beside the profile, and what else `capgeo report` writes."""

    #: the near-duplicate gallery (`capgeo dupes`)
    dupes: bool = True
    #: the gamma diagnostics (`capgeo gamma`)
    gamma: bool = True
    #: the caption map (capgeo.map; left out with a note without openTSNE)
    caption_map: bool = True
    #: the context-length section (`capgeo truncation`): the dataset embedded again at several lengths
    truncation: bool = False
    #: evaluation datasets (paths or CaptionSets) of the train/eval leakage section (`capgeo leak`)
    leak: Sequence = ()
    #: for a saved profile: compute its missing dupes/gamma sections from the dataset it names
    fill_missing: bool = False
    #: also write the complete profile as JSON here, to redraw the report later
    save_profile: str | Path | None = None
    #: the pairs section (capgeo.pipeline.PairOptions with image vectors; docs/pairs.md)
    pairs: Any = None
    #: a measured gamma in the gamma section (capgeo.findings.gamma_sweep.SweepOptions, or True: its
    #: defaults), the headline of the summary and the section; None: the rule alone
    sweep: Any = None


@dataclass(frozen=True)
class ReportPlan:
    """A report of a dataset checked and ready (:func:`plan_report`); :func:`run_report` makes it."""

    #: the profile's run (capgeo.pipeline.ProfilePlan)
    profile: Any
    report: ReportOptions
    #: the truncation section's run over the same captions and options, with ``report.truncation``
    truncation: Any = None

    def with_encoder(self, encoder) -> "ReportPlan":
        """This plan with ``encoder`` (the one its spec names, loaded and checked) in the spec's place."""
        def swapped(plan):
            return None if plan is None else replace(plan, encode=replace(plan.encode, encoder=encoder))

        return replace(self, profile=swapped(self.profile), truncation=swapped(self.truncation))


def plan_report(captions, encode: EncodeOptions | None = None, options: ProfileOptions | None = None, *,
                report: ReportOptions | None = None, embeddings=None) -> ReportPlan:
    """Every check of :func:`report_dataset` before its first encoding, once
    (capgeo.pipeline.plan_profile, and the truncation section's own checks); the evaluation
    sets of ``report.leak`` given as paths are read now."""
    from capgeo.pipeline import ImageOptions, ProfileSections, TruncationPasses, checked_sweep, plan_profile

    report = report or ReportOptions()
    report = replace(report, sweep=checked_sweep(report.sweep, gamma=report.gamma))
    # relative buckets too: MiniLM-like encoders put almost every negative below the absolute 0.7 edge
    options = ProfileOptions.of(options, relative_buckets=True)
    # without a file of image vectors, the encoder's image tower over the images the dataset names
    images = ImageOptions() if report.pairs is not None and report.pairs.image_embeddings is None else None
    plan = plan_profile(captions, encode, options, embeddings=embeddings,
                        sections=ProfileSections(gamma=False, pairs=report.pairs, images=images,
                                                 extra_batch_sizes=EXTRA_BATCH_SIZES))
    if report.leak:
        report = replace(report, leak=[load_set(source, {}, role="EVAL") if isinstance(source, (str, Path))
                                       else source for source in report.leak])
    # `capgeo truncation`: the same captions re-embedded at several lengths, on the same batches
    truncation = plan.with_passes(TruncationPasses()) if report.truncation else None
    return ReportPlan(plan, report, truncation)


def report_dataset(captions, encode: EncodeOptions | None = None, options: ProfileOptions | None = None, *,
                   report: ReportOptions | None = None, embeddings=None, progress: bool | None = None,
                   command: str | None = None) -> ReportInput:
    """Profile ``captions`` (a CaptionSet or a path) and add the dupes and gamma sections.

    ``encode`` (an EncodeOptions) says how to embed them; pass ``embeddings`` to reuse vectors
    already computed for these captions. ``options`` is the profile's ProfileOptions (relative
    buckets are always added; without a batch size, the extra row EXTRA_BATCH_SIZES too).
    ``report`` says which sections to add: with ``truncation`` the ``truncation`` section
    (`capgeo truncation`); with ``leak`` (evaluation datasets) the ``leak`` section (`capgeo leak`,
    this dataset as training set); with ``caption_map`` the ``map`` section. Everything is checked
    before the first encoding (:func:`plan_report`, then :func:`run_report`).
    """
    return run_report(plan_report(captions, encode, options, report=report, embeddings=embeddings),
                      progress=progress, command=command)


def run_report(plan: ReportPlan, *, progress: bool | None = None, command: str | None = None) -> ReportInput:
    """Encode and compute what a :class:`ReportPlan` holds: the profile, then its report's sections."""
    from capgeo.pipeline import run_plan

    report, encode, options = plan.report, plan.profile.encode, plan.profile.options
    # the pairs section after the gamma section: its saturation reads the suggested gamma
    run = run_plan(replace(plan.profile, pairs=None), progress=progress, command=command)
    captions, embeddings, profile, scan = run.captions, run.embeddings, run.profile, run.scan
    notes = [note[0].upper() + note[1:] for note in run.batch_sizes.notes]
    # one all-pairs pass serves the profile and the dupes section
    profile, added = add_sections(profile, captions, embeddings, dupes=report.dupes, gamma=report.gamma,
                                  progress=progress, scan=scan)
    notes += added
    pair_images = plan.profile.image_vectors if plan.profile.image_vectors is not None else run.image_vectors
    if report.sweep:
        from capgeo.pipeline import with_sweep

        profile = with_sweep(profile, captions, embeddings, report.sweep, image_vectors=pair_images,
                             device=encode.device, progress=progress)
    if plan.profile.pairs is not None and pair_images is not None:
        from capgeo.pipeline import with_pairs

        profile = with_pairs(profile, captions, embeddings, pair_images, plan.profile.pairs,
                             batch_size=run.batch_sizes.headline, progress=progress)
    if plan.truncation is not None:
        made = run_plan(plan.truncation, progress=progress)
        profile = replace(profile, truncation=made.profile.truncation)
    if report.leak:
        from capgeo.pipeline import leak_sets

        # the evaluation sets cut to the training set's length: the same captions then compare alike;
        # the training images' vectors, where the profile has them, find the evaluation images among them
        leak_notes: list[str] = []
        leak = leak_sets(captions, report.leak, encode, train_embeddings=embeddings, progress=progress,
                         images=_leak_images(pair_images, captions, embeddings, plan.profile.pairs),
                         image_threshold=getattr(report.pairs, "image_threshold", None), notes=leak_notes)
        profile = replace(profile, leak=leak)
        notes += [f"Leak: {note}." for note in leak_notes]
    if report.caption_map:
        profile, added = add_map_section(profile, captions, embeddings, scan=scan, seed=options.seed,
                                         thumbnail=getattr(pair_images, "thumbnail", None), device=encode.device,
                                         progress=progress)
        notes += added
    else:
        notes.append(NO_MAP_NOTE)
    return ReportInput(profile, notes)


NO_MAP_NOTE = "Caption map: left out (--no-map)."


def _leak_images(pair_images, captions, embeddings, pairs):
    """The --leak image comparison (capgeo.pipeline.LeakImages) where the profile has the training
    images' vectors: those, and each evaluation set's from the encoder's image tower; else None."""
    from capgeo.pipeline import LeakImages, pair_image_vectors

    if pair_images is None:
        return None
    # --image-embeddings, read and checked by the plan, as the pairs section has them
    return LeakImages(train=pair_image_vectors(pair_images, captions, embeddings, pairs))


def add_map_section(profile: Profile, captions, embeddings, *, scan=None, seed: int = 0, thumbnail=None,
                    device: str | None = None, progress: bool | None = None) -> tuple[Profile, list[str]]:
    """``profile`` with the ``map`` section (at most capgeo.map.REPORT_MAX_POINTS captions, with the
    profile's leak marked, and ``thumbnail``: the image vectors' thumbnails, shown on hover); without
    openTSNE, as it is with a note saying what to install instead."""
    from capgeo.map import REPORT_MAX_POINTS, MapUnavailable, dataset_map

    threshold = _threshold(profile)
    try:
        section = dataset_map(captions, embeddings.vectors, scan=scan,
                              leak=profile.leak, seed=seed,
                              max_points=REPORT_MAX_POINTS, thumbnail=thumbnail, device=device, progress=progress,
                              **({} if threshold is None else {"near_duplicate_threshold": threshold}))
    except MapUnavailable as error:
        return profile, [f"Caption map: left out: {error}."]
    return replace(profile, map=section), []


#: how a library caller adds what a profile's page lacks (:func:`library_report`)
LIBRARY_ADDS = "capgeo.profile(DATA).to_html(...) adds it, as `capgeo report DATA` does"


def library_report(profile: Profile, made_from=None) -> ReportInput:
    """What ``Profile.to_html`` draws. With ``made_from`` (the captions and embeddings the profile was made
    from, which :func:`capgeo.profile` keeps) the sections ``capgeo report DATA`` adds to a profile: the
    near-duplicate gallery, the gamma diagnostics and the caption map, each unless present. Without, the
    profile as it is, and a note for each of those sections it lacks naming the call that adds it."""
    if made_from is None:
        notes = [f"{name}: this profile has no {key} section; {LIBRARY_ADDS}."
                 for name, key in (("Near-duplicate gallery", "dupes"), ("Gamma diagnostics", "gamma"),
                                   ("Caption map", "map")) if not getattr(profile, key)]
        return ReportInput(profile, notes)
    captions, embeddings = made_from
    profile, notes = add_sections(profile, captions, embeddings)
    if not profile.map:
        options = profile.options
        profile, added = add_map_section(profile, captions, embeddings,
                                         seed=options.seed if options and options.seed is not None else 0)
        notes += added
    return ReportInput(profile, notes)


def load_saved_profile(path: str | Path, *, dupes: bool = True, gamma: bool = True) -> ReportInput:
    """A saved profile as it is; missing dupes/gamma sections become notes, not recomputation.
    ``dupes``/``gamma`` False (--no-dupes, --no-gamma) leave those sections out of the page, said
    so as for a dataset (not as a section the profile lacks)."""
    from capgeo.geometry.typed_profile import load_typed_profile

    profile = load_typed_profile(path)
    notes = []
    for wanted, key, note in ((dupes, "dupes", "Near-duplicate gallery: left out (--no-dupes)."),
                              (gamma, "gamma", "Gamma diagnostics: left out (--no-gamma).")):
        if not wanted:
            profile = profile.without(key)
            notes.append(note)
    if dupes and not profile.dupes:
        notes.append(f"Near-duplicate gallery: {Path(path).name} has no dupes section and the report was built from the "
                     "saved profile alone. Run `capgeo report DATA` (or add --fill-missing) to include it.")
    if gamma and not profile.gamma:
        notes.append(f"Gamma diagnostics: {Path(path).name} has no gamma section and the report was built from the "
                     "saved profile alone. Run `capgeo report DATA` (or add --fill-missing) to include it.")
    return ReportInput(profile, notes)


def fill_missing(report_input: ReportInput, *, device: str | None = None, cache_dir: str | None = None,
                 use_cache: bool = True, progress: bool | None = None, dupes: bool = True,
                 gamma: bool = True, outputs: dict | None = None) -> ReportInput:
    """Compute a saved profile's missing dupes/gamma sections (those of them asked for) from its
    own dataset and encoder. ``outputs`` (option -> path) are checked against the dataset and the
    encoder's files, which only the profile names, before anything is read.

    The dataset is re-read from ``dataset.source`` and must have the same caption texts
    (``texts_digest``) and the same groups (``groups_digest``, and ``n_groups``) as when the
    profile was made; embeddings come from the cache when present.
    """
    profile = report_input.profile
    if (profile.dupes or not dupes) and (profile.gamma or not gamma):
        return report_input
    from capgeo.captions import load_captions
    from capgeo.encoders import get_encoder
    from capgeo.errors import DataError
    from capgeo.pipeline import embed_captions

    dataset, provenance = profile.dataset or Dataset(), profile.provenance or Provenance()
    source, spec = _made_from(profile)
    if not source or not (Path(source).exists() or is_pattern(source)):
        raise CapgeoError(f"--fill-missing: the profile's dataset {source!r} is not found (moved or deleted?); "
                          "run `capgeo report DATA` instead")
    encoder = profile.encoder or Encoder()
    # the report or --save-profile written over the dataset or a model file the profile names: replaced
    # with HTML, exit 0 (the command's own check knew only the profile file)
    check_output_paths(fill_missing_inputs(profile), outputs or {})
    # the profile does not record --limit; it kept the first n_captions captions, so read as many
    try:
        captions = load_captions(source, format=dataset.format or "auto", limit=dataset.n_captions)
    except DataError as error:
        made_with = provenance.command
        raise CapgeoError(f"--fill-missing: {source} cannot be read as the profile read it ({error}); a profile does "
                          f"not record column options such as --text-column: run `capgeo report DATA` with the "
                          f"options it was made with" + (f" ({made_with})" if made_with else "")) from None
    if dataset.texts_digest and captions.texts_digest() != dataset.texts_digest:
        raise CapgeoError(f"--fill-missing: {source} does not hold the captions the profile was made from "
                          "(texts digest differs: the file changed, or the profile used --split); "
                          "run `capgeo report DATA` instead")
    from capgeo.geometry.profile import groups_digest

    # same texts, other images: sections filled by the new grouping would sit beside the old one's
    if (dataset.groups_digest and groups_digest(captions) != dataset.groups_digest) or \
            (dataset.n_groups is not None and captions.n_groups != dataset.n_groups):
        raise CapgeoError(f"--fill-missing: {source} groups its captions into images otherwise than when the "
                          f"profile was made ({captions.n_groups} groups now, {dataset.n_groups} then, or "
                          "other group ids; the file changed, or the profile used --group-column); "
                          "run `capgeo report DATA` instead")
    lengths = profile.lengths or Lengths()
    # precomputed vectors have no tokenizer (known: false, max_tokens 0): nothing to re-cut
    max_tokens = (lengths.max_tokens or None) if lengths.counted else None
    # the encoder's identity comes from its files, without a model: a replaced checkpoint or vectors
    # file is refused before the whole dataset is encoded, not after
    text_encoder = get_encoder(spec, device=device, cache_dir=cache_dir)
    made_by, now = encoder.fingerprint, text_encoder.info.fingerprint
    if made_by and now and made_by != now:  # the checkpoint or vectors file was replaced since
        raise CapgeoError(f"--fill-missing: the encoder {encoder.spec!r} is not the one the profile was made "
                          f"with (fingerprint {now[:12]}, the profile's {made_by[:12]}: its file changed); run "
                          "`capgeo report DATA` instead")
    embeddings = embed_captions(captions, EncodeOptions(text_encoder, device=device, cache_dir=cache_dir,
                                                        use_cache=use_cache, max_tokens=max_tokens), progress=progress)
    profile, notes = add_sections(profile, captions, embeddings, dupes=dupes, gamma=gamma, progress=progress)
    return ReportInput(profile, notes)


def _made_from(profile: Profile) -> tuple[str | None, str | None]:
    """The dataset and encoder spec a profile names, as found from where it was made."""
    made_in = (profile.provenance or Provenance()).working_directory
    source = _as_made((profile.dataset or Dataset()).source, made_in)
    return source, _encoder_as_made((profile.encoder or Encoder()).spec, made_in)


def fill_missing_inputs(profile: Profile | str | Path) -> dict:
    """The files --fill-missing reads for a saved profile (typed, or its path): its dataset and
    its encoder's files, as labelled inputs for :func:`capgeo.paths.check_output_paths`."""
    if not isinstance(profile, Profile):
        try:
            data = json.loads(Path(profile).read_text(encoding="utf-8"))
            # only the sections naming the inputs: the file's other sections are checked when it is drawn
            profile = Profile.from_dict({key: data[key] for key in ("dataset", "encoder", "provenance")
                                         if key in data and isinstance(data[key], dict)}, check=False)
        except (OSError, ValueError, TypeError, AttributeError):
            return {}  # the profile's own error comes when it is read
    try:
        source, spec = _made_from(profile)
    except CapgeoError:
        return {}
    return {"DATA": source, "--encoder": encoder_input_files(spec)}


def _as_made(path: str | None, made_in: str | None) -> str | None:
    """``path`` as the profile's command saw it: a relative path is taken from the folder that command
    ran in (a file of the same name here is another file), else from here."""
    if not path or Path(path).is_absolute() or not made_in:
        return path
    there = Path(made_in) / path
    # a glob or brace pattern of shards was expanded in that folder
    return str(there) if there.exists() or is_pattern(path) else path


def _encoder_as_made(spec: str | None, made_in: str | None) -> str | None:
    """The encoder spec with the files it reads (vectors, checkpoint, a CONFIG.json@, a local-dir:
    folder) resolved as :func:`_as_made`."""
    from capgeo.encoders.registry import model_at_checkpoint

    if spec and spec.lower().startswith("local-dir:"):
        return "local-dir:" + _as_made(spec.split(":", 1)[1], made_in)
    at = model_at_checkpoint(spec) if spec else None
    if at is not None and at[0].lower().endswith(".json"):
        return f"{_as_made(at[0], made_in)}@{_as_made(at[1], made_in)}"
    file = encoder_input_file(spec) if spec else None
    found = _as_made(file, made_in)
    if not file or found == file:
        return spec
    at = spec.rfind(file)
    return spec[:at] + found + spec[at + len(file):]


def build_report(profile: Profile | ReportInput, output: str | Path, *, command: str | None = None,
                 notes: Sequence[str] = ()) -> Path:
    """Render one profile's report and write it atomically to ``output``."""
    from capgeo._atomic import atomic_open
    from capgeo.report.single import render_report

    if isinstance(profile, ReportInput):
        notes = [*profile.notes, *notes]
        profile = profile.profile
    page = render_report(profile, command=command, notes=list(notes))
    with atomic_open(output) as handle:
        handle.write(page)
    return Path(output)


def build_compare(profiles: Sequence[Profile | ReportInput], output: str | Path, *, labels: Sequence[str] | None = None,
                  command: str | None = None, notes: Sequence[str] = ()) -> Path:
    """Render the side-by-side view of several profiles and write it atomically to ``output``."""
    from capgeo._atomic import atomic_open
    from capgeo.report.compare import render_compare

    plain = [p.profile if isinstance(p, ReportInput) else p for p in profiles]
    page = render_compare(plain, labels=labels, command=command, notes=list(notes))
    with atomic_open(output) as handle:
        handle.write(page)
    return Path(output)


def save_profile(profile: Profile, path: str | Path) -> Path:
    """Write the (completed) profile as strict JSON, atomically, so the report can be redrawn without recomputing."""
    from capgeo._atomic import atomic_open
    from capgeo._json_write import dumps

    with atomic_open(path) as handle:
        handle.write(dumps(profile.to_dict()) + "\n")   # json.dumps(indent=2, ensure_ascii=False, allow_nan=False)
    return Path(path)


#: Dataset options of `capgeo report` that a saved profile cannot use (it is drawn as it is).
DATASET_ONLY_OPTIONS = ("encoder", "text_column", "captions_column", "id_column", "group_column", "split", "limit",
                        "image_column", "images", "max_tokens", "batch_size")
#: All that a saved profile ignores: its sections keep the seed and batch count they were made with
#: (--fill-missing uses them too), and the truncation section needs the dataset's encoding at each length
SAVED_PROFILE_IGNORES = (*DATASET_ONLY_OPTIONS, "format", "seed", "n_batches", "truncation", "image_embeddings",
                         "sweep")


@dataclass(frozen=True)
class CommandHooks:
    """The command around :func:`write_report` or :func:`write_compare`: the command line the page
    gives to reproduce it, and what the command tells the user as the work goes."""

    #: the command line shown on the page (None: "built from the library")
    command: str | None = None
    #: called with each capgeo.captions.model.Skipped as soon as a dataset is read
    on_skipped: Callable | None = None
    #: report: called with the path of ``report.save_profile`` once written
    on_saved: Callable | None = None
    #: compare: ``on_profiles(profiles, labels)``, given what the page shows, as the page names it, once written
    on_profiles: Callable | None = None


@dataclass(frozen=True)
class CompareOptions:
    """What `capgeo compare` puts side by side beyond its sources."""

    #: each dataset is profiled under each of these encoder specs (default: the embedded one)
    encoders: Sequence[str | None] = ()
    #: the columns' names, one per profile (default: from the sources and encoders)
    labels: Sequence[str] | None = None


@dataclass
class WrittenReport:
    """What `capgeo report` wrote, and what it has to tell the user."""

    path: Path
    notes: list[str]
    saved_profile: Path | None = None
    #: options given for a dataset that a saved profile ignored (names as in SAVED_PROFILE_IGNORES, the CLI's)
    ignored_options: list[str] = field(default_factory=list)


def write_report(source: str | Path, output: str | Path, *, encode: EncodeOptions | None = None,
                 options: ProfileOptions | None = None, report: ReportOptions | None = None,
                 load_options: dict | None = None, hooks: CommandHooks | None = None,
                 force: bool = False) -> WrittenReport:
    """`capgeo report`: a dataset (profiled, with dupes, gamma and optionally truncation) or a saved
    profile (drawn as it is, or with ``report.fill_missing`` completed from its dataset) to one HTML file.

    ``encode``, ``options`` and ``report`` are the run's EncodeOptions, ProfileOptions and
    ReportOptions. ``load_options`` are :func:`capgeo.captions.load_captions`'s keyword arguments;
    ``hooks`` (:class:`CommandHooks`): the command line the page names, ``on_skipped`` called with each
    :class:`~capgeo.captions.model.Skipped` as soon as the dataset is read, ``on_saved`` with the path
    of ``report.save_profile`` once written. Every option is checked
    before anything is encoded (:func:`plan_report`); no output may replace an input, nor, unless
    ``force``, an existing file capgeo did not write (:func:`capgeo.paths.check_outputs`)."""
    hooks = hooks or CommandHooks()
    command, on_skipped, on_saved = hooks.command, hooks.on_skipped, hooks.on_saved
    encode = (encode or EncodeOptions()).checked()
    options, report = options or ProfileOptions(), report or ReportOptions()
    load_options = dict(load_options or {})
    leak, save_profile_to = list(report.leak), report.save_profile
    # what the command checks before any work, for library callers too: no output over an input
    check_outputs({"DATA": source, "--leak": leak, "--encoder": _encoder_files([encode.encoder])},
                  {"output": output, "--save-profile": save_profile_to}, force=force)
    ignored = []
    saved_profile = is_profile_file(source)
    if report.fill_missing and not saved_profile:
        # a flag that would change nothing is refused, not passed over: the user meant something by it
        raise CapgeoError(f"--fill-missing completes the sections a saved profile lacks (`capgeo report PROFILE.json "
                          f"--fill-missing`); {source} is a dataset, whose report computes its sections itself: "
                          "leave --fill-missing out")
    if saved_profile:
        if leak:
            raise CapgeoError(f"--leak needs DATA to be a dataset, not a saved profile ({source}); "
                              "run `capgeo report DATASET --leak EVAL`")
        defaults = ProfileOptions()
        given = {**load_options, "encoder": encode.encoder, "max_tokens": encode.max_tokens,
                 "batch_size": options.batch_sizes, "format": load_options.get("format") not in (None, "auto"),
                 "truncation": report.truncation, "seed": options.seed != defaults.seed,
                 "n_batches": options.n_batches != defaults.n_batches,
                 "image_embeddings": getattr(report.pairs, "image_embeddings", None) is not None,
                 "sweep": bool(report.sweep)}
        ignored = [name for name in SAVED_PROFILE_IGNORES if given.get(name)]
        with _drawing_saved_profiles([source]):
            report_input = load_saved_profile(source, dupes=report.dupes, gamma=report.gamma)
        if report.fill_missing:
            encode.check_cache()
            report_input = fill_missing(report_input, device=encode.device, cache_dir=encode.cache_dir,
                                        use_cache=encode.use_cache, dupes=report.dupes, gamma=report.gamma,
                                        outputs={"--output": output, "--save-profile": save_profile_to})
    else:
        captions = load_set(source, load_options, on_skipped)
        # what --truncation and --leak need is checked before the profile is computed, not after
        if report.truncation:
            from capgeo.findings.truncation import check_encoder_spec

            check_encoder_spec(encode.encoder)
        eval_sets = [load_set(path, {}, on_skipped, role="--leak EVAL", columns=False) for path in leak]
        if eval_sets:
            from capgeo.pipeline import vectors_for_different_sets

            # vectors aligned by row cannot embed the eval sets: refused now, not after the whole profile
            vectors_for_different_sets(encode.encoder, captions, eval_sets)
        report_input = report_dataset(captions, encode, options, report=replace(report, leak=eval_sets),
                                      command=command)
    with _drawing_saved_profiles([source] if saved_profile else []):
        saved = save_profile(report_input.profile, save_profile_to) if save_profile_to else None
        if saved is not None and on_saved is not None:
            on_saved(saved)  # at once: an interrupted drawing still leaves this file, and the user is told
        path = build_report(report_input, output, command=command)
    return WrittenReport(path, report_input.notes, saved, ignored)


def _encoder_files(specs) -> list[str]:
    return [path for spec in specs if isinstance(spec, str) for path in encoder_input_files(spec)]


@contextlib.contextmanager
def _drawing_saved_profiles(sources: Sequence[str | Path]):
    """A saved profile whose sections do not have the documented shape (edited by hand, or not
    capgeo's) fails in the drawing code: one line naming the file, not a traceback."""
    if not sources:
        yield
        return
    try:
        yield
    except (TypeError, AttributeError, ValueError, KeyError, IndexError, ArithmeticError) as error:  # 1e308 edges overflow
        names = ", ".join(map(str, sources))
        raise CapgeoError(f"{names}: a section of this saved profile does not have the shape "
                          f"`capgeo docs profile-schema` gives it, so it cannot be drawn ({type(error).__name__}: "
                          f"{first_line(error)})") from error


def write_compare(sources: Sequence[str | Path], output: str | Path, compare: CompareOptions | None = None, *,
                  encode: EncodeOptions | None = None, options: ProfileOptions | None = None,
                  load_options: dict | None = None, hooks: CommandHooks | None = None,
                  force: bool = False) -> tuple[Path, list[str]]:
    """`capgeo compare`: saved profiles and/or datasets (profiled under each of ``compare.encoders``,
    default the embedded one) on one HTML page, its columns named by ``compare.labels``
    (:class:`CompareOptions`). Returns the page's path and notes for the user; ``hooks.on_profiles(profiles,
    labels)`` is given what the page shows, as the page names it, once it is written.

    ``encode`` (its encoder aside: each of the encoders in turn) and ``options`` are the
    datasets' EncodeOptions and ProfileOptions. ``load_options`` (load_captions' keyword
    arguments, ``limit`` among them) apply to each dataset. Every source is read and checked
    (:func:`plan_report`, for each encoder) before the first one is encoded; saved profiles alone
    need no cache folder. ``output`` replaces an existing file capgeo did not write only with ``force``."""
    from capgeo.preflight import check_counts

    compare, hooks = compare or CompareOptions(), hooks or CommandHooks()
    encoders, labels, command = compare.encoders, compare.labels, hooks.command
    encode = (encode or EncodeOptions()).checked()
    options = options or ProfileOptions()
    defaults = ProfileOptions()
    check_counts(n_batches=options.n_batches)  # the datasets' option, refused before any source is read
    check_outputs({"SOURCES": list(sources), "--encoder": _encoder_files(encoders)}, {"output": output}, force=force)
    loaded, notes, saved_profiles = [], [], []
    load_options = dict(load_options or {})
    read = [f"--{name.replace('_', '-')}" for name, value in load_options.items()
            if value is not None and not (name == "format" and value == "auto")]
    given = (["--encoder"] if encoders else []) + read + [
        option for option, value in (("--batch-size", options.batch_sizes),
                                     ("--n-batches", options.n_batches != defaults.n_batches),
                                     ("--seed", options.seed != defaults.seed)) if value]
    for source in sources:  # every source read and every option checked before anything is encoded
        if is_profile_file(source):
            if given:
                notes.append(f"{source} is a saved profile, drawn as it is; ignored: {', '.join(given)}")
            with _drawing_saved_profiles([source]):   # read typed here: a section of another shape is one line
                loaded.append(load_saved_profile(source).profile)
            saved_profiles.append(source)
            continue
        captions = load_set(source, load_options, hooks.on_skipped, role="SOURCE")
        loaded.append([plan_report(captions, replace(encode, encoder=spec), options, report=ReportOptions(dupes=False))
                       for spec in encoders or (None,)])
    datasets = [plans[0].profile.captions for plans in loaded if not isinstance(plans, Profile)]
    n_profiles = len(saved_profiles) + len(datasets) * len(encoders or (None,))
    if n_profiles < 2:
        raise CapgeoError("compare needs at least two profiles: give two or more SOURCES, "
                          "or one dataset with two or more --encoder")
    if labels and len(labels) != n_profiles:
        raise CapgeoError(f"--label given {len(labels)} times for {n_profiles} profiles")
    checked = _checked_encoders(encoders or (None,), datasets, device=encode.device,
                                cache_dir=encode.cache_dir) if datasets else []
    profiles, adapted = [], []
    for plans in loaded:
        if isinstance(plans, Profile):
            profiles.append(plans)
            continue
        for plan, encoder in zip(plans, checked):
            made = run_report(plan.with_encoder(encoder), command=command)
            profiles.append(made.profile)
            # compare draws no gallery, so its absence is no news
            adapted += [(len(profiles) - 1, Path(str(plan.profile.captions.source)).resolve(), note)
                        for note in made.notes if note != NO_DUPES_NOTE]
    # what was adapted (a batch size cut to the dataset's images, a gamma left out) changes what the columns
    # mean side by side: said on the terminal and on the page, as `report` says it, named by the page's
    # labels, once a dataset whatever the encoders
    from capgeo.report.compare import profile_labels

    shown_labels = list(labels) if labels else profile_labels(profiles)
    named: dict[tuple[Path, str], list[str]] = {}
    for index, source, note in adapted:
        named.setdefault((source, note), []).append(shown_labels[index])
    changed = [f"{', '.join(names)}: {note}" for (_, note), names in named.items()]
    with _drawing_saved_profiles(saved_profiles):
        page = build_compare(profiles, output, labels=labels or None, command=command, notes=changed)
    if hooks.on_profiles is not None:  # once the page is written: a failed write is the one line said
        hooks.on_profiles(profiles, shown_labels)
    return page, [*notes, *changed]


def _checked_encoders(specs, datasets, *, device: str | None, cache_dir: str | None) -> list:
    """Every --encoder of compare, checked before the first is used: a spec no kind accepts, a weight
    file that is missing, or vectors that do not fit a dataset fail now, not after the others encoded.
    Returns what to embed with: the loaded encoder where checking loaded it (so the vectors file is
    not read again), else the spec."""
    from capgeo.encoders.registry import get_encoder, spec_kind

    checked = []
    for spec in specs:
        kind, _ = spec_kind(spec)
        if kind in ("precomputed", "open_clip", "longclip"):  # their identity loads no model (lazy)
            encoder = get_encoder(spec, device=device, cache_dir=cache_dir)
            if kind == "precomputed":
                for captions in datasets:
                    encoder.align(captions.ids)
            checked.append(encoder)
        else:
            checked.append(spec)
    return checked

