"""Crash-safe small files: fsynced writes, directory fsync, and the ``.tmp`` + ``.bak`` safe write.

Rules
-----
* :func:`write_fsync` writes the whole buffer (short writes retried) and fsyncs the file before
  it returns; :func:`fsync_dir` makes a create, rename or delete in a directory durable.
* :func:`write_file_safely` is the write of DLedger's ``IOUtils.string2File`` and RocketMQ's
  ``MixAll.string2File``: the text goes to ``<f>.tmp`` (fsynced), the previous content of
  ``<f>`` is copied to ``<f>.bak`` (fsynced), then ``<f>.tmp`` replaces ``<f>`` and the
  directory is fsynced. Java deletes ``<f>`` before the rename; an atomic ``os.replace``
  means there is never a moment without a complete ``<f>``. The end state (``<f>`` new,
  ``<f>.bak`` previous) is the same.

These files hold Raft's vote (``currterm``) and the broker's metadata, so the fsyncs are part of
the contract, not an optimisation to drop. (Here rather than in ``broker``: ``dledger`` must not
import ``broker``; ``broker`` uses these.)
"""
from __future__ import annotations

import os
from pathlib import Path


def write_fsync(path: str | os.PathLike[str], data: bytes) -> None:
    """Create/truncate ``path``, write all of ``data`` and fsync it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file_safely(path: str | os.PathLike[str], text: str) -> None:
    """Safe write with ``.tmp`` and ``.bak`` (see module rules)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    bak = path.with_name(path.name + ".bak")
    write_fsync(tmp, text.encode("utf-8"))
    try:
        previous = path.read_bytes()
    except FileNotFoundError:
        previous = None
    if previous is not None:
        write_fsync(bak, previous)
    os.replace(tmp, path)
    fsync_dir(path.parent)
