"""Recovery of a DLedger file store, exactly as DLedger 0.3.1.2 ``DLedgerMmapFileStore.recover``.

Rules
-----
1. Both file lists must be well-formed (``check_self``). No data files: the index list is
   truncated to 0 and the ledger is empty.
2. Pre-check, from the third-last data file downwards: the first entry of the file must have a
   magic other than the blank's and >= 1, ``size > 44``, ``pos == file start``,
   ``body_size + 48 == size``, and its index unit must agree on magic, size, index, term and
   pos. The first file that passes is where the scan starts (the first file when none does).
3. Sequential scan: a blank magic moves to the next file; ``size == 0`` is the clean end. Each
   entry must satisfy ``pos == its absolute position``, ``body_size + 48 == size``,
   ``1 <= magic <= CURRENT_MAGIC``, ``index == previous + 1``, ``term >= previous term``,
   ``size > 44``, fit in its file, and (ours, DESIGN §4.3) a non-zero body CRC must match. The
   first failure ends the scan at the last good entry. Each entry is compared with its index
   unit until the first mismatch; from there the index list is truncated (rebuilt if needed)
   and every later unit is rewritten from the data.
4. ``last file start - end of scan > file size`` means whole files would be dropped: error.
5. Data is truncated at the end of the scan, the index list at ``(last index + 1) * 32``; the
   begin index is read from the first entry of the first data file; the committed index comes
   from the ``checkpoint`` file (capped at the end index).

Where we differ, deliberately (DESIGN §7): DLedger calls ``System.exit`` for (4) and silently
truncates whatever the scan did not accept. We raise :class:`StoreLayoutError` for (4), and
:class:`EntryCorruptionError` naming the file and offset instead of truncating, unless the
caller passes ``allow_truncate_committed=True`` (a store argument for tests and tools; no
configuration key reaches it, so the error names the operator's real fix: :func:`restore_hint`), when

* the scan ends (cleanly or not) *below the committed index recorded in the checkpoint*; or
* the entry that stopped the scan is followed by a valid entry continuing the chain (index
  ``last + 2``, its own ``pos``, term not lower, CRC good), found after the invalid entry's
  declared size or through the next index units. The checkpoint lags what a node flushed and
  acknowledged after a crash, so an invalid entry with intact entries after it is corruption
  of possibly committed data, not a torn tail. Only an invalid entry with nothing valid after
  it (zeros, a write cut short, stale bytes behind an earlier truncation) is a torn tail and is
  truncated, with a warning naming the file and offset.

The message tells the operator how to recover: restore the node from a replica (move the
``dledger-<id>`` directory away and restart, the leader re-replicates). I/O errors (a full disk
while rewriting index units) propagate; they never shorten the log.

Theory of operation: the scan reads headers straight from the read-only mappings with
``struct.unpack_from`` (no copies), and rewritten index units are batched into one write per
few thousand entries.
"""
from __future__ import annotations

import logging
import mmap
import struct
import zlib
from dataclasses import dataclass
from typing import Optional

from dledger.entry import (BODY_OFFSET, CURRENT_MAGIC, HEADER, HEADER_SIZE, INDEX_UNIT, INDEX_UNIT_SIZE,
                           MAGIC_1, EntryCorruptionError, to_java_int)
from dledger.store.errors import StoreLayoutError
from dledger.store.mmap_file_list import BLANK_MAGIC_CODE, MmapFile, MmapFileList

log = logging.getLogger(__name__)


def restore_hint(member_dir: object) -> str:
    """What an operator does about a member whose committed log is damaged (issue 13.8): only
    real steps (``allow_truncate_committed`` is a store argument for tests, not a setting)."""
    return (f"Restore this member from its replicas: stop it, move {member_dir} away (keep it for inspection) and "
            f"restart it; the leader re-replicates the whole log. A broker keeps its old commitlog region in "
            f"storePathCommitLog; check the result with `mqupgrade validate <storePathRootDir>` on the restored node "
            f"and a healthy one. A group of one member has no replica: restore {member_dir} from a backup")

_INDEX_BATCH = 4096
_II = struct.Struct(">ii")
_PROBE_UNITS = 64  # index units past an invalid entry checked for valid successors


class _CheckFailed(Exception):
    """An entry failed a recovery check: the scan ends before it."""


@dataclass
class RecoveryResult:
    ledger_end_index: int
    ledger_end_term: int
    process_offset: int  # end of the last good entry (where data is truncated)
    first_scanned_index: int  # pre-check result (-1 if none passed)
    stop_reason: str | None  # None: clean end; else why the scan stopped
    stop_pos: int  # absolute position where the scan stopped
    stop_file: str


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise _CheckFailed(msg)


def _explain(magic: int, size: int, entry_index: int, term: int, pos: int, body_size: int, abs_pos: int,
             rel: int, fs: int, last_index: int, last_term: int) -> str:
    """The first failed check, worded like DLedger's PreConditions messages."""
    for ok, msg in (
        (pos == abs_pos, f"pos {pos} != {abs_pos}"),
        (body_size + BODY_OFFSET == size, f"size {size} != {body_size} + {BODY_OFFSET}"),
        (rel + size <= fs, f"entry of {size} bytes overruns the file"),
        (MAGIC_1 <= magic <= CURRENT_MAGIC, f"magic={magic} index={entry_index} currMagic={CURRENT_MAGIC}"),
        (last_index == -1 or entry_index == last_index + 1, f"index={entry_index} lastEntryIndex={last_index}"),
        (entry_index >= 0, f"index={entry_index}"),
        (term >= last_term, f"term={term} lastEntryTerm={last_term}"),
        (size > HEADER_SIZE, f"size {size} should > {HEADER_SIZE}"),
    ):
        if not ok:
            return msg
    return "entry check failed"


def _index_unit(index_list: MmapFileList, entry_index: int) -> tuple[int, int, int, int, int] | None:
    off = entry_index * INDEX_UNIT_SIZE
    f = index_list.find_file(off) if entry_index >= 0 else None
    if f is None or off - f.from_offset + INDEX_UNIT_SIZE > f.wrote:
        return None
    return INDEX_UNIT.unpack_from(f.mm, off - f.from_offset)


def _precheck(f: MmapFile, index_list: MmapFileList) -> int:
    """Check the first entry of ``f`` against its index unit; returns its index."""
    magic, size, entry_index, term, pos, _c, _cc, _bc, body_size = HEADER.unpack_from(f.mm, 0)
    _check(magic != BLANK_MAGIC_CODE and magic >= MAGIC_1, f"unknown magic={magic}")
    _check(size > HEADER_SIZE, f"size {size} should > {HEADER_SIZE}")
    _check(pos == f.from_offset, f"pos {pos} != {f.from_offset}")
    _check(body_size + BODY_OFFSET == size, f"size {size} != {body_size} + {BODY_OFFSET}")
    unit = _index_unit(index_list, entry_index)
    _check(unit is not None, f"no index unit for index={entry_index}")
    assert unit is not None
    _check(unit == (magic, f.from_offset, size, entry_index, term), f"index unit {unit} disagrees")
    return entry_index


def _entry_at(data: MmapFileList, pos: int, want_index: int | None, min_term: int,
              verify_crc: bool) -> bool:
    """Is there a well-formed entry at absolute ``pos`` (optionally with index ``want_index``)?"""
    f = data.find_file(pos)
    if f is None:
        return False
    rel, fs = pos - f.from_offset, data.file_size
    if rel + BODY_OFFSET > fs:
        return False
    magic, size, entry_index, term, epos, _c, _cc, body_crc, body_size = HEADER.unpack_from(f.mm, rel)
    if not (epos == pos and body_size + BODY_OFFSET == size and size > HEADER_SIZE and rel + size <= fs
            and MAGIC_1 <= magic <= CURRENT_MAGIC and entry_index >= 0 and term >= min_term
            and (want_index is None or entry_index == want_index)):
        return False
    if verify_crc and body_crc != 0:
        return to_java_int(zlib.crc32(memoryview(f.mm)[rel + BODY_OFFSET:rel + size])) == body_crc
    return True


def _valid_successor(data: MmapFileList, index: MmapFileList, f: MmapFile, rel: int, last_index: int | None,
                     last_term: int, verify_crc: bool) -> tuple[int, int] | None:
    """``(index, pos)`` of a valid entry continuing the chain past the invalid one at ``f``+``rel``.

    A torn tail has nothing valid after it; corruption in the middle does. Two probes: the entry
    just after the invalid one's declared size (the next file's start after a blank or the file
    end), and the index units of the next few entries, each checked against its data. Stale
    bytes left behind a truncation do not continue the chain (wrong index, pos or term).
    """
    fs = data.file_size
    want = None if last_index is None else last_index + 2
    stop_pos = f.from_offset + rel
    candidates: list[int] = []
    if rel + 8 <= fs:
        _magic, size = _II.unpack_from(f.mm, rel)
        if HEADER_SIZE < size and rel + size <= fs:
            nxt = rel + size
            if nxt + 8 > fs or _II.unpack_from(f.mm, nxt)[0] == BLANK_MAGIC_CODE:
                candidates.append(f.end_offset)
            else:
                candidates.append(f.from_offset + nxt)
    else:
        candidates.append(f.end_offset)
    if want is None:
        return None
    for pos in candidates:
        if _entry_at(data, pos, want, last_term, verify_crc):
            return want, pos
    for k in range(want, want + _PROBE_UNITS):
        unit = _index_unit(index, k)
        if unit is None:
            break
        magic, pos, _size, entry_index, term = unit
        if entry_index == k and pos > stop_pos and term >= last_term and _entry_at(data, pos, k, last_term,
                                                                                   verify_crc):
            return k, pos
    return None


def recover_lists(data: MmapFileList, index: MmapFileList, *, verify_crc: bool = True,
                  checkpoint_committed: int | None = None,
                  allow_truncate_committed: bool = False) -> RecoveryResult:
    """Scan ``data``, repair ``index``, truncate both; see the module rules."""
    data.check_self()
    index.check_self()
    files = data.files
    if not files:
        index.update_where_position(0)
        index.truncate_offset(0)
        return RecoveryResult(-1, -1, 0, -1, None, 0, "")
    fs = data.file_size
    last_file = files[-1]
    start = max(len(files) - 3, 0)
    first_entry_index = -1
    for i in range(start, -1, -1):
        start = i
        try:
            first_entry_index = _precheck(files[i], index)
            break
        except _CheckFailed as exc:
            log.warning("pre-check of data and index failed for %s: %s", files[i].path, exc)
    i = start
    f = files[i]
    log.info("recovering from entry index %d, file %s (%d of %d)", first_entry_index, f.path.name, i, len(files))
    rel = 0
    process = f.from_offset
    last_index = last_term = -1
    need_write_index = False
    pending = bytearray()
    pending_first = -1
    stop_reason: str | None = None

    def flush_units() -> None:
        nonlocal pending, pending_first
        if pending:
            plan = index.plan_append([INDEX_UNIT_SIZE] * (len(pending) // INDEX_UNIT_SIZE), use_blank=False)
            if plan.start != pending_first * INDEX_UNIT_SIZE:
                raise StoreLayoutError(f"index list {index.store_path} ends at {plan.start}, "
                                       f"expected {pending_first * INDEX_UNIT_SIZE} while rewriting units")
            index.commit_stream(plan, pending)
            pending = bytearray()

    mv = memoryview(f.mm)  # zero-copy CRC input; released when the scan leaves the file
    ifile_from, ifile_limit = 0, -1  # cached index file for unit comparisons
    ifile_mm: Optional[mmap.mmap] = None
    stored: Optional[tuple[int, ...]] = None
    unpack_unit = INDEX_UNIT.unpack_from
    unpack_header, unpack_ii, crc32 = HEADER.unpack_from, _II.unpack_from, zlib.crc32
    while True:
        abs_pos = f.from_offset + rel
        try:
            _check(rel + 8 <= fs, "header beyond file end")
            magic, size = unpack_ii(mv, rel)
            if magic == BLANK_MAGIC_CODE:
                process = f.end_offset
                i += 1
                if i >= len(files):
                    break
                mv.release()
                f, rel = files[i], 0
                mv = memoryview(f.mm)
                process = f.from_offset
                continue
            if size == 0:
                break
            _check(rel + BODY_OFFSET <= fs, "header beyond file end")
            magic, size, entry_index, term, pos, _c, _cc, body_crc, body_size = unpack_header(mv, rel)
            if not (pos == abs_pos and body_size + BODY_OFFSET == size and rel + size <= fs
                    and MAGIC_1 <= magic <= CURRENT_MAGIC and entry_index >= 0
                    and (last_index == -1 or entry_index == last_index + 1)
                    and term >= last_term and size > HEADER_SIZE):
                raise _CheckFailed(_explain(magic, size, entry_index, term, pos, body_size, abs_pos, rel, fs,
                                            last_index, last_term))
            if verify_crc and body_crc != 0:
                actual = crc32(mv[rel + BODY_OFFSET:rel + size])
                if to_java_int(actual) != body_crc:
                    raise _CheckFailed(f"body CRC mismatch for index {entry_index}: stored {body_crc}, "
                                       f"computed {to_java_int(actual)}")
        except _CheckFailed as exc:
            stop_reason = str(exc)
            break
        unit = (magic, abs_pos, size, entry_index, term)
        if not need_write_index:
            off = entry_index * INDEX_UNIT_SIZE - ifile_from
            if ifile_mm is not None and 0 <= off <= ifile_limit:  # fast path: same index file as the previous unit
                stored = unpack_unit(ifile_mm, off)
            else:
                stored = _index_unit(index, entry_index)
                ifile = index.find_file(entry_index * INDEX_UNIT_SIZE)
                if ifile is not None:
                    ifile_from, ifile_mm = ifile.from_offset, ifile.mm
                    ifile_limit = ifile.wrote - INDEX_UNIT_SIZE
        if not need_write_index and stored != unit:
            log.warning("data and index disagree at index %d (%s): rewriting index units from data",
                        entry_index, f.path)
            off = entry_index * INDEX_UNIT_SIZE
            index.truncate_offset(off)
            if index.max_wrote_position != off and not index.rebuild_with_pos(off):
                raise StoreLayoutError(f"could not rebuild index list {index.store_path} at {off}")
            need_write_index = True
            pending_first = entry_index
        if need_write_index:
            pending += INDEX_UNIT.pack(*unit)
            if len(pending) >= _INDEX_BATCH * INDEX_UNIT_SIZE:
                flush_units()
                pending_first = entry_index + 1
        last_index, last_term = entry_index, term
        process += size
        rel += size
    flush_units()
    mv.release()

    stop_file = f.path.name
    stop_pos = f.from_offset + rel
    follows = None
    if stop_reason is not None and not allow_truncate_committed:
        base = last_index if last_index != -1 else (first_entry_index - 1 if first_entry_index >= 0 else None)
        follows = _valid_successor(data, index, f, rel, base, last_term, verify_crc)
    if (follows is not None and not (checkpoint_committed is not None and checkpoint_committed > last_index)):
        succ_index, succ_pos = follows
        raise EntryCorruptionError(
            f"corrupt entry {(base if base is not None else -1) + 1} in the middle of the log: "
            f"{stop_reason}; a valid entry (index {succ_index} at pos {succ_pos}) follows, so this is not "
            f"a torn tail and the entries after it may have been acknowledged. Refusing to start. "
            f"{restore_hint(data.store_path.parent)}", pos=stop_pos, path=str(f.path))
    if stop_reason is not None:
        log.warning("recovery stopped at pos %d of %s: %s; nothing valid follows, truncating it as a torn tail",
                    stop_pos, f.path, stop_reason)
    if last_file.from_offset - process > fs:
        raise StoreLayoutError(
            f"recovery of {data.store_path} ended at {process}, more than a file before the last file "
            f"{last_file.path.name} ({stop_reason or 'clean end'}); refusing to drop whole files. "
            f"{restore_hint(data.store_path.parent)}")
    if (checkpoint_committed is not None and checkpoint_committed > last_index
            and not allow_truncate_committed):
        failing = last_index + 1 if last_index != -1 else max(first_entry_index, 0)
        raise EntryCorruptionError(
            f"committed entry {failing} (checkpoint committedIndex={checkpoint_committed}) is "
            f"{'unreadable: ' + stop_reason if stop_reason else 'missing'}; refusing to truncate committed "
            f"data{'' if follows is None else f' (valid entry {follows[0]} follows at pos {follows[1]})'}. "
            f"{restore_hint(data.store_path.parent)}", pos=stop_pos, path=str(f.path))
    return RecoveryResult(last_index, last_term, process, first_entry_index, stop_reason, stop_pos, stop_file)
