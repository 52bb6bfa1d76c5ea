"""A realistic profile dict for the report tests, computed by brute force.

Follows docs/profile-schema.md: every statistic is computed here with plain
numpy from small clustered embeddings, so the report tests run before (and
independently of) the geometry engine. End-to-end tests use the real pipeline.
"""

from __future__ import annotations

import numpy as np

from capgeo.geometry.distribution import QUANTILE_PERCENTS

NASTY_CAPTIONS = [
    'A <script>document.title="pwned"</script> sign & a "quoted" \'word\' on a wall '
    '<img src=x onerror="document.title=\'pwned\'"> &amp; &lt;b&gt;',
    "Un café près de la Tour Eiffel, avec des chaises rouges",
    "東京の夜の通りに赤い提灯が並んでいる",
    "Улица с красными фонарями ночью",
    "शाम को बाज़ार में लाल लालटेनें",
    "مصابيح حمراء في شارع ليلي",
]


def _summary(values: np.ndarray, bins: int = 2000) -> dict:
    edges = np.linspace(-1.0, 1.0, bins + 1)
    counts, _ = np.histogram(np.clip(values, -1, 1), bins=edges)
    quantile_levels = {f"p{level}": level for level in QUANTILE_PERCENTS}  # the profile's p1..p99
    return {
        "count": int(values.size), "mean": float(values.mean()), "std": float(values.std()),
        "min": float(values.min()), "max": float(values.max()),
        "quantiles": {key: float(np.percentile(values, level)) for key, level in quantile_levels.items()},
        "histogram": {"edges": edges.tolist(), "counts": counts.tolist()},
        "bin_width": 2.0 / bins, "exact": True,
    }


def make_texts(n: int, rng: np.random.Generator, long_every: int = 7) -> list[str]:
    words = ("red dog cat table window street light tree car woman man child wooden blue green large small "
             "stone river bridge sky cloud building lamp chair").split()
    texts = []
    for i in range(n):
        if i < len(NASTY_CAPTIONS):
            texts.append(NASTY_CAPTIONS[i])
            continue
        length = 320 if i % long_every == 0 else int(rng.integers(8, 30))
        texts.append(" ".join(rng.choice(words, size=length)).capitalize() + ".")
    return texts


def make_profile(n_groups: int = 40, per_group: int = 2, width: int = 16, seed: int = 0,
                 batch_sizes=(8, 16), context_length: int = 77, source: str = "data/fixture.jsonl") -> dict:
    rng = np.random.default_rng(seed)
    n = n_groups * per_group
    groups = np.repeat(np.arange(n_groups), per_group)
    # clustered unit vectors: a shared direction makes cosines high, like real caption sets
    base = rng.normal(size=width)
    centres = base + 0.6 * rng.normal(size=(n_groups, width))
    vectors = centres[groups] + 0.25 * rng.normal(size=(n, width))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    similarity = vectors @ vectors.T
    upper = np.triu_indices(n, k=1)
    same = groups[upper[0]] == groups[upper[1]]
    negatives = similarity[upper][~same]
    positives = similarity[upper][same]
    masked = np.where(groups[:, None] == groups[None, :], -np.inf, similarity)
    hardest_index = masked.argmax(axis=1)
    hardest_cosine = masked.max(axis=1)

    texts = make_texts(n, rng)
    token_counts = np.array([len(t.split()) + 2 for t in texts])
    length_edges = np.arange(0, token_counts.max() + 9, 8)
    length_counts, _ = np.histogram(token_counts, bins=length_edges)
    ids = [f"cap{i:03d}" for i in range(n)]
    group_ids = [f"img{g:03d}" for g in groups]
    threshold = 0.95

    batches = []
    for batch_size in batch_sizes:
        order = [rng.choice(n_groups, size=batch_size, replace=False) for _ in range(20)]
        rows = [np.array([g * per_group + rng.integers(per_group) for g in picked]) for picked in order]
        edges = [0.7, 0.8, 0.9]
        all_values, hardest_rows, near_flags, near_pairs = [], [], [], []
        for index in rows:
            block = similarity[np.ix_(index, index)]
            off = block[~np.eye(batch_size, dtype=bool)]
            all_values.append(off)
            hardest_rows.append(np.where(np.eye(batch_size, dtype=bool), -np.inf, block).max(axis=1))
            pairs = block[np.triu_indices(batch_size, k=1)]
            near_flags.append(bool((pairs >= threshold).any()))
            near_pairs.append(int((pairs >= threshold).sum()))
        values = np.concatenate(all_values)
        bucket_index = np.searchsorted(edges, values, side="right")
        shares = np.bincount(bucket_index, minlength=len(edges) + 1) / values.size
        share_above = [float((values >= e).mean()) for e in edges]
        hardest_all = np.concatenate(hardest_rows)
        example = similarity[np.ix_(rows[0], rows[0])].round(4).tolist()
        for i in range(batch_size):
            example[i][i] = None
        batches.append({
            "batch_size": batch_size, "n_batches": len(rows), "seed": seed, "negatives_per_row": batch_size - 1,
            "buckets": {"kind": "absolute", "edges": edges, "quantile_levels": None,
                        "labels": ["<0.7", "0.7-0.8", "0.8-0.9", ">=0.9"], "shares": shares.tolist(),
                        "share_above": share_above,
                        "expected_above_per_row": [s * (batch_size - 1) for s in share_above]},
            "relative_buckets": None,
            "hardest_in_batch": _summary(hardest_all),
            "near_duplicate": {"threshold": threshold, "share_batches": float(np.mean(near_flags)),
                               "mean_pairs_per_batch": float(np.mean(near_pairs))},
            "example": {"caption_ids": [ids[i] for i in rows[0]], "group_ids": [group_ids[i] for i in rows[0]],
                        "cosine": example},
        })

    n_truncated = int((token_counts > context_length).sum())
    hardest_summary = _summary(hardest_cosine)
    hardest_summary["n_captions"] = n
    profile = {
        "schema": "capgeo.profile/1",
        "dataset": {"source": source, "format": "jsonl", "fingerprint": "ab" * 32, "texts_digest": "cd" * 32,
                    "n_captions": n, "n_groups": n_groups,
                    "captions_per_group": {"min": per_group, "max": per_group, "mean": float(per_group)},
                    "skipped": []},
        "encoder": {"spec": "minilm", "kind": "sentence-transformers", "name": "all-MiniLM-L6-v2", "width": width,
                    "context_length": context_length, "logit_scale": None, "fingerprint": "ef" * 32},
        "lengths": {"n": n, "mean": float(token_counts.mean()), "median": float(np.median(token_counts)),
                    "p95": float(np.percentile(token_counts, 95)), "p99": float(np.percentile(token_counts, 99)),
                    "min": int(token_counts.min()), "max": int(token_counts.max()),
                    "context_length": context_length, "max_tokens": context_length, "n_truncated": n_truncated,
                    "share_truncated": n_truncated / n,
                    "histogram": {"edges": length_edges.tolist(), "counts": length_counts.tolist()}},
        "pairwise": _summary(negatives),
        "within_group": _summary(positives) if positives.size else None,
        "hardest_companion": hardest_summary,
        "companions": {"caption_id": ids, "hardest_id": [ids[j] for j in hardest_index],
                       "hardest_cosine": hardest_cosine.round(6).tolist(), "top_k": 1},
        "exact_duplicates": {"n_sets": 0, "n_captions": 0, "n_redundant_captions": 0, "n_redundant_cross_group": 0,
                             "n_pairs": 0,
                             "n_pairs_cross_group": 0, "n_pairs_within_group": 0, "n_sets_cross_group": 0,
                             "examples": []},
        "near_duplicates": {"threshold": threshold, "n_pairs_cross_group": int((negatives >= threshold).sum()),
                            "bin_width": 0.001, "share_pairs": float((negatives >= threshold).mean()),
                            "n_captions_hardest_above": int((hardest_cosine >= threshold).sum()),
                            "share_captions_hardest_above": float((hardest_cosine >= threshold).mean()),
                            "exact": True},
        "batches": batches,
        "options": {"batch_sizes": list(batch_sizes), "seed": seed, "n_batches": 20, "top_k": 1},
        "provenance": {"capgeo_version": "0.1.0", "created": "2026-11-29T10:40:00Z",
                       "command": f"capgeo profile {source} --json profile.json", "elapsed_s": 0.5},
    }
    # kept beside the profile (not part of the schema) so tests can build dupes sections from the same data
    profile_texts = {"texts": texts, "ids": ids, "group_ids": group_ids, "similarity": similarity}
    return profile, profile_texts


def make_dupes(extras: dict, n_pairs: int = 5, n_examples: int = len(NASTY_CAPTIONS), neighbours: int = 3) -> dict:
    """A dupes section (docs/dupes.md shape) from the fixture's similarity, spans from the real highlighter."""
    from capgeo.findings.highlight import highlight_pair

    texts, ids, groups, similarity = extras["texts"], extras["ids"], extras["group_ids"], extras["similarity"]
    n = len(texts)
    group_array = np.array(groups)
    masked = np.where(group_array[:, None] == group_array[None, :], -np.inf, similarity)

    def row(a: int, b: int) -> dict:
        h = highlight_pair(texts[a], texts[b])
        return {"index_a": a, "index_b": b, "id_a": ids[a], "id_b": ids[b], "group_a": groups[a],
                "group_b": groups[b], "text_a": texts[a], "text_b": texts[b], "cosine": float(similarity[a, b]),
                "jaccard": h.jaccard, "exact_duplicate": h.exact_duplicate, "shared_words": list(h.shared),
                "only_a_words": list(h.only_a), "only_b_words": list(h.only_b),
                "spans_a": [s.to_dict() for s in h.spans_a], "spans_b": [s.to_dict() for s in h.spans_b]}

    upper = np.triu(masked, k=1)
    order = np.argsort(upper, axis=None)[::-1][:n_pairs]
    pairs = [{"rank": r + 1, **row(*map(int, np.unravel_index(flat, upper.shape)))} for r, flat in enumerate(order)]
    # the first nasty captions are the queries, so escaping and non-Latin spans are exercised
    examples = []
    for query in range(n_examples):
        nearest = np.argsort(masked[query])[::-1][:neighbours]
        examples.append({"quantile": 0.9, "target_cosine": float(masked[query].max()),
                         "query": {"index": query, "id": ids[query], "group": groups[query], "text": texts[query]},
                         "hardest_cosine": float(masked[query].max()),
                         "neighbours": [{"neighbour_rank": k + 1, **row(query, int(j))} for k, j in enumerate(nearest)]})
    return {"schema": "capgeo.dupes/1", "n_captions": n, "n_groups": len(set(groups)), "threshold": None,
            "limit": n_pairs, "top_k": 10, "pairs": pairs, "quantiles": [0.9], "examples": examples,
            "components_threshold": None, "components": None, "warnings": []}


def make_gamma(profile: dict, extras: dict, logit_scale: float = 100.0) -> dict:
    """A gamma section (capgeo.findings.gamma shape) with brute-force effective-negative shares."""
    similarity = extras["similarity"]
    grid = [k / 8 for k in range(9)]
    batches = []
    for entry in profile["batches"]:
        matrix = np.array([[np.nan if v is None else v for v in r] for r in entry["example"]["cosine"]])
        size = matrix.shape[0]
        rows = matrix[~np.eye(size, dtype=bool)].reshape(size, size - 1)
        points = []
        for gamma in grid:
            logits = logit_scale * gamma * rows
            weights = np.exp(logits - logits.max(axis=1, keepdims=True))
            weights /= weights.sum(axis=1, keepdims=True)
            effective = np.exp(-(weights * np.log(weights)).sum(axis=1)).mean()
            points.append({"gamma": gamma, "scaled_gamma": logit_scale * gamma, "effective_negatives": effective,
                           "effective_share": effective / (size - 1),
                           "hard_bucket_mass": float((weights * (rows >= 0.9)).sum(axis=1).mean()),
                           "top_decile_mass": 0.0,
                           "boost_median": logit_scale * gamma * float(np.median(rows, axis=1).mean()),
                           "boost_hardest": logit_scale * gamma * float(rows.max(axis=1).mean()),
                           "boost_gap": 0.0})
        batches.append({"batch_size": entry["batch_size"], "negatives_per_row": entry["batch_size"] - 1,
                        "suggestion": {"gamma": 0.375, "gamma_exact": 0.38, "range": [0.25, 0.625],
                                       "target_share": 0.5, "clipped": False, "clip_note": None},
                        "why": "Fixture: <b>not</b> a real suggestion & made up.", "grid": points, "image": None})
    del similarity
    return {"rule": "effective-negative share matched to the paper's default (docs/gamma.md)",
            "suggested_gamma": 0.375, "suggested_range": [0.25, 0.625], "logit_scale": logit_scale,
            "logit_scale_source": "default (100, the paper's s; the encoder has no logit scale)", "hard_edge": 0.9,
            "gamma_grid": grid, "batches": batches}


def make_full_profile(**options) -> dict:
    """The fixture profile with dupes and gamma sections, like `capgeo report DATA` produces."""
    profile, extras = make_profile(**options)
    profile["dupes"] = make_dupes(extras)
    profile["gamma"] = make_gamma(profile, extras)
    return profile


REPO_DATA = __import__("pathlib").Path(__file__).resolve().parents[1] / "data"
#: small real slices: DOCCI (one long caption per image) and COCO (five short captions per image)
REAL_SLICES = {"docci": ("docci_sample.jsonlines", 40, (16,)), "coco": ("coco_sample.json", 60, (8,))}


def real_report_input(name: str):
    """`capgeo report DATA`'s profile (with dupes and gamma) of a real sample slice, via the real pipeline.

    Cached per process: the browser and end-to-end tests share one embedding run."""
    return _real_report_input(name)


@__import__("functools").lru_cache(maxsize=None)
def _real_report_input(name: str):
    from capgeo.captions import load_captions
    from capgeo.geometry.profile_options import ProfileOptions
    from capgeo.report.build import report_dataset

    file_name, limit, batch_sizes = REAL_SLICES[name]
    captions = load_captions(REPO_DATA / file_name, limit=limit)
    return report_dataset(captions, None, ProfileOptions(batch_sizes=batch_sizes, n_batches=20, seed=0),
                          command=f"capgeo report data/{file_name} --limit {limit}")


def typed(profile: dict, check: bool = True):
    """A profile built here as its JSON object, read as the typed profile the renderers take (where JSON
    arrives, capgeo reads it once the same way)."""
    from capgeo.geometry.typed_profile import Profile

    return Profile.from_dict(profile, check=check)
