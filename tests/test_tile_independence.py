"""Results that do not depend on the tile size: every cosine comes from an arithmetic block of one
shape, so histograms, companions, threshold pairs and counts are the same bytes for any
--block-size (tiny, odd, huge), and pairs excluded by code never appear."""

import numpy as np
import pytest

from capgeo.geometry import cpu_pass
from capgeo.geometry.pairwise import scan_pairs


def clustered(n, width, seed, per_group=3):
    """Unit vectors near a few centres (so cosines crowd and bins fill), groups of ``per_group``."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(max(n // 25, 2), width))
    vectors = centres[rng.integers(0, len(centres), n)] + 0.5 * rng.normal(size=(n, width))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors.astype(np.float32), np.arange(n) // per_group


def fingerprint(scan):
    """Everything a scan reports, as bytes (its timings aside)."""
    parts = []
    for histogram in (scan.negatives, scan.same_group):
        parts += [histogram.counts.tobytes(), np.float64([histogram.n, histogram.total, histogram.total_squares,
                                                          histogram.min, histogram.max]).tobytes()]
    parts += [scan.companion_index.tobytes(), scan.companion_cosine.tobytes()]
    parts += [np.asarray(part).tobytes() for part in scan.extra["pairs"]]
    parts.append(str(scan.extra["count_at_or_above"]).encode())
    return parts


def scan(vectors, groups, block_size, **options):
    return scan_pairs(vectors, groups, top_k=6, block_size=block_size, device="cpu", threshold=0.55,
                      count_at_or_above=0.5, **options)


def test_tiny_odd_and_huge_tiles_give_the_same_bytes():
    vectors, groups = clustered(700, 40, seed=11)
    reference = fingerprint(scan(vectors, groups, None))
    for block_size in (7, 61, 255, 256, 300, 10_000):
        assert fingerprint(scan(vectors, groups, block_size)) == reference, block_size


def test_the_same_bytes_with_small_arithmetic_blocks_and_one_caption_tiles(monkeypatch):
    # a block of 8 rows: tiles of 1 and 5 rows cut through blocks, tiles of 24 and 37 hold several
    monkeypatch.setattr(cpu_pass, "ARITHMETIC_BLOCK", 8)
    vectors, groups = clustered(90, 12, seed=12)
    reference = fingerprint(scan(vectors, groups, 90))
    for block_size in (1, 5, 8, 24, 37):
        assert fingerprint(scan(vectors, groups, block_size)) == reference, block_size


def test_float64_moments_and_counts_match_numpy():
    vectors, groups = clustered(500, 24, seed=13)
    result = scan(vectors, groups, 61)
    cosine = vectors.astype(np.float64) @ vectors.astype(np.float64).T
    rows, columns = np.triu_indices(len(vectors), 1)
    different = groups[rows] != groups[columns]
    values = cosine[rows, columns][different]
    assert result.negatives.n == values.size
    assert result.negatives.mean == pytest.approx(values.mean(), abs=1e-7)
    assert result.negatives.std == pytest.approx(values.std(), abs=1e-7)
    counts, _ = np.histogram(values, bins=result.negatives.bins, range=(-1, 1))
    # float32 cosines may sit one bin away from the float64 ones at an edge
    assert np.abs(result.negatives.counts - counts).sum() <= 0.001 * values.size
    sure = int((values >= 0.5 + 1e-6).sum())
    assert sure <= result.extra["count_at_or_above"]["pairs"] <= int((values >= 0.5 - 1e-6).sum())


def test_excluded_pairs_are_no_companions_and_no_threshold_pairs():
    vectors, groups = clustered(300, 16, seed=14)
    codes = np.random.default_rng(0).integers(0, 40, len(vectors))
    result = scan_pairs(vectors, groups, top_k=4, block_size=37, device="cpu", threshold=0.5, exclude_codes=codes)
    cosine = vectors.astype(np.float64) @ vectors.astype(np.float64).T
    banned = (groups[:, None] == groups[None, :]) | (codes[:, None] == codes[None, :])
    cosine[banned] = -np.inf
    for row in range(len(vectors)):
        expected = np.argsort(-cosine[row], kind="stable")[:4]
        np.testing.assert_array_equal(result.companion_index[row], expected)
    rows, columns, _ = result.extra["pairs"]
    assert rows.size and not np.any(codes[rows] == codes[columns])
    assert result.negatives.n == len(vectors) * (len(vectors) - 1) // 2 - result.same_group_pairs_total


def test_products_a_tile_ahead_and_banded_bins_give_the_one_thread_bytes(monkeypatch):
    """With a thread pool the pass computes a tile's products (and their block sums) while the tile
    before it is booked and bins its histogram in row bands; with none, tile by tile on one thread:
    the same bytes, for bands of one row, of an odd number of rows and of the default size.
    Repeated vectors make equal cosines, which must go to the lower caption index either way."""
    vectors, groups = clustered(1300, 24, seed=5)
    vectors[600:700] = vectors[100:200]  # equal cosines to many captions at once
    monkeypatch.setattr(cpu_pass, "default_threads", lambda: 1)
    one_thread = fingerprint(scan(vectors, groups, 512))
    monkeypatch.setattr(cpu_pass, "default_threads", lambda: 3)
    for band_cells in (1, 512 * 7, cpu_pass._BAND_CELLS):
        monkeypatch.setattr(cpu_pass, "_BAND_CELLS", band_cells)
        assert fingerprint(scan(vectors, groups, 512)) == one_thread, band_cells


def test_merge_key_orders_as_the_three_key_sort():
    """(caption ascending, cosine descending) keys of one int64: equal cosines equal (-0.0 and 0.0
    too), so a stable sort leaves them in the order they came in, as lexsort on the index does."""
    rng = np.random.default_rng(0)
    values = rng.choice(np.array([-np.inf, -1, -0.5, -0.0, 0.0, 1e-40, -1e-40, 0.3, np.nextafter(0.3, 1), 1.0],
                                 dtype=np.float32), 5000)
    query = rng.integers(0, 50, 5000)
    index = np.arange(5000)
    key = (query.astype(np.int64) << 32) | cpu_pass._descending_bits(values)   # _merge's key, candidate bits aside
    order = np.argsort(key, kind="stable")
    assert np.array_equal(order, np.lexsort((index, -values, query)))


@pytest.mark.parametrize("block_size", [97, 512])
def test_merge_by_three_key_sort_gives_the_one_key_bytes_and_brute_force(monkeypatch, block_size):
    """Tiles too large for one int64 merge key sort on three keys: the same lists to the bit, and
    both numpy's brute force (cosine descending, ties to the lower index) at a large k, with many
    equal cosines (repeated vectors) and lists merged over many tiles."""
    vectors, groups = clustered(1100, 24, seed=8)
    vectors[500:650] = vectors[50:200]
    k = 45
    one_key = scan_pairs(vectors, groups, top_k=k, block_size=block_size, device="cpu", histograms=False)
    monkeypatch.setattr(cpu_pass, "_POSITION_BITS", 0)
    three_keys = scan_pairs(vectors, groups, top_k=k, block_size=block_size, device="cpu", histograms=False)
    assert one_key.companion_index.tobytes() == three_keys.companion_index.tobytes()
    assert one_key.companion_cosine.tobytes() == three_keys.companion_cosine.tobytes()
    # brute force on the pass's own float32 cosines (one arithmetic block's product each)
    cosine = np.full((len(vectors), len(vectors)), -np.inf, dtype=np.float32)
    with cpu_pass.block_threads(1):   # (the pass's products run on one BLAS thread)
        cpu_pass.BlockProducts(vectors).tile_into(0, len(vectors), 0, len(vectors), cosine)
    cosine[groups[:, None] == groups[None, :]] = -np.inf
    order = np.argsort(-cosine, axis=1, kind="stable")[:, :k]
    np.testing.assert_array_equal(one_key.companion_index, order)
    np.testing.assert_array_equal(one_key.companion_cosine, np.take_along_axis(cosine, order, 1))


def companions_of(queries, vectors, groups, block_size, device="cpu"):
    from capgeo.geometry.pairwise import query_companions

    index, cosine = query_companions(vectors, groups, queries, top_k=6, block_size=block_size, device=device)
    return [index.tobytes(), cosine.tobytes()]


def test_companions_of_some_captions_do_not_follow_the_tile():
    # the recall check of approximate companions, and dedup's, read these
    vectors, groups = clustered(700, 40, seed=14)
    queries = np.random.default_rng(14).choice(len(vectors), 300, replace=False)
    reference = companions_of(queries, vectors, groups, None)
    for block_size in (1, 7, 61, 255, 256, 300, 10_000):
        assert companions_of(queries, vectors, groups, block_size) == reference, block_size
    # and they are the float64 brute force's, to float32 rounding
    cosine = vectors[queries].astype(np.float64) @ vectors.astype(np.float64).T
    cosine[groups[queries][:, None] == groups[None, :]] = -np.inf
    index = np.frombuffer(reference[0], np.int64).reshape(len(queries), 6)
    found = np.frombuffer(reference[1], np.float32).reshape(len(queries), 6)
    np.testing.assert_allclose(found, np.take_along_axis(cosine, index, 1), atol=2e-6)
    np.testing.assert_allclose(found, -np.sort(-cosine, axis=1)[:, :6], atol=2e-6)
