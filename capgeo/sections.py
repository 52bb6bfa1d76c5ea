"""The optional sections of a profile, one entry each: what computes a section, what draws it on the
terminal and on the report page, and what the page says when a profile lacks it.

The report page (capgeo.report.single) and the terminal summary (capgeo.terminal.profile) draw the
optional sections by iterating :data:`SECTIONS`; adding a finding is its module in capgeo/findings/,
its terminal renderer, its HTML renderer and one entry here.

Functions are named by ``"module:attribute"`` strings, imported only when :func:`resolve` is called:
importing this module imports nothing of capgeo's layers, so the typed profile (capgeo.geometry)
reaches its writers here (:data:`WRITE_HTML` ...) without importing a layer above it, and `capgeo
--help` loads no renderer.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


def resolve(reference: str) -> Any:
    """The attribute a ``"module:attribute"`` reference names, its module imported now."""
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class SectionEntry:
    """One optional profile section. References are ``"module:function"`` strings (:func:`resolve`)."""

    #: the Profile field and JSON key
    name: str
    #: the heading of its part of the report page
    title: str
    #: the line under the heading saying what the section shows
    lede: str
    #: the function of capgeo.findings (or capgeo.map) that computes the section
    compute: str
    #: ``(section) -> str | None``: the section's page HTML (escaped), None when it holds nothing to draw
    html: str
    #: ``(section, console)``: its lines in `capgeo profile`'s summary; None: the summary shows none
    terminal: str | None = None
    #: the terminal renderer also reads the whole profile (keyword ``profile``), and is called for a
    #: profile that lacks the section too (with None), to say why it is missing
    terminal_reads_profile: bool = False
    #: ``(section) -> str``: a lede that depends on the section, in place of ``lede``
    lede_from: str | None = None
    #: the element id of its part of the page (default: ``name``)
    anchor: str | None = None
    #: a script (``"module:CONSTANT"``) the page runs when the section is drawn
    script: str | None = None
    #: the page's note when the profile lacks the section; None: the page says nothing
    missing: str | None = None
    #: the words by which a caller's note already says why the section is missing
    missing_said_by: str | None = None
    #: place of ``missing`` among the page's notes (the order they have always had: gallery, map, gamma)
    missing_rank: int = 0

    @property
    def element_id(self) -> str:
        return self.anchor or self.name

    def lede_for(self, section) -> str:
        return resolve(self.lede_from)(section) if self.lede_from else self.lede

    def page_html(self, section) -> str | None:
        """The section's page HTML, None when the profile lacks it or it holds nothing to draw."""
        return resolve(self.html)(section) if section else None

    def print_terminal(self, profile, console) -> None:
        """The section's lines in the terminal summary of ``profile`` (nothing without a renderer)."""
        section = getattr(profile, self.name)
        if self.terminal is None or not (section or self.terminal_reads_profile):
            return
        render = resolve(self.terminal)
        if self.terminal_reads_profile:
            render(section, console, profile=profile)
        else:
            render(section, console)


#: in page order (the gallery, map, leak and pairs follow the figures, truncation and gamma among them)
SECTIONS: tuple[SectionEntry, ...] = (
    SectionEntry(
        name="truncation", title="Context length",
        lede="The same captions embedded at several maximum token lengths: how the geometry changes when the "
             "encoder sees less of each caption.",
        compute="capgeo.findings.truncation:truncation_section",
        html="capgeo.report.single:truncation_html"),
    SectionEntry(
        name="gamma", title="Gamma diagnostics", lede="",
        compute="capgeo.findings.gamma:gamma_section",
        html="capgeo.report.single:gamma_html", lede_from="capgeo.report.single:gamma_caption",
        terminal="capgeo.terminal.profile:print_gamma", terminal_reads_profile=True,
        missing="Gamma diagnostics: the profile has no gamma section.", missing_said_by="amma", missing_rank=3),
    SectionEntry(
        name="dupes", title="Near-duplicate gallery", anchor="gallery",
        lede="Captions of different images that the encoder places closest together.",
        compute="capgeo.findings.duplicates:gallery_section",
        html="capgeo.report.gallery:gallery_html",
        missing="Near-duplicate gallery: the profile has no dupes section.", missing_said_by="gallery",
        missing_rank=1),
    SectionEntry(
        name="map", title="Caption map", lede="",
        compute="capgeo.map:dataset_map",
        html="capgeo.map:map_body", lede_from="capgeo.report.single:map_lede", script="capgeo.map:SEARCH_SCRIPT",
        missing="Caption map: the profile has no map section (`capgeo report DATA` adds one).",
        missing_said_by="Caption map", missing_rank=2),
    SectionEntry(
        name="leak", title="Train/eval leakage",
        lede="Evaluation captions with a twin in this (training) dataset.",
        compute="capgeo.findings.leak:leak_section",
        html="capgeo.report.leak:leak_html"),
    SectionEntry(
        name="pairs", title="Image-caption pairs",
        lede="The image side (docs/pairs.md): how well each image and its captions align before training, "
             "captions of other images that score as high as an image's own (false negatives in a batch), "
             "saturation at the training batch, and image twins under different ids.",
        compute="capgeo.findings.pairs:pairs_section",
        html="capgeo.report.pairs:pairs_html",
        terminal="capgeo.terminal.pairs:print_pairs"),
)


def missing_notes(profile, notes) -> list[str]:
    """The page's notes: the caller's ``notes``, then one for each section ``profile`` lacks that no
    note of the caller's already explains."""
    said = list(notes or [])
    for entry in sorted(SECTIONS, key=lambda entry: entry.missing_rank):
        if entry.missing and not getattr(profile, entry.name) and \
                not any(entry.missing_said_by in note for note in said):
            said.append(entry.missing)
    return said


#: the writers :class:`capgeo.geometry.typed_profile.Profile`'s output methods hand the profile to
#: (a layer above the typed profile: reached here, at call time)
BUILD_REPORT = "capgeo.report.build:build_report"
LIBRARY_REPORT = "capgeo.report.build:library_report"
OUTPUT_INPUTS = "capgeo.report.build:fill_missing_inputs"
PRINT_SUMMARY = "capgeo.terminal.profile:print_profile"
SUMMARY_CONSOLE = "capgeo.terminal:console"
PER_CAPTION_FRAME = "capgeo.findings.per_caption:per_caption_frame"
