"""batches.jsonl: planned batches as one JSON line per batch, written and read back.

Each line is ``{"epoch": E, "batch": K, "indices": [...], "ids": [...]}`` (docs/batches.md):
``indices`` are row numbers of the dataset as capgeo reads it, ``ids`` the same captions' ids,
so a training script can use either. Lines run epoch by epoch, batch by batch.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Sequence

from capgeo.errors import DataError

FIELDS = ("epoch", "batch", "indices", "ids")


def batch_lines(plans, ids: Sequence[str]):
    """The lines of the plans (capgeo.training.plan.EpochPlan), in order, each ending in a newline."""
    for plan in plans:
        for number, batch in enumerate(plan.batches):
            indices = batch.tolist()
            yield json.dumps({"epoch": plan.epoch, "batch": number, "indices": indices,
                              "ids": [str(ids[i]) for i in indices]}, ensure_ascii=False) + "\n"


def write_batches(path: str, plans, ids: Sequence[str]) -> None:
    """Write the plans to ``path`` atomically (a failure leaves no partial file and the old one)."""
    from capgeo._atomic import atomic_open

    with atomic_open(path) as handle:
        handle.writelines(batch_lines(plans, ids))


def _whole_number(value, what: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise DataError(f"{where}: {what} must be a whole number >= 0, got {json.dumps(value)}")
    return value


def read_batches(path: str | Path) -> list[list[list[int]]]:
    """The batches of a batches.jsonl, per epoch (``epochs[e][k]``: the indices of batch k of epoch e).

    One ``DataError`` naming the line for anything else: lines not JSON objects, missing fields,
    indices that are not whole numbers >= 0, a caption twice in one epoch, epochs or batches out of
    order (each epoch's batches numbered 0, 1, ...; epochs 0, 1, ...)."""
    epochs: list[list[list[int]]] = []
    seen: set[int] = set()
    try:
        handle = open(path, encoding="utf-8")
    except OSError as error:
        raise DataError(f"{path}: cannot be read ({error.strerror}); expected a batches.jsonl") from None
    with handle:
        for number, line in enumerate(handle, start=1):
            where = f"{path}, line {number}"
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                raise DataError(f"{where}: not JSON ({error.msg if hasattr(error, 'msg') else error}); expected "
                                "one batch per line as capgeo batches writes it") from None
            missing = [name for name in FIELDS if not isinstance(row, dict) or name not in row]
            if missing:
                raise DataError(f"{where}: no {', '.join(missing)}; expected the fields {', '.join(FIELDS)}")
            epoch = _whole_number(row["epoch"], "epoch", where)
            batch = _whole_number(row["batch"], "batch", where)
            if not isinstance(row["indices"], list) or not row["indices"]:
                raise DataError(f"{where}: indices must be a non-empty list of caption row numbers")
            indices = [_whole_number(value, "each index", where) for value in row["indices"]]
            if epoch == len(epochs):
                epochs.append([])
                seen = set()
            if epoch != len(epochs) - 1 or batch != len(epochs[-1]):
                expected = f"epoch {len(epochs) - 1} batch {len(epochs[-1])} or epoch {len(epochs)} batch 0"
                raise DataError(f"{where}: epoch {epoch} batch {batch} out of order; expected {expected}")
            twice = seen.intersection(indices) | {i for i, count in Counter(indices).items() if count > 1}
            if twice:
                raise DataError(f"{where}: caption {min(twice)} is in epoch {epoch} more than once")
            seen.update(indices)
            epochs[-1].append(indices)
    if not epochs:
        raise DataError(f"{path}: no batches; expected one batch per line as capgeo batches writes it")
    return epochs
