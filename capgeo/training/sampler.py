"""A torch batch sampler whose batches hold no false negatives (capgeo.training.plan).

    from capgeo.training.sampler import HNCLIPBatchSampler
    sampler = HNCLIPBatchSampler.from_captions(captions, vectors, batch_size=128, seed=0)
    loader = DataLoader(dataset, batch_sampler=sampler)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)   # a new plan each epoch, seeded seed + epoch
        for batch in loader: ...

Or replay the batches `capgeo batches` saved: ``HNCLIPBatchSampler.from_jsonl("batches.jsonl")``.
torch is imported by this module only.
"""

from __future__ import annotations

from typing import Iterator

from torch.utils.data import Sampler

from capgeo.defaults import NEAR_DUPLICATE_THRESHOLD
from capgeo.errors import CapgeoError
from capgeo.training.plan import Conflicts, EpochPlan, check_batch_size, conflicts_of, plan_epoch


class HNCLIPBatchSampler(Sampler):
    """Yields each batch of an epoch as a list of dataset indices: no two captions of one image,
    no two exact copies, no two near-duplicates in one batch. Planned again for each epoch, from
    ``seed + epoch`` (call :meth:`set_epoch` before each epoch, as with DistributedSampler).

    A batch holds ``batch_size`` captions unless no caption left could fill it without a
    conflict; ``drop_short`` leaves such batches out. :attr:`plan` tells what the epoch's plan
    rearranged and left out."""

    def __init__(self, conflicts: Conflicts | None, batch_size: int, *, seed: int = 0, drop_short: bool = False,
                 saved: list[list[list[int]]] | None = None):
        """``saved``: batches per epoch (``saved[e][k]``: indices) to replay instead of planning
        (what :meth:`from_jsonl` reads); ``conflicts`` is then None."""
        super().__init__()
        if saved is None:
            check_batch_size(batch_size, conflicts.n)
        self.conflicts = conflicts
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        self.drop_short = drop_short
        self.epoch = 0
        self._saved = saved
        self._plan: EpochPlan | None = None

    @classmethod
    def from_captions(cls, captions, vectors, batch_size: int, *, threshold: float = NEAR_DUPLICATE_THRESHOLD,
                      seed: int = 0, drop_short: bool = False, device: str | None = None) -> "HNCLIPBatchSampler":
        """For a CaptionSet (or anything capgeo.load_captions reads) and its caption vectors
        (an (N, d) array or Embeddings): near-duplicates are pairs of different images at cosine
        >= ``threshold``."""
        from capgeo.pipeline import loaded_captions

        captions = loaded_captions(captions)
        return cls(conflicts_of(captions, vectors, threshold, device=device), batch_size, seed=seed,
                   drop_short=drop_short)

    @classmethod
    def from_jsonl(cls, path, *, drop_short: bool = False) -> "HNCLIPBatchSampler":
        """Replays the batches of a batches.jsonl (`capgeo batches -o`): epoch ``e`` of training
        gets saved epoch ``e`` modulo the epochs saved; the batch size is the largest batch's."""
        from capgeo.training.batches_export import read_batches

        saved = read_batches(path)
        return cls(None, max(len(batch) for epoch in saved for batch in epoch), drop_short=drop_short, saved=saved)

    def set_epoch(self, epoch: int) -> None:
        if int(epoch) != epoch or epoch < 0:
            raise CapgeoError(f"epoch: expected a whole number >= 0, got {epoch}")
        self.epoch = int(epoch)

    @property
    def plan(self) -> EpochPlan | None:
        """The current epoch's plan (None when replaying a file)."""
        if self._saved is not None:
            return None
        if self._plan is None or self._plan.epoch != self.epoch:
            self._plan = plan_epoch(self.conflicts, self.batch_size, self.seed, self.epoch)
        return self._plan

    def _batches(self) -> list[list[int]]:
        if self._saved is not None:
            batches = self._saved[self.epoch % len(self._saved)]
        else:
            batches = [batch.tolist() for batch in self.plan.batches]
        if self.drop_short:
            batches = [batch for batch in batches if len(batch) == self.batch_size]
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self._batches())

    def __len__(self) -> int:
        if self._saved is None and not self.drop_short:
            return self.conflicts.n // self.batch_size  # without planning the epoch
        return len(self._batches())


__all__ = ["HNCLIPBatchSampler", "Conflicts"]
