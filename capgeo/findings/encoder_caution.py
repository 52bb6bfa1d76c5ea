"""Is the encoder behind a gamma the text tower that training will fine-tune?

HN-CLIP computes Gbar with the CLIP text tower being fine-tuned, so a gamma measured
on another encoder's geometry is calibrated on cosines training never sees. One
function decides and words the caution; the terminal, the JSON (``gamma.encoder_caution``)
and the report's alert list all show its line.
"""

from __future__ import annotations

HOW_TO_GET_THE_REAL_ONE = ("for the real one use --encoder longclip-L (fetched ahead of time with "
                           "`hf download BeichenZhang/LongCLIP-L longclip-L.pt`; `capgeo encoders` lists the "
                           "others and how to use them offline), --encoder MODEL@your-checkpoint.pt, "
                           "or vectors from the tower you will fine-tune")


def encoder_caution(encoder: dict | None) -> str | None:
    """One line when ``encoder`` (an ``EncoderInfo.to_dict()``, or None for raw vectors) is not
    known to be a CLIP text tower: the embedded default (a sentence-transformers model) or
    precomputed vectors of unknown origin. None for open_clip and Long-CLIP towers."""
    kind = (encoder or {}).get("kind")
    name = (encoder or {}).get("name") or "unnamed vectors"
    if kind in ("open_clip", "longclip"):
        return None
    if kind == "sentence-transformers":
        return (f"This gamma is for {name}'s geometry (capgeo's default encoder, not a CLIP text tower); "
                f"training computes Gbar with the tower it fine-tunes, so {HOW_TO_GET_THE_REAL_ONE}.")
    return (f"This gamma is for the geometry of precomputed vectors of unknown origin ({name}); it holds only if they "
            f"come from the CLIP text tower you will fine-tune, otherwise {HOW_TO_GET_THE_REAL_ONE}.")
