"""File primitives of the upgrade tool: sparse-aware digests, comparisons and atomic copies.

Rules:
- Holes read as zeros. Everything here asks the file system where data lives
  (``SEEK_DATA``/``SEEK_HOLE``) and never reads a chunk that lies entirely in a hole, so the cost
  of a sparse multi-GiB file is the cost of its data, not of its apparent size.
- A content digest is defined over content only (not over allocation): the range is cut into
  1 MiB chunks from its start, each chunk is SHA-256'd (a chunk inside a hole takes the
  precomputed digest of a zero chunk), and the digest is SHA-256 over the chunk digests. Two
  ranges with equal bytes have equal digests whatever their holes.
- A copy is never visible half-done: bytes go to ``<dst>.upgrade-tmp``, which is fsynced and
  verified by digest against the source before it is renamed over ``dst`` (and the directory
  fsynced). A leftover ``.upgrade-tmp`` from a killed run is simply discarded and redone.
- Every open is ``O_NOFOLLOW``: a symbolic link in a store is never followed (issue 23.8; the
  commands refuse stores with links up front, ``upgrade.store_links``).
- ``MQUPGRADE_THROTTLE_BPS`` (bytes per second) slows copies down, for kill tests and demos.

Theory of operation: :func:`data_ranges` yields the data extents of a byte range; the digest,
compare and copy loops walk chunks and consult the next data extent to skip holes. Progress is
reported through an optional ``on_bytes(n)`` callback (the CLI feeds a tqdm bar on stderr).
"""
from __future__ import annotations

import errno
import hashlib
import os
import time
from pathlib import Path
from typing import Callable, Iterator, Optional

from dledger.store.safefile import fsync_dir

CHUNK = 1 << 20
TMP_SUFFIX = ".upgrade-tmp"
THROTTLE_ENV = "MQUPGRADE_THROTTLE_BPS"
_ZERO = bytes(CHUNK)
_ZERO_DIGEST = hashlib.sha256(_ZERO).digest()

OnBytes = Optional[Callable[[int], None]]


class CopyVerifyError(RuntimeError):
    """The bytes written differ from the source (disk trouble or a source changing under us)."""


def data_ranges(fd: int, start: int, end: int) -> Iterator[tuple[int, int]]:
    """``(begin, stop)`` sub-ranges of ``[start, end)`` that may hold data; the rest is holes."""
    pos = start
    while pos < end:
        try:
            begin = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # only a hole up to EOF
                return
            yield pos, end  # SEEK_DATA unsupported: assume data
            return
        if begin >= end:
            return
        stop = min(os.lseek(fd, begin, os.SEEK_HOLE), end)
        yield begin, stop
        pos = stop


def allocated_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes the file occupies on disk (``st_blocks * 512``)."""
    return os.stat(path).st_blocks * 512


class _Extents:
    """Answers "does ``[a, b)`` touch data?" for increasing ``a`` with few ``lseek`` calls."""

    def __init__(self, fd: int, end: int) -> None:
        self._it = data_ranges(fd, 0, end)
        self._cur: Optional[tuple[int, int]] = next(self._it, None)

    def touches(self, a: int, b: int) -> bool:
        while self._cur is not None and self._cur[1] <= a:
            self._cur = next(self._it, None)
        return self._cur is not None and self._cur[0] < b


def _pread_full(fd: int, size: int, pos: int) -> bytes:
    data = os.pread(fd, size, pos)
    if len(data) < size:  # beyond EOF counts as zeros (a shorter file compares as zero-padded)
        data += bytes(size - len(data))
    return data


def content_digest(path: str | os.PathLike[str], start: int, end: int, on_bytes: OnBytes = None) -> str:
    """Digest of the content of ``[start, end)`` (see the module rules)."""
    outer = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        extents = _Extents(fd, end)
        pos = start
        while pos < end:
            stop = min(pos + CHUNK, end)
            if stop - pos == CHUNK and not extents.touches(pos, stop):
                outer.update(_ZERO_DIGEST)
            else:
                outer.update(hashlib.sha256(_pread_full(fd, stop - pos, pos)).digest())
                if on_bytes:
                    on_bytes(stop - pos)
            pos = stop
    finally:
        os.close(fd)
    return f"sha256x1m:{outer.hexdigest()}"


def _first_diff(a: bytes, b: bytes) -> int:
    """Index of the first differing byte of two unequal equal-length buffers (memcmp halving)."""
    lo, hi = 0, len(a)
    while hi - lo > 64:
        mid = (lo + hi) // 2
        if a[lo:mid] != b[lo:mid]:
            hi = mid
        else:
            lo = mid
    for i in range(lo, hi):
        if a[i] != b[i]:
            return i
    return hi  # pragma: no cover - callers pass unequal buffers


def first_difference(path_a: str | os.PathLike[str], path_b: str | os.PathLike[str], start: int, end: int,
                     on_bytes: OnBytes = None) -> tuple[Optional[int], int]:
    """(first differing file offset in ``[start, end)`` or None, bytes actually read per side)."""
    fa = os.open(path_a, os.O_RDONLY | os.O_NOFOLLOW)
    fb = os.open(path_b, os.O_RDONLY | os.O_NOFOLLOW)
    read = 0
    try:
        ea, eb = _Extents(fa, end), _Extents(fb, end)
        pos = start
        while pos < end:
            stop = min(pos + CHUNK, end)
            if ea.touches(pos, stop) or eb.touches(pos, stop):
                a = _pread_full(fa, stop - pos, pos)
                b = _pread_full(fb, stop - pos, pos)
                read += stop - pos
                if on_bytes:
                    on_bytes(stop - pos)
                if a != b:
                    return pos + _first_diff(a, b), read
            pos = stop
    finally:
        os.close(fa)
        os.close(fb)
    return None, read


def _throttle(started: float, done: int) -> None:
    bps = os.environ.get(THROTTLE_ENV)
    if not bps:
        return
    try:
        rate = float(bps)
    except ValueError:
        return
    if rate > 0:
        ahead = done / rate - (time.monotonic() - started)
        if ahead > 0:
            time.sleep(ahead)


def copy_range(src_fd: int, dst_fd: int, start: int, end: int, *, dst_is_zero: bool,
               on_bytes: OnBytes = None) -> int:
    """Copy ``[start, end)`` at the same positions; holes of the source are zeroed in the
    destination unless it is known to be zero there (a fresh sparse file). Returns bytes written."""
    written = 0
    t0 = time.monotonic()
    pos = start
    for begin, stop in list(data_ranges(src_fd, start, end)) + [(end, end)]:
        if not dst_is_zero:
            while pos < begin:  # a hole in the source: make the destination zero too
                n = min(CHUNK, begin - pos)
                os.pwrite(dst_fd, _ZERO[:n], pos)
                pos += n
                written += n
        pos = begin
        while pos < stop:
            data = os.pread(src_fd, min(CHUNK, stop - pos), pos)
            if not data:
                break
            os.pwrite(dst_fd, data, pos)
            pos += len(data)
            written += len(data)
            if on_bytes:
                on_bytes(len(data))
            _throttle(t0, written)
        pos = stop
    return written


def atomic_copy_file(src: str | os.PathLike[str], dst: str | os.PathLike[str], size: int,
                     on_bytes: OnBytes = None) -> str:
    """Copy the whole ``src`` (``size`` bytes) to ``dst`` via ``.upgrade-tmp``; returns the digest."""
    dst = Path(dst)
    tmp = dst.with_name(dst.name + TMP_SUFFIX)
    tmp.unlink(missing_ok=True)
    sfd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        dfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        try:
            os.ftruncate(dfd, size)
            copy_range(sfd, dfd, 0, size, dst_is_zero=True, on_bytes=on_bytes)
            os.fsync(dfd)
        finally:
            os.close(dfd)
    finally:
        os.close(sfd)
    return _verify_and_rename(src, tmp, dst, 0, size)


def atomic_patch_file(src: str | os.PathLike[str], dst: str | os.PathLike[str], start: int, end: int,
                      on_bytes: OnBytes = None) -> str:
    """Make ``dst[start:end]`` equal to ``src[start:end]`` without ever exposing a half-written
    ``dst``: ``dst`` is cloned to ``.upgrade-tmp`` (in-kernel copy), patched, fsynced, verified and
    renamed over ``dst``. Returns the digest of the patched range."""
    dst = Path(dst)
    tmp = dst.with_name(dst.name + TMP_SUFFIX)
    tmp.unlink(missing_ok=True)
    size = os.stat(dst).st_size
    ofd = os.open(dst, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        dfd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        try:
            os.ftruncate(dfd, size)
            for begin, stop in data_ranges(ofd, 0, size):  # keep dst's own bytes, holes stay holes
                pos = begin
                while pos < stop:
                    n = os.copy_file_range(ofd, dfd, stop - pos, pos, pos)
                    if n <= 0:
                        break
                    pos += n
            sfd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                copy_range(sfd, dfd, start, end, dst_is_zero=False, on_bytes=on_bytes)
            finally:
                os.close(sfd)
            os.fsync(dfd)
        finally:
            os.close(dfd)
    finally:
        os.close(ofd)
    return _verify_and_rename(src, tmp, dst, start, end)


def _verify_and_rename(src: str | os.PathLike[str], tmp: Path, dst: Path, start: int, end: int) -> str:
    want = content_digest(src, start, end)
    got = content_digest(tmp, start, end)
    if want != got:
        tmp.unlink(missing_ok=True)
        raise CopyVerifyError(f"copy of {src} [{start}, {end}) to {dst} does not verify ({got} != {want})")
    os.replace(tmp, dst)
    fsync_dir(dst.parent)
    # the broker's page checksums of the file it replaced no longer hold (broker.store.page_crc):
    # dropped, and sealed again from the new bytes at the broker's next start
    (dst.parent.with_name(dst.parent.name + ".pagecrc") / dst.name).unlink(missing_ok=True)
    return want


def atomic_write_text(path: str | os.PathLike[str], text: str, mode: int = 0o644) -> None:
    """Write a small text file via ``.upgrade-tmp`` + fsync + rename + directory fsync.

    ``mode`` is set on the temporary file before any byte is written, so a file holding a
    secret (0o600) is never readable by others, not even for an instant."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    os.fchmod(fd, mode)  # O_CREAT's mode is masked by umask and ignored for an existing file
    with open(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)
