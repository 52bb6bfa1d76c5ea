"""Import open_clip without the optional libraries a text tower does not need.

``import open_clip`` imports ``transformers`` (for Hugging Face text towers and CoCa
generation) and ``timm`` (for timm image towers) whenever they are installed. Both
imports are guarded by ``try: ... except ImportError`` in open_clip, and together they
cost seconds of start-up (on a machine without compiled bytecode, 8 s for
``transformers`` alone, which pulls in much of ``torch._dynamo``). A CLIP or Long-CLIP
text tower needs neither, so open_clip is imported with them hidden; they stay
importable for everything else in the process (sentence-transformers, for one).

If a later model in the same process does need one, the open_clip modules that
guard it are reloaded: a reload re-executes the module in the same namespace, so
the classes open_clip already handed out see the library from then on.
"""

from __future__ import annotations

import importlib
import sys
from typing import Iterable

# optional library -> the open_clip modules whose guarded import of it is skipped when hidden
_GUARDED = {
    "transformers": ("open_clip.hf_model", "open_clip.coca_model"),
    "timm": ("open_clip.timm_model",),
}
_hidden: set[str] = set()  # libraries hidden when open_clip was imported in this process


def libraries_needed(config: dict | None) -> set[str]:
    """The optional libraries the model of an open_clip ``config`` needs to be built;
    None (config unknown) needs all of them."""
    if config is None:
        return set(_GUARDED)
    text_cfg, vision_cfg = config.get("text_cfg") or {}, config.get("vision_cfg") or {}
    needed = set()
    if text_cfg.get("hf_model_name") or "multimodal_cfg" in config:  # HF text tower, CoCa
        needed.add("transformers")
    if vision_cfg.get("timm_model_name"):
        needed.add("timm")
    return needed


def import_open_clip(needed: Iterable[str] = tuple(_GUARDED)):
    """open_clip, imported (once) with the optional libraries not in ``needed`` hidden, or made
    whole again when it was imported without one that is now needed."""
    needed = set(needed)
    if "open_clip" not in sys.modules:
        hide = [name for name in _GUARDED if name not in needed and name not in sys.modules]
        try:
            for name in hide:
                sys.modules[name] = None  # makes `import name` raise ImportError
            import open_clip
        finally:
            for name in hide:
                if sys.modules.get(name, 0) is None:
                    del sys.modules[name]
        _hidden.update(hide)
        return open_clip
    for name in needed & _hidden:
        for module in _GUARDED[name]:
            if module in sys.modules:
                importlib.reload(sys.modules[module])
        _hidden.discard(name)
    return sys.modules["open_clip"]
