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

#: public names of submodules, imported on first use (PEP 562) so that ``import capgeo`` loads nothing
_EXPORTS = {
    "EncodeOptions": "capgeo.pipeline",
    "ProfileOptions": "capgeo.geometry.profile_options",
    "Profile": "capgeo.geometry.typed_profile",
    "load_captions": "capgeo.captions",
    "profile": "capgeo.api",
    "near_duplicates": "capgeo.api",
    "leak": "capgeo.api",
    "suggest_gamma": "capgeo.api",
    "plan_batches": "capgeo.api",
    "BatchPlan": "capgeo.api",
    "NearDuplicates": "capgeo.api",
    "Leak": "capgeo.api",
    "EvalLeak": "capgeo.api",
    "GammaSuggestion": "capgeo.api",
    "HNCLIPLoss": "capgeo.training.loss",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'capgeo' has no attribute {name!r}")
