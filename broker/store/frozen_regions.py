"""Read-only views of the frozen regions of a store migrated from DLedger mode to Controller mode.

Rules (the shared spec, layout A "a second divide"; ``commitlog_regions`` routes to these):
- A view serves the messages of one region ``[start, end)`` by physical offset, never a byte at or
  beyond ``end`` (a DLedger region's uncommitted tail, the gap before ``classicFrom``), and never
  below the first file it still holds (retention). Files are opened read-only (``O_RDONLY``,
  ``PROT_READ``): nothing here writes, truncates or zeroes a byte; only :meth:`drop_oldest`
  (retention) deletes a whole file.
- :class:`FrozenClassicRegion`: classic commitlog files (20-digit names) named below ``end``, read
  by a read-only classic :class:`~broker.store.commitlog.CommitLog` (its read guard, its record
  checks); its last file is readable up to ``end`` only.
- :class:`FrozenDLedgerRegion`: the ``data/`` files of a DLedger member dir, messages at the
  offsets DLedger's append hook wrote (entry position + 48), read by the DLedger mode's own
  :func:`~broker.store.dledger_reads.dledger_message_view` with ``end`` as the committed position.
- Both answer the same questions (:class:`FrozenRegion`): ``min_offset``, ``get_message``,
  ``get_record``, ``get_data`` + ``parse_record`` + ``entry_size_at`` (walks: the dispatch gap and
  re-dispatch after a crash), ``first_store_timestamp`` of each file (the crash rule), ``verify``
  (a CRC scan), ``files`` + ``drop_oldest`` (retention), ``close``.
- Present files must be contiguous and reach the region's end; files missing below them are the
  ones retention deleted (a view may hold none: ``commitlog_regions`` checks that retention's
  order explains it). Anything else is a :class:`~broker.store.errors.StoreLayoutError` naming
  the file and the fix.

Theory of operation: thin adapters over the two modes' existing read code; ``commitlog_regions``
validates the regions file and builds one view per region.
"""
from __future__ import annotations

import mmap
import os
import struct
import time
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, Sequence

from broker.store.commitlog import ASYNC_FLUSH, CommitLog, SelectMappedBufferResult
from broker.store.dledger_dispatch import (
    DLEDGER_BODY_OFFSET, check_dledger_message_and_return_size, dledger_entry_frame_size, explain_dledger_record,
)
from broker.store.dledger_reads import dledger_message_view
from broker.store.errors import StoreLayoutError
from broker.store.message import explain_invalid_record, record_store_timestamp
from broker.store.verify import (
    CorruptionLog, CorruptRecordError, Progress, dledger_record_problem, verify_classic_range,
)

if TYPE_CHECKING:  # pragma: no cover
    from broker.store.dispatch import DispatchRequest, StoreFile

_II = struct.Struct(">ii")


def _fix(what: str) -> str:
    return (f"this copy of the frozen {what} region is damaged: stop this broker and run 'mqupgrade reseed' "
            "from a healthy replica of the group to copy the region again")


class FrozenFile(Protocol):
    @property
    def path(self) -> Path: ...

    @property
    def from_offset(self) -> int: ...

    def age_seconds(self, now: float | None = None) -> float: ...


class FrozenRegion(Protocol):
    """What the router (``commitlog_regions``) asks of either view (module rules)."""

    kind: str
    start: int
    end: int

    @property
    def min_offset(self) -> int: ...

    @property
    def files(self) -> Sequence[FrozenFile]: ...

    def get_message(self, offset: int, size: int, checked_pages: set[tuple[str, int]] | None = None
                    ) -> memoryview | None: ...

    def get_record(self, offset: int) -> memoryview | None: ...

    def get_data(self, offset: int) -> SelectMappedBufferResult | None: ...

    def parse_record(self, buf: memoryview, pos: int, check_crc: bool) -> DispatchRequest: ...

    def entry_size_at(self, buf: memoryview, pos: int, offset: int) -> int: ...

    def explain_record(self, buf: memoryview, pos: int) -> str: ...

    def roll_next_file(self, offset: int) -> int: ...

    def first_store_timestamp(self, f: FrozenFile) -> int: ...

    def configure_reads(self, verify: bool, node_label: str, corruption: CorruptionLog) -> None: ...

    def verify(self, start: int, progress: Progress) -> int: ...

    def drop_oldest(self) -> None: ...

    def close(self) -> None: ...


# --- classic -------------------------------------------------------------------------------------
class FrozenClassicRegion:
    """Classic commitlog files of ``[start, end)``, read-only (module rules)."""

    kind = "classic"

    def __init__(self, directory: Path, start: int, end: int, file_size: int, delay_levels: Sequence[int]) -> None:
        self.start, self.end, self.file_size = start, end, file_size
        self.log = CommitLog(directory, file_size, flush_disk_type=ASYNC_FLUSH, checkpoint=None,
                             delay_levels=delay_levels)
        self.log.writable = False
        self.log.corrupt_fix = _fix("classic")
        mfq = self.log.mapped_file_queue
        mfq.load(read_only=True, upto=end)
        files = mfq.mapped_files
        if files and files[0].file_from_offset + file_size <= start:
            bad = files[0].path
            mfq.shutdown()
            raise StoreLayoutError(f"{bad}: a commitlog file below the classic region's start {start}; "
                                   "move it away (it is not part of the migrated store)")
        if files and files[-1].file_from_offset + file_size < end:
            mfq.shutdown()
            raise StoreLayoutError(
                f"{directory}: the classic region [{start}, {end}) has no file holding offset {end - 1}; "
                "restore the frozen commitlog files (or `mqupgrade reseed` from a healthy replica)")
        if files:  # none: retention deleted them all (commitlog_regions checks that only older ones went)
            last = files[-1]
            last.set_positions(end - last.file_from_offset)
        mfq.flushed_where = mfq.committed_where = end
        self.log.flush_service.recovered = True

    @property
    def min_offset(self) -> int:
        files = self.log.mapped_file_queue.mapped_files
        return max(self.start, files[0].file_from_offset) if files else self.end

    @property
    def files(self) -> Sequence[FrozenFile]:
        return self.log.mapped_file_queue.mapped_files

    def get_message(self, offset: int, size: int, checked_pages: set[tuple[str, int]] | None = None
                    ) -> memoryview | None:
        return self.log.get_message(offset, size, checked_pages)

    def get_record(self, offset: int) -> memoryview | None:
        return self.log.get_record(offset)

    def get_data(self, offset: int) -> SelectMappedBufferResult | None:
        return self.log.get_data(offset, False)

    def parse_record(self, buf: memoryview, pos: int, check_crc: bool) -> DispatchRequest:
        return self.log.parse_record(buf, pos, check_crc)

    def entry_size_at(self, buf: memoryview, pos: int, offset: int) -> int:
        return -1

    def explain_record(self, buf: memoryview, pos: int) -> str:
        return explain_invalid_record(buf, pos)

    def roll_next_file(self, offset: int) -> int:
        return self.log.roll_next_file(offset)

    def first_store_timestamp(self, f: FrozenFile) -> int:
        res = self.log.get_data(f.from_offset, False)
        ts = record_store_timestamp(res.buffer, 0) if res is not None else None
        return ts or 0

    def configure_reads(self, verify: bool, node_label: str, corruption: CorruptionLog) -> None:
        self.log.verify_reads, self.log.node_label, self.log.corruption = verify, node_label, corruption

    def verify(self, start: int, progress: Progress) -> int:
        return verify_classic_range(self.log.mapped_file_queue.mapped_files, start, self.end, self.log.node_label,
                                    self.log.corrupt_fix, progress)

    def drop_oldest(self) -> None:
        mfq = self.log.mapped_file_queue
        doomed, mfq.mapped_files = mfq.mapped_files[0], mfq.mapped_files[1:]
        doomed.destroy()

    def close(self) -> None:
        self.log.mapped_file_queue.shutdown()
        self.log.allocate_service.shutdown()


# --- DLedger -------------------------------------------------------------------------------------
class FrozenDataFile:
    """One DLedger data file mapped read-only; ``start``/``wrote`` bound it to the region."""

    __slots__ = ("path", "from_offset", "file_size", "mm", "start", "wrote")

    def __init__(self, path: Path, from_offset: int, file_size: int, start: int, wrote: int) -> None:
        actual = path.stat().st_size
        if actual != file_size:
            raise StoreLayoutError(f"{path}: length {actual} != mappedFileSizeCommitLog {file_size}")
        fd = os.open(path, os.O_RDONLY)
        try:
            self.mm = mmap.mmap(fd, file_size, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        self.path, self.from_offset, self.file_size, self.start, self.wrote = path, from_offset, file_size, start, wrote

    def age_seconds(self, now: float | None = None) -> float:
        return (time.time() if now is None else now) - self.path.stat().st_mtime

    def close(self) -> None:
        try:
            self.mm.close()
        except BufferError:  # a reader still holds a view; the mapping goes with the last one
            pass


class FrozenDLedgerRegion:
    """The ``data/`` files of a DLedger member dir, ``[start, end)`` of them (module rules)."""

    kind = "dledger"

    def __init__(self, member_dir: Path, start: int, end: int, file_size: int, delay_levels: Sequence[int]) -> None:
        self.start, self.end, self.file_size = start, end, file_size
        self.delay_levels = tuple(delay_levels)
        self.verify_reads = True
        self.node_label = str(member_dir)
        self.corrupt_fix = _fix("DLedger")
        self.corruption = CorruptionLog()
        data = member_dir / "data"
        for d in (data, member_dir / "index"):
            if not d.is_dir():
                raise StoreLayoutError(f"{d}: the DLedger region's directory is missing; restore it (or "
                                       "`mqupgrade reseed` from a healthy replica)")
        names = sorted(p.name for p in data.iterdir() if len(p.name) == 20 and p.name.isdigit())
        offsets = [int(n) for n in names if int(n) < end and int(n) + file_size > start]
        self._files: list[FrozenDataFile] = []
        try:
            for i, off in enumerate(offsets):
                if off % file_size:
                    raise StoreLayoutError(f"{data / names[i]}: not at a multiple of the file size {file_size}")
                if i and off != offsets[i - 1] + file_size:
                    raise StoreLayoutError(f"{data}: the DLedger region misses the file at {offsets[i - 1] + file_size}; "
                                           "restore it (or `mqupgrade reseed` from a healthy replica)")
                self._files.append(FrozenDataFile(data / f"{off:020d}", off, file_size, max(0, start - off),
                                                  min(file_size, end - off)))
        except BaseException:
            self.close()
            raise
        if offsets and offsets[-1] + file_size < end:  # none: retention deleted them all
            self.close()
            raise StoreLayoutError(f"{data}: the DLedger region [{start}, {end}) has no data file holding offset "
                                   f"{end - 1}; restore it (or `mqupgrade reseed` from a healthy replica)")

    @property
    def min_offset(self) -> int:
        return self._files[0].from_offset + self._files[0].start if self._files else self.end

    @property
    def files(self) -> Sequence[FrozenFile]:
        return self._files

    def find_file(self, offset: int) -> FrozenDataFile | None:
        files = self._files
        if not files or offset < files[0].from_offset:
            return None
        i = (offset - files[0].from_offset) // self.file_size
        return files[i] if i < len(files) else None

    def get_message(self, offset: int, size: int, checked_pages: set[tuple[str, int]] | None = None
                    ) -> memoryview | None:
        return dledger_message_view(self.find_file(offset), offset, size, self.end, self)

    def get_record(self, offset: int) -> memoryview | None:
        return dledger_message_view(self.find_file(offset), offset, None, self.end, self)

    def get_data(self, offset: int) -> SelectMappedBufferResult | None:
        """Bytes from ``offset`` (an entry's header) to the region's end in its file."""
        f = self.find_file(offset)
        if f is None or offset < f.from_offset + f.start or offset >= self.end:
            return None
        rel = offset - f.from_offset
        if rel >= f.wrote:
            return None
        sf: StoreFile = f
        return SelectMappedBufferResult(offset, memoryview(f.mm)[rel:f.wrote], sf)

    def parse_record(self, buf: memoryview, pos: int, check_crc: bool) -> DispatchRequest:
        return check_dledger_message_and_return_size(buf, pos, check_crc, self.delay_levels)

    def entry_size_at(self, buf: memoryview, pos: int, offset: int) -> int:
        return dledger_entry_frame_size(buf, pos, offset)

    def explain_record(self, buf: memoryview, pos: int) -> str:
        return explain_dledger_record(buf, pos)

    def roll_next_file(self, offset: int) -> int:
        return offset + self.file_size - offset % self.file_size

    def first_store_timestamp(self, f: FrozenFile) -> int:
        res = self.get_data(max(f.from_offset, self.start))
        ts = record_store_timestamp(res.buffer, DLEDGER_BODY_OFFSET) if res is not None else None
        return ts or 0

    def configure_reads(self, verify: bool, node_label: str, corruption: CorruptionLog) -> None:
        self.verify_reads, self.node_label, self.corruption = verify, node_label, corruption

    def verify(self, start: int, progress: Progress) -> int:
        """CRC-check the message of every entry ending after ``start`` (files walked from their
        first entry); returns the count."""
        count = 0
        for f in self._files:
            if f.from_offset + f.wrote <= start:
                continue
            pos, mm = f.start, f.mm
            while pos + DLEDGER_BODY_OFFSET <= f.wrote:
                magic, size = _II.unpack_from(mm, pos)
                if magic == -1:
                    break  # DLedger's end-of-file blank
                if size <= DLEDGER_BODY_OFFSET or pos + size > f.wrote:
                    raise CorruptRecordError(self.node_label, str(f.path), pos, f.from_offset + pos,
                                             f"DLedger entry header damaged (magic {magic}, size {size})", self.corrupt_fix)
                if f.from_offset + pos + size > start:
                    problem = dledger_record_problem(mm, pos, size - DLEDGER_BODY_OFFSET)
                    if problem is not None:
                        raise CorruptRecordError(self.node_label, str(f.path), pos + DLEDGER_BODY_OFFSET,
                                                 f.from_offset + pos + DLEDGER_BODY_OFFSET, problem, self.corrupt_fix)
                    count += 1
                    progress.tick(f.path, f.from_offset + pos)
                pos += size
        return count

    def drop_oldest(self) -> None:
        doomed, self._files = self._files[0], self._files[1:]
        doomed.close()
        doomed.path.unlink(missing_ok=True)

    def close(self) -> None:
        for f in self._files:
            f.close()
        self._files = []
