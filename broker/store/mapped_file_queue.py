"""MappedFileQueue: the ordered list of MappedFiles forming one offset space (the commitlog).

Rules:
- Every file in the directory is exactly ``mapped_file_size`` bytes, is named by its start
  offset, and consecutive files differ by exactly ``mapped_file_size``; anything else is a
  StoreLayoutError naming the file (RocketMQ logs and carries on; we refuse to guess).
- Offsets are absolute: file *f* covers ``[f.file_from_offset, f.file_from_offset + size)``.
- ``flushed_where`` / ``committed_where`` are absolute offsets; ``max_offset`` is the last file's
  start + read position; ``min_offset`` the first file's start.
- The list is copy-on-write: writers (one put lock, the cleaner) replace it, readers take a
  snapshot reference and never see a half-updated list.
- The last file is never deleted by age.
- ``first_file_offset`` (0 unless a migrated store's ``classicFrom``, ``commitlog_regions``):
  files named below it are not this queue's (a frozen region's, in the same directory) and are
  never loaded; an empty queue creates its first file there and reads its max offset as it.
  ``load(upto=...)`` loads only files named below ``upto`` (a frozen region, read-only).

Theory of operation: ``load`` maps the files with every position at the file end (RocketMQ
does the same; recovery then moves the positions back with ``truncate_dirty_files``).
``get_last_mapped_file`` returns the file to append to, creating the next one when the last is
full. File creation goes through :class:`AllocateMappedFileService`, which creates (and warms)
the file *after* the requested one in a background thread, so a roll is usually instant.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from broker.store.errors import StoreLayoutError
from broker.store.mapped_file import MappedFile, file_name_to_offset, offset_to_file_name

log = logging.getLogger(__name__)


class AllocateMappedFileService:
    """Creates the next MappedFile ahead of time on a worker thread (warmed if asked)."""

    def __init__(self, warm: bool = True) -> None:
        self.warm = warm
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="AllocateMappedFile")
        self._pending: dict[Path, Future[MappedFile]] = {}
        self._lock = threading.Lock()
        self._closed = False

    def _submit(self, path: Path, size: int) -> Future[MappedFile]:
        fut = self._pending.get(path)
        if fut is None:
            fut = self._pool.submit(MappedFile, path, size, warm=self.warm)
            self._pending[path] = fut
        return fut

    def put_request_and_return(self, path: Path, next_path: Path | None, size: int) -> MappedFile:
        """The file at ``path`` (pre-created if it was requested before); pre-creates ``next_path``."""
        with self._lock:
            fut = self._pending.pop(path, None)
            if fut is None or self._closed:
                mf = MappedFile(path, size, warm=False)
            else:
                mf = fut.result()
            if next_path is not None and not self._closed:
                self._submit(next_path, size)
            return mf

    def discard_after(self, offset_path_dir: Path) -> None:
        """Drop pre-created files in ``offset_path_dir`` (truncation moved the end backwards)."""
        with self._lock:
            for path in [p for p in self._pending if p.parent == offset_path_dir]:
                fut = self._pending.pop(path)
                try:
                    fut.result().destroy()
                except Exception:  # noqa: BLE001 - best effort cleanup of a spare file
                    log.exception("discarding pre-allocated %s", path)

    def shutdown(self) -> None:
        """Stop; spare files created ahead are deleted (they hold no data)."""
        with self._lock:
            self._closed = True
            pending, self._pending = self._pending, {}
        for path, fut in pending.items():
            try:
                fut.result().destroy()
            except Exception:  # noqa: BLE001
                log.exception("cleaning pre-allocated %s", path)
        self._pool.shutdown(wait=True)


class MappedFileQueue:
    """The files of one directory as a single append-only offset space."""

    def __init__(self, store_path: str | os.PathLike[str], mapped_file_size: int,
                 allocate_service: AllocateMappedFileService | None = None, first_file_offset: int = 0) -> None:
        if mapped_file_size <= 0:
            raise ValueError(f"mapped file size must be positive, got {mapped_file_size}")
        if first_file_offset % mapped_file_size:
            raise ValueError(f"first file offset {first_file_offset} is not a multiple of {mapped_file_size}")
        self.store_path = Path(store_path)
        self.mapped_file_size = mapped_file_size
        self.allocate_service = allocate_service
        self.first_file_offset = first_file_offset
        self.mapped_files: list[MappedFile] = []
        self.flushed_where = first_file_offset
        self.committed_where = first_file_offset
        self.store_timestamp = 0  # STORETIMESTAMP of the last message known flushed
        # retention calls it with the new first file's offset before deleting files (broker.store.shape)
        self.before_delete: Callable[[int], None] | None = None
        # page checksums (broker.store.page_crc): told of flushes, truncations and deleted files
        self.after_flush: Callable[[MappedFile, int], None] | None = None
        self.on_truncate: Callable[[int], None] | None = None
        self.on_deleted: Callable[[MappedFile], None] | None = None

    # --- load -------------------------------------------------------------------------------
    def load(self, read_only: bool = False, upto: int | None = None) -> None:
        """Map every file named in ``[first_file_offset, upto)``; positions at file end until
        recovery says otherwise."""
        if not self.store_path.exists():
            if read_only:
                raise StoreLayoutError(f"{self.store_path}: directory does not exist")
            self.store_path.mkdir(parents=True, exist_ok=True)
        names = sorted(p.name for p in self.store_path.iterdir() if not p.name.startswith("."))
        files: list[MappedFile] = []
        try:
            prev = None
            for name in names:
                path = self.store_path / name
                if not path.is_file():
                    continue
                start = file_name_to_offset(name)
                if start < self.first_file_offset or (upto is not None and start >= upto):
                    continue
                if start % self.mapped_file_size:
                    raise StoreLayoutError(
                        f"{path}: start offset {start} is not a multiple of the file size "
                        f"{self.mapped_file_size}")
                if prev is not None and start != prev + self.mapped_file_size:
                    raise StoreLayoutError(
                        f"{path}: expected the file after {offset_to_file_name(prev)} to start at "
                        f"{prev + self.mapped_file_size}, a file is missing")
                mf = MappedFile(path, self.mapped_file_size, read_only=read_only)
                mf.set_positions(self.mapped_file_size)
                files.append(mf)
                prev = start
        except BaseException:
            for mf in files:
                mf.close()
            raise
        self.mapped_files = files

    # --- lookup -----------------------------------------------------------------------------
    def first(self) -> MappedFile | None:
        files = self.mapped_files
        return files[0] if files else None

    def last(self) -> MappedFile | None:
        files = self.mapped_files
        return files[-1] if files else None

    def get_last_mapped_file(self, start_offset: int = 0, need_create: bool = True) -> MappedFile | None:
        """The file to append to; creates the next file when the last one is full."""
        last = self.last()
        if last is not None and not last.is_full():
            return last
        if not need_create:
            return last
        if last is None:
            start_offset = max(start_offset, self.first_file_offset)
            create_offset = start_offset - start_offset % self.mapped_file_size
        else:
            create_offset = last.file_from_offset + self.mapped_file_size
        path = self.store_path / offset_to_file_name(create_offset)
        if self.allocate_service is not None:
            nxt = self.store_path / offset_to_file_name(create_offset + self.mapped_file_size)
            mf = self.allocate_service.put_request_and_return(path, nxt, self.mapped_file_size)
        else:
            mf = MappedFile(path, self.mapped_file_size)
        self.mapped_files = self.mapped_files + [mf]
        return mf

    def find_mapped_file_by_offset(self, offset: int, return_first_on_not_found: bool = False) -> MappedFile | None:
        files = self.mapped_files
        if not files:
            return None
        first, last = files[0], files[-1]
        if offset < first.file_from_offset or offset >= last.file_from_offset + self.mapped_file_size:
            return first if return_first_on_not_found else None
        index = (offset - first.file_from_offset) // self.mapped_file_size
        mf = files[index]
        if mf.file_from_offset <= offset < mf.file_from_offset + self.mapped_file_size:
            return mf
        for mf in files:  # pragma: no cover - only reachable if the list had a gap
            if mf.file_from_offset <= offset < mf.file_from_offset + self.mapped_file_size:
                return mf
        return first if return_first_on_not_found else None

    def get_min_offset(self) -> int:
        first = self.first()
        return first.file_from_offset if first is not None else -1

    def get_max_offset(self) -> int:
        """End of the readable (committed) bytes."""
        last = self.last()
        return last.file_from_offset + last.read_position if last is not None else self.first_file_offset

    def get_max_wrote_position(self) -> int:
        last = self.last()
        return last.file_from_offset + last.wrote_position if last is not None else self.first_file_offset

    def remain_how_many_data_to_flush(self) -> int:
        return self.get_max_offset() - self.flushed_where

    def roll_next_file(self, offset: int) -> int:
        return offset + self.mapped_file_size - offset % self.mapped_file_size

    # --- flush ------------------------------------------------------------------------------
    def flush(self) -> bool:
        """Flush the file holding ``flushed_where``; True if nothing was left to flush."""
        mf = self.find_mapped_file_by_offset(self.flushed_where, self.flushed_where == 0)
        if mf is None:
            return True
        ts = mf.store_timestamp
        pos = mf.flush()
        if self.after_flush is not None:
            self.after_flush(mf, pos)
        where = mf.file_from_offset + pos
        result = where == self.flushed_where
        if where > self.flushed_where:
            self.flushed_where = where
            if ts:
                self.store_timestamp = ts
        if pos >= self.mapped_file_size and where < self.get_max_offset():
            return False  # crossed a file end: more may be waiting in the next file
        return result

    def flush_all(self) -> int:
        """Flush until everything committed is durable; returns ``flushed_where``."""
        while self.flushed_where < self.get_max_offset():
            before = self.flushed_where
            self.flush()
            if self.flushed_where == before:
                break
        return self.flushed_where

    # --- truncation and deletion ------------------------------------------------------------
    def truncate_dirty_files(self, offset: int) -> None:
        """Forget everything at or beyond ``offset``: positions move back, the rest of that file
        is zeroed (so no stale record can be mistaken for data later), later files go."""
        if self.on_truncate is not None:
            self.on_truncate(offset)
        keep: list[MappedFile] = []
        for mf in self.mapped_files:
            tail = mf.file_from_offset + self.mapped_file_size
            if tail <= offset:
                keep.append(mf)
            elif offset >= mf.file_from_offset:
                mf.set_positions(offset % self.mapped_file_size)
                if mf.zero_from(offset % self.mapped_file_size):
                    log.warning("zeroed the truncated tail of %s from %d", mf.path, offset % self.mapped_file_size)
                keep.append(mf)
            else:
                log.warning("truncate dirty file %s (offset %d)", mf.path, offset)
                mf.destroy()
                if self.on_deleted is not None:
                    self.on_deleted(mf)
        self.mapped_files = keep
        if self.allocate_service is not None:
            self.allocate_service.discard_after(self.store_path)
        self.flushed_where = min(self.flushed_where, offset)
        self.committed_where = min(self.committed_where, offset)

    def reset_offset(self, offset: int) -> bool:
        """Move the end back to ``offset`` (HA slave catching a master that went back)."""
        if offset > self.get_max_offset():
            return False
        self.truncate_dirty_files(offset)
        return True

    def delete_expired_file_by_time(self, expired_seconds: float, max_delete: int = 10,
                                    now: float | None = None, clean_immediately: bool = False) -> int:
        """Delete up to ``max_delete`` oldest files unmodified for ``expired_seconds`` (never the last)."""
        now = time.time() if now is None else now
        files = self.mapped_files
        doomed: list[MappedFile] = []
        for mf in files[:-1]:
            if len(doomed) >= max_delete:
                break
            if clean_immediately or mf.age_seconds(now) >= expired_seconds:
                doomed.append(mf)
            else:
                break
        if doomed:
            if self.before_delete is not None:  # the store records its new low mark first (broker.store.shape)
                self.before_delete(files[len(doomed)].file_from_offset)
            self.mapped_files = files[len(doomed):]
            for mf in doomed:
                log.info("delete expired file %s", mf.path)
                mf.destroy()
                if self.on_deleted is not None:
                    self.on_deleted(mf)
        return len(doomed)

    def shutdown(self) -> None:
        for mf in self.mapped_files:
            mf.close()

    def destroy(self) -> None:
        for mf in self.mapped_files:
            mf.destroy()
        self.mapped_files = []
        self.flushed_where = self.committed_where = self.first_file_offset
