"""The typed profile: a real profile round-trips through the frozen objects unchanged, its fields are
the ones docs/profile-schema.md documents, and other schema versions are refused in one line."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest

from capgeo.errors import CapgeoError
from capgeo.geometry import build_profile
from capgeo.geometry.typed_profile import (
    ABSENT,
    BatchStatistics,
    Dataset,
    Distribution,
    ExactDuplicates,
    Lengths,
    NearDuplicates,
    Profile,
    load_typed_profile,
)
from _report_fixtures import make_full_profile
from test_profile import caption_set, fake_embeddings

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_DOC = (ROOT / "docs" / "profile-schema.md").read_text(encoding="utf-8")
SAVED = ROOT / "reports" / "docci_sample.profile.json"


def documented_keys(heading: str) -> set[str]:
    """The keys of the tables under the '## ...heading...' section of docs/profile-schema.md
    (first column; a cell may name several keys)."""
    body = SCHEMA_DOC.split(f"\n## {heading}", 1)[1].split("\n## ", 1)[0]
    return {key for line in body.splitlines() if line.startswith("| `")
            for key in re.findall(r"`([a-z_0-9]+)`", line.split("|")[1])}


def declared(section: type) -> set[str]:
    return {item.name for item in dataclasses.fields(section)} - {"extra"}


@pytest.fixture(scope="module")
def built() -> dict:
    rng = np.random.default_rng(3)
    groups = np.arange(60) // 2
    captions = caption_set([f"caption {i % 50}" for i in range(60)], groups)  # some exact duplicates
    embeddings = fake_embeddings(rng.normal(size=(60, 12)), token_counts=rng.integers(5, 120, size=60))
    profile = build_profile(captions, embeddings, batch_sizes=(8, 16), n_batches=4, relative_buckets=True,
                            progress=False)
    return json.loads(json.dumps(profile))  # as a saved file holds it


@pytest.fixture(scope="module")
def saved() -> dict:
    return json.loads(SAVED.read_text(encoding="utf-8"))


@pytest.mark.parametrize("source", ["built", "saved"])
def test_profile_round_trips_unchanged(source, request):
    data = request.getfixturevalue(source)
    typed = Profile.from_dict(data)
    assert typed.to_dict() == data
    assert json.loads(json.dumps(typed.to_dict())) == data


def test_sections_are_typed_and_read_only(built):
    typed = Profile.from_dict(built)
    assert isinstance(typed.dataset, Dataset) and typed.dataset.n_captions == 60
    assert isinstance(typed.pairwise, Distribution) and typed.pairwise.mean == built["pairwise"]["mean"]
    assert typed.pairwise.quantiles["p50"] == built["pairwise"]["quantiles"]["p50"]
    assert [entry.batch_size for entry in typed.batches] == [8, 16]
    assert all(isinstance(entry, BatchStatistics) for entry in typed.batches)
    assert isinstance(typed.batches[0].hardest_in_batch, Distribution)
    assert typed.exact_duplicates.n_sets == built["exact_duplicates"]["n_sets"] == 10
    with pytest.raises(dataclasses.FrozenInstanceError):
        typed.pairwise.mean = 0.0
    with pytest.raises(TypeError):
        typed.pairwise.quantiles["p50"] = 0.0  # nested objects are read-only too
    assert typed.gamma is ABSENT and "gamma" not in typed.to_dict()


def test_fields_added_within_version_1_are_kept(built):
    data = json.loads(json.dumps(built))
    data["per_caption"] = {"caption_id": ["c0"]}
    data["pairwise"]["precision"] = "float64"
    typed = Profile.from_dict(data)
    assert typed.extra["per_caption"]["caption_id"] == ("c0",)
    assert typed.pairwise.extra["precision"] == "float64"
    assert typed.to_dict() == data


def test_a_gamma_only_profile_has_only_its_sections(saved):
    data = {key: saved[key] for key in ("schema", "dataset", "encoder", "gamma")}
    typed = Profile.from_dict(data)
    assert typed.pairwise is ABSENT and typed.batches is ABSENT and typed.gamma["suggested_gamma"] == \
        saved["gamma"]["suggested_gamma"]
    assert typed.to_dict() == data


@pytest.mark.parametrize("schema, message", [
    ("capgeo.profile/2", "profile schema 'capgeo.profile/2' is not supported"),
    ("capgeo.profile/x", "unreadable schema version"),
    ("something/1", "not a capgeo profile"),
])
def test_other_schemas_are_refused_in_one_line(tmp_path, built, schema, message):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**built, "schema": schema}), encoding="utf-8")
    with pytest.raises(CapgeoError, match=re.escape(message)) as caught:
        load_typed_profile(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_loading_a_saved_file_gives_the_same_objects(saved):
    assert load_typed_profile(SAVED) == Profile.from_dict(saved)


@pytest.mark.parametrize("section, heading, keys_of", [
    (Profile, "Top level", lambda p: [p]),
    (Dataset, "`dataset`", lambda p: [p["dataset"]]),
    (Lengths, "`lengths`", lambda p: [p["lengths"]]),
    (Distribution, "Distribution summaries", lambda p: [p["pairwise"], p["hardest_companion"]]),
    (ExactDuplicates, "`exact_duplicates`", lambda p: [p["exact_duplicates"]]),
    (NearDuplicates, "`near_duplicates`", lambda p: [p["near_duplicates"]]),
    (BatchStatistics, "`batches`", lambda p: p["batches"]),
], ids=lambda value: value.__name__ if isinstance(value, type) else None)
def test_typed_fields_and_real_keys_are_the_documented_ones(built, saved, section, heading, keys_of):
    documented = documented_keys(heading)
    assert declared(section) <= documented, sorted(declared(section) - documented)
    for profile in (built, saved, make_full_profile()):  # the report tests' fixture too: it must not drift
        for written in keys_of(profile):
            undocumented = set(written) - documented
            assert not undocumented, f"{heading}: written but not documented: {sorted(undocumented)}"


def test_report_fixture_has_the_real_quantile_keys(built):
    fixture = Profile.from_dict(make_full_profile())
    for name in ("pairwise", "hardest_companion"):
        assert list(getattr(fixture, name).quantiles) == list(built[name]["quantiles"])


def test_frozen_lists_take_their_shortcuts_and_freeze_what_the_recursion_would():
    import types as _types

    from capgeo.geometry.typed_profile import _frozen

    def reference(value):
        if isinstance(value, dict):
            return _types.MappingProxyType({key: reference(item) for key, item in value.items()})
        if isinstance(value, list):
            return tuple(reference(item) for item in value)
        return value

    cases = [[], [1, 2.5, None, "x"], [[1, 2], [], [3.0]], [[1, [2]], [3]], [[{"a": [1]}], [2]],
             [{"a": [1, 2]}, 3], [[1, 2], "not a list"], {"top_ids": [["c1", "c2"], ["c3"]], "n": 2}]
    for value in cases:
        frozen = _frozen(value)
        assert frozen == reference(value)
        # nothing mutable is left anywhere inside
        stack = [frozen]
        while stack:
            item = stack.pop()
            assert not isinstance(item, (list, dict))
            if isinstance(item, (tuple, _types.MappingProxyType)):
                stack.extend(item.values() if isinstance(item, _types.MappingProxyType) else item)
