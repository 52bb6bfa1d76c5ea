"""Length-trimmed forward for CLIP text towers.

A CLIP text tower attends causally (token i sees tokens 0..i) and pools the
end-of-text token, so nothing after a caption's end-of-text token can change
its embedding. Running a batch only up to its longest caption is therefore
exact, and with captions sorted by length most batches are far shorter than
the context (COCO: ~14 of 77 tokens). open_clip's ``encode_text`` insists on
full-length input (its causal mask is context x context), so this module runs
its own forward over the tower's modules.

Trimming is used only when :func:`text_tower` finds the tower exact for it:
causal mask, end-of-text pooling (``argmax`` / ``eos``), no appended class
token, open_clip's own forward. Anything else (SigLIP-style last-token or
bidirectional towers, Hugging Face text towers, CoCa) runs at full context
through the model's own ``encode_text``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

EXACT_POOL_TYPES = ("argmax", "eos")  # pool at a token position that trimming keeps


@dataclass
class TextTower:
    """The parts of one open_clip text tower, wherever the model keeps them."""

    full_forward: Callable            # open_clip's own forward: token ids (B, context) -> features
    context_length: int
    trimmable: bool
    reason: str                       # why the tower is (not) trimmed, for reports and tests
    pad_id: int = 0
    token_embedding: object = None
    positional_embedding: object = None
    transformer: object = None
    ln_final: object = None
    text_projection: object = None
    attn_mask: object = None
    pool_type: str = "argmax"
    eos_id: int | None = None


@dataclass
class EncodeStats:
    """What the last encode did: which path, and how many token positions it ran."""

    path: str = "none"                # "trimmed" | "full"
    reason: str = ""
    batches: int = 0
    positions_run: int = 0            # sum over batches of batch size x sequence length
    positions_full: int = 0           # the same at full context
    widths: list[int] = field(default_factory=list)


def text_tower(model) -> TextTower:
    """Find the text tower of an open_clip ``CLIP``, ``CustomTextCLIP`` or bare ``TextTransformer``
    and decide whether the trimmed forward is exact for it."""
    from open_clip.model import CLIP, CustomTextCLIP
    from open_clip.transformer import TextTransformer

    if isinstance(model, TextTransformer):
        owner, tower, forward_is_stock = model, model, type(model).forward is TextTransformer.forward
        full_forward = _first_output(model)
        pool_type, eos_id, cls_emb = model.pool_type, model.eos_id, model.cls_emb
        pad_mask = model.use_pad_mask
    elif isinstance(model, CustomTextCLIP) and isinstance(getattr(model, "text", None), TextTransformer):
        owner, tower = model, model.text
        forward_is_stock = (type(model).encode_text is CustomTextCLIP.encode_text
                            and type(tower).forward is TextTransformer.forward)
        full_forward = model.encode_text
        pool_type, eos_id, cls_emb = tower.pool_type, tower.eos_id, tower.cls_emb
        pad_mask = tower.use_pad_mask
    elif isinstance(model, CLIP):
        owner, tower = model, model
        forward_is_stock = type(model).encode_text is CLIP.encode_text
        full_forward = model.encode_text
        pool_type, eos_id, cls_emb = model.text_pool_type, getattr(model, "text_eos_id", None), None
        pad_mask = False
    else:
        # Hugging Face text towers and anything unknown: their own forward, full length
        text = getattr(model, "text", model)
        context = int(getattr(model, "context_length", 0) or getattr(text, "context_length", 0))
        # captions cut below the context are padded with the tower's own pad token
        pad_id = getattr(getattr(text, "config", None), "pad_token_id", None)
        return TextTower(full_forward=getattr(model, "encode_text", model), context_length=context,
                         trimmable=False, reason=f"{type(text).__name__} text tower", pad_id=int(pad_id or 0))

    parts = TextTower(
        full_forward=full_forward,
        context_length=int(owner.context_length),
        trimmable=False,
        reason="",
        pad_id=int(getattr(tower, "pad_id", 0) or 0),
        token_embedding=tower.token_embedding,
        positional_embedding=tower.positional_embedding,
        transformer=tower.transformer,
        ln_final=tower.ln_final,
        text_projection=tower.text_projection,
        attn_mask=tower.attn_mask,
        pool_type=pool_type,
        eos_id=eos_id,
    )
    parts.reason = _why_not_exact(parts, forward_is_stock, cls_emb, pad_mask)
    parts.trimmable = parts.reason == ""
    if parts.trimmable:
        parts.reason = f"causal mask, '{pool_type}' pooling"
    return parts


def _why_not_exact(parts: TextTower, forward_is_stock: bool, cls_emb, pad_mask: bool) -> str:
    """Empty when trimming cannot change any output; otherwise the reason it could."""
    import torch
    from open_clip.transformer import CustomResidualAttentionBlock, ResidualAttentionBlock, Transformer

    if not forward_is_stock:
        return "the model overrides open_clip's text forward"
    if cls_emb is not None:
        return "appends a class token"
    if pad_mask:
        return "uses a padding mask"
    if parts.pool_type not in EXACT_POOL_TYPES:
        return f"pools with '{parts.pool_type}', which depends on the padded length"
    mask = parts.attn_mask
    if mask is None:
        return "attends bidirectionally (no causal mask)"
    n = parts.context_length
    if tuple(mask.shape) != (n, n) or parts.positional_embedding.shape[0] != n:
        return "mask or positional table does not match the context length"
    above = torch.ones(n, n, dtype=torch.bool, device=mask.device).triu(1)
    if not (torch.isneginf(mask[above]).all() and (mask[~above] == 0).all()):
        return "attention mask is not causal"
    # open_clip's own classes, not subclasses: a subclass's forward may look past a token's position
    # (mixing in all positions), which a trimmed batch would change
    if type(parts.transformer) is not Transformer or not all(
            type(block) in (ResidualAttentionBlock, CustomResidualAttentionBlock)
            for block in parts.transformer.resblocks):
        return "unknown transformer blocks"
    return ""


def _first_output(text_transformer):
    def forward(tokens):
        out = text_transformer(tokens)
        return out[0] if isinstance(out, tuple) else out
    return forward


def forward_trimmed(parts: TextTower, tokens):
    """Text features for token ids of any length up to the context (B, L), L = the batch's longest caption."""
    from open_clip.transformer import text_global_pool

    length = tokens.shape[1]
    cast_dtype = parts.transformer.get_cast_dtype()
    x = parts.token_embedding(tokens).to(cast_dtype)
    x = x + parts.positional_embedding[:length].to(cast_dtype)
    # the mask is a buffer: moving the model after text_tower() leaves our reference behind
    x = parts.transformer(x, attn_mask=parts.attn_mask[:length, :length].to(x.device))
    x = parts.ln_final(x)
    return project(parts, text_global_pool(x, tokens, parts.pool_type, eos_token_id=parts.eos_id))


def project(parts: TextTower, pooled):
    """The tower's text projection of pooled features (B, width) -> (B, embedding width)."""
    import torch

    if parts.text_projection is None:
        return pooled
    if isinstance(parts.text_projection, torch.nn.Linear):
        return parts.text_projection(pooled)
    return pooled @ parts.text_projection


def _batches(order: np.ndarray, lengths: np.ndarray, batch_size: int, context_length: int,
             trimmed: bool) -> list[np.ndarray]:
    """Consecutive slices of ``order`` (longest first).

    Full length: ``batch_size`` captions each. Trimmed: as many captions as fit in
    ``batch_size x context_length`` token positions (at most 16 x batch_size), so
    short captions go in bigger batches (fewer, larger matrix products) while no
    batch holds more positions, or attention entries, than a full-length one.
    """
    if not trimmed:
        return [order[start:start + batch_size] for start in range(0, len(order), batch_size)]
    return batches(order, lengths, batch_size * context_length, 16 * batch_size)


def batches(order: np.ndarray, lengths: np.ndarray, budget: int, most: int | None = None) -> list[np.ndarray]:
    """Consecutive slices of ``order`` (longest first) of at most ``budget`` token positions each,
    counted at the slice's longest row, and at most ``most`` rows."""
    most = most or len(order)
    slices, start = [], 0
    while start < len(order):
        width = max(1, int(lengths[order[start]]))           # the longest of this batch: sorted descending
        count = max(1, min(most, budget // width))
        slices.append(order[start:start + count])
        start += count
    return slices


def encode_token_rows(parts: TextTower, rows: Sequence[np.ndarray], *, batch_size: int = 64,
                      device: str = "cpu", progress=False,
                      trim: bool = True) -> tuple[np.ndarray, EncodeStats]:
    """L2-normalised float32 embeddings of token-id rows, in input order.

    Each row holds one caption's token ids, start and end tokens included, at
    most ``parts.context_length`` long. Rows are sorted longest first and
    batched; a trimmable tower runs each batch only to its longest row, any
    other tower at full context. ``batch_size`` is the number of full-length
    captions per batch; trimmed batches hold the same number of token positions
    (see :func:`_batches`), so peak memory never exceeds the full-length path's.
    ``trim=False`` forces the full-length path (the baseline in tests and benchmarks).
    """
    import torch
    import torch.nn.functional as F

    from capgeo.progress import batch_progress

    trimmed = trim and parts.trimmable
    stats = EncodeStats(path="trimmed" if trimmed else "full",
                        reason=parts.reason if trim else "trimming switched off")
    lengths = np.fromiter((len(row) for row in rows), dtype=np.int64, count=len(rows))
    if len(rows) and lengths.max() > parts.context_length:
        raise ValueError(f"token rows longer than the context length {parts.context_length}")
    order = np.argsort(-lengths, kind="stable")
    slices = _batches(order, lengths, batch_size, parts.context_length, trimmed)
    chunks: list[np.ndarray] = []
    with batch_progress(progress, "Encoding captions", total=len(rows)) as bar, \
            torch.inference_mode(), autocast_for(device):
        for batch in slices:
            width = int(lengths[batch].max()) if trimmed else parts.context_length
            tokens = padded(rows, batch, lengths, width, parts.pad_id)
            tokens_t = torch.from_numpy(tokens).to(device)
            features = forward_trimmed(parts, tokens_t) if trimmed else parts.full_forward(tokens_t)
            chunks.append(F.normalize(features.float(), dim=-1).cpu().numpy())
            stats.batches += 1
            stats.widths.append(width)
            stats.positions_run += len(batch) * width
            stats.positions_full += len(batch) * parts.context_length
            bar.advance(len(batch))
    if not chunks:
        return np.zeros((0, 0), dtype=np.float32), stats
    sorted_vectors = np.concatenate(chunks).astype(np.float32, copy=False)
    vectors = np.empty_like(sorted_vectors)
    vectors[order] = sorted_vectors
    return vectors, stats


def autocast_for(device: str):
    """fp16 on cuda (CLIP towers are trained with fp16 mixed precision); fp32 elsewhere."""
    import torch

    if torch.device(device).type == "cuda":
        return torch.autocast("cuda", dtype=torch.float16)
    return torch.autocast("cpu", enabled=False)


def padded(rows: Sequence[np.ndarray], batch: np.ndarray, lengths: np.ndarray, width: int, pad_id: int) -> np.ndarray:
    """The token rows ``batch`` of ``rows`` as one (len(batch), width) int64 array, padded with ``pad_id``."""
    tokens = np.full((len(batch), width), pad_id, dtype=np.int64)
    for slot, index in enumerate(batch):
        tokens[slot, :lengths[index]] = rows[index]
    return tokens
