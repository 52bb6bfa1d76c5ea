"""The typed profile: a real profile round-trips through the frozen objects unchanged, its fields are
the ones docs/profile-schema.md documents, and other schema versions are refused in one line."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import types as types_module
import re
from pathlib import Path

import numpy as np
import pytest

from capgeo.errors import CapgeoError
from capgeo.geometry import build_profile
from capgeo.geometry.typed_profile import (
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
    return {item.name for item in dataclasses.fields(section)} - {"extra", "nulls", "order"}


@pytest.fixture(scope="module")
def built() -> dict:
    rng = np.random.default_rng(3)
    groups = np.arange(60) // 2
    captions = caption_set([f"caption {i % 50}" for i in range(60)], groups)  # some exact duplicates
    embeddings = fake_embeddings(rng.normal(size=(60, 12)), token_counts=rng.integers(5, 120, size=60))
    profile = build_profile(captions, embeddings, batch_sizes=(8, 16), n_batches=4, relative_buckets=True,
                            progress=False).to_dict()
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
    assert typed.gamma is None and "gamma" not in typed.to_dict()


def test_fields_added_within_version_1_are_kept(built):
    data = json.loads(json.dumps(built))
    data["per_caption"] = {"caption_id": ["c0"]}
    data["pairwise"]["added_later"] = "float64"
    typed = Profile.from_dict(data)
    assert typed.extra["per_caption"]["caption_id"] == ("c0",)
    assert typed.pairwise.extra["added_later"] == "float64"
    assert typed.to_dict() == data


def test_a_gamma_only_profile_has_only_its_sections(saved):
    data = {key: saved[key] for key in ("schema", "dataset", "encoder", "gamma")}
    typed = Profile.from_dict(data)
    assert typed.pairwise is None and typed.batches is None and typed.gamma.suggested_gamma == \
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

    from capgeo.geometry.typed_profile import _frozen, _plain

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
        assert _plain(frozen) == value and type(_plain(frozen)) is type(value)  # and back, by the shortcuts too
        # nothing mutable is left anywhere inside
        stack = [frozen]
        while stack:
            item = stack.pop()
            assert not isinstance(item, (list, dict))
            if isinstance(item, (tuple, _types.MappingProxyType)):
                stack.extend(item.values() if isinstance(item, _types.MappingProxyType) else item)


# --------------------------------------------------------------------------- explicit classes, saved profiles

from capgeo.geometry import typed_profile  # noqa: E402

SAVED_PROFILES = sorted((ROOT / "reports").glob("*.profile.json"))


@pytest.mark.parametrize("path", SAVED_PROFILES, ids=[path.name for path in SAVED_PROFILES])
def test_every_saved_profile_round_trips_byte_for_byte(path):
    """reports/ holds profiles saved by earlier versions: they load, and write back the same JSON,
    key order included (so a profile written from a Profile is the file a dict gave)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    typed = Profile.from_dict(data, str(path))
    assert typed.to_dict() == data
    assert json.dumps(typed.to_dict(), indent=2) == json.dumps(data, indent=2)
    # every section the file has is typed, down to the rows of gamma, dupes and truncation
    assert isinstance(typed.gamma.batches[0], typed_profile.GammaBatch)
    assert isinstance(typed.gamma.batches[0].suggestion, typed_profile.GammaSuggestion)
    assert typed.gamma.headline.suggestion.gamma == data["gamma"]["batches"][0]["suggestion"]["gamma"]
    assert isinstance(typed.dupes.pairs[0], typed_profile.DupesPair)
    assert typed.dupes.pairs[0].cosine == data["dupes"]["pairs"][0]["cosine"]
    assert isinstance(typed.companions, typed_profile.Companions)
    assert typed.companions.caption_id == tuple(data["companions"]["caption_id"])
    assert typed.map.x == tuple(data["map"]["x"])
    assert typed.options.headline_batch_size == data["options"]["headline_batch_size"]
    if "truncation" in data:
        entry = typed.truncation.per_length[0]
        assert isinstance(entry, typed_profile.TruncationLength)
        assert entry.pairwise.mean == data["truncation"]["per_length"][0]["pairwise"]["mean"]
        assert entry.near_duplicates.n_pairs == data["truncation"]["per_length"][0]["near_duplicates"]["n_pairs"]


def test_fixture_profiles_round_trip(built):
    """Every profile the test fixtures build: the report tests' full one, one without companion lists,
    one with one caption per image (within_group null), and gamma- and truncation-only files."""
    rng = np.random.default_rng(5)
    groups = np.arange(30)
    captions = caption_set([f"caption {i}" for i in range(30)], groups)
    embeddings = fake_embeddings(rng.normal(size=(30, 8)), token_counts=rng.integers(5, 90, size=30))
    single = json.loads(json.dumps(build_profile(captions, embeddings, batch_sizes=(8,), n_batches=2, progress=False,
                                                 companion_lists=False).to_dict()))
    assert single["within_group"] is None and single["companions"] is None
    saved = json.loads(SAVED.read_text(encoding="utf-8"))
    gamma_only = {key: saved[key] for key in ("schema", "dataset", "encoder", "gamma", "options", "provenance")}
    truncation_only = {key: saved[key] for key in ("schema", "dataset", "encoder", "truncation", "provenance")}
    for data in (built, single, json.loads(json.dumps(make_full_profile())), gamma_only, truncation_only):
        assert Profile.from_dict(data).to_dict() == data


def test_null_and_absent_differ_where_the_schema_allows_both(built):
    """within_group is null for one caption per image, absent from a gamma-only file: ``nulls`` says which."""
    written_null = Profile.from_dict({**built, "within_group": None})
    left_out = Profile.from_dict({key: value for key, value in built.items() if key != "within_group"})
    assert written_null.within_group is None and left_out.within_group is None
    assert written_null.written_null("within_group") and not left_out.written_null("within_group")
    assert written_null.to_dict()["within_group"] is None and "within_group" not in left_out.to_dict()
    dataset = Profile.from_dict({**built, "dataset": {**built["dataset"], "fingerprint": None}}).dataset
    assert dataset.fingerprint is None and "fingerprint" in dataset.nulls
    assert "fingerprint" in dataset.to_dict() and dataset.to_dict()["fingerprint"] is None


def _classes():
    return [value for value in vars(typed_profile).values()
            if isinstance(value, type) and dataclasses.is_dataclass(value) and value.__module__ == typed_profile.__name__
            and not value.__name__.startswith("_")]


def test_profile_and_every_section_are_frozen(built):
    typed = Profile.from_dict(built)
    for kind in _classes():
        assert kind.__dataclass_params__.frozen, kind.__name__
    with pytest.raises(dataclasses.FrozenInstanceError):
        typed.gamma = None
    with pytest.raises(dataclasses.FrozenInstanceError):
        typed.batches[0].buckets.shares = ()
    with pytest.raises(TypeError):
        typed.batches[0].buckets.shares[0] = 1.0   # tuples
    with pytest.raises(TypeError):
        typed.pairwise.quantiles["p50"] = 0.0   # read-only mappings
    # sections are attached by replacing, never by editing: the original is unchanged
    with_gamma = dataclasses.replace(typed, gamma=typed_profile.Gamma(suggested_gamma=0.5))
    assert typed.gamma is None and with_gamma.gamma.suggested_gamma == 0.5


def _sample(kind, read) -> object:
    """A JSON value for a field of codec reader ``read`` (typed_profile._codec) and annotation ``kind``."""
    if read is None:
        return {"str": "x", "int": 3, "float": 0.5, "bool": True}.get(kind.split(" | ")[0], "x")
    if getattr(read, "__self__", None) is not None:   # a section class's from_dict
        return {}
    if read is typed_profile._frozen:
        return {"k": [1, [2, 3]], "n": None} if kind.startswith("Mapping") else [1, [2, 3], "x"]
    return [{}, {}]   # a list of sections


def test_every_class_round_trips_through_the_generic_codec():
    """One codec for every class, from its fields: each declared key reads into its field (a section
    into its class, a list of them into a tuple of it) and writes back byte for byte with the keys
    written as null, the undeclared keys and the order they came in."""
    for kind in _classes():
        assert "from_dict" not in vars(kind) or kind is Profile, kind.__name__   # Profile's checks, then the codec's
        assert "to_dict" not in vars(kind) and not hasattr(kind, "KEYS"), kind.__name__
        fields, keys = typed_profile._codec(kind)
        declared = [item for item in dataclasses.fields(kind) if item.name not in ("nulls", "extra", "order")]
        assert [name for name, *_ in fields] == [item.name for item in declared]
        assert keys == {item.name for item in declared}
        types = {item.name: item.type for item in declared}
        data = {name: _sample(types[name], read) for name, _, read, _ in fields}
        data = {"a later key": {"x": [1]}, **dict(reversed(data.items())), "written null": None}
        if kind is Profile:
            data.update(schema="capgeo.profile/1", dataset={}, encoder={})
        typed = kind.from_dict(data)
        written = typed.to_dict()
        assert written == data and list(written) == list(data), kind.__name__
        assert json.dumps(written) == json.dumps(data)
        assert set(typed.extra) == {"a later key", "written null"} and "written null" in typed.nulls
        for name, _, read, write in fields:
            value = getattr(typed, name)
            if getattr(read, "__self__", None) is not None:
                assert isinstance(value, read.__self__), (kind.__name__, name)
            elif write is typed_profile._write_many:
                assert isinstance(value, tuple) and all(isinstance(item, typed_profile._Section) for item in value)
            elif read is typed_profile._frozen:
                assert isinstance(value, (tuple, types_module.MappingProxyType)), (kind.__name__, name)
        # absent stays absent and null stays null, field by field
        empty = {key: None for _, key, _, _ in fields}
        read = functools.partial(Profile.from_dict, check=False) if kind is Profile else kind.from_dict
        assert read(empty).to_dict() == empty and read({}).to_dict() == {}


@typed_profile._section
class Part(typed_profile._Section):
    label: str | None = None
    weights: tuple[float, ...] | None = None


@typed_profile._section
class Whole(typed_profile._Section):
    name: str | None = None
    main: Part | None = None
    parts: tuple[Part, ...] | None = None
    notes: dict | None = None
    kind_of: str | None = dataclasses.field(default=None, metadata={"key": "kind-of"})
    required: tuple[Part, ...] = ()   # not optional: still a list of sections


def test_a_new_section_with_only_its_fields_declared_reads_and_writes_itself():
    """A section class needs nothing but its fields: nested sections, lists of them, read-only JSON
    values, and a JSON key other than the field's name (field metadata ``key``)."""
    data = {"name": "w", "main": {"label": "m", "weights": [0.5, 1.0]}, "parts": [{"label": "a"}, {"weights": []}],
            "notes": {"k": [1, {"x": None}]}, "kind-of": "thing", "required": [{"label": "r"}], "later": [[1]],
            "gone": None}
    whole = Whole.from_dict(data)
    assert whole.main == Part(label="m", weights=(0.5, 1.0)) and whole.parts == (Part(label="a"), Part(weights=()))
    assert whole.required == (Part(label="r"),)
    assert whole.kind_of == "thing" and whole.notes["k"][1]["x"] is None and whole.extra["later"] == ((1,),)
    assert whole.nulls == {"gone"}
    assert whole.to_dict() == data and list(whole.to_dict()) == list(data)
    with pytest.raises(TypeError):
        whole.notes["k"] = 2   # read-only
    made = Whole(name="n", parts=(Part(label="p"),), kind_of="k")   # made in code: declared order, no Nones
    assert made.to_dict() == {"name": "n", "parts": [{"label": "p"}], "kind-of": "k", "required": []}
    assert Whole(name="n", nulls=frozenset({"main"})).to_dict() == {"name": "n", "main": None, "required": []}


def test_the_codec_is_worked_out_once_a_class():
    typed_profile._codec.cache_clear()
    Profile.from_dict(json.loads(SAVED.read_text(encoding="utf-8")))
    calls = typed_profile._codec.cache_info()
    Profile.from_dict(json.loads(SAVED.read_text(encoding="utf-8"))).to_dict()
    again = typed_profile._codec.cache_info()
    assert again.misses == calls.misses and again.hits > calls.hits


def _generated_twin(kind: type) -> type:
    """``kind``'s fields in a class that ``@dataclass(frozen=True)`` gives every method of its own."""
    fields = [(item.name, item.type, dataclasses.field(default=item.default, default_factory=item.default_factory,
                                                      repr=item.repr, compare=item.compare, kw_only=item.kw_only))
              for item in dataclasses.fields(kind)]
    twin = dataclasses.make_dataclass(kind.__name__, fields, frozen=True)
    twin.__qualname__ = kind.__qualname__
    return twin


def test_shared_eq_hash_and_repr_are_the_generated_ones(built):
    """The sections share _Section's __eq__/__hash__/__repr__ instead of generating their own:
    each gives what @dataclass(frozen=True) generates for the same fields."""
    typed = Profile.from_dict(built)
    examples = [typed, typed.dataset, typed.pairwise, typed.pairwise.histogram, typed.batches[0],
                typed.options, typed.lengths]
    for section in examples:
        twin = _generated_twin(type(section))
        values = {item.name: getattr(section, item.name) for item in dataclasses.fields(section)}
        assert repr(section) == repr(twin(**values)), type(section).__name__
        reordered = dataclasses.replace(section, order=tuple(reversed(section.order)))
        assert section == reordered and twin(**values) == twin(**{**values, "order": reordered.order})
        shown = next(item.name for item in dataclasses.fields(section) if item.repr)
        changed = dataclasses.replace(section, **{shown: "changed"})
        assert (section == changed) is (twin(**values) == twin(**{**values, shown: "changed"})) is False
        assert section.__eq__(values) is NotImplemented and twin(**values).__eq__(values) is NotImplemented
        assert section != _generated_twin(type(section))(**values)
        subclass = typed_profile._section(type("Subclass", (type(section),), {}))
        assert section != subclass(**values) and subclass(**values) == subclass(**values)   # only its own class
    hashable = {"edges": (0.0, 1.0), "counts": (3,), "nulls": frozenset({"start"}), "extra": ()}
    assert hash(typed_profile.Histogram(**hashable)) == hash(_generated_twin(typed_profile.Histogram)(**hashable))
    with pytest.raises(TypeError, match="unhashable type: 'mappingproxy'"):
        hash(typed.dataset)   # as the generated __hash__: the read-only extra mapping cannot be hashed
    with pytest.raises(TypeError, match="unhashable type: 'mappingproxy'"):
        hash(_generated_twin(Dataset)(**{item.name: getattr(typed.dataset, item.name)
                                          for item in dataclasses.fields(typed.dataset)}))


# --------------------------------------------------------------------------- methods: each delegates to its writer

def test_to_json_writes_what_the_profile_command_writes(built, tmp_path):
    from capgeo.cli.options import print_json
    from capgeo.report.build import save_profile

    typed = Profile.from_dict(built)
    typed.to_json(tmp_path / "typed.json")
    print_json(built, str(tmp_path / "command.json"))   # `capgeo profile --json`'s writer
    save_profile(typed, tmp_path / "report.json")       # `capgeo report --save-profile`'s
    assert (tmp_path / "typed.json").read_bytes() == (tmp_path / "command.json").read_bytes()
    assert json.loads((tmp_path / "report.json").read_text(encoding="utf-8")) == built


def test_to_html_draws_the_report_of_the_dict(built, tmp_path, monkeypatch):
    from capgeo.report import single
    from capgeo.report.build import build_report

    monkeypatch.setattr(single, "now_utc", lambda: "2026-01-01T00:00:00Z")
    Profile.from_dict(built).to_html(tmp_path / "typed.html")
    # a profile read from a dict holds no captions: the page says what it lacks and the call that adds it
    lacks = [f"{name}: this profile has no {key} section; capgeo.profile(DATA).to_html(...) adds it, as "
             "`capgeo report DATA` does." for name, key in (("Near-duplicate gallery", "dupes"),
                                                            ("Gamma diagnostics", "gamma"), ("Caption map", "map"))]
    build_report(Profile.from_dict(built), tmp_path / "plain.html", notes=lacks)
    page = (tmp_path / "typed.html").read_text(encoding="utf-8")
    assert page == (tmp_path / "plain.html").read_text(encoding="utf-8") and "<html" in page


def test_summary_is_the_profile_commands_terminal_text(built):
    from capgeo.terminal.profile import print_profile
    from capgeo.terminal import console

    out = console(record=True, width=100, force_terminal=False, color_system=None)
    with out.capture() as captured:
        print_profile(Profile.from_dict(built), out)
    text = Profile.from_dict(built).summary()
    assert text == captured.get() and "Caption cosines" in text and "Verdict:" in text


def test_per_caption_rows_as_a_frame_or_a_clear_error():
    from capgeo.findings.per_caption import COLUMNS, profile_rows

    rng = np.random.default_rng(8)
    groups = np.arange(40) // 2
    captions = caption_set([f"caption {i % 30}" for i in range(40)], groups)
    embeddings = fake_embeddings(rng.normal(size=(40, 8)), token_counts=rng.integers(5, 90, size=40))
    data = json.loads(json.dumps(build_profile(captions, embeddings, batch_sizes=(8,), n_batches=2, progress=False).to_dict()))
    frame = Profile.from_dict(data).per_caption(captions, embeddings)
    assert tuple(frame.columns) == COLUMNS and frame.height == 40
    assert frame.to_dicts() == profile_rows(captions, embeddings, data)
    assert frame["exact_duplicate_of"].null_count() < 40   # "caption i % 30" repeats
    without = json.loads(json.dumps(build_profile(captions, embeddings, batch_sizes=(8,), n_batches=2,
                                                  progress=False, companion_lists=False).to_dict()))
    with pytest.raises(CapgeoError, match="no per-caption companion lists"):
        Profile.from_dict(without).per_caption(captions, embeddings)


def test_dupes_declares_the_skipped_copies_and_the_dedup_and_the_text_reads_them():
    """`dupes --skip-exact` and `dupes-sets --keep` sections read into declared fields (nothing left in
    ``extra``), round trip, and print the same text computed and read back from JSON."""
    import numpy as np
    from rich.console import Console

    from capgeo.findings.duplicates import pairs_section, sets_section
    from capgeo.geometry.typed_profile import Dupes
    from capgeo.terminal.dupes import render

    from _action_fixtures import caption_set, unit

    rng = np.random.default_rng(5)
    centres = rng.normal(size=(8, 12))
    vectors = unit(np.repeat(centres, 2, axis=0) + 0.05 * rng.normal(size=(16, 12)))
    texts = [f"a photo of thing {i // 2}" for i in range(16)]  # each pair of images: one text twice
    captions = caption_set([f"g{i}" for i in range(16)], texts=texts)
    computed_pairs = pairs_section(captions, vectors, top=5, skip_exact=True)
    computed_sets = sets_section(captions, vectors, threshold=0.9, keep="longest")
    pairs, sets = computed_pairs.to_dict(), computed_sets.to_dict()
    assert pairs["n_exact_skipped"] == 8 and sets["dedup"]["n_captions_dropped"] == 8  # brute force: 8 twin pairs
    for computed, section in ((computed_pairs, pairs), (computed_sets, sets)):
        typed = Dupes.from_dict(section)
        assert not typed.extra and typed.to_dict() == section
        texts_printed = []
        for source in (computed, typed):
            console = Console(record=True, width=100, color_system=None)
            with console.capture():
                render(source, console)
            texts_printed.append(console.export_text())
        assert texts_printed[0] == texts_printed[1]
    assert Dupes.from_dict(pairs).n_exact_skipped == 8
    assert Dupes.from_dict(sets).dedup.keep == "longest"
