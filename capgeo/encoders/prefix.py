"""Several maximum lengths from one forward of a causal CLIP text tower.

A caption cut at L tokens is ``[SOT, t1 .. t(L-2), EOT]``. In a tower that
attends causally, position i sees positions 0..i only, so at every layer the
states of positions 0..L-2 of the cut caption are those of the whole caption.
Only the end token at position L-1 differs. :func:`encode_prefix_lengths`
therefore runs the whole captions once, keeping each layer's keys and values,
and then, for each shorter length, runs just the end token through the layers,
attending to the kept keys and values of the L-1 positions before it and to
itself. The end token is one position of L, so each extra length costs a small
fraction of a forward.

The reuse runs only where :func:`why_not_reusable` finds it exact: where the
trimmed forward is (causal mask, end-token pooling, open_clip's own forward;
see :mod:`capgeo.encoders.trimmed`) and the blocks are open_clip's plain
``ResidualAttentionBlock`` over ``nn.MultiheadAttention``, whose arithmetic
this module repeats. Anything else (custom attention blocks, bidirectional or
first/last-token towers, other tokenizers) is encoded at each length instead.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from capgeo.encoders.trimmed import EncodeStats, TextTower, autocast_for, batches, padded, project

#: the kept keys and values of one batch take at most this many bytes (all layers together)
CACHE_BYTES = 256 << 20


def why_not_reusable(parts: TextTower) -> str:
    """Empty when the end-token-only forward gives each cut caption's own embedding; otherwise why not."""
    import torch
    from open_clip.transformer import ResidualAttentionBlock

    if not parts.trimmable:
        return parts.reason
    for block in parts.transformer.resblocks:
        if type(block) is not ResidualAttentionBlock or hasattr(block, "ln_1_kv"):
            return "its attention blocks are not open_clip's plain ResidualAttentionBlock"
        attention = block.attn
        if type(attention) is not torch.nn.MultiheadAttention or not attention.batch_first \
                or not attention._qkv_same_embed_dim or attention.bias_k is not None or attention.add_zero_attn:
            return "its attention is not a plain batch-first MultiheadAttention"
    if not getattr(parts.transformer, "batch_first", True):
        return "its transformer is not batch-first"
    return ""


def pooled_position(row: np.ndarray, pool_type: str, eos_id: int | None) -> int:
    """The position open_clip's ``text_global_pool`` takes for one token row ('argmax' or 'eos')."""
    if pool_type == "argmax":
        return int(np.argmax(row))
    return int(np.argmax(row == eos_id))


def encode_prefix_lengths(parts: TextTower, rows: Sequence[np.ndarray], lengths: Sequence[int], *, eot_id: int,
                          batch_size: int = 64, device: str = "cpu",
                          progress=False) -> tuple[dict[int, np.ndarray], EncodeStats]:
    """L2-normalised float32 embeddings of each token row cut at each length, in input order.

    ``rows`` are whole captions' token ids (start and end tokens included, at
    most the context long, as :func:`capgeo.encoders.trimmed.encode_token_rows`
    takes them); a row longer than L is cut as open_clip's tokenizer cuts it:
    its first L-1 ids, then ``eot_id``. A row no longer than L gets its whole
    embedding at L. ``lengths`` may include the context (the whole rows).
    """
    import torch
    import torch.nn.functional as F

    from capgeo.progress import batch_progress

    reason = why_not_reusable(parts)
    if reason:
        raise ValueError(f"prefix reuse is not exact for this tower: {reason}")
    lengths = sorted({int(length) for length in lengths})
    counts = np.fromiter((len(row) for row in rows), dtype=np.int64, count=len(rows))
    if len(rows) and counts.max() > parts.context_length:
        raise ValueError(f"token rows longer than the context length {parts.context_length}")
    order = np.argsort(-counts, kind="stable")
    stats = EncodeStats(path="prefix", reason=f"{parts.reason}; one forward, end token only at shorter lengths")
    blocks = list(parts.transformer.resblocks)
    width = int(parts.ln_final.weight.shape[0])
    # positions per batch: the trimmed forward's budget, less where the kept keys and values would not fit
    kept_per_position = 2 * len(blocks) * width * 4
    budget = max(1, min(batch_size * parts.context_length, CACHE_BYTES // kept_per_position))
    out = {length: [] for length in lengths}
    with batch_progress(progress, "Encoding captions", total=len(rows)) as bar, torch.inference_mode(), \
            autocast_for(device):
        cast_dtype = parts.transformer.get_cast_dtype()
        eot = parts.token_embedding(torch.tensor([eot_id], device=device)).to(cast_dtype)
        for batch in batches(order, counts, budget):
            seq = int(counts[batch].max())
            tokens = padded(rows, batch, counts, seq, parts.pad_id)
            tokens_t = torch.from_numpy(tokens).to(device)
            x = parts.token_embedding(tokens_t).to(cast_dtype) + parts.positional_embedding[:seq].to(cast_dtype)
            kept = []
            for block in blocks:
                q, k, v = _heads(block, block.ln_1(x))
                kept.append((k, v))
                x = _rest_of_block(block, x, F.scaled_dot_product_attention(q, k, v, is_causal=True))
            final = parts.ln_final(x)
            for length in lengths:
                positions = _pooled_positions(parts, tokens, counts[batch], length, eot_id)
                index = torch.from_numpy(positions).to(final.device)
                vectors = project(parts, final[torch.arange(len(batch), device=final.device), index])
                # rows cut here that pool their new end token: the one state the whole rows do not have
                ends = np.flatnonzero((counts[batch] > length) & (positions == length - 1))
                if ends.size:
                    vectors[torch.from_numpy(ends).to(device)] = _end_token_only(
                        parts, blocks, kept, ends, length, eot, device).to(vectors.dtype)
                out[length].append(F.normalize(vectors.float(), dim=-1).cpu().numpy())
            stats.batches += 1
            stats.widths.append(seq)
            stats.positions_run += len(batch) * seq
            stats.positions_full += len(batch) * parts.context_length
            bar.advance(len(batch))
    result = {}
    for length, chunks in out.items():
        vectors = np.zeros((len(rows), 0), dtype=np.float32)
        if chunks:
            ordered = np.concatenate(chunks).astype(np.float32, copy=False)
            vectors = np.empty_like(ordered)
            vectors[order] = ordered
        result[length] = vectors
    return result, stats


def _heads(block, h):
    """Queries, keys and values of ``h`` (B, T, D) as MultiheadAttention computes them: (B, heads, T, D / heads)."""
    import torch.nn.functional as F

    attention = block.attn
    batch, length, width = h.shape
    q, k, v = F.linear(h, attention.in_proj_weight, attention.in_proj_bias).chunk(3, dim=-1)
    split = (batch, length, attention.num_heads, width // attention.num_heads)
    return tuple(part.reshape(split).transpose(1, 2) for part in (q, k, v))


def _rest_of_block(block, x, attended):
    """ResidualAttentionBlock.forward after the attention weights: output projection, residuals, MLP."""
    batch, heads, length, head_width = attended.shape
    x = x + block.ls_1(block.attn.out_proj(attended.transpose(1, 2).reshape(batch, length, heads * head_width)))
    return x + block.ls_2(block.mlp(block.ln_2(x)))


def _pooled_positions(parts: TextTower, tokens: np.ndarray, counts: np.ndarray, length: int,
                      eot_id: int) -> np.ndarray:
    """The pooled position of each row of the batch cut at ``length``. Before the cut the whole
    rows' final states are the cut rows' own (causal), so only a pooled position at the new end
    token (``length - 1`` of a row that is cut) needs a forward of its own."""
    positions = np.empty(len(tokens), dtype=np.int64)
    for slot, row in enumerate(tokens):
        row = row[:counts[slot]]
        if counts[slot] > length:
            row = np.append(row[:length - 1], eot_id)
        positions[slot] = pooled_position(row, parts.pool_type, parts.eos_id)
    return positions


def _end_token_only(parts: TextTower, blocks, kept, cut: np.ndarray, length: int, eot, device):
    """Features of the end token at position ``length - 1`` of the rows ``cut`` (slots of the batch),
    attending to the whole rows' kept keys and values at positions 0..length-2 and to itself."""
    import torch
    import torch.nn.functional as F

    slots = torch.from_numpy(cut).to(device)
    x = (eot + parts.positional_embedding[length - 1].to(eot.dtype)).expand(len(cut), 1, -1)
    for block, (keys, values) in zip(blocks, kept):
        q, k, v = _heads(block, block.ln_1(x))
        keys = torch.cat([keys[slots, :, :length - 1], k], dim=2)
        values = torch.cat([values[slots, :, :length - 1], v], dim=2)
        x = _rest_of_block(block, x, F.scaled_dot_product_attention(q, keys, values))
    return project(parts, parts.ln_final(x[:, 0]))
