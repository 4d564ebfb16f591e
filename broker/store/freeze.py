"""Freezing the old commitlog: what the first start in DLedger mode does to a classic store.

Rules (reference §4.3, RocketMQ 4.9.8 ``DLedgerCommitLog.recover``, first start on an old store):
- Input: the commitlog directory, ``mappedFileSizeCommitLog`` and the *recovered* max physical
  offset (the caller recovers first: classic recovery, or ``mqupgrade apply`` after its own
  recover step). The recovered end must lie in the last file; files beyond it mean the store
  was not recovered and nothing is written.
- On the last file, at its wrote position ``wrotePos = maxOffset - fromOffset``: read
  ``[size:int][magic:int]``; if ``magic != 0xCBD43194`` write ``[fileSize - wrotePos:int]
  [0xCBD43194]`` there (8 bytes, big-endian) and fsync. Nothing else of the old commitlog is
  ever written: the rest of the file stays as it is (zeros).
- ``dividedCommitlogOffset = lastFile.fromOffset + fileSize``: the first DLedger data file is
  named with that offset, so physical offsets continue across the divide.
- Idempotent: a second freeze finds the blank and writes nothing (a recovered frozen store ends
  at the blank, because classic recovery stops at the last file's end-of-file blank).
- No commitlog files: nothing to freeze, ``divided_commitlog_offset`` is -1 (DLedger starts at 0).
- A wrote position within 8 bytes of the file end cannot take a blank; RocketMQ never leaves one
  (a record is placed only when 8 bytes remain after it), so it is reported as an error.

Theory of operation: pure function over one file, a pread and at most one pwrite; O(1) in the
store size. It lives in the store (not in ``upgrade``) because the store's first DLedger start
needs it; the upgrade tool uses it from here. ``DLedgerCommitLog`` calls :func:`freeze_commitlog` on its first start (with the max
offset its classic recovery found); ``mqupgrade apply --freeze`` calls it ahead of time, so the
first start finds the blank already written. Both give the bytes Apache writes (tested against
the fixtures' ``rmq-mixed`` / ``variety-mixed``).
"""
from __future__ import annotations

import os
import struct
from dataclasses import asdict, dataclass
from pathlib import Path
from broker.store.store_types import JsonObject

BLANK_MAGIC_CODE = -875286124  # 0xCBD43194 (broker.store.message.BLANK_MAGIC_CODE)
_BLANK = struct.Struct(">ii")
_NAME_DIGITS = 20


class FreezeError(RuntimeError):
    """The commitlog is not in a state that can be frozen (one line for the operator)."""


@dataclass(frozen=True)
class FreezePoint:
    """Where the blank goes and what the divide will be."""

    last_file: str  # path of the last old commitlog file ("" if there is none)
    file_from_offset: int
    file_size: int
    wrote_position: int  # position of the blank in the last file
    blank_present: bool  # the blank was already there before this call
    divided_commitlog_offset: int  # -1 when there is no old commitlog

    @property
    def blank_bytes(self) -> bytes:
        return _BLANK.pack(self.file_size - self.wrote_position, BLANK_MAGIC_CODE)

    def to_dict(self) -> JsonObject:
        return asdict(self)


def _commitlog_files(commit_log_dir: Path) -> list[Path]:
    if not commit_log_dir.is_dir():
        return []
    return sorted(p for p in commit_log_dir.iterdir()
                  if p.is_file() and len(p.name) == _NAME_DIGITS and p.name.isdigit())


def freeze_point(commit_log_dir: str | os.PathLike[str], max_offset: int, file_size: int) -> FreezePoint:
    """Compute the freeze without writing (FreezeError if the store is not recovered)."""
    files = _commitlog_files(Path(commit_log_dir))
    if not files:
        return FreezePoint("", -1, file_size, 0, False, -1)
    last = files[-1]
    if last.is_symlink():  # never write (or read) through a link out of the store (issue 23.8)
        raise FreezeError(f"{last} is a symbolic link (to {os.readlink(last)}); replace it with the real file")
    from_offset = int(last.name)
    actual = last.stat().st_size
    if actual != file_size:
        raise FreezeError(f"{last}: {actual} bytes, expected mappedFileSizeCommitLog={file_size}")
    wrote = max_offset - from_offset
    if wrote < 0:
        raise FreezeError(
            f"{last}: recovered end {max_offset} lies before this last file (from {from_offset}); "
            "recover the store first (files beyond its end would be dropped)")
    if wrote > file_size - 8:
        raise FreezeError(f"{last}: wrote position {wrote} leaves no room for an 8-byte blank")
    rfd = os.open(last, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        head = os.pread(rfd, 8, wrote)
    finally:
        os.close(rfd)
    present = len(head) == 8 and _BLANK.unpack(head)[1] == BLANK_MAGIC_CODE
    return FreezePoint(str(last), from_offset, file_size, wrote, present, from_offset + file_size)


def freeze_commitlog(commit_log_dir: str | os.PathLike[str], max_offset: int, file_size: int) -> FreezePoint:
    """Write the tail blank unless present; returns the point (``blank_present`` = it was there)."""
    point = freeze_point(commit_log_dir, max_offset, file_size)
    if point.divided_commitlog_offset < 0 or point.blank_present:
        return point
    fd = os.open(point.last_file, os.O_WRONLY | os.O_NOFOLLOW)
    try:
        if os.pwrite(fd, point.blank_bytes, point.wrote_position) != 8:
            raise FreezeError(f"{point.last_file}: short write of the blank record")
        os.fsync(fd)
    finally:
        os.close(fd)
    return point
