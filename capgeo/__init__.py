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

#: the one-call functions of capgeo.api, imported when first used (capgeo.api imports little, but lazily
#: ``import capgeo`` costs nothing for them)
_API = ("near_duplicates", "leak", "suggest_gamma", "NearDuplicates", "Leak", "EvalLeak", "GammaSuggestion")


def __getattr__(name):
    if name in _API:
        from capgeo import api

        return getattr(api, name)
    raise AttributeError(f"module 'capgeo' has no attribute {name!r}")
