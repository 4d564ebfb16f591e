"""MmapFileList: a directory of fixed-size files forming one contiguous byte address space.

Rules (DLedger 0.3.1.2 ``MmapFileList`` / ``DefaultMmapFile``)
-------------------------------------------------------------
* Files are named by their absolute start offset, 20 zero-padded digits. Every file has the
  configured size; consecutive files differ by exactly that size. Anything else is a
  :class:`StoreLayoutError` naming the file (DLedger would ``System.exit``).
* Each file tracks ``wrote`` (bytes used from its start), ``start`` (first valid byte, set by
  :meth:`reset_offset`) and is *full* when ``wrote == file_size``. After :meth:`load` every
  file is full; recovery then truncates to the real end.
* Data lists append with ``use_blank=True``: a record of ``n`` bytes is placed only if
  ``n + MIN_BLANK_LEN`` bytes remain, otherwise the rest of the file is filled with the blank
  ``[0xFFFFFFFF][remaining:int]`` + zeros and the record starts the next file. Index lists use
  ``use_blank=False`` (32-byte units in files whose size is a multiple of 32 never straddle).
* An empty list creates its first file at ``first_file_offset`` (rounded down to a file
  boundary): RocketMQ starts the DLedger data list at ``divided_commitlog_offset``.
* A new file is created whole (issue 13.4): sized under ``<name>.creating`` and then linked under
  its real name, so kill -9 never leaves a short list member. :meth:`MmapFileList.load` removes
  ``.creating`` leftovers and a 0-byte last file (what an older two-step creation could leave;
  it holds nothing), logging one line; any other wrong length is still refused.
* Truncation only moves write positions and drops whole files; the first 8 bytes at the new
  end are zeroed (when not already zero) so a restart's recovery scan stops there instead of
  resurrecting the truncated suffix.

Theory of operation
-------------------
Appending is two-phase so callers can learn positions before bytes exist (the leader's append
hooks need ``pos``): :meth:`plan_append` lays out a batch of record sizes, blanks and file
rolls without touching the disk; the caller fills its buffers; :meth:`commit_stream` (one
contiguous buffer) or :meth:`commit_records` (one buffer per record) writes them with one
``pwrite``/``pwritev`` per file and only then advances the write positions. Because the files
are contiguous in offset space, a planned batch is one contiguous byte range.

Writes use ``pwrite`` on the file descriptor, reads use a read-only ``mmap`` of the same file
(Linux shares the page cache between them). Deliberate: a store through a shared mapping that
hits ENOSPC on a sparse file kills the process with SIGBUS, whereas ``pwrite`` reports
``OSError(ENOSPC)``; we turn that into :class:`DiskFullError` after rolling the batch back
(new files removed, headers already written zeroed, positions unchanged), so nothing
half-appended is visible now or after a restart. ``pwrite`` into fresh sparse files is also
faster here than first-touch page faults through a mapping (DESIGN §6 measurements).

Concurrency: one writer thread (the event loop) mutates the list; :meth:`flush` may run
concurrently in one worker thread. A lock guards the file list and ``flushed_where``; the
worker ``fdatasync``s duplicated descriptors outside the lock, and a truncation generation
counter stops it from claiming durability for bytes that were truncated meanwhile.
"""
from __future__ import annotations

import errno
import logging
import os
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from dledger.store.errors import AppendMismatchError, DiskFullError, DLedgerStoreError, StoreLayoutError
from dledger.store.mmap_file import (  # noqa: F401 - re-exported: the list's vocabulary
    CREATING_SUFFIX, MIN_BLANK_LEN, Buffer, MmapFile, offset_to_file_name, pwritev_all, zero_if_nonzero,
)
from dledger.store.safefile import fsync_dir

log = logging.getLogger(__name__)

BLANK_MAGIC_CODE = -1
DELETE_FILES_BATCH_MAX = 10
_BLANK = struct.Struct(">ii")


@dataclass
class AppendPlan:
    """Where a batch of records will go. ``[start, end)`` is one contiguous byte range."""

    start: int
    end: int
    positions: list[int]
    sizes: list[int]
    blanks: list[tuple[int, int]] = field(default_factory=list)  # (absolute pos, length)
    new_files: list[int] = field(default_factory=list)  # from offsets to create

    def write_blanks(self, stream: bytearray | memoryview) -> None:
        """Write the blank records into a stream buffer that covers ``[start, end)``."""
        for pos, length in self.blanks:
            rel = pos - self.start
            _BLANK.pack_into(stream, rel, BLANK_MAGIC_CODE, length)
            stream[rel + 8:rel + length] = bytes(length - 8)


class MmapFileList:
    """See the module docstring. Offsets are absolute byte positions in the list."""

    def __init__(self, store_path: str | os.PathLike[str], file_size: int, *,
                 first_file_offset: int = 0) -> None:
        if file_size <= MIN_BLANK_LEN:
            raise ValueError(f"file size {file_size} too small")
        self.store_path = Path(store_path)
        self.file_size = file_size
        self.first_file_offset = first_file_offset - first_file_offset % file_size
        self.files: list[MmapFile] = []
        self._lock = threading.Lock()
        self._flushed_where = 0
        self._generation = 0  # bumped by every truncation / removal
        self._dir_dirty = False

    # ------------------------------------------------------------------ loading and layout
    def load(self) -> None:
        """Open every file of the directory (all must have the configured size)."""
        self.store_path.mkdir(parents=True, exist_ok=True)
        names = sorted(p.name for p in self.store_path.iterdir())
        names = self._drop_unfinished(names)
        for name in names:
            if not (len(name) == 20 and name.isdigit()):
                raise StoreLayoutError(f"unexpected file {self.store_path / name} in a DLedger file list "
                                       "(names are 20-digit offsets)")
        lengths = {name: (self.store_path / name).stat().st_size for name in names}
        self.files_on_disk = len(names)
        for name in names:
            path = self.store_path / name
            length = lengths[name]
            if length != self.file_size:
                raise StoreLayoutError(self._size_mismatch(path, length, set(lengths.values())))
            offset = int(name)
            if offset % self.file_size:
                raise StoreLayoutError(f"{path}: offset {offset} is not a multiple of the file size {self.file_size}")
            f = MmapFile(path, offset, self.file_size, create=False)
            f.wrote = self.file_size
            self.files.append(f)
        self.check_self()

    def _size_mismatch(self, path: Path, length: int, all_lengths: set[int]) -> str:
        """Why a file has the wrong length, and the real fix (issue 13.8: never "delete files").

        Every file the same other length: the store was written with that file size, so the
        configuration changed. One file of another length: that file is damaged (cut short by an
        interrupted copy or a full disk, or extended by hand); its data is needed, so the fix is
        to copy it again or restore the member, never to delete anything."""
        if all_lengths == {length} and self.files_on_disk > 1 and length % 32 == 0:
            return (f"every file in {self.store_path} is {length} bytes but the configured file size is "
                    f"{self.file_size}: this store was written with file size {length}. Set the file size back "
                    f"to {length} (a broker: mappedFileSizeCommitLog={length}; dledger server: --data-file-size / "
                    f"--index-file-size); do not delete files, they hold the log")
        how = f"{self.file_size - length} bytes short" if length < self.file_size else \
            f"{length - self.file_size} bytes longer"
        return (f"{path} is {length} bytes, {how} of the configured file size {self.file_size}: the file is "
                f"damaged (an interrupted copy or restore, a full disk while copying, a truncation), not a leftover "
                f"of a size change; do not delete it or any other file. Copy it again in full from where it came "
                f"from, or restore this member from its replicas: stop it, move {self.store_path.parent} away "
                f"(keep it) and restart it so the leader re-replicates the log"
                + (f" (if this store was written with file size {length}, set the file size back to {length} "
                   "instead)" if all_lengths == {length} else ""))

    def _drop_unfinished(self, names: list[str]) -> list[str]:
        """Remove what an aborted file creation can leave: ``*.creating`` files, and a 0-byte
        *last* file (an older version created then sized in two steps; it holds nothing, and
        nothing can point into it because no byte was ever written there)."""
        removed = []
        for name in [n for n in names if n.endswith(CREATING_SUFFIX)]:
            os.unlink(self.store_path / name)
            names.remove(name)
            removed.append(name)
        if names and len(names[-1]) == 20 and names[-1].isdigit() \
                and (self.store_path / names[-1]).stat().st_size == 0:
            os.unlink(self.store_path / names[-1])
            removed.append(names.pop())
        if removed:
            fsync_dir(self.store_path)
            log.warning("%s: removed %s left by an interrupted file creation (held no data)",
                        self.store_path, ", ".join(removed))
        return names

    def check_self(self) -> None:
        """Consecutive files must differ by exactly the file size (``checkSelf``)."""
        for prev, cur in zip(self.files, self.files[1:]):
            if cur.from_offset - prev.from_offset != self.file_size:
                raise StoreLayoutError(
                    f"file list {self.store_path} is damaged: {prev.path.name} is followed by "
                    f"{cur.path.name} (expected {offset_to_file_name(prev.end_offset)})")

    @property
    def first_file(self) -> MmapFile | None:
        return self.files[0] if self.files else None

    @property
    def last_file(self) -> MmapFile | None:
        return self.files[-1] if self.files else None

    @property
    def min_offset(self) -> int:
        f = self.first_file
        return f.from_offset + f.start if f else 0

    @property
    def max_wrote_position(self) -> int:
        f = self.last_file
        return f.from_offset + f.wrote if f else 0

    @property
    def flushed_where(self) -> int:
        return self._flushed_where

    def find_file(self, offset: int) -> MmapFile | None:
        files = self.files
        if not files or offset < files[0].from_offset or offset >= files[-1].end_offset:
            return None
        f = files[(offset - files[0].from_offset) // self.file_size]
        return f if f.from_offset <= offset < f.end_offset else None

    def get_data(self, pos: int, size: int | None = None) -> memoryview:
        """Zero-copy read-only view of ``size`` bytes at ``pos`` (default: to the file's write end).

        The range must lie inside one file and below its write position.
        """
        f = self.find_file(pos)
        if f is None:
            raise DLedgerStoreError(f"offset {pos} outside the file list {self.store_path} "
                                    f"[{self.files[0].from_offset if self.files else 0}, {self.max_wrote_position})")
        rel = pos - f.from_offset
        end = f.wrote if size is None else rel + size
        if (size is not None and size < 0) or end > f.wrote:
            raise DLedgerStoreError(f"read of {size} bytes at {pos} beyond the write position "
                                    f"{f.from_offset + f.wrote} of {f.path}")
        return memoryview(f.mm)[rel:end]

    # ------------------------------------------------------------------ appending
    def plan_append(self, sizes: Sequence[int], use_blank: bool = True) -> AppendPlan:
        """Lay out records of the given sizes after the current end (pure: no I/O)."""
        fs = self.file_size
        last = self.last_file
        new_files: list[int] = []
        if last is None:
            file_from, wrote = self.first_file_offset, 0
            new_files.append(file_from)
        elif last.full:
            file_from, wrote = last.end_offset, 0
            new_files.append(file_from)
        else:
            file_from, wrote = last.from_offset, last.wrote
        start = file_from + wrote
        need = MIN_BLANK_LEN if use_blank else 0
        positions: list[int] = []
        blanks: list[tuple[int, int]] = []
        for n in sizes:
            if wrote == fs:
                file_from += fs
                wrote = 0
                new_files.append(file_from)
            if n + need > fs - wrote:
                if not use_blank:
                    raise DLedgerStoreError(f"record of {n} bytes does not fit the {fs - wrote} bytes "
                                            f"left in {offset_to_file_name(file_from)} of {self.store_path}")
                blanks.append((file_from + wrote, fs - wrote))
                file_from += fs
                wrote = 0
                new_files.append(file_from)
                if n + need > fs:
                    raise DLedgerStoreError(f"record of {n} bytes cannot fit a file of {fs} bytes "
                                            f"({self.store_path})")
            positions.append(file_from + wrote)
            wrote += n
        return AppendPlan(start, file_from + wrote, positions, list(sizes), blanks, new_files)

    def commit_stream(self, plan: AppendPlan, stream: Buffer) -> None:
        """Write a buffer covering ``[plan.start, plan.end)`` (records and blanks in place)."""
        if len(stream) != plan.end - plan.start:
            raise ValueError(f"stream of {len(stream)} bytes for a plan of {plan.end - plan.start}")
        self._commit(plan, [memoryview(stream)])

    def commit_records(self, plan: AppendPlan, records: Sequence[Buffer]) -> None:
        """Write one buffer per planned record; blank fillers are generated here."""
        iov: list[Buffer] = []
        blanks = iter(plan.blanks)
        nxt = next(blanks, None)
        for pos, rec, size in zip(plan.positions, records, plan.sizes):
            while nxt is not None and nxt[0] < pos:
                iov.append(_BLANK.pack(BLANK_MAGIC_CODE, nxt[1]) + bytes(nxt[1] - 8))
                nxt = next(blanks, None)
            if len(rec) != size:
                raise ValueError(f"record of {len(rec)} bytes planned as {size}")
            iov.append(rec)
        if len(records) != len(plan.positions) or nxt is not None:
            raise ValueError("records do not match the plan")
        self._commit(plan, iov)

    def append(self, data: Buffer, use_blank: bool = True) -> int:
        """Append one record; returns its absolute position."""
        plan = self.plan_append([len(data)], use_blank)
        self._commit(plan, self._with_blanks(plan, data))
        return plan.positions[0]

    def pre_append(self, n: int, use_blank: bool = True) -> int:
        """DLedger's ``preAppend``: write any blank and create the file, return where ``n`` bytes go."""
        plan = self.plan_append([n], use_blank)
        if plan.new_files or plan.blanks:
            only = AppendPlan(plan.start, plan.positions[0], [], [], plan.blanks, plan.new_files)
            self._commit(only, self._with_blanks(only, b""))
        return plan.positions[0]

    def get_last_mapped_file(self, start_offset: int | None = None) -> MmapFile:
        """DLedger's ``getLastMappedFile(startOffset)``: the last file, created if the list is
        empty (at ``start_offset`` rounded down, default ``first_file_offset``) or full."""
        last = self.last_file
        if last is None:
            base = self.first_file_offset if start_offset is None else start_offset
            return self._create_file(base - base % self.file_size)
        if last.full:
            return self._create_file(last.end_offset)
        return last

    @staticmethod
    def _with_blanks(plan: AppendPlan, data: Buffer) -> list[Buffer]:
        return [_BLANK.pack(BLANK_MAGIC_CODE, n) + bytes(n - 8) for _, n in plan.blanks] + ([data] if data else [])

    def _commit(self, plan: AppendPlan, iov: list[Buffer]) -> None:
        last = self.files[-1] if self.files else None
        if (last is not None and not plan.new_files and len(iov) == 1
                and plan.start == last.from_offset + last.wrote and plan.end <= last.end_offset):
            try:  # fast path: one buffer inside the current file
                pwritev_all(last.fd, iov, last.wrote)
            except OSError as exc:
                self._rollback([], [(last, last.wrote)])
                raise self._os_error(exc, f"writing [{plan.start}, {plan.end})") from exc
            last.wrote = plan.end - last.from_offset
            return
        if plan.start != self._next_position():
            raise AppendMismatchError(f"stale append plan for {self.store_path}: starts at {plan.start}, "
                                      f"list ends at {self.max_wrote_position}")
        created: list[MmapFile] = []
        try:
            for off in plan.new_files:
                created.append(self._create_file(off))
        except OSError as exc:
            self._rollback(created, [])
            raise self._os_error(exc, f"creating {offset_to_file_name(off)}") from exc
        written: list[tuple[MmapFile, int]] = []  # (file, rel start) of each segment started
        try:
            for f, rel, bufs in self._segments(plan.start, plan.end, iov):
                written.append((f, rel))
                pwritev_all(f.fd, bufs, rel)
        except OSError as exc:
            self._rollback(created, written)
            raise self._os_error(exc, f"writing [{plan.start}, {plan.end})") from exc
        for f, _rel in written:
            f.wrote = min(self.file_size, plan.end - f.from_offset)

    def _next_position(self) -> int:
        last = self.last_file
        if last is None:
            return self.first_file_offset
        return last.end_offset if last.full else last.from_offset + last.wrote

    def _segments(self, start: int, end: int, iov: list[Buffer]):
        """Split a contiguous iov (byte buffers) at file boundaries: yields (file, rel, buffers)."""
        pos = start
        f = self.find_file(pos)
        if f is None:
            raise DLedgerStoreError(f"no file for offset {pos} in {self.store_path}")
        seg_rel, seg_end, bufs = pos - f.from_offset, min(f.end_offset, end), []
        for b in iov:
            n = len(b)
            while n:
                room = seg_end - pos
                if n <= room:
                    bufs.append(b)
                    pos += n
                    n = 0
                else:  # only a contiguous stream straddles a file boundary; records never do
                    mv = memoryview(b).cast("B")
                    bufs.append(mv[:room])
                    b = mv[room:]
                    pos += room
                    n -= room
                if pos == seg_end and pos < end:
                    yield f, seg_rel, bufs
                    f = self.find_file(pos)
                    if f is None:
                        raise DLedgerStoreError(f"no file for offset {pos} in {self.store_path}")
                    seg_rel, seg_end, bufs = 0, min(f.end_offset, end), []
        if pos != end:
            raise ValueError(f"buffers cover [{start}, {pos}) but the plan needs [{start}, {end})")
        yield f, seg_rel, bufs

    def _create_file(self, from_offset: int) -> MmapFile:
        if not self.files:
            self.store_path.mkdir(parents=True, exist_ok=True)
        f = MmapFile(self.store_path / offset_to_file_name(from_offset), from_offset, self.file_size, create=True)
        with self._lock:
            if self.files and self.files[-1].end_offset != from_offset:
                f.destroy()
                raise StoreLayoutError(f"cannot create {f.path.name} after {self.files[-1].path.name} "
                                       f"in {self.store_path}")
            self.files.append(f)
            self._dir_dirty = True
        return f

    def _rollback(self, created: list[MmapFile], written: list[tuple[MmapFile, int]]) -> None:
        """Undo a failed commit: zero headers already written, drop files created."""
        for f, rel in written:
            if f not in created:
                zero_if_nonzero(f, rel)
        with self._lock:
            for f in created:
                self.files.remove(f)
                f.destroy()
            self._generation += 1

    def _os_error(self, exc: OSError, what: str) -> DLedgerStoreError:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return DiskFullError(f"disk full while {what} in {self.store_path}: {exc}")
        return DLedgerStoreError(f"I/O error while {what} in {self.store_path}: {exc}")

    # ------------------------------------------------------------------ truncation
    def truncate_offset(self, offset: int) -> None:
        """Make ``offset`` the end: files after it are deleted, the file holding it ends there."""
        remove: list[MmapFile] = []
        for f in self.files:
            if f.end_offset > offset:
                if offset >= f.from_offset:
                    f.wrote = offset - f.from_offset
                    zero_if_nonzero(f, f.wrote)
                else:
                    remove.append(f)
        with self._lock:
            self._generation += 1
            self._flushed_where = min(self._flushed_where, max(offset, 0))
            self._remove(remove)

    def reset_offset(self, offset: int) -> None:
        """Make ``offset`` the beginning: files wholly before it are deleted."""
        remove: list[MmapFile] = []
        for f in reversed(self.files):
            if f.from_offset <= offset:
                if offset < f.end_offset:
                    f.start = offset - f.from_offset
                else:
                    remove.append(f)
        with self._lock:
            self._generation += 1
            self._remove(remove)

    def rebuild_with_pos(self, pos: int) -> bool:
        """Delete everything and start a fresh file so that ``min == max == pos``."""
        self.truncate_offset(-1)
        self._create_file(pos - pos % self.file_size)
        self.truncate_offset(pos)
        self.reset_offset(pos)
        return pos == self.max_wrote_position and pos == self.min_offset

    def update_where_position(self, where: int) -> None:
        """Declare bytes below ``where`` flushed (recovery: they were read back from disk)."""
        if where > self.max_wrote_position:
            log.warning("update_where_position %d > max wrote %d (%s)", where, self.max_wrote_position, self.store_path)
            return
        with self._lock:
            self._flushed_where = where

    def _remove(self, files: list[MmapFile]) -> None:
        for f in files:
            if f in self.files:
                self.files.remove(f)
                f.destroy()
                self._dir_dirty = True

    def delete_expired_files_by_time(self, expired_ms: float, *, now_ms: float | None = None,
                                     force: bool = False, max_files: int = DELETE_FILES_BATCH_MAX,
                                     below_offset: int | None = None) -> int:
        """Delete leading files not modified for ``expired_ms`` (never the last one).

        ``force`` ignores the age; ``below_offset`` protects files that end after it.
        """
        now_ms = time.time() * 1000 if now_ms is None else now_ms
        victims: list[MmapFile] = []
        for f in self.files[:-1]:
            if below_offset is not None and f.end_offset > below_offset:
                break
            if not force and os.stat(f.path).st_mtime * 1000 + expired_ms > now_ms:
                break  # never delete files in the middle
            victims.append(f)
            if len(victims) >= max_files:
                break
        with self._lock:
            self._generation += 1
            self._remove(victims)
        return len(victims)

    # ------------------------------------------------------------------ durability
    def flush(self) -> int:
        """``fdatasync`` every file holding unflushed bytes; returns the new ``flushed_where``.

        Safe to call from one worker thread while the writer appends.
        """
        with self._lock:
            target = self.max_wrote_position
            gen = self._generation
            fds = [os.dup(f.fd) for f in self.files
                   if f.end_offset > self._flushed_where and f.from_offset < target]
            dir_dirty, self._dir_dirty = self._dir_dirty, False
        try:
            for fd in fds:
                os.fdatasync(fd)
            if dir_dirty:
                fsync_dir(self.store_path)
        except BaseException:
            with self._lock:
                self._dir_dirty = self._dir_dirty or dir_dirty
            raise
        finally:
            for fd in fds:
                os.close(fd)
        with self._lock:
            if gen == self._generation and target > self._flushed_where:
                self._flushed_where = target
            return self._flushed_where

    def shutdown(self) -> None:
        with self._lock:
            for f in self.files:
                f.close()
            self.files = []

    def destroy(self) -> None:
        """Delete every file (tests and ``rebuild``)."""
        with self._lock:
            self._generation += 1
            self._remove(list(self.files))
            self._flushed_where = 0
