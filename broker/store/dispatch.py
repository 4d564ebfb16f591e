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
- A record whose topic or queue id is not what a send accepts (``names.record_problem``), or,
  where entry boundaries are known (DLedger), an entry whose body is not a message, is never
  dispatched: every dispatch path (ReputMessageService, recovery re-dispatch, the old region of
  a DLedger store, bytes replicated from a peer) reports it to :class:`SkippedRecords` and
  goes on with the next record. Reported once per process (by physical offset): one log line
  with the file, the file position, the physical offset and why, and a counter for status.
"""
from __future__ import annotations

import collections
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from broker.store.store_types import JsonObject

log = logging.getLogger(__name__)


@dataclass(slots=True, init=False)
class DispatchRequest:
    """``__init__`` is written out (same fields, defaults and order as the dataclass would make):
    compiled, it is a native call; the one ``dataclasses`` generates stays interpreted (0.6 us
    per record, measured: one per record on every replica's reput thread)."""

    topic: str
    queue_id: int
    commitlog_offset: int
    msg_size: int
    tags_code: int
    store_timestamp: int
    consume_queue_offset: int
    keys: str  # KEYS property (space separated), "" if none
    uniq_key: str  # UNIQ_KEY property, "" if none
    sys_flag: int
    prepared_transaction_offset: int
    buffer_size: int  # bytes the scanner advances by; -1 means msg_size
    success: bool

    def __init__(self, topic: str, queue_id: int, commitlog_offset: int, msg_size: int, tags_code: int,
                 store_timestamp: int, consume_queue_offset: int, keys: str = "", uniq_key: str = "",
                 sys_flag: int = 0, prepared_transaction_offset: int = 0, buffer_size: int = -1,
                 success: bool = True) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.commitlog_offset = commitlog_offset
        self.msg_size = msg_size
        self.tags_code = tags_code
        self.store_timestamp = store_timestamp
        self.consume_queue_offset = consume_queue_offset
        self.keys = keys
        self.uniq_key = uniq_key
        self.sys_flag = sys_flag
        self.prepared_transaction_offset = prepared_transaction_offset
        self.buffer_size = buffer_size
        self.success = success


class CommitLogDispatcher(Protocol):
    def dispatch(self, request: DispatchRequest) -> None: ...


class SkippedRecords:
    """Records dispatch refused: a counter, the last few, and the log line (module rules).

    Shared by the store's ReputMessageService and its recovery re-dispatch, so a record met by
    both (re-dispatch after a crash, then reput from the ConsumeQueues' end) counts once."""

    RECENT = 16
    REMEMBERED = 100_000  # offsets kept to report once; beyond it a record may be counted again

    def __init__(self) -> None:
        self.count = 0
        self.recent: collections.deque[JsonObject] = collections.deque(maxlen=self.RECENT)
        self._seen: set[int] = set()
        self._lock = threading.Lock()

    def report(self, path: str, file_pos: int, offset: int, reason: str) -> bool:
        """Note the record at physical ``offset`` (``file_pos`` in ``path``); False if already noted."""
        with self._lock:
            if offset in self._seen:
                return False
            if len(self._seen) < self.REMEMBERED:
                self._seen.add(offset)
            self.count += 1
            self.recent.append({"file": path, "filePos": file_pos, "offset": offset, "reason": reason})
        log.error("dispatch skipped the record at commitlog offset %d (file %s, position %d): %s; "
                  "no ConsumeQueue or index entry is made for it", offset, path, file_pos, reason)
        return True

    def status(self) -> JsonObject:
        with self._lock:
            return {"skippedRecords": self.count, "lastSkipped": list(self.recent)}


class StoreFile(Protocol):
    """A file of either address space: a classic ``MappedFile`` or a DLedger ``MmapFile``."""

    @property
    def path(self) -> Path: ...

    @property
    def from_offset(self) -> int: ...


def locate(mapped_file: StoreFile | None, offset: int, default_path: str = "?") -> tuple[str, int]:
    """(file path, position in it) of physical ``offset`` in a classic MappedFile or a DLedger
    MmapFile; ``(default_path, -1)`` when unknown."""
    if mapped_file is None:
        return default_path, -1
    return str(mapped_file.path), offset - mapped_file.from_offset
