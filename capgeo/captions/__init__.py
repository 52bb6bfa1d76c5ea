"""Caption datasets: reading every benchmark layout into one CaptionSet, and describing it."""

from capgeo.captions.load import LoadOptions, load_captions
from capgeo.captions.model import CaptionSet, Skipped
from capgeo.captions.summary import summarize_captions

__all__ = ["CaptionSet", "LoadOptions", "Skipped", "load_captions", "summarize_captions"]
