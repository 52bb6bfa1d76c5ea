"""Text encoders: turn captions into L2-normalised embeddings, cached on disk.

``embed(captions, spec)`` is the entry point; ``get_encoder(spec)`` resolves a
spec (see `capgeo encoders`). Nothing here imports torch until an encoder runs.
"""

from capgeo.encoders.base import EncoderInfo, Embeddings, TextEncoder
from capgeo.encoders.embed import embed
from capgeo.encoders.registry import get_encoder, list_encoder_kinds

__all__ = ["EncoderInfo", "Embeddings", "TextEncoder", "embed", "get_encoder", "list_encoder_kinds"]
