"""Defaults and choices that both the command line (in its --help) and the library use.

They live here, apart from the modules that compute with them, because those import numpy
and polars: listing the commands (``capgeo --help``) reads every command's options and
would import both (about a second) only to show these numbers.
"""

#: two captions of different images at or above this cosine are near-duplicates (profile, dupes)
NEAR_DUPLICATE_THRESHOLD = 0.95
#: the highest pair threshold the float32 pass can honour: identical vectors' float32 cosine falls
#: up to about 1e-6 below 1, so a threshold of 1 found no pair
MAX_PAIR_THRESHOLD = 0.9999

#: leak: an evaluation caption with a training caption at or above this cosine has a twin
LEAK_THRESHOLD = 0.95
#: leak: closest pairs shown per evaluation set
LEAK_TOP = 20
#: leak --normalize: how far two texts are made alike before they count as exact twins, each rule
#: adding to the one before it: as written; NFKC with whitespace collapsed; and casefolded (the rule
#: of every command's exact duplicates); and a final period dropped
LEAK_NORMALIZE_RULES = ("none", "whitespace", "case", "period")
LEAK_NORMALIZE = "case"

#: dupes-sets --keep: which caption of a near-duplicate set stays
KEEP_POLICIES = ("first", "longest", "shortest", "random")

#: negatives: hard negatives per caption, and the cosine range they are taken from; at or above the
#: upper end a companion is treated as a false negative (the same scene), as profile's near-duplicates
NEGATIVES_K = 5
NEGATIVES_MIN_COSINE = -1.0
NEGATIVES_MAX_COSINE = NEAR_DUPLICATE_THRESHOLD
#: negatives: at most this many of an anchor's negatives from one image (None: no limit); the
#: captions of one image describe one scene, so several of them are one negative said again
NEGATIVES_PER_IMAGE = 1

#: file suffixes of the table outputs, and the format each means
PER_CAPTION_SUFFIXES = {".parquet": "parquet", ".csv": "csv", ".jsonl": "jsonl"}
NEGATIVE_SUFFIXES = {".jsonl": "jsonl", ".parquet": "parquet"}
