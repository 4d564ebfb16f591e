"""Start-up wiring of the record checks: the read guard's settings and the recovery scan.

Rules (the checks themselves are ``verify.py``'s):
- ``configure_read_guard``: ``checkCRCOnRead`` and the node's name go to the commitlog; a
  DLedger commitlog's frozen classic region reads as the same node with the same flag.
- ``verify_after_recovery``: scans from the checkpoint's verified offset to the end of the
  recovered data (DLedger: committed), the classic region first (skipping what the classic
  recovery scan itself checked with CRCs), then the DLedger region; moves the verified offset to
  that end. With ``checkCRCOnRecover=false`` it scans nothing, says so, and clamps the offset.

Theory of operation: both commitlogs answer the same region questions (``classic_region``,
``classic_region_end``, ``dledger_region``, ``divided_commitlog_offset``), so this module asks
them without knowing which mode it runs in; the facade calls it after each commitlog's own
recovery. It imports neither the facade nor a commitlog class at run time (no import circle).
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from broker.store.verify import Progress, verify_classic_range, verify_dledger_range

if TYPE_CHECKING:  # pragma: no cover
    from broker.config.broker_config import BrokerConfig
    from broker.store.checkpoint import StoreCheckpoint
    from broker.store.commitlog import CommitLog
    from broker.store.dledger_commitlog import DLedgerCommitLog

log = logging.getLogger("broker.store.verify")


def configure_read_guard(cl: CommitLog | DLedgerCommitLog, check_crc_on_read: bool,
                         broker_config: BrokerConfig | None, root: Path) -> None:
    """Give the commitlog (and a DLedger one's old region) the node's name and the flag."""
    cl.verify_reads = bool(check_crc_on_read)
    classic = cl.classic_region
    if classic is not cl:  # DLedgerCommitLog: its old region reads as this node too
        classic.verify_reads = cl.verify_reads
        classic.node_label = cl.node_label
    elif broker_config is not None and broker_config.broker_name:
        cl.node_label = f"{broker_config.broker_name} (brokerId {broker_config.broker_id}, {root})"
    else:
        cl.node_label = str(root)


def verify_after_recovery(cl: CommitLog | DLedgerCommitLog, cp: StoreCheckpoint | None,
                          check_crc_on_recover: bool) -> int:
    """Scan what recovery has not verified yet (module rules); returns the records checked."""
    if cp is None:
        return 0
    dl, classic, divided = cl.dledger_region, cl.classic_region, cl.divided_commitlog_offset
    if dl is not None:
        end = dl.committed_pos if dl.data_file_list.files else max(divided, 0)
        end = max(end, 0)
    else:
        end = cl.max_offset
    verified = min(cp.physic_verified_offset, end)
    if not check_crc_on_recover:
        log.warning("checkCRCOnRecover=false: records from commitlog offset %d to %d are not verified at start "
                    "(reads still verify each record they serve unless checkCRCOnRead=false)", verified, end)
        cp.clamp_verified(end)
        return 0
    started = time.monotonic()
    progress = Progress(end)
    count = 0
    classic_end = min(end, divided) if dl is not None else end
    if classic.mapped_file_queue.mapped_files and verified < classic_end:
        checked_from = classic.recovery_checked_from
        stop = classic_end if checked_from is None else min(classic_end, max(checked_from, verified))
        count += verify_classic_range(classic.mapped_file_queue.mapped_files, verified, stop, classic.node_label, classic.corrupt_fix, progress)
    if dl is not None and verified < end and dl.data_file_list.files:
        count += verify_dledger_range(dl, verified, end, cl.node_label, cl.corrupt_fix, progress)
    cp.physic_verified_offset = end
    cp.flush()
    if count:
        log.info("verified %d records by CRC from commitlog offset %d to %d in %.2f s", count, verified, end,
                 time.monotonic() - started)
    return count
