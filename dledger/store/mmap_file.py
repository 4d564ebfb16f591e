"""One file of a DLedger MmapFileList: created whole, written with ``pwrite``, read through ``mmap``.

Rules (see ``mmap_file_list`` for the list): a new file is sized under ``<name>.creating`` and
linked into place (issue 13.4), so kill -9 never leaves a short list member; the descriptor is
for writes (``pwrite``/``pwritev``: ENOSPC is an error, not a SIGBUS), the read-only mapping for
reads; closing tolerates readers still holding views.
"""
from __future__ import annotations

import errno
import logging
import mmap
import os
from pathlib import Path
from typing import Union

from dledger.store.errors import StoreLayoutError

log = logging.getLogger(__name__)

Buffer = Union[bytes, bytearray, memoryview]
MIN_BLANK_LEN = 8
CREATING_SUFFIX = ".creating"  # a file being sized before it joins the list (see create_sized)
_IOV_MAX = 1024


def offset_to_file_name(offset: int) -> str:
    """``DLedgerUtils.offset2FileName``: 20 digits, zero-padded."""
    return "%020d" % offset


def create_sized(path: Path, file_size: int) -> int:
    """Create ``path`` already ``file_size`` bytes long and return a read-write descriptor.

    The file is made whole under ``<name>.creating`` (open + ``ftruncate``) and only then linked
    under its real name, so a kill -9 at any point leaves either no file, a complete one, or a
    ``.creating`` leftover that :meth:`MmapFileList.load` removes, never a 0-byte list member.
    ``os.link`` (not ``rename``) refuses to replace a file that appeared under the real name."""
    tmp = path.with_name(path.name + CREATING_SUFFIX)
    if path.exists():
        raise StoreLayoutError(f"cannot create {path}: a file not in the list already exists")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, file_size)  # sparse, zero-filled, like a Java mmap of a new file
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise StoreLayoutError(f"cannot create {path}: a file not in the list already exists") from None
        finally:
            os.unlink(tmp)
    except BaseException:
        os.close(fd)
        raise
    return fd


class MmapFile:
    """One fixed-size file: a descriptor for writes and a read-only mapping for reads."""

    __slots__ = ("path", "from_offset", "file_size", "fd", "mm", "wrote", "start")

    def __init__(self, path: Path, from_offset: int, file_size: int, *, create: bool) -> None:
        self.path = path
        self.from_offset = from_offset
        self.file_size = file_size
        self.fd = create_sized(path, file_size) if create else os.open(path, os.O_RDWR)
        try:
            self.mm = mmap.mmap(self.fd, file_size, access=mmap.ACCESS_READ)
        except BaseException:
            os.close(self.fd)
            if create:
                os.unlink(path)
            raise
        self.wrote = 0
        self.start = 0

    @property
    def full(self) -> bool:
        return self.wrote == self.file_size

    @property
    def end_offset(self) -> int:
        return self.from_offset + self.file_size

    def close(self) -> None:
        try:
            self.mm.close()
        except BufferError:
            pass  # a reader still holds a view; the mapping goes when the last view does
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def destroy(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def __repr__(self) -> str:
        return f"MmapFile({self.path.name}, wrote={self.wrote}, start={self.start})"


def pwritev_all(fd: int, bufs: list[Buffer], offset: int) -> None:
    """Write all buffers at ``offset``, resuming after short writes (<= IOV_MAX per call)."""
    if len(bufs) == 1:
        n = os.pwrite(fd, bufs[0], offset)
        if n == len(bufs[0]):
            return
        bufs = [memoryview(bufs[0])[n:]] if n > 0 else bufs
        offset += max(n, 0)
    pending = [memoryview(b) for b in bufs if len(b)]
    i = 0
    while i < len(pending):
        chunk = pending[i:i + _IOV_MAX]
        n = os.pwritev(fd, chunk, offset) if len(chunk) > 1 else os.pwrite(fd, chunk[0], offset)
        if n <= 0:
            raise OSError(errno.ENOSPC, "short write")
        offset += n
        while n:
            if n >= len(pending[i]):
                n -= len(pending[i])
                i += 1
            else:
                pending[i] = pending[i][n:]
                n = 0


def zero_if_nonzero(f: MmapFile, rel: int) -> None:
    """Zero up to 8 bytes at ``rel`` unless already zero (a hole must not be allocated)."""
    n = min(MIN_BLANK_LEN, f.file_size - rel)
    if n > 0 and f.fd >= 0 and os.pread(f.fd, n, rel) != bytes(n):  # pread: never faults a hole in
        try:
            os.pwrite(f.fd, bytes(n), rel)
        except OSError as exc:  # pragma: no cover - overwriting allocated blocks
            log.error("could not zero %d bytes at %d of %s: %s", n, rel, f.path, exc)
