"""The examples that end each command's --help: two or three lines a new user can run, a Long-CLIP
one among them (the embedded default's gamma is not for training: `capgeo encoders`)."""

from __future__ import annotations

EXAMPLES = {
    "profile": (
        ("the shipped DOCCI sample, embedded default encoder (offline)",
         "capgeo profile data/docci_sample.jsonlines"),
        ("under the Long-CLIP-L text tower (fetch it ahead: hf download BeichenZhang/LongCLIP-L longclip-L.pt)",
         "capgeo profile captions.json --encoder longclip-L --json profile.json"),
        ("with a checkpoint file on a machine without a network",
         "capgeo profile captions.json --encoder /path/to/longclip-L.pt --batch-size 256"),
    ),
    "gamma": (
        ("the gamma for the tower you will fine-tune, at your training batch",
         "capgeo gamma captions.json --encoder longclip-L --batch-size 256"),
        ("OpenAI's ViT-L/14 at its logit scale, with a finer grid",
         "capgeo gamma captions.json --encoder ViT-L-14/openai --grid 0,0.1,0.2,0.3,0.5"),
    ),
    "dupes": (
        ("the 20 most similar pairs, exact copies left out",
         "capgeo dupes captions.json --encoder longclip-L --top 20 --skip-exact"),
        ("every pair at cosine 0.9 or more, as rows for other tools",
         "capgeo dupes captions.json --threshold 0.9 --top 0 -o pairs.parquet"),
    ),
    "dupes-examples": (
        ("captions at the median and the 90th percentile of hardest-companion cosine, under Long-CLIP-L",
         "capgeo dupes-examples captions.json --encoder longclip-L --quantile 0.5 --quantile 0.9"),
        ("one query per quantile with its five nearest captions, as JSON",
         "capgeo dupes-examples captions.json --per-quantile 1 --neighbours 5 --json examples.json"),
    ),
    "dupes-sets": (
        ("near-duplicate sets under Long-CLIP-L, one caption kept per set, the others' ids written",
         "capgeo dupes-sets captions.json --encoder longclip-L --keep longest --drop-list drop.txt"),
        ("sets linked at cosine 0.9, one row per set",
         "capgeo dupes-sets captions.json --threshold 0.9 -o sets.jsonl"),
    ),
    "leak": (
        ("COCO-style training captions against a test split, ids to drop written",
         "capgeo leak train.json test.json --encoder longclip-L -o drop.txt"),
        ("two evaluation sets at a lower threshold",
         "capgeo leak train.json eval_a.json eval_b.json --threshold 0.9 --top 50"),
    ),
    "report": (
        ("an HTML report of the shipped DOCCI sample",
         "capgeo report data/docci_sample.jsonlines -o docci.html"),
        ("under Long-CLIP-L, with the profile saved to redraw later",
         "capgeo report captions.json --encoder longclip-L --save-profile p.json -o report.html"),
        ("redraw a saved profile, nothing recomputed",
         "capgeo report p.json -o again.html"),
    ),
}


def epilog(command: str) -> str:
    """The Examples section of ``command``'s --help: each example's comment, then its command line
    (``\\b`` keeps click from rewrapping the lines)."""
    lines = ["\b", "Examples:"]
    for comment, line in EXAMPLES[command]:
        lines += [f"  # {comment}", f"  {line}"]
    return "\n".join(lines)
