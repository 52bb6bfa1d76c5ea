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
