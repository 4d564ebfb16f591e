"""The read side of DLedgerCommitLog: one physical offset space over two sets of files.

Rules (``dledger_commitlog`` module rules): below ``divided_commitlog_offset`` reads go to the
old, frozen classic commitlog; at or above it to the DLedger data files, committed bytes only.
A message offset must be the body of an entry whose pos field names it, and a record is served
only whole and as long as asked, after its CRC check (``broker.store.verify``); a record that
fails is :class:`~broker.store.verify.CorruptRecordError`, never data.

Theory of operation: :class:`DLedgerReads` is an object its
:class:`~broker.store.dledger_commitlog.DLedgerCommitLog` composes (split out to keep that module
about the put path, roles and life cycle), which keeps one-line delegates of these methods: they
are the commitlog interface both commitlogs answer (dispatch, recovery, the store's reads). It is
given exactly what it reads: the old commitlog and the delay levels (fixed), and the commitlog
itself as a :class:`DividedLog`, read at each call: recovery sets its divided offset and opens
its DLedger file store after construction, and the store sets its read guard's node name and
flag (attribute reads, not accessor calls: they are read per message on the pull path). The
message check itself is :func:`dledger_message_view`, over one data file and a committed end, so
a frozen DLedger region of a migrated store (``frozen_regions``) reads by the same code.
"""
from __future__ import annotations

import struct
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, Sequence

from broker.store.commitlog import CommitLog, SelectMappedBufferResult
from broker.store.dledger_dispatch import (
    DLEDGER_BODY_OFFSET, check_dledger_message_and_return_size, dledger_entry_frame_size, explain_dledger_record,
)
from broker.store.message import MessageExt, decode_message, store_timestamp_position
from broker.store.verify import CorruptionLog, CorruptRecordError, dledger_record_problem

if TYPE_CHECKING:  # pragma: no cover
    from broker.store.dispatch import DispatchRequest
    from broker.store.store_types import Buffer
    from dledger.store.file_store import DLedgerMmapFileStore

_I = struct.Struct(">i")
_Q = struct.Struct(">q")


class ReadGuard(Protocol):
    """The read guard's state (``broker.store.verify``): a DLedgerCommitLog, and a frozen DLedger
    region of a migrated store (``frozen_regions``)."""

    verify_reads: bool
    node_label: str
    corrupt_fix: str
    corruption: CorruptionLog


class EntryFile(Protocol):
    """A DLedger data file as reads see it (DLedger's ``MmapFile``, or a frozen read-only one)."""

    @property
    def path(self) -> Path: ...

    @property
    def from_offset(self) -> int: ...

    @property
    def start(self) -> int: ...

    @property
    def wrote(self) -> int: ...

    @property
    def mm(self) -> Buffer: ...


def dledger_message_view(f: EntryFile | None, offset: int, size: int | None, committed: int,
                         guard: ReadGuard) -> memoryview | None:
    """The message at ``offset`` of DLedger data file ``f`` (the file holding it, or None), below
    ``committed``, ``size`` bytes long (its TOTALSIZE when None), verified by ``guard``; None if
    no such message (module rules)."""
    if f is None or offset < f.from_offset + f.start + DLEDGER_BODY_OFFSET or offset + 4 > committed:
        return None
    rel = offset - f.from_offset
    mm = f.mm
    # the offset must be the body of an entry and the record as long as asked: a stale
    # ConsumeQueue unit (kept when the DLedger dir was found empty, DESIGN §4.4) is never
    # served as the bytes of another message
    if _Q.unpack_from(mm, rel - DLEDGER_BODY_OFFSET + 24)[0] != offset - DLEDGER_BODY_OFFSET:
        return None
    total = _I.unpack_from(mm, rel)[0]
    if size is None:
        size = total
    if size != total or size <= 0 or offset + size > min(committed, f.from_offset + f.wrote):
        return None
    if guard.verify_reads:
        problem = dledger_record_problem(mm, rel - DLEDGER_BODY_OFFSET, size)
        if problem is not None:
            exc = CorruptRecordError(guard.node_label, str(f.path), rel, offset, problem, guard.corrupt_fix)
            guard.corruption.report(exc)
            raise exc
    return memoryview(mm)[rel:rel + size]


class DividedLog(ReadGuard, Protocol):
    """What :class:`DLedgerReads` reads of its DLedgerCommitLog at each call (module theory)."""

    @property
    def divided_commitlog_offset(self) -> int: ...

    @property
    def dledger_store(self) -> DLedgerMmapFileStore | None: ...


class DLedgerReads:
    """Read methods of DLedgerCommitLog (see the module rules)."""

    def __init__(self, *, old: CommitLog, delay_levels: Sequence[int], log: DividedLog) -> None:
        self.old = old
        self.delay_levels = tuple(delay_levels)
        self._log = log

    def _in_old(self, offset: int) -> bool:
        return offset < self._log.divided_commitlog_offset and bool(self.old.mapped_file_queue.mapped_files)

    # --- reading ----------------------------------------------------------------------------
    def parse_record(self, buf: memoryview, pos: int, check_crc: bool) -> DispatchRequest:
        return check_dledger_message_and_return_size(buf, pos, check_crc, self.delay_levels)

    def scan_start_of(self, record_offset: int) -> int:
        """Where a scan that should meet the record at ``record_offset`` starts: the record itself
        in the old region, its entry's header (48 bytes before it) in the DLedger region."""
        return record_offset if self._in_old(record_offset) else record_offset - DLEDGER_BODY_OFFSET

    def entry_size_at(self, buf: memoryview, pos: int, offset: int) -> int:
        """Size of the DLedger entry at physical ``offset`` (``buf[pos:]``) whatever its body, or -1
        (the old region, or not an entry frame): lets dispatch skip an entry whose body is not a
        message instead of stopping there (``reput`` module rules)."""
        if self._in_old(offset):
            return -1
        return dledger_entry_frame_size(buf, pos, offset)

    def explain_record(self, buf: memoryview, pos: int) -> str:
        return explain_dledger_record(buf, pos)

    def get_data(self, offset: int, return_first_on_not_found: bool | None = None) -> SelectMappedBufferResult | None:
        """Committed bytes from ``offset`` to the end of its file (old or DLedger)."""
        if return_first_on_not_found is None:
            return_first_on_not_found = offset == 0
        if self._in_old(offset):
            return self.old.get_data(offset, return_first_on_not_found)
        dl = self._log.dledger_store
        if dl is None:
            return None
        committed = dl.committed_pos
        fl = dl.data_file_list
        if offset < fl.min_offset and return_first_on_not_found:
            offset = fl.min_offset
        if offset >= committed:
            return None
        f = fl.find_file(offset)
        if f is None or offset < f.from_offset + f.start:
            return None
        end = min(f.wrote, committed - f.from_offset)
        rel = offset - f.from_offset
        if rel >= end:
            return None
        return SelectMappedBufferResult(offset, memoryview(f.mm)[rel:end], f)

    def get_message(self, offset: int, size: int, checked_pages: set[tuple[str, int]] | None = None
                    ) -> memoryview | None:
        """The ``size`` committed bytes of the message at ``offset`` (None if there is none);
        ``checked_pages`` as the classic commitlog's (the old region's page checksums)."""
        if self._in_old(offset):
            return self.old.get_message(offset, size, checked_pages)
        return self._message_view(offset, size)

    def get_record(self, offset: int) -> memoryview | None:
        """The whole committed record at ``offset`` (size from its TOTALSIZE), verified; None if
        no record starts there. Lookups by msgId and key read through here (issue 14.4)."""
        if self._in_old(offset):
            return self.old.get_record(offset)
        return self._message_view(offset, None)

    def _message_view(self, offset: int, size: int | None) -> memoryview | None:
        dl = self._log.dledger_store
        if dl is None:
            return None
        committed = dl.committed_pos
        return dledger_message_view(dl.data_file_list.find_file(offset), offset, size, committed, self._log)

    def look_message_by_offset(self, offset: int, size: int | None = None) -> MessageExt | None:
        if self._in_old(offset):
            return self.old.look_message_by_offset(offset, size)
        buf = self._message_view(offset, size)
        return decode_message(buf) if buf is not None else None

    def pickup_store_timestamp(self, offset: int, size: int) -> int:
        buf = self.get_message(offset, size)
        if buf is None:
            return -1
        return _Q.unpack_from(buf, store_timestamp_position(int.from_bytes(buf[36:40], "big")))[0]

