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
