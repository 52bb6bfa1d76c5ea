"""Report orchestration: a dataset or a saved profile in, one HTML file out.

- :func:`report_dataset` embeds and profiles a dataset and adds the ``dupes`` and
  ``gamma`` sections (the library calls of `capgeo profile`, `capgeo dupes` and
  `capgeo gamma`), returning one complete profile dict.
- :func:`load_report_source` reads a saved profile (never recomputing what it
  holds) or, given a dataset, calls :func:`report_dataset`.
- :func:`build_report` / :func:`build_compare` render and write atomically.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from capgeo.errors import CapgeoError

#: Batch sizes used when the caller gives none: the paper's micro-batch and effective batch.
DEFAULT_BATCH_SIZES = (16, 128)
#: Gallery content computed for a report: example queries at these quantiles of the
#: hardest-companion distribution (a typical, a hard and a very hard caption), and the top pairs.
DUPES_QUANTILES = (0.5, 0.9, 0.99)
DUPES_PAIRS = 20
#: A saved profile is recognised by its first bytes (``capgeo profile --json`` writes "schema" first).
_PROFILE_HEAD = re.compile(r'^\s*\{\s*"schema"\s*:\s*"capgeo\.profile/')


@dataclass
class ReportInput:
    """A profile to draw, plus what the page should say is missing and why."""

    profile: dict
    notes: list[str] = field(default_factory=list)


def is_profile_file(path: str | Path) -> bool:
    """True when ``path`` is a saved capgeo profile (JSON object whose first key is "schema")."""
    path = Path(path)
    if not path.is_file() or path.suffix.lower() != ".json":
        return False
    with open(path, "rb") as handle:
        head = handle.read(4096).decode("utf-8", errors="replace")
    return bool(_PROFILE_HEAD.match(head))


def usable_batch_sizes(batch_sizes: Sequence[int] | None, n_groups: int) -> tuple[list[int], list[str]]:
    """Batch sizes to profile, and notes. Explicit sizes are kept (too large ones fail clearly later);
    the defaults are reduced to those the dataset can fill."""
    if batch_sizes:
        from capgeo.geometry.profile import check_batch_sizes

        return check_batch_sizes(batch_sizes, n_groups), []
    kept = [b for b in DEFAULT_BATCH_SIZES if b <= n_groups]
    notes = [f"Batch size {b} left out: the dataset has only {n_groups} images."
             for b in DEFAULT_BATCH_SIZES if b > n_groups]
    if not kept:
        if n_groups < 2:
            raise CapgeoError(f"the dataset has {n_groups} group(s); a batch needs captions of at least 2 images")
        kept = [n_groups]
    return kept, notes


def add_sections(profile: dict, captions, embeddings, *, dupes: bool = True, gamma: bool = True,
                 progress: bool | None = None) -> list[str]:
    """Add the ``dupes`` and ``gamma`` sections a profile lacks, from its captions and embeddings.

    Sections already present are kept as they are. Returns notes for what was not added.
    """
    notes = []
    if dupes and not profile.get("dupes"):
        from capgeo.findings.duplicates import dupes_section

        profile["dupes"] = dupes_section(captions, embeddings, limit=DUPES_PAIRS, quantiles=DUPES_QUANTILES,
                                         n_per_quantile=1, neighbours=3)
    elif not dupes and not profile.get("dupes"):
        notes.append("Near-duplicate gallery: left out (--no-dupes).")
    if gamma and not profile.get("gamma"):
        from capgeo.pipeline import add_gamma_section

        note = add_gamma_section(profile, captions, embeddings, progress=progress)
        if note:
            notes.append(note)
    elif not gamma and not profile.get("gamma"):
        notes.append("Gamma diagnostics: left out (--no-gamma).")
    return notes


def report_dataset(captions, encoder=None, *, batch_sizes: Sequence[int] | None = None, seed: int = 0,
                   n_batches: int = 200, dupes: bool = True, gamma: bool = True, device: str | None = None,
                   cache_dir: str | None = None, use_cache: bool = True, max_tokens: int | None = None,
                   progress: bool | None = None, command: str | None = None,
                   embeddings=None, truncation: bool = False, leak: Sequence[str | Path] = ()) -> ReportInput:
    """Embed and profile ``captions`` (a CaptionSet or a path) and add the dupes and gamma sections.

    ``encoder`` is a spec, a loaded encoder or None (the embedded default); pass
    ``embeddings`` to reuse vectors already computed for these captions. With
    ``truncation`` the ``truncation`` section (`capgeo truncation`) is added too; with
    ``leak`` (evaluation datasets) the ``leak`` section (`capgeo leak`, this dataset as training set).
    """
    from capgeo.geometry.profile import build_profile

    if isinstance(captions, (str, Path)):
        from capgeo.captions import load_captions

        captions = load_captions(captions)
    sizes, notes = usable_batch_sizes(batch_sizes, captions.n_groups)  # before the (slow) encoding
    if embeddings is None:
        from capgeo.encoders import embed

        embeddings = embed(captions, encoder, device=device, cache_dir=cache_dir, use_cache=use_cache,
                           max_tokens=max_tokens, progress=progress)
    # relative buckets too: MiniLM-like encoders put almost every negative below the absolute 0.7 edge
    profile = build_profile(captions, embeddings, batch_sizes=sizes, seed=seed, n_batches=n_batches,
                            relative_buckets=True, device=device, progress=progress, command=command)
    notes += add_sections(profile, captions, embeddings, dupes=dupes, gamma=gamma, progress=progress)
    if truncation:
        # `capgeo truncation`: the same captions re-embedded at several lengths, on the same batches
        from capgeo.findings.truncation import truncation_profile

        profile["truncation"] = truncation_profile(
            captions, encoder, device=device, cache_dir=cache_dir, use_cache=use_cache, progress=progress,
            batch_size=max(sizes), n_batches=n_batches, seed=seed)["truncation"]
    if leak:
        from capgeo.pipeline import leak_datasets

        profile["leak"] = leak_datasets(captions, leak, encoder, device=device, cache_dir=cache_dir,
                                        use_cache=use_cache, progress=progress, train_embeddings=embeddings)
    return ReportInput(profile, notes)


def load_saved_profile(path: str | Path) -> ReportInput:
    """A saved profile as it is; missing dupes/gamma sections become notes, not recomputation."""
    from capgeo.geometry.profile import load_profile

    profile = load_profile(path)
    notes = []
    if not profile.get("dupes"):
        notes.append(f"Near-duplicate gallery: {Path(path).name} has no dupes section and the report was built from the "
                     "saved profile alone. Run `capgeo report DATA` (or add --fill-missing) to include it.")
    if not profile.get("gamma"):
        notes.append(f"Gamma diagnostics: {Path(path).name} has no gamma section and the report was built from the "
                     "saved profile alone. Run `capgeo report DATA` (or add --fill-missing) to include it.")
    return ReportInput(profile, notes)


def fill_missing(report_input: ReportInput, *, device: str | None = None, cache_dir: str | None = None,
                 use_cache: bool = True, progress: bool | None = None) -> ReportInput:
    """Compute a saved profile's missing dupes/gamma sections from its own dataset and encoder.

    The dataset is re-read from ``dataset.source`` and must have the same caption texts
    (``texts_digest``) as when the profile was made; embeddings come from the cache when present.
    """
    profile = report_input.profile
    if profile.get("dupes") and profile.get("gamma"):
        return report_input
    from capgeo.captions import load_captions
    from capgeo.encoders import embed

    dataset = profile.get("dataset") or {}
    source = dataset.get("source")
    if not source or not Path(source).exists():
        raise CapgeoError(f"--fill-missing: the profile's dataset {source!r} is not on this machine; "
                          "run `capgeo report DATA` instead")
    # the profile does not record --limit; it kept the first n_captions captions, so read as many
    captions = load_captions(source, format=dataset.get("format") or "auto", limit=dataset.get("n_captions"))
    if dataset.get("texts_digest") and captions.texts_digest() != dataset["texts_digest"]:
        raise CapgeoError(f"--fill-missing: {source} does not hold the captions the profile was made from "
                          "(texts digest differs: the file changed, or the profile used --split); "
                          "run `capgeo report DATA` instead")
    encoder = profile.get("encoder") or {}
    lengths = profile.get("lengths") or {}
    # precomputed vectors have no tokenizer (known: false, max_tokens 0): nothing to re-cut
    max_tokens = (lengths.get("max_tokens") or None) if lengths.get("known", True) else None
    embeddings = embed(captions, encoder.get("spec"), device=device, cache_dir=cache_dir, use_cache=use_cache,
                       max_tokens=max_tokens, progress=progress)
    add_sections(profile, captions, embeddings, progress=progress)
    return ReportInput(profile, [])


def build_report(profile: dict | ReportInput, output: str | Path, *, command: str | None = None,
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


def build_compare(profiles: Sequence[dict | ReportInput], output: str | Path, *, labels: Sequence[str] | None = None,
                  command: str | None = None) -> Path:
    """Render the side-by-side view of several profiles and write it atomically to ``output``."""
    from capgeo._atomic import atomic_open
    from capgeo.report.compare import render_compare

    plain = [p.profile if isinstance(p, ReportInput) else p for p in profiles]
    page = render_compare(plain, labels=labels, command=command)
    with atomic_open(output) as handle:
        handle.write(page)
    return Path(output)


def save_profile(profile: dict, path: str | Path) -> Path:
    """Write the (completed) profile as strict JSON, atomically, so the report can be redrawn without recomputing."""
    from capgeo._atomic import atomic_open

    with atomic_open(path) as handle:
        handle.write(json.dumps(profile, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    return Path(path)
