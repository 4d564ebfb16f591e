"""MappedFile: one preallocated, mmapped store file (commitlog, ConsumeQueue or IndexFile).

Rules:
- The file name is ``UtilAll.offset2FileName(fromOffset)``: the absolute byte offset of byte 0,
  zero-padded to 20 digits (an IndexFile, named by its creation time, passes ``from_offset``
  instead). The file is exactly ``file_size`` bytes from the moment it exists: a new one is sized
  under a hidden ``.<name>.creating`` name (its first bytes, ``head``, written there too) and
  renamed into place, so a crash never leaves a short or headerless file under a real name. An
  existing file of another length is a :class:`FileSizeError` (a ``StoreLayoutError`` carrying
  both lengths, which ConsumeQueue and IndexFile translate into their own messages).
- ``read_only=True`` opens an existing file ``O_RDONLY`` and maps it ``PROT_READ`` (the upgrade
  tools and validator inspect a store that a broker may own); it never creates a file.
- Three positions, each a byte count from the file start: ``wrote_position`` (bytes appended),
  ``committed_position`` (visible to readers; equal to wrote here, as RocketMQ without a
  transient store pool), ``flushed_position`` (known durable). flushed <= committed <= wrote.
- Writers append under the CommitLog's put lock; readers see ``[0, committed_position)`` only.
- ``flush`` makes bytes durable with ``os.fdatasync`` on the file descriptor (it releases the
  GIL, ``mmap.flush`` does not); call it from a worker thread when the caller must not block.
- A fresh sparse page is slow to touch the first time (DESIGN §6), so a new file can be
  *warmed* (``warm=True``): zeros are written with ``pwrite`` (GIL released) and the mapping is
  made with ``MAP_POPULATE``, before the writer needs the file (AllocateMappedFileService).
- Never SIGBUS on a full disk: a store through a shared mapping into a hole of a sparse file
  that the filesystem cannot back kills the process with SIGBUS. So every byte range is given
  its blocks (``posix_fallocate``) *before* it is written through the mapping, by
  :class:`BlockReserve`: granules of up to 1 MiB, allocated on first use (a 420 MB IndexFile or
  a 1 GiB commitlog file is not reserved whole: on a small tmpfs that would not fit, and it
  would cost RAM there). ENOSPC/EDQUOT become :class:`DiskFullError` naming the file and the
  offset, raised before anything is written, so the caller refuses the write and nothing half
  written is visible. Creating a file reserves its first granule; a failed creation leaves no
  file behind. Measured here: ``posix_fallocate`` of 1 GiB costs ~3 ms on ext4 and ~145 ms on
  tmpfs; re-reserving allocated blocks ~2-10 us; one 1 MiB granule well under a millisecond.
  Files written at random (an IndexFile's slots and entries) use page-sized granules
  (``granule=``) and :meth:`MappedFile.reserve` / :meth:`MappedFile.reserve_bulk` directly.
- ``flush`` is ``fdatasync`` of the whole file: it covers every page written through the mapping
  (at any position), so the ConsumeQueue's and IndexFile's writes need no range ``msync``.
- Compiled with mypyc (``broker.native``): the compiled ConsumeQueue and IndexFile call it once
  or more per unit, and a call from compiled code into an interpreted module cost the
  ConsumeQueue ~80% more CPU per unit (measured: 200k ``put_message_position_info``, best of 3,
  process time, 0.73 us with its private file class, 1.33 us on an interpreted MappedFile,
  0.75 us compiled). So everything here is fully typed; compiled code checks declared types at
  run time (bytes, bytearray or memoryview for data; nothing else).

Theory of operation: a MappedFile is a thin, bounds-checked window on an ``mmap``. Slices are
handed out as ``memoryview``s so reads copy nothing; because an mmap cannot be closed while a
view is exported, ``close`` tolerates exported views (the mapping is released when the last view
dies) and ``destroy`` unlinks the file regardless.
"""
from __future__ import annotations

import errno
import logging
import mmap
import os
import time
from pathlib import Path
from typing import Final, Iterator, Optional

from mypy_extensions import mypyc_attr

from broker.store.errors import StoreError, StoreLayoutError

log = logging.getLogger(__name__)

OS_PAGE_SIZE: Final = mmap.PAGESIZE
_WARM_CHUNK: Final = 1 << 20
_ZEROS: Final = bytes(_WARM_CHUNK)


_GRANULE: Final = 1 << 20
#: appends of at least this many bytes go through ``pwrite`` on the file descriptor instead of a
#: copy into the mapping: the kernel fills the page cache (which the MAP_SHARED mapping shows at
#: once) without a user-space page fault per fresh 4 KiB page, and the GIL is released while it
#: copies. Measured (bench/store_append, 1 KiB x 256 batches, fresh files): the mapping copy ran
#: at ~325 MB/s, a quarter of the raw write bandwidth, all of it first-touch page faults.
_PWRITE_MIN: Final = 16 * 1024  # Final: compiled code inlines it (no module-dict lookup per append)


def _pwrite_all(fd: int, data: bytes | bytearray | memoryview, pos: int) -> None:
    view = memoryview(data)
    while view:
        done = os.pwrite(fd, view, pos)
        view = view[done:]
        pos += done


@mypyc_attr(native_class=False)  # an OSError too: a builtin base mypyc cannot compile natively
class DiskFullError(StoreError, OSError):
    """No space for blocks of ``path`` at ``offset`` (ENOSPC/EDQUOT); nothing was written.

    Also an ``OSError`` (errno ENOSPC), so callers that map I/O errors to a put status
    (``CREATE_MAPPED_FILE_FAILED``) keep working.
    """

    def __init__(self, path: str | os.PathLike[str], offset: int, length: int, cause: str = "") -> None:
        self.path = str(path)
        self.offset = offset
        self.length = length
        OSError.__init__(self, errno.ENOSPC,
                         f"disk full: no space for {length} bytes at offset {offset} of {path}"
                         f"{': ' + cause if cause else ''}")

    def __str__(self) -> str:
        return str(self.strerror)


def allocate(fd: int, path: str | os.PathLike[str], offset: int, length: int) -> None:
    """``posix_fallocate`` the range, raising :class:`DiskFullError` on ENOSPC/EDQUOT."""
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFullError(path, offset, length, os.strerror(exc.errno)) from None
        raise


class BlockReserve:
    """Which granules of one file are known to have blocks; allocates the others on demand."""

    __slots__ = ("fd", "path", "file_size", "granule", "_have", "ready_to")

    def __init__(self, fd: int, path: str | os.PathLike[str], file_size: int, granule: int = _GRANULE) -> None:
        self.fd = fd
        self.path = path
        self.file_size = file_size
        page = mmap.PAGESIZE
        self.granule = max(page, min(granule, file_size) + (-min(granule, file_size)) % page)
        self._have = bytearray(file_size // self.granule + 1)
        self.ready_to = 0  # [0, ready_to) is known to have blocks (a cheap check for appenders)

    def ensure_head(self) -> None:
        """Blocks for the first granule (a file being created)."""
        self.ensure(0, min(self.granule, self.file_size))

    def mark_all(self) -> None:
        """Every block exists already (the file was written in full, e.g. warmed)."""
        self._have = bytearray(b"\x01") * len(self._have)
        self.ready_to = self.file_size

    def ensure_bulk(self, start: int, end: int) -> None:
        """As :meth:`ensure` with one ``posix_fallocate`` for the whole range (a region written
        at random, such as an index file's hash slots: one call instead of one per granule)."""
        end = min(end, self.file_size)
        if end <= start:
            return
        g = self.granule
        if all(self._have[start // g:(end - 1) // g + 1]):
            return
        allocate(self.fd, self.path, start, end - start)
        first, last = -(-start // g), end // g  # granules wholly inside the range
        for i in range(first, last):
            self._have[i] = 1
        self.ensure(start, end)  # the granules cut by either edge (at most two more calls)

    def known_end(self, end: int) -> int:
        """After :meth:`ensure` of a range ending at ``end``: the end of the granule holding byte
        ``end - 1`` when that whole granule is known to have blocks, else ``end``."""
        if end <= 0:
            return end
        i = (end - 1) // self.granule
        if self._have[i]:
            return min((i + 1) * self.granule, self.file_size)
        return end

    def ensure(self, start: int, end: int) -> None:
        """Blocks for ``[start, end)`` exist when this returns; DiskFullError otherwise."""
        if end <= start:
            return
        g = self.granule
        have = self._have
        first, last = start // g, (end - 1) // g
        if first == last and have[first]:
            return
        for i in range(first, last + 1):
            if have[i]:
                continue
            gs = i * g
            ge = min(gs + g, self.file_size)
            try:
                allocate(self.fd, self.path, gs, ge - gs)
            except DiskFullError:
                lo, hi = max(gs, start), min(ge, end)  # the whole granule does not fit: just what is needed
                allocate(self.fd, self.path, lo, hi - lo)
                continue
            have[i] = 1
        while self.ready_to < self.file_size and have[self.ready_to // g]:
            self.ready_to = min(self.ready_to + g, self.file_size)


class FileSizeError(StoreLayoutError):
    """An existing file is not ``expected`` bytes long (``actual``); nothing was mapped."""

    def __init__(self, path: Path, actual: int, expected: int) -> None:
        self.path = path
        self.actual = actual
        self.expected = expected
        super().__init__(f"{path}: length {actual} != configured mapped file size {expected}")


def offset_to_file_name(offset: int) -> str:
    """``UtilAll.offset2FileName``."""
    return f"{offset:020d}"


def file_name_to_offset(name: str) -> int:
    if len(name) != 20 or not name.isdigit():
        raise StoreLayoutError(f"not a 20-digit offset file name: {name!r}")
    return int(name)


class MappedFile:
    """A fixed-size file mapped read/write; positions are relative to the file start."""

    def __init__(self, path: str | os.PathLike[str], file_size: int, *, warm: bool = False,
                 read_only: bool = False, from_offset: Optional[int] = None, granule: int = _GRANULE,
                 head: bytes = b"") -> None:
        """``from_offset``: byte 0's offset when the name is not a 20-digit offset; ``granule``:
        the BlockReserve granule; ``head``: bytes written at 0 of a new file before it is renamed
        into place (ignored when the file exists)."""
        self.path = Path(path)
        self.file_size = file_size
        self.file_from_offset = file_name_to_offset(self.path.name) if from_offset is None else from_offset
        self.read_only = read_only
        #: RocketMQ's firstCreateInQueue: the first file its queue ever created (ConsumeQueue pre-blank)
        self.first_create_in_queue = False
        exists = self.path.exists()
        if exists:
            actual = self.path.stat().st_size
            if actual != file_size:
                raise FileSizeError(self.path, actual, file_size)
        elif read_only:
            raise StoreLayoutError(f"{self.path}: does not exist (read-only open)")
        if exists:
            self._fd = os.open(self.path, os.O_RDONLY if read_only else os.O_RDWR)
        else:
            # Sized (and warmed) under a hidden name, then renamed: a crash never leaves a file
            # of the wrong length behind under a real offset name.
            tmp = self.path.with_name(f".{self.path.name}.creating")
            self._fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self._reserve = BlockReserve(self._fd, self.path, file_size, granule)
        try:
            if not exists:
                os.ftruncate(self._fd, file_size)
                if warm:
                    self._warm_pages()
                else:
                    self._reserve.ensure_head()
                if head:
                    self._reserve.ensure(0, len(head))
                    _pwrite_all(self._fd, head, 0)
                os.rename(tmp, self.path)
            map_flags = mmap.MAP_SHARED
            if warm and hasattr(mmap, "MAP_POPULATE"):
                map_flags |= mmap.MAP_POPULATE
            prot = mmap.PROT_READ if read_only else mmap.PROT_READ | mmap.PROT_WRITE
            self.mm = mmap.mmap(self._fd, file_size, flags=map_flags, prot=prot)
        except BaseException:
            os.close(self._fd)
            if not exists:
                tmp.unlink(missing_ok=True)
            raise
        self._view = memoryview(self.mm)
        self.wrote_position = 0
        self.committed_position = 0
        self.flushed_position = 0
        self.store_timestamp = 0  # STORETIMESTAMP of the last appended message
        self._closed = False

    def _warm_pages(self) -> None:
        """Make every page resident and allocated before the first append touches it."""
        pos = 0
        while pos < self.file_size:
            n = min(_WARM_CHUNK, self.file_size - pos)
            try:
                os.pwrite(self._fd, _ZEROS[:n], pos)
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise DiskFullError(self.path, pos, n, "while warming a new file") from None
                raise
            pos += n
        self._reserve.mark_all()

    # --- positions --------------------------------------------------------------------------
    @property
    def from_offset(self) -> int:
        """``file_from_offset`` under the name DLedger's ``MmapFile`` uses (``dispatch.StoreFile``)."""
        return self.file_from_offset

    @property
    def read_position(self) -> int:
        return self.committed_position

    def set_positions(self, pos: int) -> None:
        """Set wrote/committed/flushed to ``pos`` (load, recovery, truncation)."""
        if not 0 <= pos <= self.file_size:
            raise ValueError(f"{self.path}: position {pos} outside [0, {self.file_size}]")
        self.wrote_position = self.committed_position = self.flushed_position = pos

    @property
    def remaining(self) -> int:
        return self.file_size - self.wrote_position

    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def is_first_create_in_queue(self) -> bool:
        return self.first_create_in_queue

    @property
    def closed(self) -> bool:
        return self._closed

    # --- writing ----------------------------------------------------------------------------
    def reserve(self, start: int, end: int) -> None:
        """Make sure ``[start, end)`` has blocks (DiskFullError naming file and offset if not)."""
        self._reserve.ensure(start, end)

    def reserve_bulk(self, start: int, end: int) -> None:
        """As :meth:`reserve`, one ``posix_fallocate`` for the whole range (``BlockReserve.ensure_bulk``)."""
        self._reserve.ensure_bulk(start, end)

    def reserved_end(self, end: int) -> int:
        """After :meth:`reserve` of a range ending at ``end``: how far past it blocks are known to
        exist without another check (``BlockReserve.known_end``)."""
        return self._reserve.known_end(end)

    def append(self, data: bytes | bytearray | memoryview, publish: bool = True) -> int:
        """Append at the wrote position; returns the file position written.

        ``publish=False`` leaves ``committed_position`` behind (readers do not see the bytes)
        until :meth:`publish`: a batch spanning files becomes visible only once all of it is in.
        """
        pos = self.wrote_position
        n = len(data)
        if pos + n > self.file_size:
            raise ValueError(f"{self.path}: {n} bytes do not fit at {pos} (size {self.file_size})")
        if pos + n > self._reserve.ready_to:
            self._reserve.ensure(pos, pos + n)
        if n >= _PWRITE_MIN:
            _pwrite_all(self._fd, data, pos)
        else:
            self._view[pos:pos + n] = data
        self.wrote_position = pos + n
        if publish:
            self.committed_position = pos + n
        return pos

    def append_end_of_file(self, record: bytes, publish: bool = True) -> int:
        """Write the end-of-file blank at the wrote position and mark the file full.

        Only the 8-byte record is written; the rest of the file stays as it is (zeros), and the
        positions jump to the file end, exactly as RocketMQ's END_OF_FILE result does.
        """
        pos = self.wrote_position
        self._reserve.ensure(pos, pos + len(record))
        self._view[pos:pos + len(record)] = record
        self.wrote_position = self.file_size
        if publish:
            self.committed_position = self.file_size
        return pos

    def publish(self) -> None:
        """Make everything written visible to readers."""
        self.committed_position = self.wrote_position

    def write_at(self, pos: int, data: bytes | bytearray | memoryview) -> None:
        """Overwrite bytes at ``pos`` (blank records, repair); positions are not moved."""
        if pos < 0 or pos + len(data) > self.file_size:
            raise ValueError(f"{self.path}: write of {len(data)} bytes at {pos} outside the file")
        self._reserve.ensure(pos, pos + len(data))
        self._view[pos:pos + len(data)] = data

    # --- reading ----------------------------------------------------------------------------
    def select(self, pos: int, size: int | None = None) -> memoryview | None:
        """Committed bytes ``[pos, pos+size)`` (or to the read position); None if not readable."""
        read = self.committed_position
        if pos < 0 or pos >= read:
            return None
        end = read if size is None else pos + size
        if end > read:
            return None
        return self._view[pos:end]

    def read_at(self, pos: int, size: int) -> bytes:
        """``size`` bytes at ``pos`` by ``pread``, not through the mapping: a hole reads as zeros
        where a read fault of a shared mapping on a full tmpfs would be SIGBUS."""
        return os.pread(self._fd, size, pos)

    def data_extents(self, start: int = 0) -> Iterator[tuple[int, int]]:
        """(begin, end) file ranges that may hold data (``SEEK_DATA``/``SEEK_HOLE``; holes are zeros)."""
        pos = start
        while pos < self.file_size:
            try:
                pos = os.lseek(self._fd, pos, os.SEEK_DATA)
            except OSError:
                return
            end = min(os.lseek(self._fd, pos, os.SEEK_HOLE), self.file_size)
            yield pos, end
            pos = end

    def zero_from(self, pos: int) -> int:
        """Zero every non-zero byte at or after ``pos``; returns how many bytes were rewritten.

        Truncation must not leave the tail of a torn or superseded record behind: a later
        recovery would find it after new records and take it for corruption. Holes are skipped.
        """
        rewritten = 0
        for begin, end in list(self.data_extents(pos)):
            at = max(begin, pos)
            while at < end:
                stop = min(at + _WARM_CHUNK, end)
                if self._view[at:stop] != _ZEROS[:stop - at]:
                    self._view[at:stop] = _ZEROS[:stop - at]
                    rewritten += stop - at
                at = stop
        return rewritten

    def whole(self) -> memoryview:
        """The whole mapping, committed or not (recovery scans past the positions)."""
        return self._view

    # --- durability -------------------------------------------------------------------------
    def flush(self) -> int:
        """Make everything committed so far durable; returns the new flushed position."""
        target = self.committed_position
        if target > self.flushed_position and not self._closed:
            os.fdatasync(self._fd)
            self.flushed_position = target
        return self.flushed_position

    def force(self) -> None:
        """fdatasync whatever the positions say: bytes a killed process left in the page cache
        count as flushed after recovery, so recovery makes them durable once (issue 13.5)."""
        if not self._closed:
            os.fdatasync(self._fd)

    # --- life cycle -------------------------------------------------------------------------
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._view.release()
        try:
            self.mm.close()
        except BufferError:  # a reader still holds a view; the mapping dies with it
            log.debug("%s: mapping still referenced, released later", self.path)
        os.close(self._fd)

    def destroy(self) -> None:
        """Close and delete the file."""
        self.close()
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass

    def last_modified(self) -> float:
        return self.path.stat().st_mtime

    def age_seconds(self, now: float | None = None) -> float:
        return (time.time() if now is None else now) - self.last_modified()

    def __repr__(self) -> str:
        return (f"MappedFile({self.path.name}, wrote={self.wrote_position}, "
                f"flushed={self.flushed_position})")
