"""Embedding cache: hits without encoding, invalidation, resume after an interruption."""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from capgeo.encoders import embed
from capgeo.encoders.base import EncoderInfo
from capgeo.encoders.cache import CacheEntry, cache_key, default_cache_dir

WIDTH = 8


def text_vector(text: str, max_tokens: int) -> np.ndarray:
    """A deterministic unit vector per (text cut to max_tokens words)."""
    kept = " ".join(text.split()[: max_tokens - 2])
    seed = int.from_bytes(hashlib.sha256(kept.encode()).digest()[:8], "little")
    vector = np.random.default_rng(seed).normal(size=WIDTH)
    return (vector / np.linalg.norm(vector)).astype(np.float32)


class CountingEncoder:
    """Fake TextEncoder: tokens are words plus start/end; counts every call."""

    def __init__(self, fingerprint: str = "weights-v1", fail_after: int | None = None):
        self.info = EncoderInfo(spec="fake", kind="fake", name="fake-encoder", width=WIDTH, context_length=32,
                                logit_scale=None, fingerprint=fingerprint)
        self.encode_calls = 0
        self.encoded_texts = 0
        self.token_calls = 0
        self.fail_after = fail_after

    def token_counts(self, texts):
        self.token_calls += 1
        return np.array([len(text.split()) + 2 for text in texts])

    def encode(self, texts, *, max_tokens=None, batch_size=64, progress=None):
        if self.fail_after is not None and self.encode_calls >= self.fail_after:
            raise KeyboardInterrupt
        self.encode_calls += 1
        self.encoded_texts += len(texts)
        limit = max_tokens or self.info.context_length
        return np.stack([text_vector(text, limit) for text in texts])


def make_texts(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    words = ["red", "cat", "on", "a", "mat", "blue", "sky", "over", "the", "hill", "dog", "runs"]
    return [" ".join(rng.choice(words, size=int(rng.integers(1, 40)))) + f" #{i}" for i in range(n)]


def expected(texts, max_tokens=32):
    return np.stack([text_vector(text, max_tokens) for text in texts])


def chunk_files(cache_dir: Path) -> list[Path]:
    return sorted(cache_dir.glob("embeddings/*/chunk-*.npy"))


def test_vectors_and_token_counts_are_in_caption_order(tmp_path):
    texts = make_texts(50)
    result = embed(texts, CountingEncoder(), cache_dir=tmp_path, chunk_rows=8)
    np.testing.assert_array_equal(result.vectors, expected(texts))
    np.testing.assert_array_equal(result.token_counts, [len(t.split()) + 2 for t in texts])
    np.testing.assert_array_equal(result.truncated, result.token_counts > 32)
    assert result.truncated.any() and not result.truncated.all()
    assert result.origin == "encoded"


def test_second_run_is_a_cache_hit_without_encoding_or_tokenizing(tmp_path):
    texts = make_texts(50)
    first = embed(texts, CountingEncoder(), cache_dir=tmp_path, chunk_rows=8)
    again = CountingEncoder()
    second = embed(texts, again, cache_dir=tmp_path, chunk_rows=8)
    assert again.encode_calls == 0 and again.token_calls == 0
    assert second.origin == "cache"
    np.testing.assert_array_equal(second.vectors, first.vectors)
    np.testing.assert_array_equal(second.token_counts, first.token_counts)
    manifest = next(tmp_path.glob("embeddings/*/manifest.json"))
    assert len(chunk_files(tmp_path)) == 7 and manifest.exists()


@pytest.mark.parametrize("change", ["texts", "fingerprint", "max_tokens"])
def test_cache_is_invalidated_when_what_decides_the_vectors_changes(tmp_path, change):
    texts = make_texts(30)
    embed(texts, CountingEncoder(), cache_dir=tmp_path, chunk_rows=10)
    encoder = CountingEncoder(fingerprint="weights-v2" if change == "fingerprint" else "weights-v1")
    new_texts = texts[:-1] + [texts[-1] + " changed"] if change == "texts" else texts
    max_tokens = 12 if change == "max_tokens" else None
    result = embed(new_texts, encoder, cache_dir=tmp_path, chunk_rows=10, max_tokens=max_tokens)
    assert encoder.encoded_texts == 30 and result.origin == "encoded"
    np.testing.assert_array_equal(result.vectors, expected(new_texts, max_tokens or 32))
    assert result.max_tokens == (max_tokens or 32)


def test_key_depends_on_order_of_texts():
    info = CountingEncoder().info
    assert cache_key(["a", "b"], info, 32) != cache_key(["b", "a"], info, 32)
    assert cache_key(["ab", ""], info, 32) != cache_key(["a", "b"], info, 32)
    assert cache_key(["a"], info, 32) != cache_key(["a"], info, 32, normalised=False)


def test_interrupted_encode_resumes_from_written_chunks(tmp_path):
    texts = make_texts(50)
    interrupted = CountingEncoder(fail_after=3)
    with pytest.raises(KeyboardInterrupt):
        embed(texts, interrupted, cache_dir=tmp_path, chunk_rows=8)
    assert len(chunk_files(tmp_path)) == 3
    assert not list(tmp_path.glob("embeddings/*/manifest.json"))
    assert not list(tmp_path.glob("embeddings/*/.*.part"))

    resumed = CountingEncoder()
    result = embed(texts, resumed, cache_dir=tmp_path, chunk_rows=8)
    assert resumed.encode_calls == 7 - 3
    assert resumed.encoded_texts == 50 - 3 * 8
    assert resumed.token_calls == 0  # token counts were saved before the first chunk
    assert result.origin == "resumed"
    np.testing.assert_array_equal(result.vectors, expected(texts))


@pytest.mark.parametrize("damage", ["truncated-file", "wrong-shape", "not-normalised", "garbage"])
def test_damaged_chunk_is_discarded_and_re_encoded(tmp_path, damage):
    texts = make_texts(40)
    embed(texts, CountingEncoder(), cache_dir=tmp_path, chunk_rows=10)
    victim = chunk_files(tmp_path)[1]
    if damage == "truncated-file":
        victim.write_bytes(victim.read_bytes()[:100])
    elif damage == "wrong-shape":
        np.save(victim, np.ones((3, WIDTH), dtype=np.float32) / np.sqrt(WIDTH))
    elif damage == "not-normalised":
        np.save(victim, np.full((10, WIDTH), 5.0, dtype=np.float32))
    else:
        victim.write_bytes(b"not a numpy file at all")
    encoder = CountingEncoder()
    result = embed(texts, encoder, cache_dir=tmp_path, chunk_rows=10)
    assert encoder.encode_calls == 1 and encoder.encoded_texts == 10
    np.testing.assert_array_equal(result.vectors, expected(texts))


def test_leftover_temporary_file_is_never_read(tmp_path):
    texts = make_texts(20)
    with pytest.raises(KeyboardInterrupt):
        embed(texts, CountingEncoder(fail_after=1), cache_dir=tmp_path, chunk_rows=10)
    folder = next(tmp_path.glob("embeddings/*"))
    # what a killed writer leaves behind: a temporary named after the next chunk
    (folder / ".chunk-000000010-000000020.npy.abc123.part").write_bytes(b"\x93NUMPY half")
    encoder = CountingEncoder()
    result = embed(texts, encoder, cache_dir=tmp_path, chunk_rows=10)
    assert encoder.encode_calls == 1
    np.testing.assert_array_equal(result.vectors, expected(texts))


def test_no_cache_writes_nothing(tmp_path):
    texts = make_texts(10)
    embed(texts, CountingEncoder(), cache_dir=tmp_path, use_cache=False)
    encoder = CountingEncoder()
    result = embed(texts, encoder, cache_dir=tmp_path, use_cache=False)
    assert encoder.encode_calls == 1 and result.origin == "encoded"
    assert not any(tmp_path.iterdir())


def test_default_cache_dir_follows_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("CAPGEO_CACHE", str(tmp_path / "here"))
    assert default_cache_dir() == tmp_path / "here"
    embed(make_texts(5), CountingEncoder())
    assert list((tmp_path / "here" / "embeddings").glob("*/manifest.json"))
    monkeypatch.delenv("CAPGEO_CACHE")
    assert default_cache_dir() == Path.home() / ".cache" / "capgeo"


def test_token_counts_file_of_wrong_length_is_not_trusted(tmp_path):
    texts = make_texts(12)
    first = CountingEncoder()
    embed(texts, first, cache_dir=tmp_path, chunk_rows=4)
    entry_folder = next(tmp_path.glob("embeddings/*"))
    counts_file = next(entry_folder.glob("token_counts.*.npy"))
    np.save(counts_file, np.arange(5))
    key = entry_folder.name
    assert CacheEntry(tmp_path, key, 12, WIDTH).load_token_counts() is None


KILLED_WRITER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    from test_cache import CountingEncoder, make_texts
    from capgeo.encoders import embed

    class Slow(CountingEncoder):
        def encode(self, texts, **kwargs):
            time.sleep(0.3)
            return super().encode(texts, **kwargs)

    embed(make_texts(60), Slow(), cache_dir={cache!r}, chunk_rows=5)
""")


@pytest.mark.slow
def test_killed_process_leaves_a_resumable_entry(tmp_path):
    script = KILLED_WRITER.format(tests=str(Path(__file__).parent), cache=str(tmp_path))
    process = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 60
        while len(chunk_files(tmp_path)) < 3:
            assert process.poll() is None, "the writer exited before it was killed"
            assert time.monotonic() < deadline, "the writer wrote no chunks in 60 s"
            time.sleep(0.05)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.wait(timeout=30)
    written = len(chunk_files(tmp_path))
    assert 3 <= written < 12
    encoder = CountingEncoder()
    result = embed(make_texts(60), encoder, cache_dir=tmp_path, chunk_rows=5)
    assert encoder.encode_calls == 12 - written
    np.testing.assert_array_equal(result.vectors, expected(make_texts(60)))


def test_encoder_output_is_checked_before_it_is_cached(tmp_path):
    class Broken(CountingEncoder):
        def encode(self, texts, **kwargs):
            vectors = super().encode(texts, **kwargs) * 3.0  # forgot to normalise
            if any("#7" == text.split()[-1] for text in texts):
                vectors[[text.split()[-1] for text in texts].index("#7")] = np.nan
            return vectors

    texts = make_texts(6)
    result = embed(texts, Broken(), cache_dir=tmp_path / "a")
    np.testing.assert_allclose(result.vectors, expected(texts), atol=1e-6)
    from capgeo.errors import EncoderError

    with pytest.raises(EncoderError, match="NaN or infinite values for caption row 7"):
        embed(make_texts(9), Broken(), cache_dir=tmp_path / "b")
    assert not list((tmp_path / "b").glob("embeddings/*/chunk-*"))


def test_an_all_zero_encoder_output_is_refused_not_cached_as_nan(tmp_path):
    """A zero vector has no direction: normalising it wrote NaN rows into the cache and the export."""
    class Zeroes(CountingEncoder):
        def encode(self, texts, **kwargs):
            vectors = super().encode(texts, **kwargs)
            for row, text in enumerate(texts):
                if text.split()[-1] == "#4":
                    vectors[row] = 0.0
            return vectors

    from capgeo.errors import EncoderError

    with pytest.raises(EncoderError, match="all-zero vector for caption row 4"):
        embed(make_texts(6), Zeroes(), cache_dir=tmp_path)
    assert not list(tmp_path.glob("embeddings/*/chunk-*"))


def test_chunks_of_another_chunk_size_are_replaced(tmp_path):
    texts = make_texts(20)
    embed(texts, CountingEncoder(), cache_dir=tmp_path, chunk_rows=8)
    encoder = CountingEncoder()
    result = embed(texts, encoder, cache_dir=tmp_path, chunk_rows=5)
    assert encoder.encode_calls == 4
    np.testing.assert_array_equal(result.vectors, expected(texts))
    assert [path.name.split(".")[0] for path in chunk_files(tmp_path)] == [
        f"chunk-{start:09d}-{start + 5:09d}" for start in range(0, 20, 5)]


def _flip_one_bit(path: Path, offset_from_end: int = 5) -> None:
    data = bytearray(path.read_bytes())
    data[-offset_from_end] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("victim", ["chunk", "token_counts"])
def test_a_flipped_bit_in_any_cache_file_is_caught_and_recomputed(tmp_path, capfd, victim):
    texts = make_texts(30)
    embed(texts, CountingEncoder(), cache_dir=tmp_path, chunk_rows=10)
    folder = next(tmp_path.glob("embeddings/*"))
    # a bit in the data area: still a valid .npy of finite numbers, so only a checksum can tell
    path = chunk_files(tmp_path)[1] if victim == "chunk" else next(folder.glob("token_counts.*.npy"))
    _flip_one_bit(path, offset_from_end=2 if victim == "chunk" else 8)
    encoder = CountingEncoder()
    result = embed(texts, encoder, cache_dir=tmp_path, chunk_rows=10)
    np.testing.assert_array_equal(result.vectors, expected(texts))
    np.testing.assert_array_equal(result.token_counts, [len(text.split()) + 2 for text in texts])
    assert "fails its checksum" in capfd.readouterr().err
    if victim == "chunk":
        assert encoder.encoded_texts == 10 and encoder.token_calls == 0
    else:
        assert encoder.token_calls == 1


def test_valid_but_wrong_token_counts_cannot_reorder_the_rows(tmp_path):
    # the reported failure: token counts replaced by other valid integers reordered every
    # row; here even a replacement named with its own correct checksum is not trusted by the chunks
    texts = make_texts(30)
    embed(texts, CountingEncoder(), cache_dir=tmp_path, chunk_rows=10)
    folder = next(tmp_path.glob("embeddings/*"))
    for old in folder.glob("token_counts.*.npy"):
        old.unlink()
    CacheEntry(tmp_path, folder.name, 30, WIDTH).save_token_counts(np.arange(30))
    result = embed(texts, CountingEncoder(), cache_dir=tmp_path, chunk_rows=10)
    cosines = np.sum(result.vectors * expected(texts), axis=1)
    np.testing.assert_allclose(cosines, 1.0, atol=1e-6)


def test_an_entry_lists_its_folder_once_however_many_chunks(tmp_path, monkeypatch):
    # a glob per chunk read the whole folder for every chunk: quadratic in the chunks
    texts = make_texts(120)
    first = embed(texts, CountingEncoder(), cache_dir=tmp_path, chunk_rows=4)   # 30 chunks
    listings = []
    real_scandir = os.scandir

    def counting_scandir(path="."):
        listings.append(Path(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", counting_scandir)
    again = CountingEncoder()
    second = embed(texts, again, cache_dir=tmp_path, chunk_rows=4)
    assert again.encode_calls == 0 and second.origin == "cache"
    np.testing.assert_array_equal(second.vectors, first.vectors)
    entry_folder = next(tmp_path.glob("embeddings/*"))
    assert listings.count(entry_folder) == 1
    # and a damaged chunk found through the listing is still discarded and re-encoded
    victim = chunk_files(tmp_path)[3]
    victim.write_bytes(victim.read_bytes()[:-4] + b"\x00\x00\x00\x01")
    third = CountingEncoder()
    np.testing.assert_array_equal(embed(texts, third, cache_dir=tmp_path, chunk_rows=4).vectors, first.vectors)
    assert third.encoded_texts == 4 and len(chunk_files(tmp_path)) == 30


@pytest.mark.parametrize("captions, says", [
    ("data/coco_sample.json", "not the path 'data/coco_sample.json'"),
    (["a cat", None, "a dog"], "text 1: expected a caption (str), got NoneType"),
    (42, "got int"),
])
def test_embed_refuses_what_is_not_captions(captions, says):
    """A path string was a sequence of one-character captions; None and numbers were embedded as "None"."""
    from capgeo.errors import DataError

    with pytest.raises(DataError, match=re.escape(says)):
        embed(captions, CountingEncoder())


def test_an_encoder_that_is_not_a_spec_is_a_one_line_error():
    from capgeo.errors import EncoderError

    with pytest.raises(EncoderError, match="an encoder spec is text"):
        embed(["a cat"], 5)


def test_partial_files_a_killed_process_left_are_swept(tmp_path):
    """SIGKILL mid-write leaves .<chunk>.npy.<random>.part in the entry; nothing removed them, so
    they piled up. Old ones go when the entry is next read; a fresh one (a writer now) stays."""
    texts = make_texts(12)
    embed(texts, CountingEncoder(), cache_dir=tmp_path, chunk_rows=5)
    (folder,) = (tmp_path / "embeddings").iterdir()
    old, fresh = folder / ".chunk-000000000-000000005.abc.npy.x1.part", folder / ".chunk-x.npy.x2.part"
    old.write_bytes(b"half a chunk")
    fresh.write_bytes(b"being written")
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    result = embed(texts, CountingEncoder(), cache_dir=tmp_path, chunk_rows=5)
    assert result.origin == "cache"
    assert not old.exists() and fresh.exists()


def _refused_inside(monkeypatch, folder: Path, method: str) -> None:
    """Path.<method> fails with a permission error inside ``folder``: an entry this user cannot change."""
    real = getattr(Path, method)

    def refused(path, *args, **kwargs):
        if folder in path.parents:
            raise PermissionError(1, "Operation not permitted", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(Path, method, refused)


def test_a_damaged_file_that_cannot_be_deleted_is_recomputed_not_a_traceback(tmp_path, capfd, monkeypatch):
    """A shared cache whose entry another user owns: the damaged chunk could not be unlinked, and
    the OSError of that unlink ended the command with a traceback."""
    texts = make_texts(30)
    embed(texts, CountingEncoder(), cache_dir=tmp_path, chunk_rows=10)
    _flip_one_bit(chunk_files(tmp_path)[1], offset_from_end=2)
    _refused_inside(monkeypatch, tmp_path, "unlink")
    before = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    encoder = CountingEncoder()
    result = embed(texts, encoder, cache_dir=tmp_path, chunk_rows=10)
    np.testing.assert_array_equal(result.vectors, expected(texts))
    assert encoder.encoded_texts == 10
    said = capfd.readouterr().err
    assert "fails its checksum" in said and "used without being cached" in said
    # nothing written back: in an entry whose files cannot be deleted a write fails too (it ended the
    # command after the encoding)
    assert {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()} == before


def test_a_full_hit_whose_manifest_cannot_be_restored_still_answers(tmp_path, monkeypatch):
    """Reading never uses the manifest; restoring a lost one in a read-only entry failed the command."""
    from capgeo.encoders import cache as cache_module
    from capgeo.errors import CapgeoError

    texts = make_texts(30)
    embed(texts, CountingEncoder(), cache_dir=tmp_path, chunk_rows=10)
    next(tmp_path.glob("embeddings/*/manifest.json")).unlink()

    def read_only(path, *args, **kwargs):
        raise CapgeoError(f"cannot write {path}: Read-only file system")

    monkeypatch.setattr(cache_module, "atomic_open", read_only)
    encoder = CountingEncoder()
    result = embed(texts, encoder, cache_dir=tmp_path, chunk_rows=10)
    np.testing.assert_array_equal(result.vectors, expected(texts))
    assert result.origin == "cache" and encoder.encode_calls == 0
    # while a run that encoded something still says its cache could not be written
    with pytest.raises(CapgeoError, match="Read-only"):
        embed(make_texts(12, seed=1), CountingEncoder(), cache_dir=tmp_path, chunk_rows=10)


def test_an_entry_that_cannot_be_written_is_used_read_only_before_anything_is_encoded(tmp_path, capfd, monkeypatch):
    """A shared entry this user cannot change, with a chunk missing: it encoded everything, then failed
    on the first write with no output."""
    texts = make_texts(30)
    embed(texts, CountingEncoder(), cache_dir=tmp_path, chunk_rows=10)
    chunk_files(tmp_path)[1].unlink()
    _refused_inside(monkeypatch, tmp_path, "touch")
    before = sorted(tmp_path.rglob("*"))
    encoder = CountingEncoder()
    result = embed(texts, encoder, cache_dir=tmp_path, chunk_rows=10)
    np.testing.assert_array_equal(result.vectors, expected(texts))
    assert encoder.encoded_texts == 10 and sorted(tmp_path.rglob("*")) == before
    assert "used without being cached" in capfd.readouterr().err
