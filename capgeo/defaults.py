"""Defaults and choices that both the command line (in its --help) and the library use.

They live here, apart from the modules that compute with them, because those import numpy
and polars: listing the commands (``capgeo --help``) reads every command's options and
would import both (about a second) only to show these numbers.
"""

#: two captions of different images at or above this cosine are near-duplicates (profile, dupes)
NEAR_DUPLICATE_THRESHOLD = 0.95
#: cosine edges of the in-batch hardness buckets
BUCKET_EDGES = (0.7, 0.8, 0.9)
#: pairwise quantile levels used as bucket edges with --relative-buckets
RELATIVE_LEVELS = (0.5, 0.9, 0.99)
#: companions (most similar captions of other groups) kept per caption by the pairwise pass
TOP_K = 10
#: dupes: pairs listed (0 or None: every pair at or above the floor)
DUPES_TOP = 50
#: dupes-examples: quantiles of the hardest-companion distribution its queries sit at (HN-CLIP's figures),
#: query captions per quantile, and nearest captions of other images shown per query
DUPES_QUANTILES = (0.9,)
DUPES_PER_QUANTILE = 3
DUPES_NEIGHBOURS = 3
#: rows per tile of the all-pairs pass (--block-size of profile, dupes, truncation): None sizes the
#: tile from the device and N (capgeo.geometry.tile_size: CPU_BLOCK_SIZE on a CPU, the largest tile
#: that fits on a GPU)
PAIR_BLOCK_SIZE = None
#: the all-pairs pass's tile on a CPU: past a few thousand rows, tiles leave the caches without
#: speeding the product
CPU_BLOCK_SIZE = 2048
#: rows per block of the passes that keep one tile size on every device: leak's train x eval pass
#: (capgeo.geometry.cross sizes nothing from the device), negatives' mining and dedup's re-search
#: when no size is given. Their results do not depend on it; memory grows with its square
FIXED_BLOCK_SIZE = CPU_BLOCK_SIZE
#: rows of the vectors in one arithmetic block of the all-pairs and train x eval passes, by device kind:
#: every cosine is one entry of an A x A product of two blocks (the last block zero-padded), whatever
#: the tile, so results do not depend on --block-size. A CPU block of 256 costs nothing measurable
#: against one product per 2048-row tile (bench/bench_geometry.py); a GPU wants blocks large enough
#: that each product keeps it busy, and its tiles are whole numbers of them (capgeo.geometry.tile_size)
ARITHMETIC_BLOCKS = {"cpu": 256, "mps": 2048, "cuda": 4096}
#: bins of the pairwise pass's cosine histograms over [-1, 1]
BINS = 4000
#: how the pairwise pass is run, and what chooses between its modes
PAIRWISE_MODES = ("auto", "exact", "sampled")
#: with mode "auto", datasets above this many captions use the sampled estimate
ESTIMATE_THRESHOLD = 200_000
#: pairs drawn for the sampled estimate (DKW bound on every share: +-0.001 at 95%)
SAMPLED_PAIRS = 2_000_000
#: hardest companions in sampled mode: exact blockwise top-k, or approximate with faiss
COMPANION_MODES = ("exact", "faiss")
#: matrix products of the exact pass
PRECISIONS = ("fp32", "tf32", "bf16")
#: the highest pair threshold the float32 pass can honour: identical vectors' float32 cosine falls
#: up to about 1e-6 below 1, so a threshold of 1 found no pair
MAX_PAIR_THRESHOLD = 0.9999
#: the largest logit scale s and gamma taken (--logit-scale, --grid): CLIP clamps its learned s at 100
#: and the paper's gamma plateau is [0.25, 1]; far beyond, s * gamma * cosine overflows float64
MAX_LOGIT_SCALE = 10_000.0
MAX_GAMMA = 1_000.0

#: gamma: caption cosine at or above which an in-batch negative counts as hardest-bucket
GAMMA_HARD_EDGE = 0.9
#: gamma --sweep: the gammas (the rule's suggestion is added), seeds, steps of each run and the adapter's
#: Adam learning rate (docs/gamma.md, "A measured gamma")
SWEEP_GAMMAS = (0.0, 0.25, 0.5, 0.75, 1.0)
SWEEP_SEEDS = (0, 1, 2)
SWEEP_STEPS = 300
SWEEP_LEARNING_RATE = 1e-3
#: truncation: truncation-only near-duplicate pairs listed per length (all are counted)
TRUNCATION_LISTED_PAIRS = 20

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

#: images: the largest image decoded (width x height), past which it is a decompression bomb and
#: skipped: a 16k x 16k photo; PIL's own default warns at 89M
IMAGE_MAX_PIXELS = 16384 * 16384
#: images: a thumbnail's long side in pixels and its JPEG quality (the report inlines them)
THUMBNAIL_SIDE = 64
THUMBNAIL_QUALITY = 70
#: images: encoded per batch, and cached per chunk
IMAGE_BATCH = 64

#: file suffixes of the table outputs, and the format each means
PER_CAPTION_SUFFIXES = {".parquet": "parquet", ".csv": "csv", ".jsonl": "jsonl"}
NEGATIVE_SUFFIXES = {".jsonl": "jsonl", ".parquet": "parquet"}

#: batches: epochs planned, each in its own order (seed + epoch)
BATCHES_EPOCHS = 1
#: pairs: a caption of another image is a cross-modal false negative of pair (image i, caption m) when
#: it scores at least S[i, m] - delta for image i
PAIRS_DELTA = 0.0
#: pairs: rows listed per finding (mismatched pairs, false negatives, image twins); all are counted
PAIRS_LISTED = 20
#: pairs: most false-negative rows written by --false-negatives (a larger delta makes more)
PAIRS_MAX_EXPORT_ROWS = 10_000_000
#: pairs: the thumbnails one profile holds, in bytes of JPEG (0.8 MB as base64: beside the plotly bundle, a full
#: map of long captions and the other sections, the report page stays under 3 MB; a 64-pixel photo is about
#: 2 KB, so the cards' 100-odd images fit many times over)
PAIRS_THUMBNAIL_BYTES = 600_000
#: map: hover thumbnails a caption map carries at most (images), and their base64 characters at most
MAP_THUMBNAILS = 300
MAP_THUMBNAIL_CHARS = 400_000
#: report: the page's size past which the map's hover thumbnails give way (the least telling first)
REPORT_PAGE_BYTES = 3_000_000
#: pairs and leak: two images of different ids at or above this image-image cosine are twins
IMAGE_TWIN_THRESHOLD = 0.95
