"""Long-CLIP text towers (248 tokens) loaded into open_clip.

Long-CLIP (Zhang et al., ECCV 2024; github.com/beichenzbc/Long-CLIP) keeps
two positional tables of 248 rows and adds them under masks in its text
forward (``model/model_longclip.py``)::

    x = x + positional_embedding * mask1 + positional_embedding_res * mask2
    # mask1: rows 0-19, mask2: rows 20-247

So the table the tower actually sees is rows 0-19 of ``positional_embedding``
followed by rows 20-247 of ``positional_embedding_res``. We fold the two into
one 248-row table and load it into an open_clip ``TextTransformer`` with
context 248 and QuickGELU (Long-CLIP is fine-tuned from OpenAI CLIP). The rest
of the forward (causal mask, end-of-text pooling, projection) is open_clip's
and OpenAI's alike, so the trimmed forward applies.

The silent failure guarded against: loading a 248-row table into a 77-token
tower through open_clip's ``load_checkpoint`` interpolates it down to 77 rows
without a word. :func:`verify_positional_embedding` refuses any tower whose
table is not exactly the folded 248 rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from capgeo.encoders.base import EncoderInfo, missing_file_reason
from capgeo.encoders.checkpoint import read_state_dict, state_dict_mismatch
from capgeo.encoders.open_clip_import import import_open_clip
from capgeo.encoders.registry import LONGCLIP_REPOS
from capgeo.encoders.weight_memo import check_unchanged, record_of, version_of, weight_facts, weight_fingerprint
from capgeo.errors import EncoderError

LONGCLIP_CONTEXT = 248
LONGCLIP_SHORT_ROWS = 20          # rows taken from `positional_embedding`; the rest from `_res`


@dataclass(frozen=True)
class TextArchitecture:
    """A CLIP text tower's shape, read from its weights."""

    width: int
    layers: int
    heads: int
    vocab_size: int
    embed_dim: int
    context_length: int
    mlp_ratio: float


def load_longclip_encoder(spec_or_path: str, device: str | None = None, *, cache_dir=None, lazy: bool = False):
    """A Long-CLIP text encoder: ``longclip-B`` / ``longclip-L`` (Hugging Face hub, cached) or a
    path to a ``longclip-*.pt`` state dict.

    The identity (width, name, logit scale, fingerprint) comes from facts about the file
    remembered in ``cache_dir``; with ``lazy`` the tower is built on first use, so a run served
    from the cache builds none. Only the text weights are read (the file is memory-mapped).
    """
    from capgeo.encoders.openclip import OpenClipTextEncoder

    spec = spec_or_path.strip()
    path, name = _resolve(spec)
    version = version_of(path)
    # a file hashed for the first time is a first run, which will build the tower: import its code meanwhile
    fingerprint = weight_fingerprint(path, cache_dir, meanwhile=lambda: import_open_clip(()))
    facts = weight_facts(path, "longclip_text", lambda: _text_facts(path), cache_dir, valid=TEXT_FACTS)

    def build_model():
        from capgeo.device import default_device

        import_open_clip(())  # a CLIP text tower: neither transformers nor timm
        state_dict = read_state_dict(path, keep=lambda key: not key.startswith("visual."))
        tower, _ = build_longclip_tower(state_dict, source=str(path))
        check_unchanged(path, version)  # the weights are copied into the tower by now
        return tower.eval().to(device or default_device())

    def build_tokenizer():
        return import_open_clip(()).SimpleTokenizer(context_length=LONGCLIP_CONTEXT)

    encoder = OpenClipTextEncoder(None, None, None, device, build_model=build_model, build_tokenizer=build_tokenizer)
    encoder.info = EncoderInfo(
        spec=spec, kind="longclip", name=name or facts["name"], width=int(facts["width"]),
        context_length=LONGCLIP_CONTEXT, logit_scale=facts["logit_scale"],
        fingerprint=fingerprint)
    if not lazy:
        encoder.model  # noqa: B018 - build now, so a tower that does not load fails here
    return encoder


#: the shape of what _text_facts returns, which a remembered value must have to be used
TEXT_FACTS = record_of(width=int, name=str, logit_scale=(float, int, None))


def _text_facts(path: Path) -> dict:
    """Width, display name and exp(logit_scale), read from the memory-mapped state dict; the
    checks that make a file Long-CLIP (two 248-row tables, a CLIP text tower) run here too."""
    state_dict = read_state_dict(path)
    fold_positional_embeddings(state_dict, str(path))
    arch = infer_text_architecture(state_dict, str(path))
    scale = state_dict.get("logit_scale")
    return {"width": arch.embed_dim, "name": _name_for(arch.width, arch.layers),
            "logit_scale": float(scale.float().exp().reshape(-1)[0]) if scale is not None else None}


def _resolve(spec: str) -> tuple[Path, str | None]:
    known = LONGCLIP_REPOS.get(spec.lower())
    if known is None:
        path = Path(spec).expanduser()
        if not path.is_file():
            raise EncoderError(f"Long-CLIP checkpoint {path} {missing_file_reason(path)} (or use longclip-B / longclip-L)")
        return path, None
    repo, filename, name = known
    from capgeo.encoders.hub import cache_only_when_unreachable, fetch_advice, unavailable_reason

    online = True
    try:
        from huggingface_hub import hf_hub_download

        with cache_only_when_unreachable() as online:
            return Path(hf_hub_download(repo_id=repo, filename=filename)), name
    except Exception as error:  # offline, no network, not in the cache
        why = type(error).__name__ if online else f"{unavailable_reason()}: {type(error).__name__}"
        raise EncoderError(
            f"Long-CLIP weights {filename} of {repo} are not in the Hugging Face cache and could not be "
            f"downloaded ({why}): {fetch_advice(spec, repo, (filename,), f'/path/to/{filename}')}") from error


def infer_text_architecture(state_dict: dict, source: str = "checkpoint") -> TextArchitecture:
    """Width, depth, vocabulary, embedding size and context of an OpenAI-layout text tower."""
    needed = ("token_embedding.weight", "positional_embedding", "ln_final.weight", "text_projection")
    missing = [key for key in needed if key not in state_dict]
    if missing:
        raise EncoderError(f"{source}: not a CLIP text tower state dict (missing {', '.join(missing)})")
    width = int(state_dict["ln_final.weight"].shape[0])
    layer_ids = {key.split(".")[2] for key in state_dict if key.startswith("transformer.resblocks.")}
    if not layer_ids:
        raise EncoderError(f"{source}: no transformer.resblocks.* weights")
    mlp_width = int(state_dict["transformer.resblocks.0.mlp.c_fc.weight"].shape[0])
    return TextArchitecture(
        width=width,
        layers=len(layer_ids),
        heads=max(1, width // 64),  # OpenAI CLIP (and Long-CLIP's build_model): 64-wide heads
        vocab_size=int(state_dict["token_embedding.weight"].shape[0]),
        embed_dim=int(state_dict["text_projection"].shape[1]),
        context_length=int(state_dict["positional_embedding"].shape[0]),
        mlp_ratio=mlp_width / width,
    )


def fold_positional_embeddings(state_dict: dict, source: str = "checkpoint"):
    """One 248-row table: rows 0-19 of ``positional_embedding``, rows 20-247 of ``positional_embedding_res``."""
    if "positional_embedding_res" not in state_dict:
        raise EncoderError(f"{source}: not a Long-CLIP checkpoint (no positional_embedding_res); "
                           f"load plain CLIP weights as an open_clip encoder (MODEL@file)")
    short, rest = state_dict["positional_embedding"], state_dict["positional_embedding_res"]
    if short.shape != rest.shape or short.shape[0] != LONGCLIP_CONTEXT:
        raise EncoderError(f"{source}: Long-CLIP positional tables should both be {LONGCLIP_CONTEXT} rows, "
                           f"found {tuple(short.shape)} and {tuple(rest.shape)}")
    folded = rest.clone()
    folded[:LONGCLIP_SHORT_ROWS] = short[:LONGCLIP_SHORT_ROWS]
    return folded


def build_longclip_tower(state_dict: dict, source: str = "checkpoint"):
    """(open_clip TextTransformer holding the folded Long-CLIP text weights, exp(logit_scale) or None)."""
    import torch
    from open_clip.transformer import LayerNorm, QuickGELU, TextTransformer

    from capgeo.encoders.openclip import allocate_uninitialised

    folded = fold_positional_embeddings(state_dict, source)
    arch = infer_text_architecture(state_dict, source)

    def build():
        return TextTransformer(
            context_length=LONGCLIP_CONTEXT, vocab_size=arch.vocab_size, width=arch.width, heads=arch.heads,
            layers=arch.layers, mlp_ratio=arch.mlp_ratio, output_dim=arch.embed_dim,
            act_layer=QuickGELU, norm_layer=LayerNorm)

    # every weight comes from the checkpoint (strict load below): skip the random initialisation
    tower = allocate_uninitialised(build) or build()
    text_keys = ("token_embedding.", "transformer.", "ln_final.", "text_projection")
    text_state = {key: value.float() for key, value in state_dict.items() if key.startswith(text_keys)}
    text_state["positional_embedding"] = folded.float()
    try:
        tower.load_state_dict(text_state, strict=True)
    except RuntimeError as error:
        raise EncoderError(f"{source}: Long-CLIP text weights do not fit a {arch.layers}-layer, "
                           f"{arch.width}-wide tower: {state_dict_mismatch(error)}") from error
    verify_positional_embedding(tower, folded, source)
    scale = state_dict.get("logit_scale")
    logit_scale = float(torch.as_tensor(scale).float().exp().reshape(-1)[0]) if scale is not None else None
    return tower, logit_scale


def verify_positional_embedding(tower, folded, source: str = "checkpoint") -> None:
    """Refuse a tower whose positional table is not the folded 248-row table (e.g. interpolated to 77 rows)."""
    import torch

    table = getattr(tower, "positional_embedding", None)
    if table is None and hasattr(tower, "text"):
        table = tower.text.positional_embedding
    rows = int(table.shape[0])
    if rows != LONGCLIP_CONTEXT or int(getattr(tower, "context_length", rows)) != LONGCLIP_CONTEXT:
        raise EncoderError(f"{source}: Long-CLIP tower has a {rows}-row positional table and context "
                           f"{getattr(tower, 'context_length', '?')}, expected {LONGCLIP_CONTEXT} "
                           f"(the 248-row table was resized, e.g. interpolated to 77 rows)")
    if not torch.equal(table.detach().cpu().float(), folded.detach().cpu().float()):
        raise EncoderError(f"{source}: Long-CLIP positional table does not match the folded checkpoint table")


def _name_for(width: int, layers: int) -> str:
    size = {512: "B", 768: "L"}.get(int(width))
    return f"Long-CLIP-{size}" if size and layers == 12 else f"Long-CLIP text tower ({width} wide, {layers} layers)"
