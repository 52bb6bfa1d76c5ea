"""The batch planner (capgeo.training.plan) and its torch sampler, checked by brute force."""

from __future__ import annotations

import time

import numpy as np
import pytest

from _action_fixtures import caption_set
from capgeo.captions.exact_duplicates import normalize_text
from capgeo.errors import CapgeoError, DataError
from capgeo.training.plan import Conflicts, conflicts_of, plan_epoch, plan_epochs

THRESHOLD = 0.9


def planted(n_images=150, seed=0):
    """Images with 1 to 5 captions; exact copies (some differing in case and spacing) across images
    and within one; near-duplicates of different images (cosine ~0.99) in chains; the rest random
    32-d vectors (cosines far below 0.9)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 6, n_images)
    groups = [f"img{g}" for g, size in enumerate(sizes) for _ in range(size)]
    n = len(groups)
    texts = [f"caption {i}" for i in range(n)]
    vectors = rng.normal(size=(n, 32))
    copies = rng.choice(n, 40, replace=False)
    for k, i in enumerate(copies):
        texts[i] = ["A dog on a sofa.", "a  DOG on a sofa.", "Two cats."][k % 3]
    near = rng.choice(np.setdiff1d(np.arange(n), copies), 60, replace=False)
    for a, b in near.reshape(-1, 2):
        vectors[b] = vectors[a] + 0.05 * rng.normal(size=32)
    for a, b, c in near[:30].reshape(-1, 3):  # chains: a ~ b ~ c
        vectors[c] = vectors[b] + 0.05 * rng.normal(size=32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return caption_set(groups, texts), vectors.astype(np.float32)


@pytest.fixture(scope="module")
def data():
    captions, vectors = planted()
    return captions, vectors, conflicts_of(captions, vectors, THRESHOLD)


def brute_conflicts(captions, vectors, batch):
    """Every pair of the batch that breaks a rule, by numpy on the vectors and the texts."""
    groups = np.array(captions.groups)[batch]
    texts = [normalize_text(captions.texts[i]) for i in batch]
    cosine = vectors[batch].astype(np.float64) @ vectors[batch].astype(np.float64).T
    bad = []
    for x in range(len(batch)):
        for y in range(x + 1, len(batch)):
            if groups[x] == groups[y] or texts[x] == texts[y] or cosine[x, y] >= THRESHOLD:
                bad.append((batch[x], batch[y]))
    return bad


def brute_pairs_by_kind(captions, vectors, batch_of):
    """Pairs of captions with one batch (``batch_of[i]`` >= 0), each under its first kind."""
    groups = np.array(captions.groups)
    texts = np.array([normalize_text(t) for t in captions.texts])
    cosine = vectors.astype(np.float64) @ vectors.astype(np.float64).T
    a, b = np.triu_indices(len(groups), k=1)
    together = (batch_of[a] >= 0) & (batch_of[a] == batch_of[b])
    same_image = groups[a] == groups[b]
    copy = ~same_image & (texts[a] == texts[b])
    near = ~same_image & ~copy & (cosine[a, b] >= THRESHOLD)
    return {"same_image": int((together & same_image).sum()), "exact_copy": int((together & copy).sum()),
            "near_duplicate": int((together & near).sum())}


@pytest.mark.parametrize("batch_size", [8, 24])
def test_every_batch_of_an_epoch_is_free_of_conflicts(data, batch_size):
    captions, vectors, conflicts = data
    n = len(captions)
    # the data has conflicts for the plan to avoid
    assert all(count > 0 for count in conflicts.pair_counts().values())
    for epoch in range(3):
        plan = plan_epoch(conflicts, batch_size, seed=5, epoch=epoch)
        assert len(plan.batches) == n // batch_size
        for batch in plan.batches:
            assert 0 < len(batch) <= batch_size
            assert brute_conflicts(captions, vectors, batch.tolist()) == []
        placed = np.concatenate(plan.batches)
        assert len(np.unique(placed)) == len(placed)  # no caption twice in an epoch
        assert sorted(placed.tolist() + plan.not_placed.tolist()) == list(range(n))
        # nothing is short here: only the n % B past the last full batch wait
        assert plan.n_short == 0 and len(plan.not_placed) == n % batch_size


def test_conflicts_avoided_are_those_of_the_plain_shuffle(data):
    captions, vectors, conflicts = data
    plan = plan_epoch(conflicts, 16, seed=3, epoch=2)
    order = np.random.default_rng(3 + 2).permutation(len(captions))
    n_batches = len(captions) // 16
    batch_of = np.full(len(captions), -1)
    batch_of[order[:n_batches * 16]] = np.arange(n_batches * 16) // 16
    assert plan.shuffle_conflicts == brute_pairs_by_kind(captions, vectors, batch_of)
    assert conflicts.pair_counts() == brute_pairs_by_kind(captions, vectors, np.zeros(len(captions), int))
    rearranged = sum(set(b.tolist()) != set(order[k * 16:(k + 1) * 16].tolist()) for k, b in enumerate(plan.batches))
    assert plan.n_rearranged == rearranged > 0


def test_a_plan_is_deterministic_for_its_seed_and_differs_across_epochs(data):
    _, _, conflicts = data
    first, again = plan_epochs(conflicts, 16, seed=7, epochs=2), plan_epochs(conflicts, 16, seed=7, epochs=2)
    for a, b in zip(first, again):
        assert all(np.array_equal(x, y) for x, y in zip(a.batches, b.batches))
        assert np.array_equal(a.not_placed, b.not_placed)
    assert not all(np.array_equal(x, y) for x, y in zip(first[0].batches, first[1].batches))
    other = plan_epoch(conflicts, 16, seed=8)
    assert not all(np.array_equal(x, y) for x, y in zip(first[0].batches, other.batches))


def test_without_conflicts_the_plan_is_the_plain_shuffle():
    conflicts = Conflicts(np.arange(100), np.arange(100))
    plan = plan_epoch(conflicts, 16, seed=1)
    order = np.random.default_rng(1).permutation(100)
    assert [b.tolist() for b in plan.batches] == order[:96].reshape(6, 16).tolist()
    assert plan.not_placed.tolist() == sorted(order[96:].tolist()) and plan.n_rearranged == 0
    assert plan.shuffle_conflicts == {"same_image": 0, "exact_copy": 0, "near_duplicate": 0}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_an_image_with_more_captions_than_batches_leaves_the_excess_out(seed):
    """1,000 captions in batches of 10: 100 batches. One image has 150 captions, at most one per
    batch: 50 cannot be placed, and the 850 others all can, so exactly 50 are left out."""
    groups = np.r_[np.zeros(150, np.int64), np.arange(1, 851)]
    conflicts = Conflicts(groups, np.arange(1000))
    plan = plan_epoch(conflicts, 10, seed=seed)
    assert len(plan.not_placed) == 50
    assert np.all(groups[plan.not_placed] == 0)
    assert all(np.count_nonzero(groups[b] == 0) == 1 for b in plan.batches)
    assert sum(10 - len(b) for b in plan.batches) == 50 and plan.n_short > 0  # slots no caption can fill
    assert plan.summary()["share_not_placed"] == pytest.approx(0.05)


def test_one_text_copied_more_often_than_there_are_batches():
    texts = np.r_[np.zeros(30, np.int64), np.arange(1, 171)]
    plan = plan_epoch(Conflicts(np.arange(200), texts), 20, seed=4)  # 10 batches
    assert len(plan.not_placed) == 20 and set(texts[plan.not_placed]) == {0}


def test_near_duplicate_chains_need_swaps_and_still_fill_every_batch():
    """Batches of 4 from 8 captions: 0-1, 2-3, 4-5, 6-7 are near pairs, so each batch needs one of each."""
    conflicts = Conflicts(np.arange(8), np.arange(8), np.array([0, 2, 4, 6]), np.array([1, 3, 5, 7]), 0.9)
    for seed in range(20):
        plan = plan_epoch(conflicts, 4, seed=seed)
        assert len(plan.not_placed) == 0
        assert [sorted((b // 2).tolist()) for b in plan.batches] == [[0, 1, 2, 3]] * 2


def test_bad_sizes_are_errors(data):
    _, _, conflicts = data
    for size in (1, 10_000):
        with pytest.raises(CapgeoError, match="batch size"):
            plan_epoch(conflicts, size)
    with pytest.raises(CapgeoError, match="epochs"):
        plan_epochs(conflicts, 8, epochs=0)
    with pytest.raises(CapgeoError, match="indices must lie"):
        Conflicts(np.arange(3), np.arange(3), np.array([0]), np.array([3]))


@pytest.mark.slow
def test_a_hundred_thousand_captions_plan_in_seconds():
    rng = np.random.default_rng(0)
    n = 100_000
    texts = np.arange(n)
    texts[rng.choice(n, 300)] = rng.integers(0, 50, 300)
    conflicts = Conflicts(np.repeat(np.arange(n // 5), 5), texts, rng.integers(0, n, 5000),
                          rng.integers(0, n, 5000), 0.95)
    started = time.perf_counter()
    plan = plan_epoch(conflicts, 128)
    assert time.perf_counter() - started < 15  # about 1.5 s alone on the 2-core CPU
    assert len(plan.batches) == 781 and plan.n_short == 0


# --------------------------------------------------------------------------- torch


def test_sampler_feeds_a_dataloader_and_replans_each_epoch(data, tmp_path):
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from capgeo.training.batches_export import read_batches, write_batches
    from capgeo.training.sampler import HNCLIPBatchSampler

    captions, vectors, conflicts = data
    sampler = HNCLIPBatchSampler.from_captions(captions, vectors, 16, threshold=THRESHOLD, seed=3)
    loader = DataLoader(TensorDataset(torch.arange(len(captions))), batch_sampler=sampler)
    epochs = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        seen = [batch.tolist() for (batch,) in loader]
        assert len(seen) == len(sampler) == len(captions) // 16
        assert seen == [b.tolist() for b in plan_epoch(conflicts, 16, seed=3, epoch=epoch).batches]
        for batch in seen:
            assert brute_conflicts(captions, vectors, batch) == []
        epochs.append(seen)
    assert epochs[0] != epochs[1]

    path = tmp_path / "batches.jsonl"
    write_batches(str(path), plan_epochs(conflicts, 16, seed=3, epochs=2), captions.ids)
    assert read_batches(path) == epochs
    replay = HNCLIPBatchSampler.from_jsonl(path)
    loader = DataLoader(TensorDataset(torch.arange(len(captions))), batch_sampler=replay)
    for epoch in (0, 1, 2):  # a third epoch replays the first
        replay.set_epoch(epoch)
        assert [batch.tolist() for (batch,) in loader] == epochs[epoch % 2]


def test_drop_short_leaves_out_batches_that_could_not_be_filled():
    from capgeo.training.sampler import HNCLIPBatchSampler

    groups = np.r_[np.zeros(150, np.int64), np.arange(1, 851)]
    conflicts = Conflicts(groups, np.arange(1000))
    assert len(list(HNCLIPBatchSampler(conflicts, 10))) == 100
    sampler = HNCLIPBatchSampler(conflicts, 10, drop_short=True)
    kept = list(sampler)
    assert len(kept) == len(sampler) == 100 - sampler.plan.n_short and all(len(batch) == 10 for batch in kept)


@pytest.mark.parametrize("line, message", [
    ("not json", "line 2: not JSON"),
    ('{"epoch": 0, "batch": 1}', "line 2: no indices, ids"),
    ('{"epoch": 0, "batch": 1, "indices": [-1], "ids": ["x"]}', "line 2: each index must be a whole number"),
    ('{"epoch": 0, "batch": 5, "indices": [3], "ids": ["x"]}', "line 2: epoch 0 batch 5 out of order"),
    ('{"epoch": 0, "batch": 1, "indices": [1, 7], "ids": ["x", "y"]}', "line 2: caption 1 is in epoch 0 more"),
])
def test_a_bad_batches_file_is_one_error_naming_the_line(tmp_path, line, message):
    from capgeo.training.batches_export import read_batches

    path = tmp_path / "batches.jsonl"
    path.write_text('{"epoch": 0, "batch": 0, "indices": [0, 1], "ids": ["a", "b"]}\n' + line + "\n")
    with pytest.raises(DataError, match=message):
        read_batches(path)


def test_the_planner_does_not_import_torch():
    import subprocess
    import sys

    code = ("import sys, capgeo.training.plan, capgeo.training.batches_export; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
