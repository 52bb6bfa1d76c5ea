"""Caption datasets: reading every benchmark layout into one CaptionSet, and describing it."""

from capgeo.captions.load import load_captions
from capgeo.captions.model import CaptionSet, Skipped
from capgeo.captions.summary import summarize_captions

__all__ = ["CaptionSet", "Skipped", "load_captions", "summarize_captions"]
