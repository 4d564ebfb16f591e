"""Apache RocketMQ 5.x ``EpochFileCache``: the ``<masterEpoch, startOffset>`` history of a replica,
kept in the ``epochFileCheckpoint`` file of the store root (``storePathEpochFile``).

Every time a broker becomes master (Controller mode) it appends ``<masterEpoch, maxPhyOffset>``;
a slave appends the master's epoch when the replicated stream crosses into it. An epoch's
``end_offset`` is the next epoch's ``start_offset``; the last epoch is open
(``end_offset == LONG_MAX``, Java's ``Long.MAX_VALUE``) unless
:meth:`EpochFileCache.set_last_epoch_entry_end_offset` closed it at the log's end (the
handshake does that on copies before comparing).

On disk: a :mod:`broker.ha.autoswitch.checkpoint_file` with one ``<epoch>-<startOffset>`` line
per entry, ascending (``EpochEntrySerializer``), e.g. ``2\\n<crc>\\n7-7000\\n8-8000\\n``.

Rules (Apache 5.3.3's, the divergences named):
- :meth:`append_entry`: both the epoch and the start offset must be greater than the last
  entry's, else the entry is refused (``False``) and nothing changes; the last entry's end
  becomes the new start.
- :meth:`find_epoch_entry_by_offset`: the entry with ``start <= offset < end``.
- :meth:`truncate_suffix_by_offset` drops the entries with ``start >= offset``,
  :meth:`truncate_suffix_by_epoch` those with ``epoch >= epoch``; the entry left last is open
  again (``end = LONG_MAX``). Apache means to do that too but sets it on a copy
  (``lastEntry()`` returns one), so its in-memory last entry keeps the old end until the next
  append; the file is the same either way (it holds no ends).
- :meth:`truncate_prefix_by_offset` drops the entries with ``end <= offset``.
- :func:`find_consistent_point` (Apache's ``findConsistentPoint``, the design doc's truncation
  algorithm): from the local last epoch backwards, the first epoch the peer also has with the
  same start offset; the point is the smaller of the two ends. ``-1``: none (the slave refuses
  to replicate).
- Every change is written to the file at once (Apache's ``flush``), when the cache has a file.
- Loading: the entries must be in ascending epoch order with non-decreasing start offsets (what
  ``append_entry`` produces); anything else is a :class:`CheckpointFileError` naming the file
  (Apache would load it into its TreeMap and derive nonsense ends). A torn or corrupt file falls
  back to its ``.bak`` as in Apache (:class:`CheckpointRead` says so).

Theory of operation: the cache is a sorted list of immutable :class:`EpochEntry` values; the
only I/O is the optional :class:`CheckpointFile` it writes through. Not thread-safe (Apache's
read/write lock is the caller's business: one owner, the HA service's event loop).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Iterable, Optional, Sequence

from broker.ha.autoswitch.checkpoint_file import (
    LONG_MAX,
    LONG_MIN,
    CheckpointFile,
    CheckpointFileError,
    CheckpointRead,
    parse_java_int,
)

EPOCH_FILE_NAME = "epochFileCheckpoint"


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """``org.apache.rocketmq.remoting.protocol.EpochEntry`` (its JSON names: epoch, startOffset,
    endOffset)."""

    epoch: int
    start_offset: int
    end_offset: int = LONG_MAX


class EpochEntryCodec:
    """``EpochEntrySerializer``: ``"<epoch>-<startOffset>"``. Like Java's ``split("-")`` trailing
    empty pieces are dropped; any other count of pieces is not an entry (``None``)."""

    def to_line(self, entry: EpochEntry) -> str:
        return f"{entry.epoch}-{entry.start_offset}"

    def from_line(self, line: str) -> Optional[EpochEntry]:
        parts = line.split("-")
        while parts and parts[-1] == "":
            parts.pop()
        if len(parts) != 2:
            return None
        return EpochEntry(parse_java_int(parts[0]), parse_java_int(parts[1], LONG_MIN, LONG_MAX))


def find_consistent_point(local: Sequence[EpochEntry], peer: Sequence[EpochEntry]) -> int:
    """The offset up to which ``local`` and ``peer`` agree (see the module rules), or -1."""
    by_epoch = {e.epoch: e for e in peer}
    for mine in sorted(local, key=lambda e: e.epoch, reverse=True):
        theirs = by_epoch.get(mine.epoch)
        if theirs is not None and theirs.start_offset == mine.start_offset:
            return min(mine.end_offset, theirs.end_offset)
    return -1


def _with_ends(entries: Iterable[EpochEntry]) -> list[EpochEntry]:
    """Entries in the given order with each end set to the next start (``initEntries``); the
    last keeps its own end."""
    items = list(entries)
    return [replace(e, end_offset=items[i + 1].start_offset) if i + 1 < len(items) else e
            for i, e in enumerate(items)]


class EpochFileCache:
    """The epoch history; with ``path`` it is read from and written through that file."""

    def __init__(self, path: Optional[str | os.PathLike[str]] = None) -> None:
        self._entries: list[EpochEntry] = []
        self._file: Optional[CheckpointFile[EpochEntry]] = (
            CheckpointFile(path, EpochEntryCodec()) if path is not None else None)

    # ------------------------------------------------------------------ loading
    def init_cache_from_file(self) -> CheckpointRead[EpochEntry]:
        """Load the file (or its ``.bak``); :class:`CheckpointFileError` if neither is usable."""
        if self._file is None:
            raise ValueError("this EpochFileCache has no file")
        got = self._file.read()
        self._check_order(got.entries, str(self._file.path if got.source != "bak" else self._file.bak_path))
        self._entries = _with_ends(replace(e, end_offset=LONG_MAX) for e in got.entries)
        return got

    def init_cache_from_entries(self, entries: Sequence[EpochEntry]) -> None:
        """Replace the history with ``entries`` (ends derived, the last one's kept) and flush."""
        ordered = sorted(entries, key=lambda e: e.epoch)
        self._check_order(ordered, "the given entries")
        self._entries = _with_ends(ordered)
        self._flush()

    @staticmethod
    def _check_order(entries: Sequence[EpochEntry], where: str) -> None:
        for prev, cur in zip(entries, entries[1:]):
            if cur.epoch <= prev.epoch or cur.start_offset < prev.start_offset:
                raise CheckpointFileError(
                    f"{where}: epoch entries out of order ({prev.epoch}-{prev.start_offset} before "
                    f"{cur.epoch}-{cur.start_offset}); epochs must grow and start offsets must not "
                    f"fall. Restore the file from a backup, or delete it and its .bak if this "
                    f"replica's log may be rebuilt from its master")

    # ------------------------------------------------------------------ queries
    @property
    def entry_size(self) -> int:
        return len(self._entries)

    def first_entry(self) -> Optional[EpochEntry]:
        return self._entries[0] if self._entries else None

    def last_entry(self) -> Optional[EpochEntry]:
        return self._entries[-1] if self._entries else None

    def last_epoch(self) -> int:
        """The last epoch, -1 when there is none."""
        return self._entries[-1].epoch if self._entries else -1

    def get_entry(self, epoch: int) -> Optional[EpochEntry]:
        for e in self._entries:
            if e.epoch == epoch:
                return e
        return None

    def find_epoch_entry_by_offset(self, offset: int) -> Optional[EpochEntry]:
        for e in self._entries:
            if e.start_offset <= offset < e.end_offset:
                return e
        return None

    def next_entry(self, epoch: int) -> Optional[EpochEntry]:
        """The first entry with an epoch greater than ``epoch``."""
        for e in self._entries:
            if e.epoch > epoch:
                return e
        return None

    def get_all_entries(self) -> list[EpochEntry]:
        return list(self._entries)

    def find_consistent_point(self, peer: "EpochFileCache | Sequence[EpochEntry]") -> int:
        others = peer.get_all_entries() if isinstance(peer, EpochFileCache) else peer
        return find_consistent_point(self._entries, others)

    # ------------------------------------------------------------------ changes
    def append_entry(self, entry: EpochEntry) -> bool:
        if self._entries:
            last = self._entries[-1]
            if last.epoch >= entry.epoch or last.start_offset >= entry.start_offset:
                return False
            self._entries[-1] = replace(last, end_offset=entry.start_offset)
        self._entries.append(replace(entry, end_offset=LONG_MAX))
        self._flush()
        return True

    def set_last_epoch_entry_end_offset(self, end_offset: int) -> None:
        """Close the last epoch at ``end_offset`` (ignored below its start). Not written: the
        file holds no ends."""
        if self._entries and self._entries[-1].start_offset <= end_offset:
            self._entries[-1] = replace(self._entries[-1], end_offset=end_offset)

    def truncate_suffix_by_epoch(self, truncate_epoch: int) -> None:
        self._truncate_suffix([e for e in self._entries if e.epoch < truncate_epoch])

    def truncate_suffix_by_offset(self, truncate_offset: int) -> None:
        self._truncate_suffix([e for e in self._entries if e.start_offset < truncate_offset])

    def _truncate_suffix(self, kept: list[EpochEntry]) -> None:
        if kept:
            kept[-1] = replace(kept[-1], end_offset=LONG_MAX)
        self._entries = kept
        self._flush()

    def truncate_prefix_by_offset(self, truncate_offset: int) -> None:
        self._entries = [e for e in self._entries if e.end_offset > truncate_offset]
        self._flush()

    def _flush(self) -> None:
        if self._file is not None:
            self._file.write(self._entries)
