"""Retention: RocketMQ's CleanCommitLogService and CleanConsumeQueueService, both modes.

Rules (4.9.8 ``DefaultMessageStore.CleanCommitLogService.deleteExpiredFiles``; issue 14.3):
- Every ``cleanResourceInterval`` (10 s) one round runs. It deletes commitlog files whose last
  write is older than ``fileReservedTime`` hours when any trigger holds: the local hour is one of
  ``deleteWhen`` (``"04"``, or ``"04;16"``), the disk of the commitlog or of the ConsumeQueues is
  fuller than ``diskMaxUsedSpaceRatio`` percent, or an operator asked (``trigger_manual``, Apache's
  ``executeDeleteFilesManually``: the next 20 rounds).
- Above ``DISK_CLEAN_FORCIBLY_RATIO`` (0.85) of the disk the round deletes oldest files whatever
  their age (``cleanFileForciblyEnable``, default true); above ``DISK_WARNING_RATIO`` (0.90) the
  store also refuses puts until usage falls back (``space_error``: SERVICE_NOT_AVAILABLE naming the
  disk and its ratio), as Apache marks the disk full.
- At most ``DELETE_FILES_BATCH_MAX`` (10) files per round, oldest first, never the last file. In
  DLedger mode the old region goes first (``DLedgerCommitLog.delete_expired_files``), then DLedger
  data files holding only committed entries (its index list is trimmed with them).
- A forced deletion (disk pressure) is counted (``forcedDeletedFiles``/``Bytes`` in status,
  ``rocketmq_broker_retention_forced_deleted_files_total``) and logged as a ``DISK PRESSURE``
  WARNING naming the offsets lost, since it may delete messages acknowledged seconds ago.
- Then the ConsumeQueue files and IndexFiles wholly below the new commitlog min offset are
  deleted, and every ConsumeQueue's min offset is corrected, so a consumer below it gets
  OFFSET_TOO_SMALL with the first offset still held.

Theory of operation: :class:`StoreCleaner` is pure policy over injectable ``clock`` (seconds) and
``disk_ratio`` (path -> used fraction) so a week of retention can be simulated in a test; the
store runs :meth:`StoreCleaner.run_once` on a daemon thread.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable
from broker.store.store_types import JsonObject

if TYPE_CHECKING:  # pragma: no cover
    from broker.store.message_store import DefaultMessageStore  # (it imports this module: types only)

log = logging.getLogger(__name__)

DISK_CLEAN_FORCIBLY_RATIO = 0.85  # rocketmq.broker.diskSpaceCleanForciblyRatio
DISK_WARNING_RATIO = 0.90  # rocketmq.broker.diskSpaceWarningLevelRatio
DELETE_FILES_BATCH_MAX = 10
MANUAL_DELETE_ROUNDS = 20


def disk_used_ratio(path: str | os.PathLike[str]) -> float:
    """Used fraction of the filesystem holding ``path`` (-1 if it cannot be read): Apache's
    ``getDiskPartitionSpaceUsedPercent``, (total - free) / total with free = ``File.getFreeSpace``
    (all free blocks, ``f_bfree``)."""
    try:
        s = os.statvfs(path)
    except OSError:
        return -1.0
    total = s.f_blocks * s.f_frsize
    return (total - s.f_bfree * s.f_frsize) / total if total else -1.0


def delete_hours(spec: str) -> set[int]:
    """``deleteWhen``: hours separated by ``;`` (``"04"``, ``"04;16"``); a bad token is skipped."""
    out = set()
    for token in (spec or "").split(";"):
        token = token.strip()
        if token.isdigit() and 0 <= int(token) <= 23:
            out.add(int(token))
    return out


@dataclass
class CleanRound:
    deleted_files: int = 0
    triggers: list[str] = field(default_factory=list)
    forced: bool = False
    min_offset: int = 0


class StoreCleaner:
    """One store's retention (module rules)."""

    def __init__(self, store: DefaultMessageStore, *, clock: Callable[[], float] = time.time,
                 disk_ratio: Callable[[str], float] = disk_used_ratio) -> None:
        s = store.settings
        self.store = store
        self.clock = clock
        self.disk_ratio = disk_ratio
        self.reserved_s = float(s.file_reserved_time) * 3600
        self.hours = delete_hours(s.delete_when)
        self.max_used = max(10, min(95, int(s.disk_max_used_space_ratio))) / 100.0
        self.forcibly = bool(s.clean_file_forcibly_enable)
        self.interval_s = max(0.05, s.clean_resource_interval / 1000.0)
        self.manual_rounds = 0
        self.space_error: str | None = None
        self.rounds = 0
        self.deleted_total = 0
        self.forced_deleted_total = 0  # files deleted whatever their age (disk above 85%)
        self.forced_deleted_bytes = 0
        self.last_forced: dict[str, int] | None = None
        self.last: CleanRound | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def trigger_manual(self) -> None:
        """TRIGGER_DELETE_FILES: the next rounds delete expired files whatever the hour."""
        self.manual_rounds = MANUAL_DELETE_ROUNDS

    def _space(self) -> tuple[bool, bool, list[str]]:
        """(over diskMaxUsedSpaceRatio, clean forcibly, reasons), and the puts-refused flag."""
        paths = [("commitlog", str(self.store.store_path_commitlog)), ("consumequeue", str(self.store.root))]
        over = force = False
        reasons, warning = [], None
        for what, path in paths:
            ratio = self.disk_ratio(path)
            if ratio < 0 or ratio > self.max_used:
                over = True
                reasons.append(f"{what} disk {ratio:.2%} > diskMaxUsedSpaceRatio {self.max_used:.0%}")
            if ratio > DISK_CLEAN_FORCIBLY_RATIO:
                force = True
            if ratio > DISK_WARNING_RATIO and warning is None:
                warning = (f"disk of {path} is {ratio:.2%} full (above {DISK_WARNING_RATIO:.0%}): puts are refused "
                           f"until retention frees space (fileReservedTime, diskMaxUsedSpaceRatio) or disk is added")
        if warning != self.space_error:
            (log.error if warning else log.warning)("%s", warning or "disk usage is back under the warning level: "
                                                     "puts accepted again")
        self.space_error = warning
        return over, force, reasons

    def run_once(self) -> CleanRound:
        r = CleanRound()
        now = self.clock()
        if time.localtime(now).tm_hour in self.hours:
            r.triggers.append(f"deleteWhen hour {time.localtime(now).tm_hour:02d}")
        over, force, reasons = self._space()
        if over:
            r.triggers.extend(reasons)
        if self.manual_rounds > 0:
            self.manual_rounds -= 1
            r.triggers.append("manual")
        cl = self.store.commitlog
        assert cl is not None  # a cleaner is made at start, after load
        if r.triggers:
            r.forced = force and self.forcibly
            before = cl.min_offset
            r.deleted_files = self.store.delete_expired_files(clean_immediately=r.forced, now=now,
                                                              max_delete=DELETE_FILES_BATCH_MAX)
            if r.deleted_files:
                self.deleted_total += r.deleted_files
                if r.forced:  # issue 24.4: what disk pressure costs is counted and said
                    after = cl.min_offset
                    self.forced_deleted_total += r.deleted_files
                    self.forced_deleted_bytes += max(0, after - before)
                    self.last_forced = {"atMs": int(now * 1000), "files": r.deleted_files, "fromOffset": before,
                                        "toOffset": after}
                    log.warning("DISK PRESSURE: retention deleted %d commitlog file(s) whatever their age "
                                "(offsets [%d, %d), %s); messages there are gone, however recently they were "
                                "acknowledged: consumers behind %d will skip them. Add disk or lower the write rate",
                                r.deleted_files, before, after, "; ".join(r.triggers), after)
                log.info("retention deleted %d commitlog file(s) (%s%s); min offset now %d", r.deleted_files,
                         "; ".join(r.triggers), ", forced" if r.forced else "", cl.min_offset)
        r.min_offset = cl.min_offset
        self.rounds += 1
        self.last = r
        return r

    # --- thread -------------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="CleanCommitLogService", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.run_once()
            except Exception:  # noqa: BLE001 - retention must keep running; the next round retries
                log.exception("retention round failed")

    def shutdown(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    def status(self) -> JsonObject:
        last = self.last
        return {"rounds": self.rounds, "deletedFiles": self.deleted_total, "spaceError": self.space_error,
                "fileReservedTimeHours": self.reserved_s / 3600, "deleteWhen": sorted(self.hours),
                "diskMaxUsedSpaceRatio": self.max_used,
                "lastTriggers": last.triggers if last else [], "lastForced": bool(last and last.forced),
                "forcedDeletedFiles": self.forced_deleted_total, "forcedDeletedBytes": self.forced_deleted_bytes,
                "lastForcedDeletion": self.last_forced}
