"""A distribution's ``bounds``, ``precision`` and ``recall`` are sections: read by attribute, written back
byte for byte (null kept, key order kept)."""

from __future__ import annotations

import json

from capgeo.geometry.typed_profile import CompanionRecall, Distribution, ProductPrecision, SampleBounds

_SAMPLED = {"count": 500, "exact": False,
            "bounds": {"sampled": True, "sample_size": 500, "population": 4950, "confidence": 0.95,
                       "mean_standard_error": 0.004, "mean_interval": [0.1, 0.2], "cdf_epsilon": 0.0607,
                       "quantile_intervals": {"p50": [0.1, 0.3], "p99": [0.4, 1.0]}, "method": "in words"}}
_FAISS = {"mode": "faiss", "recall": {"queries": 0, "recall_at_1": None, "recall_at_k": None, "k": 5,
                                      "hardest_cosine_mean_error": 0.0, "method": "in words"}}
_BF16 = {"exact": False, "precision": {"mode": "bf16", "cosine_error_bound": 0.008, "product": "bf16 inputs",
                                       "measured_max_error": 0.002, "measured_pairs": 10,
                                       "measured_share_of_bins_changed": 0.1, "rows_too_close_to_call": 1,
                                       "pairs_rescored": 3, "companions": "exact"}}


def test_the_parts_load_as_sections_and_write_back_as_they_were():
    for written in (_SAMPLED, _FAISS, _BF16):
        loaded = Distribution.from_dict(json.loads(json.dumps(written)))
        assert json.dumps(loaded.to_dict()) == json.dumps(written)
    bounds = Distribution.from_dict(_SAMPLED).bounds
    assert isinstance(bounds, SampleBounds) and bounds.cdf_epsilon * bounds.population == 0.0607 * 4950
    assert bounds.quantile_intervals["p99"] == (0.4, 1.0) and bounds.mean_interval == (0.1, 0.2)
    recall = Distribution.from_dict(_FAISS).recall
    assert isinstance(recall, CompanionRecall) and recall.recall_at_1 is None and "recall_at_1" in recall.nulls
    precision = Distribution.from_dict(_BF16).precision
    assert isinstance(precision, ProductPrecision) and precision.mode == "bf16" and precision.pairs_rescored == 3


def test_an_unsampled_same_group_bounds_keeps_its_two_keys():
    written = {"exact": True, "bounds": {"sampled": False, "population": 35}}
    loaded = Distribution.from_dict(written)
    assert loaded.bounds.sampled is False and loaded.bounds.sample_size is None
    assert loaded.to_dict() == written
