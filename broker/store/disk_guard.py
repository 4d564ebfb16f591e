"""Puts refused before the disk fills (issue 24.4), measured where the puts are.

Rules:
- A put is refused (``SERVICE_NOT_AVAILABLE``, naming the disk, its ratio and the fix) while the
  filesystem of the commitlog or of the ConsumeQueues is fuller than
  ``DISK_WARNING_RATIO`` (0.90, Apache's ``diskSpaceWarningLevelRatio``), or when its free space
  is below ``min_free_bytes`` (one commitlog file: a mapped file whose pages cannot be allocated
  kills the process with SIGBUS, which no error handling can catch).
- The disks are measured on the put path, at most every ``interval_s`` (50 ms) and after every
  ``recheck_bytes`` (8 MiB) appended since the last measure, so a fast producer cannot outrun
  the check the way it outran retention's 10-second round (the issue's disk went from 90% to
  full between two rounds). ``statvfs`` costs a few microseconds.
- Refusing starts and stops with one log line each (ERROR, then WARNING "accepted again");
  :meth:`DiskGuard.status` and the ``rocketmq_broker_disk_*`` gauges show the ratios, the
  refusal and how many puts were refused; ``/health`` of a master that refuses is 503.

Theory of operation: :meth:`DiskGuard.check` is called by ``DefaultMessageStore.prepare_put``
with the bytes about to be appended; it returns the refusal text or None. Clock and ratio
function are injectable so a full disk can be simulated in a test.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import Callable, Optional
from broker.store.store_types import JsonObject

log = logging.getLogger(__name__)

DISK_WARNING_RATIO = 0.90


def disk_space(path: str) -> tuple[float, int]:
    """(used fraction as Apache counts it, free bytes for us), or (-1, -1) if unreadable."""
    try:
        s = os.statvfs(path)
    except OSError:
        return -1.0, -1
    total = s.f_blocks * s.f_frsize
    if not total:
        return -1.0, -1
    return (total - s.f_bfree * s.f_frsize) / total, s.f_bavail * s.f_frsize


class DiskGuard:
    """The put path's view of the store's disks (module rules)."""

    def __init__(self, paths: dict[str, str], *, min_free_bytes: int, ratio: float = DISK_WARNING_RATIO,
                 space: Callable[[str], tuple[float, int]] = disk_space, clock: Callable[[], float] = time.monotonic,
                 interval_s: float = 0.05, recheck_bytes: int = 8 << 20) -> None:
        self.paths = paths
        self.min_free_bytes = min_free_bytes
        self.ratio = ratio
        self.space = space
        self.clock = clock
        self.interval_s = interval_s
        self.recheck_bytes = recheck_bytes
        self.error: Optional[str] = None
        self.refused = 0
        self.last: dict[str, tuple[float, int]] = {}
        self._at = -1e18
        self._bytes = 0
        self._lock = threading.Lock()

    def check(self, nbytes: int = 0) -> Optional[str]:
        """The refusal for a put of ``nbytes``, or None (measures when due)."""
        with self._lock:
            self._bytes += nbytes
            now = self.clock()
            if now - self._at >= self.interval_s or self._bytes >= self.recheck_bytes:
                self._measure(now)
            if self.error is not None:
                self.refused += 1
            return self.error

    def _measure(self, now: float) -> None:
        self._at, self._bytes = now, 0
        error = None
        for what, path in self.paths.items():
            ratio, free = self.space(path)
            self.last[what] = (ratio, free)
            if error is None and ratio > self.ratio:
                error = (f"disk full: the {what} disk ({path}) is {ratio:.1%} used, above {self.ratio:.0%}: puts are refused "
                         "until retention frees space (fileReservedTime, diskMaxUsedSpaceRatio) or disk is added")
            elif error is None and 0 <= free < self.min_free_bytes:
                error = (f"disk full: the {what} disk ({path}) has {free >> 20} MiB free, less than one commitlog "
                         f"file ({self.min_free_bytes >> 20} MiB): puts are refused until space is freed")
        if error != self.error:
            if error:
                log.error("%s", error)
            else:
                log.warning("disk space is back under %.0f%%: puts accepted again (%d refused meanwhile)",
                            self.ratio * 100, self.refused)
        self.error = error

    def status(self) -> JsonObject:
        with self._lock:
            return {"refusingPuts": self.error is not None, "error": self.error, "refusedPuts": self.refused,
                    "hardRatio": self.ratio,
                    "disks": {what: {"usedRatio": round(r, 4), "freeBytes": f} for what, (r, f) in self.last.items()}}
