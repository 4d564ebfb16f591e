"""The store's shape at load: checked before and after the commitlog opens, recorded after recovery.

Rules (``broker.store.shape`` says what a shape is and why; issue 24.1):
- Before the commitlog is made, the start's mode is checked against the record
  (``shape.check_mode``); a store migrated to Controller mode (frozen regions) holds DLedger
  data by design: only its record is read.
- The lowest offset held is the old region's first byte (DLedger mode: the divide when the old
  region is empty; -1 on an empty classic store), or the commitlog's min offset on a migrated
  store. A classic start checks it against the record once the commitlog is loaded, before
  recovery can drop the ConsumeQueues; a DLedger start after recovery, which sets the divide.
- After recovery the shape is recorded (``shape.ShapeRecorder``), and the classic region's file
  queue raises the recorded low mark before retention deletes a file.

Theory of operation: :class:`ShapeCheck` is made by ``DefaultMessageStore.load`` when the
settings say ``record_shape`` (brokers), after the regions are opened; it is given the root, the
settings, the broker name and the regions (fixed for one load), and each later step is handed
the commitlog it checks.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from broker.store import shape

if TYPE_CHECKING:  # pragma: no cover
    from broker.store.commitlog import CommitLog
    from broker.store.commitlog_regions import CommitLogRegions
    from broker.store.dledger_commitlog import DLedgerCommitLog
    from broker.store.store_settings import StoreSettings


class ShapeCheck:
    """One load's shape checks (module rules); making it checks the mode."""

    def __init__(self, root: Path, settings: StoreSettings, broker_name: str,
                 regions: CommitLogRegions | None) -> None:
        self.root = root
        self.settings = settings
        self.broker_name = broker_name
        self.regions = regions
        s = settings
        if regions is not None:  # migrated: DLedger data under the root is the frozen region
            self.recorded = shape.read_shape(root)
        else:
            self.recorded = shape.check_mode(root, (s.dledger_settings or {}) if s.enable_dleger_commit_log else None,
                                             broker_name)

    def held_min(self, cl: CommitLog | DLedgerCommitLog) -> int:
        """The lowest commitlog offset held (DLedger mode: of the old region; the divide when it is
        empty), -1 when nothing is held that a shape records."""
        if self.regions is not None:
            return cl.min_offset
        files = cl.classic_region.mapped_file_queue.mapped_files
        return files[0].file_from_offset if files else cl.divided_commitlog_offset  # classic: -1

    def check_loaded(self, cl: CommitLog | DLedgerCommitLog) -> None:
        """Classic mode, the commitlog loaded and not recovered yet: nothing recorded is missing."""
        if not self.settings.enable_dleger_commit_log:
            shape.check_held(self.root, self.recorded, self.held_min(cl))

    def record(self, cl: CommitLog | DLedgerCommitLog) -> shape.ShapeRecorder:
        """After recovery: check (DLedger mode), record the shape and hook retention to it."""
        s = self.settings
        held = self.held_min(cl)
        if not s.enable_dleger_commit_log:
            now = shape.StoreShape(shape.CLASSIC, self.broker_name, min_offset=held)
        else:
            shape.check_held(self.root, self.recorded, held)
            d = s.dledger_settings or {}
            now = shape.StoreShape(shape.DLEDGER, self.broker_name, str(d.get("group") or ""),
                                   str(d.get("self_id") or ""), cl.divided_commitlog_offset, held)
        recorder = shape.ShapeRecorder(self.root, now)
        cl.classic_region.mapped_file_queue.before_delete = recorder.raise_min
        return recorder
