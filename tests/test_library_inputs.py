"""Library calls with a user's mistake in them: a CapgeoError with one line, as the commands give,
never numpy's, torch's or Python's own exception from deep inside (found by calling each
documented function the way the docs describe, with the values users get wrong)."""

from __future__ import annotations

import numpy as np
import pytest

from capgeo.errors import CapgeoError
from capgeo.findings.gamma import gamma_section
from capgeo.geometry.batch_size import resolve_batch_sizes
from capgeo.geometry.pairwise import scan_pairs
from capgeo.geometry.profile_options import ProfileOptions
from capgeo.geometry.typed_profile import Profile


def unit_vectors(n=40, width=8, seed=0):
    vectors = np.random.default_rng(seed).normal(size=(n, width))
    return (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)


def test_a_negative_seed_is_refused_before_numpy_sees_it():
    with pytest.raises(CapgeoError, match="seed must be 0 or more, got -1"):
        ProfileOptions(seed=-1).checked((8,))


def test_batch_sizes_given_as_one_number_or_not_whole_numbers():
    assert resolve_batch_sizes(8, 20).sizes == [8]
    for bad in ((8.5,), ("16",), (True,)):
        with pytest.raises(CapgeoError, match="batch sizes are whole numbers"):
            resolve_batch_sizes(bad, 20)


@pytest.mark.parametrize("options, says", [({"bins": 0}, "bins must be at least 1"),
                                           ({"threshold": 2.0}, "threshold: expected a cosine"),
                                           ({"threshold": float("nan")}, "threshold: expected a cosine"),
                                           ({"count_at_or_above": -1.5}, "count_at_or_above: expected a cosine")])
def test_scan_pairs_refuses_values_outside_cosines_and_bins(options, says):
    with pytest.raises(CapgeoError, match=says):
        scan_pairs(unit_vectors(), np.arange(40) // 2, device="cpu", **options)


@pytest.mark.parametrize("hard_edge", [2.0, float("nan")])
def test_gamma_section_refuses_a_hard_edge_that_is_not_a_cosine(hard_edge):
    with pytest.raises(CapgeoError, match="--hard-edge: expected a cosine"):
        gamma_section(unit_vectors(), np.arange(40) // 2, batch_sizes=(8,), n_batches=2, hard_edge=hard_edge).to_dict()


def test_gamma_section_normalises_vectors_as_the_pairwise_pass_does():
    """Norms 1.0009 were used as they were (a 1e-3 tolerance), cosines 0.18% high."""
    vectors = unit_vectors(seed=3)
    codes = np.arange(40) // 2
    scaled = gamma_section(vectors * 1.0009, codes, batch_sizes=(8,), n_batches=3).to_dict()
    plain = gamma_section(vectors, codes, batch_sizes=(8,), n_batches=3).to_dict()
    assert scaled["batches"][0]["mean_cosine"] == pytest.approx(plain["batches"][0]["mean_cosine"], rel=1e-6)


def test_the_typed_profile_reads_every_documented_top_level_key():
    """gamma_left_out is documented at the top level; a typed profile had no such field."""
    data = {"schema": "capgeo.profile/1", "dataset": {}, "encoder": {}, "gamma_left_out": "B = 3 is too small"}
    assert Profile.from_dict(data).gamma_left_out == "B = 3 is too small"
    assert Profile.from_dict({"schema": "capgeo.profile/1", "dataset": {}, "encoder": {}}).gamma_left_out is None


def test_gamma_section_takes_named_groups_and_refuses_a_negative_seed():
    vectors = np.random.default_rng(0).normal(size=(40, 8)).astype(np.float32)
    named = gamma_section(vectors, [f"img{i // 2:02d}" for i in range(40)], batch_sizes=(8,), n_batches=5).to_dict()
    numbered = gamma_section(vectors, np.arange(40) // 2, batch_sizes=(8,), n_batches=5).to_dict()
    assert named == numbered  # names sorting like the numbers code alike
    with pytest.raises(CapgeoError, match="seed must be 0 or more"):
        gamma_section(vectors, np.arange(40) // 2, batch_sizes=(8,), seed=-1).to_dict()


def test_batch_sizes_as_a_numpy_array_are_taken():
    resolved = resolve_batch_sizes(np.array([32, 16]), 100)
    assert resolved.headline == 32 and resolved.extra == (16,)


def test_leak_datasets_refuses_one_eval_path_where_a_list_belongs():
    from capgeo.pipeline import leak_datasets

    with pytest.raises(CapgeoError, match=r"evals is a list of evaluation sets .* pass \['eval.jsonl'\]"):
        leak_datasets("train.jsonl", "eval.jsonl")


@pytest.mark.parametrize("requested", [16.0, np.float64(16), "16"])
def test_a_batch_size_that_is_not_a_whole_number_or_a_list_is_one_line(requested):
    with pytest.raises(CapgeoError, match="batch sizes are whole numbers"):
        resolve_batch_sizes(requested, 100)


def test_gamma_section_keeps_names_that_look_like_numbers_apart_and_takes_seed_none():
    vectors = np.random.default_rng(0).normal(size=(40, 8)).astype(np.float32)
    groups = ["1", "1", "01", "01"] + [f"x{i // 2}" for i in range(36)]
    section = gamma_section(vectors, groups, batch_sizes=(20,), n_batches=3, seed=None).to_dict()
    assert section["batches"][0]["batch_size"] == 20  # 20 images: "1" and "01" are two


def test_a_cpu_device_with_its_index_is_taken():
    import torch

    scan = scan_pairs(np.random.default_rng(1).normal(size=(10, 4)).astype(np.float32), np.arange(10), top_k=1,
                      device=torch.device("cpu", 0))
    assert scan.n == 10


@pytest.mark.parametrize("codes", [np.arange(12, dtype=float).repeat(2), np.arange(12).repeat(2).astype(str)])
def test_numeric_group_codes_keep_their_order_whatever_their_type(codes):
    """Float codes (an integer column with a missing value) and numerals were sorted as text
    ("10.0" < "2.0"), pairing image vector rows with the wrong images."""
    vectors = unit_vectors(24, 8)
    images = unit_vectors(12, 8, seed=3)
    as_ints = gamma_section(vectors, np.arange(12).repeat(2), batch_sizes=(4,), n_batches=10, image_vectors=images).to_dict()
    assert gamma_section(vectors, codes, batch_sizes=(4,), n_batches=10, image_vectors=images).to_dict() == as_ints
