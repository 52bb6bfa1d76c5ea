"""The findings' frozen results (capgeo.findings.result): their JSON comes from their fields, and a
section built by its constructor is the section a saved profile loads as."""

from __future__ import annotations

import dataclasses
import json
from types import MappingProxyType

import numpy as np
import pytest

from capgeo.findings.result import OMITTED_WHEN_NONE, Result, frozen_json, section
from capgeo.geometry.typed_profile import Gamma, GammaSuggestion


@dataclasses.dataclass(frozen=True)
class _Inner(Result):
    value: float


@dataclasses.dataclass(frozen=True)
class _Outer(Result):
    name: str
    inner: _Inner
    many: tuple[_Inner, ...]
    maybe: int | None = None
    optional: int | None = dataclasses.field(default=None, metadata=OMITTED_WHEN_NONE)


def test_a_result_writes_its_fields_in_order_and_leaves_out_only_the_optional_nones():
    found = _Outer("a", _Inner(0.5), (_Inner(1.0), _Inner(2.0)))
    assert found.to_dict() == {"name": "a", "inner": {"value": 0.5}, "many": [{"value": 1.0}, {"value": 2.0}],
                               "maybe": None}
    assert list(dataclasses.replace(found, optional=3).to_dict()) == ["name", "inner", "many", "maybe", "optional"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.name = "b"


def test_frozen_json_is_read_only_and_section_writes_its_nones_as_null():
    frozen = frozen_json(_Outer("a", _Inner(0.5), (_Inner(1.0),)))
    assert isinstance(frozen, MappingProxyType) and frozen["many"] == (MappingProxyType({"value": 1.0}),)
    with pytest.raises(TypeError):
        frozen["name"] = "b"
    suggestion = section(GammaSuggestion, gamma=0.5, range=(0.25, 0.75), clip_note=None)
    assert suggestion.to_dict() == {"gamma": 0.5, "range": [0.25, 0.75], "clip_note": None}


def test_the_gamma_section_built_is_the_section_its_json_loads_as():
    from capgeo.findings.gamma import GammaOptions, gamma_section

    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((80, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    images = rng.standard_normal((40, 16)).astype(np.float32)
    built = gamma_section(vectors, np.arange(80) // 2, GammaOptions(batch_sizes=(8, 4), n_batches=3),
                          image_vectors=images)
    written = json.loads(json.dumps(built.to_dict()))
    assert isinstance(built, Gamma) and Gamma.from_dict(written) == built
    assert json.dumps(Gamma.from_dict(written).to_dict()) == json.dumps(built.to_dict())   # the same keys, in order
    # the keywords set the options' fields, as the options object does
    assert gamma_section(vectors, np.arange(80) // 2, batch_sizes=(8, 4), n_batches=3, image_vectors=images) == built
    assert built.batches[0].image.plain.mean_loss == written["batches"][0]["image"]["plain"]["mean_loss"]


def test_the_gamma_parts_are_sections_and_an_older_grid_row_still_loads():
    from capgeo.findings.gamma import REFERENCE, GammaOptions, gamma_section
    from capgeo.geometry.typed_profile import GammaGridRow, GammaImageLosses, GammaMargins, GammaReference

    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((40, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    built = gamma_section(vectors, np.arange(40) // 2, GammaOptions(batch_sizes=(4,), n_batches=2, grid=(0.0, 0.5)),
                          image_vectors=rng.standard_normal((20, 8)).astype(np.float32))
    entry = built.batches[0]
    assert isinstance(entry.margins, GammaMargins) and isinstance(entry.image, GammaImageLosses)
    assert isinstance(built.reference, GammaReference) and built.reference.batch_size == REFERENCE.batch_size
    assert all(isinstance(row, GammaGridRow) for row in entry.grid) and [row.gamma for row in entry.grid] == [0.0, 0.5]
    # the margin view's suggested margins are gamma * G at the rows' own cosines
    assert entry.margins.suggested.median == pytest.approx(entry.suggestion.gamma_exact * entry.margins.cosines.median)
    assert [loss.gamma for loss in entry.image.boosted] == [0.0, 0.5]
    # a profile saved before the boosts were recorded: the rows load without them and write back as they were
    written = json.loads(json.dumps(built.to_dict()))
    for row in written["batches"][0]["grid"]:
        del row["boost_gap"]
    older = Gamma.from_dict(written)
    assert older.batches[0].grid[0].boost_gap is None and older.to_dict() == written


def test_the_pairs_section_built_is_the_section_its_json_loads_as():
    import capgeo
    from capgeo.findings.pairs import PairSectionOptions, pairs_section
    from capgeo.geometry.typed_profile import Pairs
    from capgeo.images.vectors import from_array

    rng = np.random.default_rng(1)
    captions = capgeo.load_captions([{"caption": f"a photo number {i} of thing {i // 2}", "image": f"img{i // 2}"}
                                     for i in range(24)])
    text = rng.standard_normal((24, 8)).astype(np.float32)
    text /= np.linalg.norm(text, axis=1, keepdims=True)
    images = from_array(captions, rng.standard_normal((12, 8)), "x", width=8)
    built = pairs_section(captions, text, images, PairSectionOptions(batch_size=4, n_batches=3, delta=0.5))
    written = json.loads(json.dumps(built.to_dict()))
    assert isinstance(built, Pairs) and Pairs.from_dict(written) == built
    assert json.dumps(Pairs.from_dict(written).to_dict()) == json.dumps(built.to_dict())
    assert written["false_negatives"]["batch_size"] == 4 and "n_written" not in written["false_negatives"]
    assert written["saturation"]["gammas"][0]["gamma"] == 0.0 and written["thumbnails"] is None
