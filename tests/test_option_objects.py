"""The lower layers' option objects (issue #47): an object and its fields as keywords are one call."""

import numpy as np
import pytest

from capgeo.arguments import keyword_annotations
from capgeo.captions import load_captions
from capgeo.geometry.cross import CrossOptions, scan_cross
from capgeo.geometry.estimate import estimate_pairs
from capgeo.geometry.inbatch import InBatchOptions, inbatch_statistics
from capgeo.geometry.pairwise import scan_pairs
from capgeo.geometry.scan_options import ScanOptions


def unit_vectors(n=60, width=8, seed=0):
    vectors = np.random.default_rng(seed).normal(size=(n, width)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_scan_options_and_their_keywords_give_the_same_pass():
    vectors, groups = unit_vectors(), np.arange(60) // 3
    by_object = scan_pairs(vectors, groups, ScanOptions(top_k=4, block_size=16, device="cpu", threshold=0.3))
    by_keywords = scan_pairs(vectors, groups, top_k=4, block_size=16, device="cpu", threshold=0.3)
    # a keyword replaces the object's field
    overridden = scan_pairs(vectors, groups, ScanOptions(top_k=9, block_size=16, device="cpu"), top_k=4, threshold=0.3)
    for scan in (by_keywords, overridden):
        assert scan.top_k == 4 and scan.negatives.counts.tobytes() == by_object.negatives.counts.tobytes()
        assert scan.companion_index.tobytes() == by_object.companion_index.tobytes()
        assert all(np.array_equal(a, b) for a, b in zip(scan.extra["pairs"], by_object.extra["pairs"]))
    assert by_object.negatives.mean == by_keywords.negatives.mean
    with pytest.raises(TypeError, match=r"scan_pairs\(\) got an unexpected keyword argument 'topk'"):
        scan_pairs(vectors, groups, topk=3)


def test_the_estimate_reads_its_fields_of_the_same_options():
    vectors, groups = unit_vectors(), np.arange(60) // 3
    options = ScanOptions(top_k=2, device="cpu", n_pairs=500, seed=4, progress=False)
    first, again = estimate_pairs(vectors, groups, options), estimate_pairs(vectors, groups, n_pairs=500, seed=4,
                                                                            top_k=2, device="cpu", progress=False)
    assert first.mode == "sampled" and first.negatives.n == 500
    assert first.negatives.counts.tobytes() == again.negatives.counts.tobytes()
    assert estimate_pairs(vectors, groups, options, seed=5).negatives.counts.tobytes() != \
        first.negatives.counts.tobytes()


def test_inbatch_and_cross_options_match_their_keywords():
    vectors, groups = unit_vectors(), np.arange(60) // 3
    drawn = InBatchOptions(n_batches=4, seed=2, edges=(0.1, 0.3))
    assert inbatch_statistics(vectors, groups, 5, drawn) == inbatch_statistics(vectors, groups, 5, n_batches=4,
                                                                               seed=2, edges=(0.1, 0.3))
    by_object = scan_cross(vectors[:10], vectors[10:], CrossOptions(threshold=0.2, top_k=3, device="cpu"))
    by_keywords = scan_cross(vectors[:10], vectors[10:], threshold=0.2, top_k=3, device="cpu")
    assert by_object.pair_query.tobytes() == by_keywords.pair_query.tobytes()
    assert by_object.top_index.tobytes() == by_keywords.top_index.tobytes()


def test_load_captions_keywords_are_its_typed_dict(tmp_path):
    annotations = keyword_annotations(load_captions)
    assert annotations["limit"] == "int | None" and annotations["images"] == "str | os.PathLike | None"
    assert list(annotations)[1:] == ["format", "text_column", "captions_column", "id_column", "group_column",
                                     "split", "limit", "image_column", "images"]
    path = tmp_path / "caps.csv"
    path.write_text("image,text\na,one\na,two\nb,three\n")
    captions = load_captions(path, text_column="text", group_column="image", limit=2)
    assert captions.texts == ["one", "two"] and list(captions.groups) == ["a", "a"]
    with pytest.raises(TypeError, match=r"load_captions\(\) got an unexpected keyword argument 'text_col'"):
        load_captions(path, text_col="text")
