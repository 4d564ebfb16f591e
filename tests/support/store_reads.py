"""Reads of a broker's store files that several tests share (test-only: no process, no writes).

Rules: a read takes the store root a conf names (``storePathRootDir``) and returns bytes; it never
opens a store through the broker's own classes, so a test compares what is on disk, not what the
code under test believes is there.

Theory of operation: the commitlog is the concatenation of its files in name order (each name is
its first byte's offset, zero-padded), so the first ``upto`` bytes of the log are the first
``upto`` bytes of that concatenation; two replicas that agree up to ``upto`` return equal bytes.
"""
from __future__ import annotations

from pathlib import Path


def commitlog_bytes(root: Path, upto: int) -> bytes:
    """The first ``upto`` bytes of the commitlog under ``root`` (files concatenated in order)."""
    out = bytearray()
    for f in sorted((root / "commitlog").iterdir()):
        if len(out) >= upto:
            break
        out += f.read_bytes()
    return bytes(out[:upto])
