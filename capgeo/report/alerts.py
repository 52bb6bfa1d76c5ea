"""Plain-words alerts about what in a profile needs attention before training.

Each rule reads one section of the profile (docs/profile-schema.md) and fires
when a documented threshold is crossed. Thresholds are module constants so a
test can check each rule on both sides of its edge. A missing section simply
yields no alert from the rules that need it.

Rules and why
-------------
- ``encoder_caution``: the profile has a gamma section and its encoder is not a CLIP text
  tower (the embedded default, or precomputed vectors of unknown origin) -> warning, first
  on the page: the gamma is for that encoder's geometry, and the line says how to get the
  real one (capgeo.findings.encoder_caution words it).
- ``truncation``: a share of captions >= TRUNCATED_WARNING (0.5) is longer than the
  encoder's context and is cut -> warning ("most captions are truncated"); a share
  >= TRUNCATED_NOTICE (0.05) -> notice. Cut text is invisible to the model, so
  captions that differ only after the cut look identical.
- ``exact_duplicates``: exact duplicates across different images are false negatives
  in a batch. Warning when the recurrences of a text in another image (n_redundant_cross_group)
  reach EXACT_DUPLICATE_WARNING (1%) of the caption count, or when there are
  >= EXACT_DUPLICATE_MIN_PAIRS (10) cross-group pairs; otherwise a notice for any
  cross-group pair. The message gives one number, the pairs across images: the count
  `capgeo dupes` heads its list with and the one a batch meets.
- ``near_twin_batches``: per batch size, the share of batches with at least one
  in-batch pair at cosine >= the near-duplicate threshold. >= NEAR_TWIN_WARNING (0.5)
  -> warning ("batches almost always contain a near-twin" when >= 0.9).
- ``hardest_bucket``: per batch size, the share of in-batch negatives in the top
  absolute bucket. >= HARDEST_BUCKET_WARNING (0.5) -> warning: most negatives are
  near-duplicates of the positive text, so plain InfoNCE saturates and HN-CLIP's
  gamma matters.
- ``crowded``: mean hardest-companion cosine >= CROWDED_HARDEST (0.9) -> notice: almost
  every caption has a near-twin in the dataset (HN-CLIP reports 0.92-0.94 for long-
  caption benchmarks under Long-CLIP-L).
- ``near_duplicate_captions``: share of captions whose hardest companion is above the
  near-duplicate threshold >= NEAR_DUPLICATE_CAPTIONS_WARNING (0.1) -> warning.
- ``sampled``: the pairwise statistics were estimated from sampled pairs -> notice.
- ``skipped``: rows were left out while loading -> notice with the count.

Each rule reads only its own section of a typed profile (capgeo.geometry.typed_profile; JSON is
read once where it arrives, ``Profile.from_dict``), so a partial profile gets the alerts its sections allow.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from capgeo.display import counted
from capgeo.findings.encoder_caution import encoder_caution
from capgeo.geometry.typed_profile import Profile

TRUNCATED_WARNING = 0.5
TRUNCATED_NOTICE = 0.05
EXACT_DUPLICATE_WARNING = 0.01
EXACT_DUPLICATE_MIN_PAIRS = 10
NEAR_TWIN_WARNING = 0.5
NEAR_TWIN_ALMOST_ALWAYS = 0.9
HARDEST_BUCKET_WARNING = 0.5
CROWDED_HARDEST = 0.9
NEAR_DUPLICATE_CAPTIONS_WARNING = 0.1

WARNING, NOTICE = "warning", "notice"


@dataclass(frozen=True)
class Alert:
    key: str       # which rule fired, e.g. "truncation"
    level: str     # "warning" | "notice"
    title: str     # one short line
    message: str   # one or two sentences of what it means and what to do

    def to_dict(self) -> dict:
        return asdict(self)


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%" if value < 0.995 or value == 1 else f"{100 * value:.2f}%"


def encoder_caution_alert(profile: Profile) -> Alert | None:
    if not profile.gamma:
        return None
    caution = encoder_caution(profile.encoder.to_dict() if profile.encoder else None)
    if caution is None:
        return None
    return Alert("encoder_caution", WARNING, "The suggested gamma rests on a different encoder than training's",
                 caution)


def truncation_alert(profile: Profile) -> Alert | None:
    lengths = profile.lengths
    share = lengths.share_truncated if lengths else None
    if share is None or not lengths.counted:
        return None
    limit = lengths.max_tokens or lengths.context_length
    cut = f"{lengths.n_truncated or 0:,} of {lengths.n or 0:,} captions ({_pct(share)})"
    if share >= TRUNCATED_WARNING:
        return Alert("truncation", WARNING, "Most captions are longer than the encoder's context and are cut",
                     f"{cut} exceed {limit} tokens; the encoder never sees their ends, so captions that differ only "
                     f"late in the text look alike. Consider a longer-context encoder (see `capgeo truncation`).")
    if share >= TRUNCATED_NOTICE:
        return Alert("truncation", NOTICE, "Some captions are cut by the encoder's context",
                     f"{cut} exceed {limit} tokens and are truncated when embedded.")
    return None


def exact_duplicate_alert(profile: Profile) -> Alert | None:
    duplicates = profile.exact_duplicates
    cross = (duplicates.n_pairs_cross_group if duplicates else None) or 0
    if not cross:
        return None
    n = (profile.dataset.n_captions if profile.dataset else None) or 0
    # repeats inside one image are positives and harmless: count only texts shared across images.
    # n_redundant_cross_group sums, over the repeated texts, the images beyond the first that hold
    # one: neither a count of captions nor of images (one image sharing five texts counts five), so
    # it decides the level and the message names one number only, the pairs
    redundant = duplicates.n_redundant_cross_group or 0
    share = redundant / n if n else 0.0
    detail = (f"{counted(cross, 'pair')} of identical captions {'describes' if cross == 1 else 'describe'} "
              f"different images. In a batch such a pair is a false negative: the loss pushes apart two "
              f"identical texts.")
    if share >= EXACT_DUPLICATE_WARNING or cross >= EXACT_DUPLICATE_MIN_PAIRS:
        return Alert("exact_duplicates", WARNING, "Many exact duplicate captions across images",
                     detail + " Deduplicate or group them before training (`capgeo dupes` lists them).")
    return Alert("exact_duplicates", NOTICE, "A few exact duplicate captions across images", detail)


def near_twin_batch_alerts(profile: Profile) -> list[Alert]:
    alerts = []
    for entry in profile.batches or ():
        near = entry.near_duplicate
        share = near.share_batches if near else None
        if share is None or share < NEAR_TWIN_WARNING:
            continue
        how_often = "almost always" if share >= NEAR_TWIN_ALMOST_ALWAYS else "often"
        alerts.append(Alert(
            "near_twin_batches", WARNING, f"Batches of {entry.batch_size} {how_often} contain a near-twin",
            f"{_pct(share)} of random batches of {entry.batch_size} hold at least one pair of captions of "
            f"different images with cosine >= {near.threshold}"
            f" ({near.mean_pairs_per_batch or 0:.2f} such pairs per batch on average). "
            f"The model must tell these apart from the text alone."))
    return alerts


def hardest_bucket_alerts(profile: Profile) -> list[Alert]:
    alerts = []
    for entry in profile.batches or ():
        buckets = entry.buckets
        shares, labels = (buckets.shares, buckets.labels) if buckets else (None, None)
        if not shares or not labels:
            continue
        if shares[-1] >= HARDEST_BUCKET_WARNING:
            alerts.append(Alert(
                "hardest_bucket", WARNING, f"Most in-batch negatives are in the hardest bucket at B={entry.batch_size}",
                f"{_pct(shares[-1])} of in-batch negatives have caption cosine {labels[-1]}. Plain contrastive loss "
                f"spreads its gradient over them almost evenly; HN-CLIP's gamma reweights them."))
    return alerts


def crowded_alert(profile: Profile) -> Alert | None:
    hardest = profile.hardest_companion
    mean = hardest.mean if hardest else None
    if mean is None or mean < CROWDED_HARDEST:
        return None
    return Alert("crowded", NOTICE, "Almost every caption has a near-twin",
                 f"The mean hardest-companion cosine is {mean:.3f} over N = {hardest.count or 0:,} captions "
                 f"(HN-CLIP reports 0.92-0.94 for long-caption benchmarks). It grows with N, so compare datasets "
                 f"at equal N.")


def near_duplicate_caption_alert(profile: Profile) -> Alert | None:
    near = profile.near_duplicates
    share = near.share_captions_hardest_above if near else None
    if share is None or share < NEAR_DUPLICATE_CAPTIONS_WARNING:
        return None
    n_captions = near.n_captions_hardest_above or 0
    return Alert("near_duplicate_captions", WARNING, "Many captions have a near-duplicate of another image",
                 f"{counted(n_captions, 'caption')} ({_pct(share)}) {'has' if n_captions == 1 else 'have'} a caption of another "
                 f"image at cosine >= {near.threshold}; `capgeo dupes` lists the pairs.")


def sampled_alert(profile: Profile) -> Alert | None:
    pairwise = profile.pairwise
    if pairwise is None or (pairwise.exact is not False and pairwise.mode != "sampled"):
        return None
    # not a schema field: no writer records it, so the line says "estimated" without a count
    sampled = pairwise.extra["n_sampled_pairs"] if "n_sampled_pairs" in pairwise.extra else None
    detail = f" from {sampled:,} sampled pairs" if sampled else ""
    return Alert("sampled", NOTICE, "Pairwise statistics are estimates",
                 f"The distribution of all pairwise cosines was estimated{detail}; hardest companions are exact "
                 f"unless stated otherwise.")


def skipped_alert(profile: Profile) -> Alert | None:
    dataset = profile.dataset
    skipped = (dataset.skipped if dataset else None) or ()
    total = sum(int(item["count"]) for item in skipped)
    if not total:
        return None
    reasons = "; ".join(f"{item['reason']} ({item['count']})" for item in skipped[:3])
    return Alert("skipped", NOTICE, f"{counted(total, 'row')} {'was' if total == 1 else 'were'} left out while loading",
                 reasons)


def alerts_for(profile: Profile) -> list[Alert]:
    """Every alert that fires for ``profile``, warnings first."""
    found: list[Alert] = []
    for rule in (encoder_caution_alert, truncation_alert, exact_duplicate_alert, near_duplicate_caption_alert, crowded_alert,
                 sampled_alert, skipped_alert):
        alert = rule(profile)
        if alert is not None:
            found.append(alert)
    found += near_twin_batch_alerts(profile) + hardest_bucket_alerts(profile)
    return sorted(found, key=lambda alert: alert.level != WARNING)
