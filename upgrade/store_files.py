"""The numbered files of a store directory (commitlog, DLedger data and index): names, sizes, space.

Rules: a file belongs to the list when its name is 20 digits (its first offset, as RocketMQ and
DLedger name them); anything else in the directory is ignored; a missing directory is empty.
``allocated`` is the space the file takes on disk (``st_blocks``), which a sparse file keeps small.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class CommitLogFile:
    name: str
    from_offset: int
    size: int
    allocated: int


def list_files(d: Path) -> list[CommitLogFile]:
    """The 20-digit files of ``d``, in name (offset) order."""
    if not d.is_dir():
        return []
    out = []
    for p in sorted(d.iterdir()):
        if p.is_file() and len(p.name) == 20 and p.name.isdigit():
            st = p.stat()
            out.append(CommitLogFile(p.name, int(p.name), st.st_size, st.st_blocks * 512))
    return out
