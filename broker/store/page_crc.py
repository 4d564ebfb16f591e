"""Per-page checksums of the classic commitlog: every byte of a served record is checked (issue 24.3).

Why: a classic record carries only a CRC of its body (RocketMQ's format), so a flipped byte in its
topic, properties (KEYS, UNIQ_KEY, TAGS...) or header fields was served as if good. DLedger
entries written by us carry a CRC of the whole message (``dLegerEntryCrcEnable``); this module
gives the classic commitlog (and the old region of an upgraded store) the same coverage.

Rules:
- Every commitlog file ``F`` has a sidecar ``<commitlog dir>.pagecrc/F``: 8 bytes per 4 KiB page,
  ``crc32(page)`` and the magic ``PGC1``; zeros mean "not sealed yet". The sidecar lives next to
  the commitlog directory, not in it, so Apache's file list (which refuses foreign files in the
  commitlog directory) never sees it; Apache ignores it.
- A page is *sealed* (its entry written) once it is wholly written and durable: after each flush
  of the file up to the flushed position, and after recovery has CRC-scanned the store up to the
  recovered end (an Apache store, or pages a crash left unsealed, are sealed then: checked from
  then on). Written bytes of a classic commitlog never change in place, except by truncation,
  which clears the entries of every page it touches; deleting a file deletes its sidecar.
- Every read that serves a record (the read guard, ``checkCRCOnRead``) recomputes the sealed pages
  the record touches: a mismatch is the read guard's ``CorruptRecordError`` (node, file, offset,
  fix), counted and never served. Pages not sealed yet (the unflushed tail) are covered by the
  record's own checks, as before.
- Cost: 3.6 us per 4 KiB page here with zlib's CRC, about a quarter with ISA-L's
  (``broker.store.crc``); a 1 KiB record touches one or two pages, and a pull checks each page once however many of its records lie on it; sealing
  is done by the flush thread, a few milliseconds a second at this broker's write rates.
- A damaged sidecar cannot make bad data pass, only good data refused: the error says so and
  names the sidecar to delete if the data is known good (its pages are sealed again at the next
  start's scan only for the range that scan covers).

Theory of operation: :class:`PageChecksums` is one commitlog directory's sidecars, each mapped
read-write on first use and sized with the commitlog file; the MappedFileQueue calls
:meth:`after_flush`, :meth:`truncated` and :meth:`deleted` (hooks), the CommitLog's read guard
calls :meth:`check`, recovery calls :meth:`seal_upto`.
"""
from __future__ import annotations

import logging
import mmap
import os
import struct
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from broker.store.crc import crc32

if TYPE_CHECKING:  # pragma: no cover
    from broker.store.mapped_file import MappedFile

log = logging.getLogger(__name__)

PAGE = 4096
_ENTRY = struct.Struct(">II")
MAGIC = 0x50474331  # "PGC1"


def sidecar_dir(commitlog_dir: str | os.PathLike[str]) -> Path:
    d = Path(commitlog_dir)
    return d.with_name(d.name + ".pagecrc")


class _Sidecar:
    def __init__(self, path: Path, pages: int) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            if os.fstat(fd).st_size != pages * _ENTRY.size:
                os.ftruncate(fd, pages * _ENTRY.size)
            # every block allocated now (ENOSPC here, an OSError the callers skip), never later: a
            # store into a sparse page of a mapping on a full disk is a SIGBUS that kills the broker
            os.posix_fallocate(fd, 0, pages * _ENTRY.size)
            self.mm = mmap.mmap(fd, pages * _ENTRY.size)
        finally:
            os.close(fd)
        self.pages = pages
        self.sealed = self._count_sealed()

    def _count_sealed(self) -> int:
        """Pages sealed from the start (a prefix: pages are sealed in order)."""
        n = 0
        mm = self.mm
        while n < self.pages and _ENTRY.unpack_from(mm, n * _ENTRY.size)[1] == MAGIC:
            n += 1
        return n

    def get(self, page: int) -> Optional[int]:
        crc, magic = _ENTRY.unpack_from(self.mm, page * _ENTRY.size)
        return crc if magic == MAGIC else None

    def close(self) -> None:
        try:
            self.mm.close()
        except BufferError:
            pass


class PageChecksums:
    """The page checksums of one commitlog directory (module rules)."""

    def __init__(self, commitlog_dir: str | os.PathLike[str], file_size: int) -> None:
        self.dir = sidecar_dir(commitlog_dir)
        self.file_size = file_size
        self.pages_per_file = (file_size + PAGE - 1) // PAGE
        self._files: dict[str, _Sidecar] = {}
        self._lock = threading.Lock()
        self.sealed_pages = 0
        self.mismatches = 0
        self.pages_checked = 0  # crc32 computations of sealed pages by reads
        self.unsealed_errors = 0

    def _sidecar(self, name: str) -> _Sidecar:
        sc = self._files.get(name)
        if sc is None:
            sc = self._files[name] = _Sidecar(self.dir / name, self.pages_per_file)
        return sc

    # --- sealing -------------------------------------------------------------------------------
    def _seal(self, mf: MappedFile, upto_pos: int) -> None:
        """Seal the wholly written pages of ``mf`` below ``upto_pos`` (bytes from its start)."""
        with self._lock:
            sc = self._sidecar(mf.path.name)
            last = min(upto_pos // PAGE, sc.pages)
            if sc.sealed >= last:
                return
            view = mf.mm
            for page in range(sc.sealed, last):
                start = page * PAGE
                _ENTRY.pack_into(sc.mm, page * _ENTRY.size, crc32(view[start:start + PAGE]), MAGIC)
            self.sealed_pages += last - sc.sealed
            sc.sealed = last

    def after_flush(self, mf: MappedFile, flushed_pos: int) -> None:
        try:
            self._seal(mf, flushed_pos)
        except OSError as exc:  # no room for the sidecar (a full disk): the pages stay unsealed
            self._cannot_seal(mf, exc)

    def seal_upto(self, files: list[MappedFile], end: int) -> None:
        """After recovery's scan: seal every wholly written page below commitlog offset ``end``."""
        for mf in files:
            if mf.file_from_offset >= end:
                break
            try:
                self._seal(mf, min(end - mf.file_from_offset, self.file_size))
            except OSError as exc:
                self._cannot_seal(mf, exc)

    def _cannot_seal(self, mf: MappedFile, exc: OSError) -> None:
        self.unsealed_errors += 1
        if self.unsealed_errors == 1 or self.unsealed_errors % 1000 == 0:
            log.warning("cannot write the page checksums of %s (%s): its new pages stay unchecked until there is room "
                        "(%d such errors)", mf.path.name, exc.strerror or exc, self.unsealed_errors)

    def truncated(self, offset: int) -> None:
        """Bytes at and beyond ``offset`` were zeroed or dropped: clear their pages' entries."""
        with self._lock:
            for name in list(self._files) + [p.name for p in self.dir.glob("*") if p.name not in self._files]:
                if not name.isdigit():
                    continue
                start = int(name)
                if start + self.file_size <= offset:
                    continue
                try:
                    sc = self._sidecar(name)
                except OSError:  # cannot open it: delete it, so no stale entry outlives the truncation
                    (self.dir / name).unlink(missing_ok=True)
                    continue
                first = max(0, (offset - start) // PAGE)
                if first < sc.pages:
                    sc.mm[first * _ENTRY.size:sc.pages * _ENTRY.size] = bytes((sc.pages - first) * _ENTRY.size)
                sc.sealed = min(sc.sealed, first)

    def deleted(self, mf: MappedFile) -> None:
        with self._lock:
            sc = self._files.pop(mf.path.name, None)
            if sc is not None:
                sc.close()
            (self.dir / mf.path.name).unlink(missing_ok=True)

    # --- reading -------------------------------------------------------------------------------
    def check(self, mf: MappedFile, pos: int, size: int, checked: Optional[set[tuple[str, int]]] = None) -> Optional[str]:
        """Why the record at ``pos`` (``size`` bytes) of ``mf`` is damaged, or None. Pages in
        ``checked`` (the pages one pull has already checked) are not checked again; pages that
        pass are added to it."""
        sc = self._files.get(mf.path.name)
        if sc is None:
            try:
                with self._lock:
                    sc = self._sidecar(mf.path.name)
            except OSError:
                return None
        view = mf.mm
        for page in range(pos // PAGE, min((pos + size - 1) // PAGE + 1, sc.sealed)):
            want = sc.get(page)
            if want is None:
                break
            key = (mf.path.name, page)
            if checked is not None and key in checked:
                continue
            start = page * PAGE
            self.pages_checked += 1
            if crc32(view[start:start + PAGE]) != want:
                self.mismatches += 1
                return (f"page {page} (file bytes {start}..{start + PAGE - 1}) does not match the checksum sealed "
                        f"when it was written ({sc.path}): a byte of this record changed on disk (if the data is "
                        f"known good and the checksum file is damaged, delete {sc.path})")
            if checked is not None:
                checked.add(key)
        return None

    def close(self) -> None:
        with self._lock:
            for sc in self._files.values():
                sc.close()
            self._files.clear()
