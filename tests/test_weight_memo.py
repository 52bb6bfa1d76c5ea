"""weight_fingerprint's overlap: the hash runs in another thread while ``meanwhile`` runs here,
the digest is the file's sha256, and facts remembered meanwhile are kept."""

from __future__ import annotations

import hashlib
import threading

from capgeo.encoders import weight_memo


def test_meanwhile_runs_while_hashing_and_facts_it_remembers_are_kept(tmp_path, monkeypatch):
    weights = tmp_path / "weights.pt"
    weights.write_bytes(bytes(range(256)) * 4099)
    hashing_started = threading.Event()
    hash_file = weight_memo._hash

    def slow_hash(path):
        hashing_started.set()
        return hash_file(path)

    monkeypatch.setattr(weight_memo, "_hash", slow_hash)
    calls = []

    def meanwhile():
        # runs in this thread while the hash runs in another; remembers another fact of the file
        calls.append(threading.get_ident())
        assert hashing_started.wait(10)
        weight_memo.weight_facts(weights, "width", lambda: 768, tmp_path)

    digest = weight_memo.weight_fingerprint(weights, tmp_path, meanwhile=meanwhile)
    assert digest == hashlib.sha256(weights.read_bytes()).hexdigest()
    assert calls == [threading.get_ident()]
    # both facts were remembered: neither is computed again, meanwhile does not run on a remembered hash
    refuse = lambda *args: (_ for _ in ()).throw(AssertionError("computed again"))  # noqa: E731
    monkeypatch.setattr(weight_memo, "_hash", refuse)
    assert weight_memo.weight_fingerprint(weights, tmp_path, meanwhile=refuse) == digest
    assert weight_memo.weight_facts(weights, "width", refuse, tmp_path) == 768


def test_a_cache_folder_written_with_a_tilde_finds_its_memo(tmp_path, monkeypatch):
    """`--cache-dir=~/c` reaches capgeo unexpanded: the memo was looked for in ./~/c (never found:
    every run hashed again) and written back to the real folder with only its own record."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    first, second = tmp_path / "a.pt", tmp_path / "b.pt"
    first.write_bytes(b"a" * 1000)
    second.write_bytes(b"b" * 1000)
    expanded = tmp_path / "home" / "c"
    expanded.mkdir(parents=True)
    weight_memo.weight_fingerprint(first, expanded)
    weight_memo.weight_fingerprint(second, expanded)
    refuse = lambda *args: (_ for _ in ()).throw(AssertionError("hashed again"))  # noqa: E731
    monkeypatch.setattr(weight_memo, "_hash", refuse)
    assert weight_memo.weight_fingerprint(first, "~/c") == hashlib.sha256(first.read_bytes()).hexdigest()
    assert weight_memo.weight_fingerprint(second, "~/c") == hashlib.sha256(second.read_bytes()).hexdigest()
    assert not (tmp_path / "~").exists()


def _tiny_checkpoint(folder):
    import json

    import torch

    from _clip_fixtures import tiny_clip, tiny_config

    config = tiny_config(77)
    torch.save(tiny_clip(config).state_dict(), folder / "tiny.pt")
    (folder / "tiny.json").write_text(json.dumps(config))
    return str(folder / "tiny.pt")


def test_truncation_and_ray_workers_keep_the_memo_in_the_cache_folder_given(tmp_path, monkeypatch):
    """`truncation` (and `report --truncation`) and the Ray workers' encoders wrote the memo to the
    default folder, outside --cache-dir: those runs hashed the checkpoint again every time."""
    from _action_fixtures import caption_set
    from capgeo.pipeline import truncation_profile
    from capgeo.scale.encode import ShardEncoder

    default, chosen = tmp_path / "default", tmp_path / "chosen"
    default.mkdir()
    chosen.mkdir()
    monkeypatch.setenv("CAPGEO_CACHE", str(default))
    checkpoint = _tiny_checkpoint(tmp_path)
    captions = caption_set([f"i{i // 2}" for i in range(12)], [f"a photo of thing {i}" for i in range(12)])
    truncation_profile(captions, checkpoint, lengths=[4], cache_dir=chosen, progress=False, batch_size=4, n_batches=2)
    assert (chosen / "weight-files.json").exists() and not (default / "weight-files.json").exists()

    hashed = []
    hash_file = weight_memo._hash
    monkeypatch.setattr(weight_memo, "_hash", lambda path: hashed.append(path) or hash_file(path))
    worker = ShardEncoder(checkpoint, "cpu", str(chosen))
    assert worker.load_error is None
    worker.encoder.info  # its identity, from the memo the driver's run left
    assert hashed == [] and not (default / "weight-files.json").exists()
    # a node without that folder keeps its memo in its own default folder
    ShardEncoder(checkpoint, "cpu", str(tmp_path / "not-on-this-node")).encoder.info
    assert (default / "weight-files.json").exists()


def test_an_edited_memo_fails_its_checksum_and_is_rebuilt(tmp_path, monkeypatch):
    """Editing checkpoint A's remembered fingerprint to B's made A serve B's cached vectors: the
    memo's checksum no longer matches, so it is ignored and A is hashed again."""
    import json

    first, second = tmp_path / "a.pt", tmp_path / "b.pt"
    first.write_bytes(b"a" * 1000)
    second.write_bytes(b"b" * 1000)
    weight_memo.weight_fingerprint(first, tmp_path)
    weight_memo.weight_fingerprint(second, tmp_path)
    memo_file = tmp_path / weight_memo.MEMO_FILE
    memo = json.loads(memo_file.read_text())
    records = memo["files"]
    records[str(first.resolve())]["facts"]["sha256"] = records[str(second.resolve())]["facts"]["sha256"]
    memo_file.write_text(json.dumps(memo))
    assert weight_memo.weight_fingerprint(first, tmp_path) == hashlib.sha256(first.read_bytes()).hexdigest()
    rebuilt = json.loads(memo_file.read_text())
    assert rebuilt["checksum"] == hashlib.sha256(json.dumps(rebuilt["files"], sort_keys=True).encode()).hexdigest()


def test_a_memo_nested_too_deeply_or_with_a_huge_number_is_ignored(tmp_path):
    """A RecursionError or an integer over Python's 4,300-digit limit was a traceback."""
    weights = tmp_path / "w.pt"
    weights.write_bytes(b"w" * 1000)
    for damaged in ("[" * 100_000 + "]" * 100_000, '{"checksum": ' + "7" * 5000 + ', "files": {}}'):
        (tmp_path / weight_memo.MEMO_FILE).write_text(damaged)
        assert weight_memo.weight_fingerprint(weights, tmp_path) == hashlib.sha256(weights.read_bytes()).hexdigest()
