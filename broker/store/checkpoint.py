"""StoreCheckpoint: the 4 KiB binary ``<storePathRootDir>/checkpoint`` file.

Rules (RocketMQ ``StoreCheckpoint``; reference §2.3):

- The file is one mmapped OS page (4096 bytes). Big-endian longs at ``@0 physicMsgTimestamp``,
  ``@8 logicsMsgTimestamp``, ``@16 indexMsgTimestamp`` (4.9.x), plus 5.x's
  ``@24 masterFlushedOffset`` and ``@32 confirmPhyOffset``; ours at ``@40 physicFlushedOffset``
  (the commitlog offset the last flush made durable: recovery tells a torn tail from damage by
  it, issue 13) and ``@48 physicVerifiedOffset`` (every record below it passed a CRC scan since
  it was written: recovery verifies from there, ``broker.store.verify``, issue 13.3). The rest stays zero; Apache ignores bytes it does not know, and a checkpoint
  Apache wrote reads 0 there ("unknown").
- Values live in memory and reach the page on :meth:`flush` (as in Java: msync, so a crash of
  the machine leaves the checkpoint at most one flush interval behind the data and abnormal
  recovery starts from an earlier, safe point) and on :meth:`publish` (no msync), which the
  commitlog flush services call after every flush so a killed process leaves the current
  flushed offset in the page cache. We always write all seven longs; a 4.9.x store had zeros there anyway
  and a 5.x store keeps its values.
- ``min_timestamp = max(0, min(physic, logics) - 3000)``: the 3 s margin covers messages whose
  store timestamps are not monotonic across threads.

Not to be confused with DLedger's text ``dledger-<selfId>/checkpoint`` (a properties file).
"""
from __future__ import annotations

import mmap
import os
import struct
import threading
from pathlib import Path

from broker.store.errors import StoreError

CHECKPOINT_FILE_SIZE = 4096
_FIELDS = struct.Struct(">qqqqqqq")


class CheckpointError(StoreError):
    """The checkpoint file cannot be used (names the path)."""


class StoreCheckpoint:
    """Timestamps (and 5.x offsets) up to which the store's files are known to be flushed."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()  # the flush service publishes while the logics thread flushes
        self.path.parent.mkdir(parents=True, exist_ok=True)
        existed = self.path.exists()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            if existed and 0 < size < _FIELDS.size:
                raise CheckpointError(f"{self.path}: checkpoint is {size} bytes, expected {CHECKPOINT_FILE_SIZE}")
            if size < CHECKPOINT_FILE_SIZE:
                os.ftruncate(fd, CHECKPOINT_FILE_SIZE)  # Java's map() extends the file the same way
            self._mm = mmap.mmap(fd, CHECKPOINT_FILE_SIZE, access=mmap.ACCESS_WRITE)
        finally:
            os.close(fd)
        (
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_phy_offset,
            self.physic_flushed_offset,
            self.physic_verified_offset,
        ) = _FIELDS.unpack_from(self._mm, 0)

    @property
    def min_timestamp(self) -> int:
        """Recovery may trust messages stored before this instant (ms)."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    @property
    def min_timestamp_index(self) -> int:
        """As :attr:`min_timestamp`, also bounded by the last fully flushed IndexFile."""
        return min(self.min_timestamp, self.index_msg_timestamp)

    def get_min_timestamp(self) -> int:
        return self.min_timestamp

    def get_min_timestamp_index(self) -> int:
        return self.min_timestamp_index

    def publish(self) -> None:
        """Write the in-memory values into the mapped page without msync.

        The page cache outlives a killed process, so a value published right after a commitlog
        flush is what recovery reads after a kill -9 (no second-long lag behind the data); after
        a machine crash the page holds this or an older value, a lower bound either way."""
        with self._lock:
            if not self._mm.closed:
                self._pack()

    def flush(self) -> None:
        """Write the in-memory values into the page and msync it."""
        with self._lock:
            if self._mm.closed:
                raise CheckpointError(f"{self.path}: checkpoint already shut down")
            self._pack()
            self._mm.flush()

    def _pack(self) -> None:
        _FIELDS.pack_into(
            self._mm,
            0,
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_phy_offset,
            self.physic_flushed_offset,
            self.physic_verified_offset,
        )

    def clamp_verified(self, offset: int) -> None:
        """The data from ``offset`` on is gone or rewritten: it is no longer verified."""
        with self._lock:
            if self.physic_verified_offset > offset:
                self.physic_verified_offset = max(0, offset)
                if not self._mm.closed:
                    self._pack()
                    self._mm.flush()

    def shutdown(self) -> None:
        """Flush and unmap."""
        if not self._mm.closed:
            self.flush()
            with self._lock:
                self._mm.close()

    def __repr__(self) -> str:
        return (
            f"StoreCheckpoint(physic={self.physic_msg_timestamp}, logics={self.logics_msg_timestamp}, "
            f"index={self.index_msg_timestamp}, masterFlushed={self.master_flushed_offset}, "
            f"confirmPhy={self.confirm_phy_offset}, physicFlushed={self.physic_flushed_offset}, "
            f"physicVerified={self.physic_verified_offset})"
        )
