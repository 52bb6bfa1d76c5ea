"""Each alert fires on one side of its documented threshold and not on the other."""

from __future__ import annotations

import copy

import pytest

from _report_fixtures import make_profile
from capgeo.geometry.typed_profile import Profile
from capgeo.report import alerts


def alerts_for(profile: dict) -> list:
    """The alerts of a (partial) profile built here as its JSON object, read as the typed profile."""
    return alerts.alerts_for(Profile.from_dict(profile, check=False))


def exact_duplicate_alert(profile: dict):
    return alerts.exact_duplicate_alert(Profile.from_dict(profile, check=False))


@pytest.fixture(scope="module")
def base():
    profile, _ = make_profile()
    return profile


def keys(profile) -> set[str]:
    return {alert.key for alert in alerts_for(profile)}


def levels(profile, key) -> list[str]:
    return [alert.level for alert in alerts_for(profile) if alert.key == key]


def with_truncation(base, share):
    profile = copy.deepcopy(base)
    n = profile["lengths"]["n"]
    profile["lengths"]["n_truncated"] = round(share * n)
    profile["lengths"]["share_truncated"] = share
    return profile


def test_truncation_thresholds(base):
    assert levels(with_truncation(base, alerts.TRUNCATED_WARNING), "truncation") == ["warning"]
    assert levels(with_truncation(base, alerts.TRUNCATED_WARNING - 0.01), "truncation") == ["notice"]
    assert levels(with_truncation(base, alerts.TRUNCATED_NOTICE - 0.01), "truncation") == []
    message = next(a.message for a in alerts_for(with_truncation(base, 0.945)) if a.key == "truncation")
    assert "94.5%" in message and "77 tokens" in message


def with_exact(base, cross_pairs, redundant):
    profile = copy.deepcopy(base)
    profile["exact_duplicates"].update(n_pairs_cross_group=cross_pairs, n_redundant_cross_group=redundant)
    return profile


def test_exact_duplicate_thresholds(base):
    n = base["dataset"]["n_captions"]
    assert levels(with_exact(base, 0, 0), "exact_duplicates") == []
    assert levels(with_exact(base, 1, 0), "exact_duplicates") == ["notice"]
    many = int(alerts.EXACT_DUPLICATE_WARNING * n) + 1
    assert levels(with_exact(base, 1, many), "exact_duplicates") == ["warning"]
    # n_redundant_cross_group (recurrences of a text across images, neither captions nor images) sets
    # the level; the message names one number, the pairs, in the singular for one
    alert = exact_duplicate_alert(with_exact(base, 1, many))
    assert alert.message.startswith("1 pair of identical captions describes different images.")
    assert f"{many:,}" not in alert.message.replace("1 pair", "")
    alert = exact_duplicate_alert(with_exact(base, 1_234, many))
    assert alert.message.startswith("1,234 pairs of identical captions describe different images.")
    assert levels(with_exact(base, alerts.EXACT_DUPLICATE_MIN_PAIRS, 0), "exact_duplicates") == ["warning"]
    assert levels(with_exact(base, alerts.EXACT_DUPLICATE_MIN_PAIRS - 1, 0), "exact_duplicates") == ["notice"]


def test_repeats_inside_one_image_do_not_count_as_duplicates_across_images():
    """150 images each with two identical captions and one text shared by two images: a notice, not a warning."""
    from capgeo.captions.exact_duplicates import find_exact_duplicates

    texts = [f"caption of image {i}" for i in range(150) for _ in range(2)] + ["a shared text", "A shared  text"]
    groups = [f"img{i}" for i in range(150) for _ in range(2)] + ["img150", "img151"]
    section = find_exact_duplicates(texts, [f"c{i}" for i in range(len(texts))], groups)
    assert section["n_pairs_within_group"] == 150 and section["n_pairs_cross_group"] == 1
    assert section["n_redundant_cross_group"] == 1
    profile, _ = make_profile()
    profile["dataset"]["n_captions"] = len(texts)
    profile["exact_duplicates"] = section
    assert levels(profile, "exact_duplicates") == ["notice"]


def with_near_twin(base, share):
    profile = copy.deepcopy(base)
    for entry in profile["batches"]:
        entry["near_duplicate"]["share_batches"] = share
    return profile


def test_near_twin_batches(base):
    fired = [a for a in alerts_for(with_near_twin(base, 0.95)) if a.key == "near_twin_batches"]
    assert len(fired) == len(base["batches"]) and all("almost always" in a.title for a in fired)
    assert all("often" in a.title and "almost" not in a.title
               for a in alerts_for(with_near_twin(base, alerts.NEAR_TWIN_WARNING)) if a.key == "near_twin_batches")
    assert "near_twin_batches" not in keys(with_near_twin(base, alerts.NEAR_TWIN_WARNING - 0.01))


def test_hardest_bucket(base):
    profile = copy.deepcopy(base)
    profile["batches"][0]["buckets"]["shares"] = [0.1, 0.1, 0.2, 0.6]
    fired = [a for a in alerts_for(profile) if a.key == "hardest_bucket"]
    assert len(fired) == 1 and "60.0%" in fired[0].message and ">=0.9" in fired[0].message
    profile["batches"][0]["buckets"]["shares"] = [0.2, 0.2, 0.2, 0.4]
    assert "hardest_bucket" not in keys(profile)


def test_crowded_and_near_duplicate_captions(base):
    profile = copy.deepcopy(base)
    profile["hardest_companion"]["mean"] = alerts.CROWDED_HARDEST
    profile["near_duplicates"]["share_captions_hardest_above"] = alerts.NEAR_DUPLICATE_CAPTIONS_WARNING
    assert {"crowded", "near_duplicate_captions"} <= keys(profile)
    profile["hardest_companion"]["mean"] = alerts.CROWDED_HARDEST - 0.001
    profile["near_duplicates"]["share_captions_hardest_above"] = alerts.NEAR_DUPLICATE_CAPTIONS_WARNING - 0.001
    assert not {"crowded", "near_duplicate_captions"} & keys(profile)


def test_sampled_and_skipped(base):
    profile = copy.deepcopy(base)
    assert not {"sampled", "skipped"} & keys(profile)
    profile["pairwise"]["exact"] = False
    profile["pairwise"]["n_sampled_pairs"] = 1_000_000
    profile["dataset"]["skipped"] = [{"reason": "empty caption", "count": 3, "examples": ["line 4"]}]
    assert {"sampled", "skipped"} <= keys(profile)


def test_warnings_come_first_and_missing_sections_give_no_alert(base):
    profile = with_truncation(with_exact(base, 1, 0), 0.9)
    found = alerts_for(profile)
    assert [a.level for a in found] == sorted((a.level for a in found), key=lambda level: level != "warning")
    assert alerts_for({"schema": "capgeo.profile/1"}) == []


@pytest.mark.parametrize("encoder, fires", [
    ({"spec": "minilm", "kind": "sentence-transformers", "name": "all-MiniLM-L6-v2"}, "all-MiniLM-L6-v2's geometry"),
    ({"spec": "emb.npy", "kind": "precomputed", "name": "emb.npy"}, "unknown origin (emb.npy)"),
    ({"spec": "longclip-L", "kind": "longclip", "name": "LongCLIP-L"}, None),
    ({"spec": "ViT-B-32@ft.pt", "kind": "open_clip", "name": "ViT-B-32"}, None),
])
def test_encoder_caution_is_the_first_alert_whenever_a_gamma_rests_on_another_encoder(base, encoder, fires):
    profile = with_truncation(copy.deepcopy(base), 0.9)   # another warning, to check the order
    profile["gamma"] = profile.get("gamma") or {"suggested_gamma": 0.3}
    profile["encoder"] = encoder
    found = alerts_for(profile)
    if fires is None:
        assert "encoder_caution" not in {a.key for a in found}
        return
    assert found[0].key == "encoder_caution" and found[0].level == "warning"
    assert fires in found[0].message and "--encoder longclip-L" in found[0].message
    assert "MODEL@your-checkpoint.pt" in found[0].message
    del profile["gamma"]   # no gamma shown, nothing to caution about
    assert "encoder_caution" not in keys(profile)
