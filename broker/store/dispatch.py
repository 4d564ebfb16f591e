"""DispatchRequest: what the ReputMessageService hands to every CommitLogDispatcher.

Rules:
- One DispatchRequest per commitlog record that is committed (classic: written and visible;
  DLedger: below committedPos). Blanks produce no request.
- ``commitlog_offset`` is the PHYSICALOFFSET field read from the record (message offset 28),
  which in DLedger mode is ``entry.pos + 48``, not the scan position.
- ``msg_size`` is the message TOTALSIZE (without any DLedger header); ``buffer_size`` is what the
  scanner advances by (``msg_size`` classic, ``msg_size + 48`` DLedger).
- Transactional PREPARED/ROLLBACK records are dispatched to the IndexFile (PREPARED keys only),
  never to a ConsumeQueue; barrier messages (DESIGN §4.1) are never dispatched to a ConsumeQueue.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(slots=True)
class DispatchRequest:
    topic: str
    queue_id: int
    commitlog_offset: int
    msg_size: int
    tags_code: int
    store_timestamp: int
    consume_queue_offset: int
    keys: str = ""  # KEYS property (space separated), "" if none
    uniq_key: str = ""  # UNIQ_KEY property, "" if none
    sys_flag: int = 0
    prepared_transaction_offset: int = 0
    buffer_size: int = -1  # bytes the scanner advances by; -1 means msg_size
    success: bool = True


class CommitLogDispatcher(Protocol):
    def dispatch(self, request: DispatchRequest) -> None: ...
