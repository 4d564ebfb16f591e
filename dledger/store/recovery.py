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

Theory of operation
-------------------
Checks as data (h11's transitions-as-data style, issue 26.6): :func:`recover_lists` is a loop over
:data:`_STEPS`, a table of named steps, each a small function over one :class:`_Recovery` (the
inputs and what the earlier steps found). A step either returns ``None`` (go on), returns the
:class:`RecoveryResult` (done early: the empty ledger), or raises the error that names file,
offset and fix. The table, in order: the lists are well-formed, the empty ledger (rule 1), the
pre-check picks the first file (2), the scan (3), a valid entry after the stop is mid-log
corruption (DESIGN §7), a torn tail is truncated with a warning, no whole file is dropped (4),
no committed entry is lost (5, DESIGN §7).

The scan is the hot part (every entry of the last files, at start-up): :func:`_scan_file` walks
one data file with everything it needs in local variables, reads headers straight from the
read-only mapping with ``struct.unpack_from`` (no copies), checks the CRC on a memoryview, and
compares each entry with its index unit through a cached index file. :class:`_IndexRepair`
(rule 3's index half) is entered only at the first disagreement; from there it rewrites units,
batched into one write per few thousand entries.
"""
from __future__ import annotations

import logging
import mmap
import struct
import zlib
from dataclasses import dataclass, field
from typing import Callable, Optional, Union

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
    """Scan ``data``, repair ``index``, truncate both; see the module rules (one loop over :data:`_STEPS`)."""
    r = _Recovery(data, index, verify_crc, checkpoint_committed, allow_truncate_committed)
    for name, step in _STEPS:
        done = step(r)
        if done is not None:
            log.debug("recovery of %s done at step %r", data.store_path, name)
            return done
    return RecoveryResult(r.last_index, r.last_term, r.process, r.first_entry_index, r.stop_reason, r.stop_pos,
                          r.f.path.name)


@dataclass
class _Recovery:
    """One recovery: its inputs, then what the steps found (each step reads and fills some of it)."""

    data: MmapFileList
    index: MmapFileList
    verify_crc: bool
    checkpoint_committed: Optional[int]
    allow_truncate_committed: bool
    start: int = 0                          # data file the scan starts in (pre-check)
    first_entry_index: int = -1             # its first entry's index (-1 if no pre-check passed)
    f: MmapFile = field(init=False)         # data file the scan ended in ...
    rel: int = 0                            # ... and where in it
    process: int = 0                        # end of the last good entry (data is truncated there)
    last_index: int = -1                    # last good entry
    last_term: int = -1
    stop_reason: Optional[str] = None       # None: clean end
    follows: Optional[tuple[int, int]] = None  # (index, pos) of a valid entry after the stop

    @property
    def stop_pos(self) -> int:
        return self.f.from_offset + self.rel

    @property
    def member_dir(self) -> object:
        return self.data.store_path.parent


# --------------------------------------------------------------------------- the steps, in order

def _lists_well_formed(r: _Recovery) -> Optional[RecoveryResult]:
    """Rule 1: both file lists are well-formed (``check_self`` raises :class:`StoreLayoutError`)."""
    r.data.check_self()
    r.index.check_self()
    return None


def _empty_ledger(r: _Recovery) -> Optional[RecoveryResult]:
    """Rule 1: no data files: the index list is truncated to 0 and the ledger is empty."""
    if r.data.files:
        return None
    r.index.update_where_position(0)
    r.index.truncate_offset(0)
    return RecoveryResult(-1, -1, 0, -1, None, 0, "")


def _pick_start(r: _Recovery) -> Optional[RecoveryResult]:
    """Rule 2: from the third-last data file downwards, the first that passes :func:`_precheck`."""
    files = r.data.files
    start = max(len(files) - 3, 0)
    for i in range(start, -1, -1):
        start = i
        try:
            r.first_entry_index = _precheck(files[i], r.index)
            break
        except _CheckFailed as exc:
            log.warning("pre-check of data and index failed for %s: %s", files[i].path, exc)
    r.start = start
    return None


def _scan(r: _Recovery) -> Optional[RecoveryResult]:
    """Rule 3: scan from the pre-check's file; a blank moves to the next file (see :func:`_scan_file`)."""
    files, fs = r.data.files, r.data.file_size
    i = r.start
    f = files[i]
    log.info("recovering from entry index %d, file %s (%d of %d)", r.first_entry_index, f.path.name, i, len(files))
    repair = _IndexRepair(r.index)
    last_index = last_term = -1
    while True:
        rel, last_index, last_term, blank, reason = _scan_file(f, fs, last_index, last_term, r.verify_crc, repair)
        process = f.from_offset + rel
        if not blank:
            break
        process = f.end_offset
        if i + 1 >= len(files):
            break
        i += 1
        f = files[i]
    repair.flush()
    r.f, r.rel, r.process, r.last_index, r.last_term, r.stop_reason = f, rel, process, last_index, last_term, reason
    return None


def _refuse_mid_log_corruption(r: _Recovery) -> Optional[RecoveryResult]:
    """DESIGN §7: an invalid entry followed by a valid one continuing the chain is corruption of
    possibly acknowledged data, not a torn tail (unless the checkpoint's rule below applies)."""
    if r.stop_reason is None or r.allow_truncate_committed:
        return None
    base = r.last_index if r.last_index != -1 else (r.first_entry_index - 1 if r.first_entry_index >= 0 else None)
    r.follows = _valid_successor(r.data, r.index, r.f, r.rel, base, r.last_term, r.verify_crc)
    if r.follows is None or (r.checkpoint_committed is not None and r.checkpoint_committed > r.last_index):
        return None
    succ_index, succ_pos = r.follows
    raise EntryCorruptionError(
        f"corrupt entry {(base if base is not None else -1) + 1} in the middle of the log: "
        f"{r.stop_reason}; a valid entry (index {succ_index} at pos {succ_pos}) follows, so this is not "
        f"a torn tail and the entries after it may have been acknowledged. Refusing to start. "
        f"{restore_hint(r.member_dir)}", pos=r.stop_pos, path=str(r.f.path))


def _warn_torn_tail(r: _Recovery) -> Optional[RecoveryResult]:
    """An invalid entry with nothing valid after it is a torn tail: truncated, with a warning."""
    if r.stop_reason is not None:
        log.warning("recovery stopped at pos %d of %s: %s; nothing valid follows, truncating it as a torn tail",
                    r.stop_pos, r.f.path, r.stop_reason)
    return None


def _refuse_dropping_files(r: _Recovery) -> Optional[RecoveryResult]:
    """Rule 4: ``last file start - end of scan > file size`` would drop whole files."""
    last_file = r.data.files[-1]
    if last_file.from_offset - r.process > r.data.file_size:
        raise StoreLayoutError(
            f"recovery of {r.data.store_path} ended at {r.process}, more than a file before the last file "
            f"{last_file.path.name} ({r.stop_reason or 'clean end'}); refusing to drop whole files. "
            f"{restore_hint(r.member_dir)}")
    return None


def _refuse_losing_committed(r: _Recovery) -> Optional[RecoveryResult]:
    """DESIGN §7: the scan may not end below the committed index recorded in the checkpoint."""
    if (r.checkpoint_committed is None or r.checkpoint_committed <= r.last_index
            or r.allow_truncate_committed):
        return None
    failing = r.last_index + 1 if r.last_index != -1 else max(r.first_entry_index, 0)
    raise EntryCorruptionError(
        f"committed entry {failing} (checkpoint committedIndex={r.checkpoint_committed}) is "
        f"{'unreadable: ' + r.stop_reason if r.stop_reason else 'missing'}; refusing to truncate committed "
        f"data{'' if r.follows is None else f' (valid entry {r.follows[0]} follows at pos {r.follows[1]})'}. "
        f"{restore_hint(r.member_dir)}", pos=r.stop_pos, path=str(r.f.path))


_STEPS: tuple[tuple[str, Callable[[_Recovery], Optional[RecoveryResult]]], ...] = (
    ("file lists are well-formed", _lists_well_formed),
    ("no data files: empty ledger", _empty_ledger),
    ("pre-check picks the first file", _pick_start),
    ("scan entries, repair index units", _scan),
    ("no valid entry after the stop", _refuse_mid_log_corruption),
    ("torn tail is truncated", _warn_torn_tail),
    ("no whole file is dropped", _refuse_dropping_files),
    ("no committed entry is lost", _refuse_losing_committed),
)
"""The recovery, in order: ``(name, step)``; a step returns None to go on, the result to end early, or raises."""


# --------------------------------------------------------------------------- the scan

_NO_INDEX_FILE = b""  # the scan's index-file cache when it holds no file (no offset fits)

def _scan_file(f: MmapFile, fs: int, last_index: int, last_term: int, verify_crc: bool,
               repair: "_IndexRepair") -> tuple[int, int, int, bool, Optional[str]]:
    """Rule 3 over one data file from its start: ``(rel, last_index, last_term, blank, reason)``:
    where the scan ended in ``f``, the last good entry, whether a blank sends it to the next file,
    and why it stopped (None: the clean end or the blank). Hot loop: everything in locals."""
    mv = memoryview(f.mm)  # zero-copy CRC input; released when the scan leaves the file
    unpack_ii, unpack_header, unpack_unit, crc32 = _II.unpack_from, HEADER.unpack_from, INDEX_UNIT.unpack_from, zlib.crc32
    from_offset = f.from_offset
    ifrom, ilimit = 0, -1  # cached index file for unit comparisons: from_offset, last unit offset, mapping
    imm: Union[mmap.mmap, bytes] = _NO_INDEX_FILE
    rewriting = repair.rewriting
    rel = 0
    blank = False
    reason: Optional[str] = None
    try:
        while True:
            if rel + 8 > fs:
                reason = "header beyond file end"
                break
            magic, size = unpack_ii(mv, rel)
            if magic == BLANK_MAGIC_CODE:
                blank = True
                break
            if size == 0:
                break
            if rel + BODY_OFFSET > fs:
                reason = "header beyond file end"
                break
            abs_pos = from_offset + rel
            magic, size, entry_index, term, pos, _c, _cc, body_crc, body_size = unpack_header(mv, rel)
            if not (pos == abs_pos and body_size + BODY_OFFSET == size and rel + size <= fs
                    and MAGIC_1 <= magic <= CURRENT_MAGIC and entry_index >= 0
                    and (last_index == -1 or entry_index == last_index + 1)
                    and term >= last_term and size > HEADER_SIZE):
                reason = _explain(magic, size, entry_index, term, pos, body_size, abs_pos, rel, fs, last_index,
                                  last_term)
                break
            if verify_crc and body_crc != 0:
                actual = to_java_int(crc32(mv[rel + BODY_OFFSET:rel + size]))
                if actual != body_crc:
                    reason = f"body CRC mismatch for index {entry_index}: stored {body_crc}, computed {actual}"
                    break
            unit = (magic, abs_pos, size, entry_index, term)
            if not rewriting:
                off = entry_index * INDEX_UNIT_SIZE - ifrom
                if 0 <= off <= ilimit:  # fast path: same index file as the previous unit
                    stored: Optional[tuple[int, ...]] = unpack_unit(imm, off)
                else:
                    stored, ifrom, ilimit, imm = repair.lookup(entry_index)
                if stored != unit:
                    repair.start(entry_index, f.path)
                    rewriting = True
            if rewriting:
                repair.add(unit, entry_index)
            last_index, last_term = entry_index, term
            rel += size
    finally:
        mv.release()
    return rel, last_index, last_term, blank, reason


class _IndexRepair:
    """Rule 3's index half: from the first entry whose index unit disagrees with the data, the
    index list is truncated there (rebuilt if needed) and every later unit is rewritten from the
    data, batched (one write per :data:`_INDEX_BATCH` units). Before that it only looks units up."""

    __slots__ = ("index", "rewriting", "pending", "pending_first")

    def __init__(self, index: MmapFileList) -> None:
        self.index = index
        self.rewriting = False
        self.pending = bytearray()
        self.pending_first = -1

    def lookup(self, entry_index: int) -> tuple[Optional[tuple[int, ...]], int, int, Union[mmap.mmap, bytes]]:
        """The stored unit of ``entry_index`` and its index file for the scan's cache
        ``(from_offset, last readable unit offset, mapping)`` (an empty cache if there is none)."""
        stored = _index_unit(self.index, entry_index)
        ifile = self.index.find_file(entry_index * INDEX_UNIT_SIZE)
        if ifile is None:
            return stored, 0, -1, _NO_INDEX_FILE
        return stored, ifile.from_offset, ifile.wrote - INDEX_UNIT_SIZE, ifile.mm

    def start(self, entry_index: int, path: object) -> None:
        log.warning("data and index disagree at index %d (%s): rewriting index units from data", entry_index, path)
        off = entry_index * INDEX_UNIT_SIZE
        self.index.truncate_offset(off)
        if self.index.max_wrote_position != off and not self.index.rebuild_with_pos(off):
            raise StoreLayoutError(f"could not rebuild index list {self.index.store_path} at {off}")
        self.rewriting = True
        self.pending_first = entry_index

    def add(self, unit: tuple[int, int, int, int, int], entry_index: int) -> None:
        self.pending += INDEX_UNIT.pack(*unit)
        if len(self.pending) >= _INDEX_BATCH * INDEX_UNIT_SIZE:
            self.flush()
            self.pending_first = entry_index + 1

    def flush(self) -> None:
        if self.pending:
            index = self.index
            plan = index.plan_append([INDEX_UNIT_SIZE] * (len(self.pending) // INDEX_UNIT_SIZE), use_blank=False)
            if plan.start != self.pending_first * INDEX_UNIT_SIZE:
                raise StoreLayoutError(f"index list {index.store_path} ends at {plan.start}, "
                                       f"expected {self.pending_first * INDEX_UNIT_SIZE} while rewriting units")
            index.commit_stream(plan, self.pending)
            self.pending = bytearray()
