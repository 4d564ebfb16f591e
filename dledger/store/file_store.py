"""DLedgerMmapFileStore: the Raft log on disk, in DLedger 0.3.1.2's format.

Rules
-----
* Layout: ``<store_base_dir>/dledger-<selfId>/{data,index}`` (``data_store_path`` overrides the
  data dir), plus the ``currterm`` and ``checkpoint`` files (:mod:`.state_files`). Data files
  hold encoded entries (:mod:`dledger.entry`) with DLedger's blank at each file end; index
  files hold one 32-byte unit per entry at ``index * 32``. Index files start at offset 0 even
  when the data list starts at ``first_data_file_offset`` (RocketMQ's divided offset).
* Leader appends assign ``index = ledger_end_index + 1`` and the given term, learn ``pos``
  from the data list's layout, patch them into the encoded bytes, run the **append hooks**
  ``hook(entry, buffer, body_offset)`` (``buffer`` is a writable memoryview of the whole encoded
  entry, ``body_offset`` is 48) and only then compute the body CRC and write. Follower appends
  write the bytes as received; they must land exactly at their ``pos`` and ``index``.
* Terms never decrease along the log; committed entries are never truncated
  (:class:`CommittedTruncationError`); corrupt committed data found by recovery stops the store
  (:class:`EntryCorruptionError` naming file and offset).
* ``update_committed_index`` follows DLedger's rules (ignored for -1, an empty log, an older
  term, or a smaller index; capped at ``ledger_end_index``); ``committed_pos`` is the end of
  the committed entry.
* ``flush()`` returns the *flushed index*: every entry up to it is on disk (data and index).
  The checkpoint records ``committedIndex = min(committed, flushed)``, so a committed index
  read back at recovery always refers to durable entries (Apache writes the committed index
  as is; the file format is the same).

Theory of operation
-------------------
A batch of leader bodies becomes one contiguous stream buffer laid out by
:meth:`MmapFileList.plan_append` (entries and blanks at their final offsets): headers are
packed in place, hooks patch bodies through memoryviews, then the data list writes the stream
(one ``pwrite`` per file) and the index list the units (one more). If anything fails, the data
list is truncated back to where the batch began, so a failed append leaves no trace. The store
has one writer (the event loop); :meth:`flush` may run in a worker thread.
"""
from __future__ import annotations

import errno
import logging
import struct
import threading
import zlib
from pathlib import Path
from typing import Callable, Iterable, Sequence, Union

from dledger.entry import (BODY_CRC_OFFSET, BODY_OFFSET, CURRENT_MAGIC, HEADER, INDEX_UNIT, INDEX_UNIT_SIZE, DLedgerEntry,
                           EntryCorruptionError, EntryHeader, check_contiguous, check_header,
                           split_entries)
from dledger.store.errors import (AppendMismatchError, CommittedTruncationError, DiskFullError, DLedgerStoreError,
                                  IndexOutOfRangeError, StoreLayoutError)
from dledger.store.mmap_file_list import MmapFileList
from dledger.store.recovery import RecoveryResult, recover_lists
from dledger.store.state_files import CheckpointFile, MemberStateFile

log = logging.getLogger(__name__)

Buffer = Union[bytes, bytearray, memoryview]
AppendHook = Callable[[DLedgerEntry, memoryview, int], None]

DEFAULT_DATA_FILE_SIZE = 1024 * 1024 * 1024
DEFAULT_INDEX_FILE_SIZE = INDEX_UNIT_SIZE * 5 * 1024 * 1024  # 167,772,160
MAX_ENTRY_SIZE = 4 * 1024 * 1024  # DLedger's thread-local encode buffer
_INT = struct.Struct(">i")


class DLedgerMmapFileStore:
    """See the module docstring. Indexes are 0-based; -1 means "none"."""

    def __init__(self, store_base_dir: str | Path, self_id: str, *,
                 data_file_size: int = DEFAULT_DATA_FILE_SIZE,
                 index_file_size: int = DEFAULT_INDEX_FILE_SIZE,
                 data_store_path: str | Path | None = None,
                 entry_crc: bool = True,
                 first_data_file_offset: int = 0,
                 current_term: Callable[[], int] | None = None,
                 verify_crc: bool = True,
                 allow_truncate_committed: bool = False) -> None:
        if index_file_size % INDEX_UNIT_SIZE:
            raise ValueError(f"index file size {index_file_size} is not a multiple of {INDEX_UNIT_SIZE}")
        self.default_path = Path(store_base_dir) / f"dledger-{self_id}"
        self.self_id = self_id
        self.data_store_path = Path(data_store_path) if data_store_path else self.default_path / "data"
        self.index_store_path = self.default_path / "index"
        self.data_file_list = MmapFileList(self.data_store_path, data_file_size,
                                           first_file_offset=first_data_file_offset)
        self.index_file_list = MmapFileList(self.index_store_path, index_file_size)
        self.entry_crc = entry_crc
        self.verify_crc = verify_crc
        self.allow_truncate_committed = allow_truncate_committed
        self.current_term = current_term
        self.checkpoint_file = CheckpointFile(self.default_path)
        self.member_state_file = MemberStateFile(self.default_path)
        self.append_hooks: list[AppendHook] = []
        self.ledger_begin_index = -1
        self.ledger_end_index = -1
        self.ledger_end_term = -1
        self.committed_index = -1
        self.committed_pos = -1
        self.disk_full = False  # set by a space monitor: appends are refused while true
        self.last_recovery: RecoveryResult | None = None
        self._flushed_index = -1
        self._truncations = 0
        self._flush_lock = threading.Lock()
        self._loaded = self._recovered = False

    # ------------------------------------------------------------------ lifecycle
    @property
    def first_data_file_offset(self) -> int:
        return self.data_file_list.first_file_offset

    @first_data_file_offset.setter
    def first_data_file_offset(self, offset: int) -> None:
        """Where an empty data list starts (RocketMQ: ``divided_commitlog_offset``)."""
        if self.data_file_list.files:
            raise DLedgerStoreError("first_data_file_offset can only change while the data list is empty")
        self.data_file_list.first_file_offset = offset - offset % self.data_file_list.file_size

    def load(self) -> None:
        """Open both file lists (every file must have the configured size)."""
        if self._loaded:
            return
        self._loaded = True
        self.data_file_list.load()
        self.index_file_list.load()

    def recover(self) -> RecoveryResult:
        """DLedger's recovery (see :mod:`.recovery`), then the committed index from ``checkpoint``."""
        if self._recovered:
            assert self.last_recovery is not None
            return self.last_recovery
        self._recovered = True
        committed = self.checkpoint_file.load_committed_index()
        res = recover_lists(self.data_file_list, self.index_file_list, verify_crc=self.verify_crc,
                            checkpoint_committed=committed,
                            allow_truncate_committed=self.allow_truncate_committed)
        self.last_recovery = res
        if not self.data_file_list.files:
            return res
        self.ledger_end_index, self.ledger_end_term = res.ledger_end_index, res.ledger_end_term
        if res.ledger_end_index != -1:
            self.ledger_begin_index = 0  # let get() through for the recheck; revised just below
            entry = self.get(res.ledger_end_index)
            if entry.index != res.ledger_end_index:
                raise StoreLayoutError(f"recheck: index {entry.index} != {res.ledger_end_index}")
            self._revise_ledger_begin_index()
        self.data_file_list.update_where_position(res.process_offset)
        self.data_file_list.truncate_offset(res.process_offset)
        index_end = (res.ledger_end_index + 1) * INDEX_UNIT_SIZE
        self.index_file_list.update_where_position(index_end)
        self.index_file_list.truncate_offset(index_end)
        self.data_file_list.check_self()
        self.index_file_list.check_self()
        self._flushed_index = self.ledger_end_index
        if committed is not None:
            self._update_committed_index(committed)
        return res

    def startup(self) -> "DLedgerMmapFileStore":
        self.load()
        self.recover()
        return self

    def shutdown(self) -> None:
        """Flush data and index, persist the checkpoint, close the files (even if those fail)."""
        try:
            self.flush()
            self.persist_checkpoint()
        finally:
            self.data_file_list.shutdown()
            self.index_file_list.shutdown()

    def add_append_hook(self, hook: AppendHook) -> None:
        if hook not in self.append_hooks:
            self.append_hooks.append(hook)

    # ------------------------------------------------------------------ leader appends
    def append_as_leader(self, body: Buffer, term: int) -> DLedgerEntry:
        """Append one body as the next entry of ``term``; returns it with index and pos set."""
        return self.append_batch_as_leader([body], term)[0]

    def append_batch_as_leader(self, bodies: Sequence[Buffer], term: int) -> list[DLedgerEntry]:
        """Append several bodies (one data write per file, one index write)."""
        self._check_writable(term)
        if not bodies:
            return []
        first = self.ledger_end_index + 1
        sizes = [BODY_OFFSET + len(b) for b in bodies]
        for s in sizes:
            if s > MAX_ENTRY_SIZE:
                raise DLedgerStoreError(f"entry of {s} bytes exceeds the {MAX_ENTRY_SIZE}-byte limit")
        dplan, iplan = self._plan(first, sizes)
        stream = bytearray(dplan.end - dplan.start)
        dplan.write_blanks(stream)
        view = memoryview(stream)
        units = bytearray(INDEX_UNIT_SIZE * len(bodies))
        hooks, crc, base = self.append_hooks, self.entry_crc, dplan.start
        entries: list[DLedgerEntry] = []
        pack_header, pack_unit, pack_int, crc32 = HEADER.pack_into, INDEX_UNIT.pack_into, _INT.pack_into, zlib.crc32
        for i, (body, pos, size) in enumerate(zip(bodies, dplan.positions, sizes)):
            off, index = pos - base, first + i
            pack_header(stream, off, CURRENT_MAGIC, size, index, term, pos, 0, 0, 0, size - BODY_OFFSET)
            stream[off + BODY_OFFSET:off + size] = body
            entry = DLedgerEntry(body=body, index=index, term=term, pos=pos, size=size)  # type: ignore[arg-type]
            for hook in hooks:
                hook(entry, view[off:off + size], BODY_OFFSET)
            if crc:  # after the hooks: the CRC covers the stored bytes
                value = crc32(view[off + BODY_OFFSET:off + size])
                entry.body_crc = value = value - 0x1_0000_0000 if value >= 0x8000_0000 else value
                pack_int(stream, off + BODY_CRC_OFFSET, value)
            pack_unit(units, i * INDEX_UNIT_SIZE, CURRENT_MAGIC, pos, size, index, term)
            entries.append(entry)
        self._write(dplan, iplan, stream, units, None)
        self._advance(first, len(bodies), term)
        return entries

    # ------------------------------------------------------------------ follower appends
    def append_as_follower(self, entry: DLedgerEntry | Buffer) -> int:
        """Append one entry as received (encoded bytes or a decoded entry); returns its index."""
        return self.append_batch_as_follower([entry])

    def append_batch_as_follower(self, entries: Buffer | Sequence[DLedgerEntry | Buffer]) -> int:
        """Append entries as received; each must land at its own index and pos.

        ``entries`` is one buffer of concatenated encoded entries (a replication batch) or a
        sequence of encoded entries / :class:`DLedgerEntry`. Returns the new end index. Headers
        and non-zero body CRCs are checked before anything is written.
        """
        views = self._as_views(entries)
        if not views:
            return self.ledger_end_index
        headers = [check_header(v, verify_crc=self.verify_crc) for v in views]
        first = self.ledger_end_index + 1
        if headers[0].index != first:
            raise AppendMismatchError(f"follower append of index {headers[0].index}, expected {first}")
        check_contiguous(headers, first)
        self._check_writable(headers[0].term)
        if first == 0 and self.data_file_list.max_wrote_position == self.data_file_list.min_offset \
                and self.data_file_list.plan_append([headers[0].size]).positions[0] != headers[0].pos:
            # empty log: adopt the leader's layout (e.g. a data list starting at a divided offset)
            self.data_file_list.rebuild_with_pos(headers[0].pos)
        dplan, iplan = self._plan(first, [h.size for h in headers])
        for h, pos in zip(headers, dplan.positions):
            if h.pos != pos:
                raise AppendMismatchError(f"entry {h.index} carries pos {h.pos} but would land at {pos} "
                                          f"in {self.data_store_path}")
        units = bytearray(INDEX_UNIT_SIZE * len(headers))
        for i, h in enumerate(headers):
            INDEX_UNIT.pack_into(units, i * INDEX_UNIT_SIZE, h.magic, h.pos, h.size, h.index, h.term)
        self._write(dplan, iplan, None, units, views)
        self._advance(first, len(headers), headers[-1].term)
        return self.ledger_end_index

    # ------------------------------------------------------------------ truncation
    def truncate(self, index: int) -> int:
        """Drop every entry after ``index`` (``-1`` empties a log that begins at 0)."""
        if index == self.ledger_end_index:
            return index
        if index > self.ledger_end_index or index < -1 or (index < self.ledger_begin_index and index != -1) \
                or (index == -1 and self.ledger_begin_index > 0):
            raise IndexOutOfRangeError(f"cannot truncate to {index}: ledger is "
                                       f"[{self.ledger_begin_index}, {self.ledger_end_index}]")
        if index < self.committed_index:
            raise CommittedTruncationError(f"truncate to {index} would drop committed entries "
                                           f"(committed index {self.committed_index})")
        if index >= 0:
            pos, size = self.get_entry_pos_and_size(index)
            data_end, term = pos + size, self.term_at(index)
        else:
            data_end, term = self.get_entry_pos_and_size(0)[0], -1
        self._note_truncation(index)
        self._truncate_lists(data_end, (index + 1) * INDEX_UNIT_SIZE)
        self.ledger_end_index, self.ledger_end_term = index, term
        if index == -1:
            self.ledger_begin_index = -1
        return index

    def truncate_to_entry(self, entry: DLedgerEntry | Buffer) -> int:
        """DLedger's follower ``truncate(entry)``: make ``entry`` the last entry of the log.

        If the local entry at that index equals it, only what follows is dropped; otherwise
        the log is cut at ``entry.pos`` and the entry written there. When the position lies
        outside the existing files, both lists are rebuilt around it, so this also starts a
        follower's log in the middle (its begin index becomes ``entry.index``).
        """
        raw = self._as_views([entry])[0]
        h = check_header(raw, verify_crc=self.verify_crc)
        existed = False
        if self.ledger_begin_index <= h.index <= self.ledger_end_index and h.index >= 0:
            local = self._raw(h.index)
            existed = local[:36] == raw[:36] and local[44:] == raw[44:]  # CRCs ignored, as equals()
        if h.index < self.committed_index or (not existed and h.index <= self.committed_index):
            raise CommittedTruncationError(f"truncate to entry {h.index} would drop committed entries "
                                           f"(committed index {self.committed_index})")
        self._note_truncation(h.index - (0 if existed else 1))
        data_end = h.pos + h.size if existed else h.pos
        unit_pos = h.index * INDEX_UNIT_SIZE
        self._truncate_lists(data_end, unit_pos)
        try:
            if not existed:
                got = self.data_file_list.append(raw)
                if got != h.pos:
                    self.data_file_list.truncate_offset(h.pos)
                    raise AppendMismatchError(f"entry {h.index} landed at {got}, not at its pos {h.pos}")
            got = self.index_file_list.append(INDEX_UNIT.pack(h.magic, h.pos, h.size, h.index, h.term), False)
            if got != unit_pos:
                raise AppendMismatchError(f"index unit of {h.index} landed at {got}, not {unit_pos}")
        except DLedgerStoreError:
            self.data_file_list.truncate_offset(h.pos)
            self.index_file_list.truncate_offset(unit_pos)
            self.ledger_end_index = h.index - 1 if h.index - 1 >= max(self.ledger_begin_index, 0) else -1
            self.ledger_end_term = self.term_at(self.ledger_end_index) if self.ledger_end_index >= 0 else -1
            raise
        self.ledger_end_index, self.ledger_end_term = h.index, h.term
        self._revise_ledger_begin_index()
        return h.index

    def begin_at(self, entry: DLedgerEntry | Buffer) -> int:
        """Drop the whole log and make ``entry`` its first entry, at its own index and pos.

        The follower side of DLedger's truncate-to-the-leader's-first-entry, for a follower
        behind the leader's begin index (retention, or a leader whose log starts at RocketMQ's
        ``dividedCommitlogOffset``). Entries held here lie below the leader's begin index and
        are committed everywhere; a committed index at or past ``entry.index`` cannot be given
        up (:class:`CommittedTruncationError`). Both lists are rebuilt around the entry, so the
        begin index becomes ``entry.index`` and the data list begins at ``entry.pos`` (a leader's
        first entry starts a data file, so a restart's recovery finds it there).
        """
        raw = self._as_views([entry])[0]
        h = check_header(raw, verify_crc=self.verify_crc)
        if self.committed_index >= h.index and self.ledger_end_index >= h.index:
            raise CommittedTruncationError(f"begin reset at entry {h.index} would drop committed entries "
                                           f"(committed index {self.committed_index})")
        self._check_writable(-1)
        self._note_truncation(-1)
        self.ledger_begin_index = self.ledger_end_index = -1
        self.ledger_end_term = -1
        self.committed_index = self.committed_pos = -1
        unit_pos = h.index * INDEX_UNIT_SIZE
        for fl, pos in ((self.data_file_list, h.pos), (self.index_file_list, unit_pos)):
            if not fl.rebuild_with_pos(pos):
                raise StoreLayoutError(f"could not rebuild {fl.store_path} at {pos}")
        got = self.data_file_list.append(raw)
        if got != h.pos:
            raise AppendMismatchError(f"entry {h.index} landed at {got}, not at its pos {h.pos}")
        got = self.index_file_list.append(INDEX_UNIT.pack(h.magic, h.pos, h.size, h.index, h.term), False)
        if got != unit_pos:
            raise AppendMismatchError(f"index unit of {h.index} landed at {got}, not {unit_pos}")
        self.ledger_begin_index = self.ledger_end_index = h.index
        self.ledger_end_term = h.term
        log.warning("%s: log reset to begin at the leader's first entry %d (pos %d)", self.default_path,
                    h.index, h.pos)
        return h.index

    # ------------------------------------------------------------------ reads
    def get_entry_pos_and_size(self, index: int) -> tuple[int, int]:
        self._index_check(index)
        unit = self._unit(index)
        return unit[1], unit[2]

    def term_at(self, index: int) -> int:
        """Term of entry ``index`` (-1 for index -1, Raft's "before the first entry")."""
        if index == -1:
            return -1
        self._index_check(index)
        return self._unit(index)[4]

    def get(self, index: int) -> DLedgerEntry:
        """Decode entry ``index`` (body copied; CRC verified when non-zero)."""
        raw = self._raw(index)
        entry = DLedgerEntry.decode(raw, verify_crc=self.verify_crc)
        if entry.index != index:
            raise EntryCorruptionError(f"entry at the pos of index {index} says index {entry.index}",
                                       pos=entry.pos, path=str(self.data_store_path))
        return entry

    def get_raw(self, lo: int, hi: int, max_bytes: int = 1 << 62) -> list[memoryview]:
        """Encoded entries ``lo <= index < hi`` as zero-copy views, for replication.

        Stops before exceeding ``max_bytes`` (at least one entry is returned when ``lo < hi``).
        Views stay valid until the files are deleted; copy them before an await that may
        truncate.
        """
        hi = min(hi, self.ledger_end_index + 1)
        if lo >= hi:
            return []
        self._index_check(lo)
        out: list[memoryview] = []
        total = 0
        get_data = self.data_file_list.get_data
        index = lo
        while index < hi:
            off = index * INDEX_UNIT_SIZE
            f = self.index_file_list.find_file(off)
            if f is None:
                raise StoreLayoutError(f"no index file holds index {index} ({self.index_store_path})")
            rel = off - f.from_offset
            count = min(hi - index, (f.wrote - rel) // INDEX_UNIT_SIZE)
            for _magic, pos, size, _i, _t in INDEX_UNIT.iter_unpack(f.mm[rel:rel + count * INDEX_UNIT_SIZE]):
                if out and total + size > max_bytes:
                    return out
                out.append(get_data(pos, size))
                total += size
            index += count
            if count == 0:
                raise StoreLayoutError(f"index unit {index} beyond the index write position")
        return out

    def _raw(self, index: int) -> memoryview:
        pos, size = self.get_entry_pos_and_size(index)
        raw = self.data_file_list.get_data(pos, size)
        if HEADER.unpack_from(raw, 0)[4] != pos:
            raise EntryCorruptionError(f"entry {index}: pos field disagrees with the index unit",
                                       pos=pos, path=str(self.data_store_path))
        return raw

    def _unit(self, index: int) -> tuple[int, int, int, int, int]:
        off = index * INDEX_UNIT_SIZE
        return INDEX_UNIT.unpack_from(self.index_file_list.get_data(off, INDEX_UNIT_SIZE), 0)

    def _index_check(self, index: int) -> None:
        if index < 0 or index < self.ledger_begin_index or index > self.ledger_end_index:
            raise IndexOutOfRangeError(f"index {index} outside [{self.ledger_begin_index}, {self.ledger_end_index}]")

    # ------------------------------------------------------------------ commit, flush, checkpoint
    def update_committed_index(self, term: int, index: int) -> None:
        """DLedger's ``updateCommittedIndex`` (rules in the module docstring)."""
        if self.current_term is not None and term < self.current_term():
            return
        self._update_committed_index(index)

    def _update_committed_index(self, index: int) -> None:
        if index == -1 or self.ledger_end_index == -1 or index == self.committed_index:
            return
        if index < self.committed_index or index < self.ledger_begin_index:
            log.warning("skip committed index update: new=%d old=%d begin=%d", index, self.committed_index,
                        self.ledger_begin_index)
            return
        index = min(index, self.ledger_end_index)
        pos, size = self.get_entry_pos_and_size(index)
        self.committed_index, self.committed_pos = index, pos + size

    @property
    def flushed_index(self) -> int:
        return self._flushed_index

    @property
    def write_pos(self) -> int:
        return self.data_file_list.max_wrote_position

    @property
    def flush_pos(self) -> int:
        return self.data_file_list.flushed_where

    def flush(self) -> int:
        """Make every appended entry durable; returns the flushed index. Thread-safe vs appends."""
        with self._flush_lock:
            end, gen = self.ledger_end_index, self._truncations
        self.data_file_list.flush()
        self.index_file_list.flush()
        with self._flush_lock:
            if gen == self._truncations and end > self._flushed_index:
                self._flushed_index = end
            return self._flushed_index

    def persist_checkpoint(self) -> None:
        """Write ``checkpoint`` (committedIndex capped at the flushed index; see module rules)."""
        try:
            self.checkpoint_file.save(self.ledger_end_index, min(self.committed_index, self._flushed_index))
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFullError(f"disk full while writing {self.checkpoint_file.path}: {exc}") from exc
            raise

    def delete_expired_files(self, reserved_ms: float, *, force: bool = False, now_ms: float | None = None) -> int:
        """Delete leading data files older than ``reserved_ms`` that hold only committed entries."""
        count = self.data_file_list.delete_expired_files_by_time(reserved_ms, now_ms=now_ms, force=force,
                                                                 below_offset=max(self.committed_pos, 0))
        if count:
            self._revise_ledger_begin_index()
        return count

    # ------------------------------------------------------------------ internals
    def _check_writable(self, term: int) -> None:
        if self.disk_full:
            raise DiskFullError(f"{self.default_path}: store is marked full")
        if term != -1 and term < self.ledger_end_term:
            raise AppendMismatchError(f"term {term} < ledger end term {self.ledger_end_term}")

    def _plan(self, first: int, sizes: list[int]):
        dplan = self.data_file_list.plan_append(sizes)
        iplan = self.index_file_list.plan_append([INDEX_UNIT_SIZE] * len(sizes), use_blank=False)
        if iplan.start != first * INDEX_UNIT_SIZE:
            raise AppendMismatchError(f"index list {self.index_store_path} ends at {iplan.start}, "
                                      f"expected {first * INDEX_UNIT_SIZE} for index {first}")
        return dplan, iplan

    def _write(self, dplan, iplan, stream: bytearray | None, units: bytearray,
               records: list[memoryview] | None) -> None:
        if stream is not None:
            self.data_file_list.commit_stream(dplan, stream)
        else:
            self.data_file_list.commit_records(dplan, records or [])
        try:
            self.index_file_list.commit_stream(iplan, units)
        except BaseException:
            self.data_file_list.truncate_offset(dplan.start)  # no half-appended batch stays visible
            raise

    def _advance(self, first: int, n: int, term: int) -> None:
        self.ledger_end_index = first + n - 1
        self.ledger_end_term = term
        if self.ledger_begin_index == -1:
            self.ledger_begin_index = first

    def _note_truncation(self, new_end: int) -> None:
        with self._flush_lock:
            self._truncations += 1
            self._flushed_index = min(self._flushed_index, new_end)

    def _truncate_lists(self, data_end: int, index_end: int) -> None:
        for fl, end in ((self.data_file_list, data_end), (self.index_file_list, index_end)):
            fl.truncate_offset(end)
            if fl.max_wrote_position != end:
                log.warning("rebuilding %s at %d (write position %d)", fl.store_path, end, fl.max_wrote_position)
                if not fl.rebuild_with_pos(end):
                    raise StoreLayoutError(f"could not rebuild {fl.store_path} at {end}")

    def _revise_ledger_begin_index(self) -> None:
        """Begin index = index of the first entry of the first data file; trim the index list."""
        fl = self.data_file_list
        first = fl.first_file
        if first is None or fl.min_offset >= fl.max_wrote_position:
            self.ledger_begin_index = -1 if self.ledger_end_index == -1 else self.ledger_end_index
            return
        begin = HEADER.unpack_from(first.mm, first.start)[2]
        self.ledger_begin_index = begin
        self.index_file_list.reset_offset(begin * INDEX_UNIT_SIZE)

    def _as_views(self, entries: Buffer | Sequence[DLedgerEntry | Buffer] | Iterable) -> list[memoryview]:
        if isinstance(entries, (bytes, bytearray, memoryview)):
            return split_entries(entries, verify_crc=False)
        out: list[memoryview] = []
        for e in entries:
            if isinstance(e, DLedgerEntry):
                buf = bytearray(BODY_OFFSET + len(e.body))
                HEADER.pack_into(buf, 0, e.magic, len(buf), e.index, e.term, e.pos, e.channel, e.chain_crc,
                                 e.body_crc, len(e.body))
                buf[BODY_OFFSET:] = e.body
                out.append(memoryview(buf))
            else:
                out.append(memoryview(e))  # type: ignore[arg-type]  # not a DLedgerEntry: a bytes-like encoded entry
        return out

    def __repr__(self) -> str:
        return (f"DLedgerMmapFileStore({self.default_path}, begin={self.ledger_begin_index}, "
                f"end={self.ledger_end_index}, term={self.ledger_end_term}, committed={self.committed_index})")


__all__ = ["DLedgerMmapFileStore", "AppendHook", "EntryHeader", "DEFAULT_DATA_FILE_SIZE", "DEFAULT_INDEX_FILE_SIZE"]
