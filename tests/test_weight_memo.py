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
