"""The read side of DefaultMessageStore: pulls through the ConsumeQueue, lookups by offset, msgId
and key, and the offsets of queues and of the commitlog.

Rules:
- Pulls answer with RocketMQ's GetMessageStatus (``DefaultMessageStore.getMessage``): no queue,
  an empty queue, an offset below the min / at the max / beyond it, then up to ``max_num``
  units read in queue order; a unit whose commitlog bytes are gone (deleted files) is skipped
  and reported as MESSAGE_WAS_REMOVING when nothing else was found. ``tags_filter`` sees the
  unit's tags hash code before the commitlog is read.
- Reads never write and never wait for dispatch: what is not yet in a ConsumeQueue is not found.
- A DLedger member that stopped itself (``server.fatal_error``) serves no reads: they raise
  :class:`MemberStoppedError` (checked before, and again when a read found nothing, as its files
  close under it) instead of answering "removed"/"not found" for data it holds (issue 13.1).
- A record that fails its CRC check (``broker.store.verify``) is never served: a pull returns
  the good records before it and stops there; a pull starting at it, or a lookup of it, raises
  :class:`~broker.store.verify.CorruptRecordError` naming node, file and offset.
- Every pull is capped in bytes and count (``broker.store.transfer_limits``, Apache's
  ``isTheBatchFull``, checked before the tags filter as in Apache): the remoting door passes
  Apache's caps, a caller that passes none (the HTTP door) gets ``httpPullMaxBytes``; the
  first message is always served, however big, and ``next_begin_offset`` points at the first
  unit not served.

Theory of operation: :class:`StoreReads` is an object the
:class:`~broker.store.message_store.DefaultMessageStore` composes (``store.reads``; split out to
keep that module about wiring and lifecycle). It is given exactly what it reads, as zero-arg
accessors read at each call, because the store makes its parts in ``load`` (after the reads
exist): the commitlog (a :class:`ReadLog`, classic or DLedger), the ConsumeQueueStore, the
IndexService (None without ``messageIndexEnable``), and the broker config, whose
``httpPullMaxBytes`` is read once, at the first pull that names no caps. A pull reads its
commitlog once, at its start. The store keeps one-line delegates of the methods its callers use
(``store.get_message`` ...).
"""
from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol

from broker.store.consume_queue import ConsumeQueue, ConsumeQueueStore
from broker.store.message import MessageExt, decode_message
from broker.store.message_id import decode_message_id
from broker.store.transfer_limits import TransferLimits
from broker.store.verify import CorruptRecordError

if TYPE_CHECKING:  # pragma: no cover
    from broker.store.index_file import IndexService


class ReadLog(Protocol):
    """What reads use of a commitlog (``CommitLog`` and ``DLedgerCommitLog`` both are one)."""

    @property
    def member_stopped_reason(self) -> str | None: ...

    @property
    def min_offset(self) -> int: ...

    @property
    def max_offset(self) -> int: ...

    @property
    def confirm_offset(self) -> int: ...

    @property
    def flushed_offset(self) -> int: ...

    def get_message(self, offset: int, size: int, checked_pages: set[tuple[str, int]] | None = None
                    ) -> memoryview | None: ...

    def look_message_by_offset(self, offset: int, size: int | None = None) -> MessageExt | None: ...


class MemberStoppedError(RuntimeError):
    """The DLedger member of this store stopped itself: reads are refused, not answered empty."""


def check_member_running(commitlog: ReadLog) -> None:
    reason = commitlog.member_stopped_reason
    if reason is not None:
        raise MemberStoppedError(f"DLedger member stopped itself ({reason}); its reads are refused")


class GetMessageStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(slots=True)
class GetMessageResult:
    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    buffers: list[memoryview] = field(default_factory=list)
    physical_offsets: list[int] = field(default_factory=list)

    @property
    def messages(self) -> list[MessageExt]:
        return [decode_message(b) for b in self.buffers]

    @property
    def message_count(self) -> int:
        return len(self.buffers)


class StoreReads:
    """Read methods of DefaultMessageStore (see the module rules), over accessors of its parts."""

    def __init__(self, *, commitlog: Callable[[], ReadLog | None],
                 consume_queue_store: Callable[[], ConsumeQueueStore | None],
                 index_service: Callable[[], IndexService | None],
                 broker_config: Callable[[], object] = lambda: None) -> None:
        self._commitlog = commitlog
        self._consume_queue_store = consume_queue_store
        self._index_service = index_service
        self._broker_config = broker_config
        self._read_limits: TransferLimits | None = None

    def _log(self) -> ReadLog:
        cl = self._commitlog()
        assert cl is not None  # made by DefaultMessageStore.load
        return cl

    def find_consume_queue(self, topic: str, queue_id: int, create: bool = False) -> ConsumeQueue | None:
        cqs = self._consume_queue_store()
        assert cqs is not None
        return cqs.find_consume_queue(topic, queue_id, create=create)

    def consume_queues_of(self, topic: str) -> list[ConsumeQueue]:
        cqs = self._consume_queue_store()
        assert cqs is not None
        return sorted((cq for cq in cqs.consume_queues() if cq.topic == topic), key=lambda cq: cq.queue_id)

    @property
    def read_limits(self) -> TransferLimits:
        """The caps of a read that names none: ``httpPullMaxBytes`` of the store's broker conf."""
        limits = self._read_limits
        if limits is None:
            limits = self._read_limits = TransferLimits.http(self._broker_config())
        return limits

    def get_message(self, topic: str, queue_id: int, offset: int, max_num: int = 32,
                    tags_filter: Callable[[int], bool] | None = None,
                    limits: TransferLimits | None = None) -> GetMessageResult:
        """Up to ``max_num`` messages from ``offset`` of a queue (``DefaultMessageStore.getMessage``),
        within ``limits`` (default :attr:`read_limits`)."""
        cl = self._log()
        caps = limits if limits is not None else self.read_limits
        check_member_running(cl)
        cq = self.find_consume_queue(topic, queue_id)
        if cq is None:
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        lo, hi = cq.min_offset_in_queue, cq.max_offset_in_queue
        if hi == 0:
            return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, lo, hi)
        if offset < lo:
            return GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, lo, lo, hi)
        if offset == hi:
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, lo, hi)
        if offset > hi:
            return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_BADLY, lo if lo == 0 else hi, lo, hi)
        result = GetMessageResult(GetMessageStatus.NO_MATCHED_MESSAGE, offset, lo, hi)
        next_offset = offset
        missing = corrupt = full = False
        total = 0
        max_phy = cl.max_offset
        checked_pages: set[tuple[str, int]] = set()  # page checksums: each page once per pull
        while result.message_count < max_num and next_offset < hi and not corrupt and not full:
            units = cq.get_units(next_offset, max_num - result.message_count)
            if not units:
                break
            for phy, size, tags_code in units:
                if caps.batch_full(size, max_num, total, result.message_count, caps.in_disk(phy, max_phy)):
                    full = True
                    break
                next_offset += 1
                if tags_filter is not None and not tags_filter(tags_code):
                    continue
                try:
                    buf = cl.get_message(phy, size, checked_pages)
                except CorruptRecordError:
                    if not result.buffers:
                        raise  # never data: the pull is an error naming the record
                    next_offset -= 1  # serve the good records before it; the next pull fails on it
                    corrupt = True
                    break
                if buf is None:
                    missing = True
                    continue
                result.buffers.append(buf)
                result.physical_offsets.append(phy)
                total += size
        result.next_begin_offset = next_offset
        if missing:  # its files may have closed under this read: then nothing here is "removed"
            check_member_running(cl)
        if result.buffers:
            result.status = GetMessageStatus.FOUND
        elif missing:
            result.status = GetMessageStatus.MESSAGE_WAS_REMOVING
        return result

    def look_message_by_offset(self, commitlog_offset: int, size: int | None = None) -> MessageExt | None:
        cl = self._log()
        check_member_running(cl)
        msg = cl.look_message_by_offset(commitlog_offset, size)
        if msg is None:
            check_member_running(cl)
        return msg

    def view_message_by_id(self, msg_id: str) -> MessageExt | None:
        """The message an offset msgId names (the store host part is not checked)."""
        _host, offset = decode_message_id(msg_id)
        return self.look_message_by_offset(offset)

    def query_message(self, topic: str, key: str, max_num: int = 32, begin: int = 0,
                      end: int | None = None) -> list[MessageExt]:
        """Messages indexed under ``key`` (a KEYS token or the UNIQ_KEY) of ``topic``."""
        index = self._index_service()
        if index is None:
            return []
        end = int(time.time() * 1000) + 1 if end is None else end
        out = []
        for phy in index.query_offset(topic, key, max_num, begin, end):
            msg = self.look_message_by_offset(phy)
            if msg is not None and msg.topic == topic:
                out.append(msg)
        return out

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.find_consume_queue(topic, queue_id)
        return cq.min_offset_in_queue if cq is not None else 0

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self.find_consume_queue(topic, queue_id)
        return cq.max_offset_in_queue if cq is not None else 0

    def get_commitlog_offset_in_queue(self, topic: str, queue_id: int, queue_offset: int) -> int:
        cq = self.find_consume_queue(topic, queue_id)
        unit = cq.get(queue_offset) if cq is not None else None
        return unit[0] if unit is not None else 0

    def get_max_phy_offset(self) -> int:
        return self._log().max_offset

    def get_min_phy_offset(self) -> int:
        return self._log().min_offset

    def get_confirm_offset(self) -> int:
        return self._log().confirm_offset

    def get_flushed_where(self) -> int:
        return self._log().flushed_offset
