"""Weights and vector files are identified by their sha256, re-read when the file changes."""

import hashlib
import os

from capgeo.encoders.base import file_fingerprint


def test_fingerprint_is_the_sha256_and_follows_a_rewrite(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"first weights")
    assert file_fingerprint(path) == hashlib.sha256(b"first weights").hexdigest()
    path.write_bytes(b"other weights, same path")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # a later write, even within one tick
    assert file_fingerprint(path) == hashlib.sha256(b"other weights, same path").hexdigest()
