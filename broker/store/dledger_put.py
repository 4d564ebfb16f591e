"""The DLedger put path on the leader: queue offsets, one entry per message, status mapping.

Rules (reference §4.5, DESIGN §5):
- Encoding runs in the caller's thread; the rest of a put runs on the DLedger event-loop thread
  only, which serialises every put: queue offsets are taken from ``topic_queue_table`` (0 for
  PREPARED/ROLLBACK, which do not advance it), written into each message (QUEUEOFFSET, and
  STORETIMESTAMP = now unless kept) and the messages are appended as one DLedger batch, one
  entry per message; the append hook fills PHYSICALOFFSET.
- The table advances only if the local append succeeded: a refused append consumes no queue
  offset (Apache 5.0-5.1's gap, issue #6570, cannot happen).
- Only a *ready* leader appends (``DLedgerCommitLog.leader_ready``); otherwise, and on
  NOT_LEADER, the answer is SERVICE_NOT_AVAILABLE with ``extra = {leader_id, leader_addr}``.
- Completion: the put's future resolves when DLedger commits (PUT_OK) or fails the entries.
  A refusal *before* the local append (not a ready leader, NOT_LEADER, full disk, oversize) was
  never proposed: its DLedger code maps by :func:`put_status_for` (SERVICE_NOT_AVAILABLE, which
  the broker turns into NOT_MASTER with the leader's address, and a producer may retry). Once
  appended, *every* failure (quorum timeout, term change, lost leadership, stop) is "outcome
  unknown": FLUSH_SLAVE_TIMEOUT with the append result and ``extra["outcome_unknown"]``, since
  a quorum may hold the entries and a later leader commit them (issue 13.6: 100,000 puts
  answered NOT_MASTER were committed, and retried into duplicates).
- Status mapping of DLedger codes refusing a put before it is appended (reference §4.5,
  decided here, :func:`put_status_for`): SUCCESS -> PUT_OK; NOT_LEADER, INCONSISTENT_LEADER,
  LEADER_NOT_READY, LEADER_TRANSFERRING, TERM_CHANGED, DISK_FULL, DISK_ERROR ->
  SERVICE_NOT_AVAILABLE; LEADER_PENDING_FULL -> OS_PAGECACHE_BUSY; WAIT_QUORUM_ACK_TIMEOUT ->
  FLUSH_SLAVE_TIMEOUT (stored locally, quorum not reached in time, may still commit: the same
  "maybe stored" meaning as classic SYNC_MASTER's; Apache 4.9.8 says OS_PAGECACHE_BUSY, 5.x
  IN_SYNC_REPLICAS_NOT_ENOUGH); UNEXPECTED_ARGUMENT (entry > 4 MiB) and
  REQUEST_WITH_EMPTY_BODYS -> MESSAGE_ILLEGAL; other codes -> UNKNOWN_ERROR.

Theory of operation: :class:`DLedgerPutPath` is an object its DLedgerCommitLog composes (this
module does not import the commitlog, which imports it), given exactly what it uses: the
commitlog's status counters, its leader-ready event and ``max_message_size`` (fixed), and zero-arg
accessors of what changes with the commitlog's life cycle: the DLedger server (made in recovery),
the loop (None unless started), and ``topic_queue_table`` (replaced by the store's
``recover_topic_queue_table``; the put path updates the current one in place).
:meth:`DLedgerPutPath.submit` (the commitlog's ``submit_put``) encodes in the caller's thread
and schedules the append on the loop with ``call_soon_threadsafe``; the result travels back
through a ``concurrent.futures.Future`` that blocking and async callers share; the server calls
the put's sink in the drive that commits or fails the entries.
Dispatch is woken by the server's commit listener, not here.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import struct
import threading
import time
from typing import TYPE_CHECKING, Callable, Sequence

from broker.store.dledger_dispatch import DLEDGER_BODY_OFFSET
from broker.store.errors import MessageFormatError
from broker.store.message import EncodedBatch, MessageExt, PropertiesSizeExceeded, encode_batch
from broker.store.put_result import AppendMessageResult, PutMessageResult, PutMessageStatus
from dledger.core.codes import Code
from dledger.errors import DLedgerError

if TYPE_CHECKING:  # pragma: no cover
    from dledger.server import DLedgerServer

_Q = struct.Struct(">q")

SERVICE_NOT_AVAILABLE_CODES = frozenset({
    Code.NOT_LEADER, Code.INCONSISTENT_LEADER, Code.LEADER_NOT_READY, Code.LEADER_TRANSFERRING,
    Code.TERM_CHANGED, Code.DISK_FULL, Code.DISK_ERROR,
})


def put_status_for(code: int) -> PutMessageStatus:
    """PutMessageStatus of a DLedger response code (module rules)."""
    if code == Code.SUCCESS:
        return PutMessageStatus.PUT_OK
    if code in SERVICE_NOT_AVAILABLE_CODES:
        return PutMessageStatus.SERVICE_NOT_AVAILABLE
    if code == Code.LEADER_PENDING_FULL:
        return PutMessageStatus.OS_PAGECACHE_BUSY
    if code == Code.WAIT_QUORUM_ACK_TIMEOUT:
        return PutMessageStatus.FLUSH_SLAVE_TIMEOUT
    if code in (Code.UNEXPECTED_ARGUMENT, Code.REQUEST_WITH_EMPTY_BODYS):
        return PutMessageStatus.MESSAGE_ILLEGAL
    return PutMessageStatus.UNKNOWN_ERROR


class DLedgerPutPath:
    """The put path of a DLedgerCommitLog (module rules and theory)."""

    def __init__(self, *, server: Callable[[], DLedgerServer | None],
                 loop: Callable[[], asyncio.AbstractEventLoop | None],
                 topic_queue_table: Callable[[], dict[tuple[str, int], int]], leader_ready: threading.Event,
                 counters: dict[str, int], max_message_size: int) -> None:
        self._server = server
        self._loop = loop
        self._table = topic_queue_table
        self._leader_ready = leader_ready
        self.counters = counters
        self.max_message_size = max_message_size

    def submit(self, msgs: Sequence[MessageExt], keep_store_timestamp: bool = False
               ) -> "concurrent.futures.Future[PutMessageResult]":
        """Encode here, append on the DLedger loop; the future resolves on commit or failure."""
        out: concurrent.futures.Future[PutMessageResult] = concurrent.futures.Future()
        if not msgs:
            out.set_result(PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, error="empty batch"))
            return out
        try:
            batch = encode_batch(msgs, self.max_message_size)
        except PropertiesSizeExceeded as exc:
            out.set_result(PutMessageResult(PutMessageStatus.PROPERTIES_SIZE_EXCEEDED, error=str(exc)))
            return out
        except MessageFormatError as exc:
            out.set_result(PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, error=str(exc)))
            return out
        loop = self._loop()
        if loop is None or self._server() is None:
            out.set_result(PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, error="DLedger commitlog not started"))
            return out
        try:
            loop.call_soon_threadsafe(self._append_on_loop, msgs, batch, keep_store_timestamp, out)
        except RuntimeError:  # loop closed
            out.set_result(PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, error="DLedger commitlog stopped"))
        return out

    def _not_leader(self, why: str) -> PutMessageResult:
        s = self._server()
        leader = s.leader_id if s is not None else None
        self.counters["refused"] += 1
        return PutMessageResult(PutMessageStatus.SERVICE_NOT_AVAILABLE, error=why,
                                extra={"leader_id": leader,
                                       "leader_addr": s.config.address_of(leader) if s is not None else None})

    def _append_on_loop(self, msgs: Sequence[MessageExt], batch: EncodedBatch, keep_ts: bool,
                       out: "concurrent.futures.Future[PutMessageResult]") -> None:
        """The put path proper (DLedger loop thread only: it serialises queue offsets and appends)."""
        if out.done():
            return
        server = self._server()
        if server is None or not self._leader_ready.is_set():
            role = server.role.value if server is not None else "stopped"
            out.set_result(self._not_leader(f"not a ready DLedger leader (role {role})"))
            return
        data, starts, sizes = batch.data, batch.starts, batch.sizes
        view = memoryview(data)
        now = int(time.time() * 1000)
        table = self._table()
        local: dict[tuple[str, int], int] = {}
        qoffs = [0] * len(msgs)
        bodies = []
        last_ts = now
        for i, msg in enumerate(msgs):
            s, n = starts[i], sizes[i]
            tran = msg.sys_flag & 0xC
            if tran == 0x4 or tran == 0xC:
                qo = 0
            else:
                key = (msg.topic, msg.queue_id)
                got = local.get(key)
                qo = table.get(key, 0) if got is None else got
                local[key] = qo + 1
            _Q.pack_into(data, s + 20, qo)
            if keep_ts:
                last_ts = msg.store_timestamp
            else:
                _Q.pack_into(data, s + (68 if data[s + 39] & 0x10 else 56), now)
            qoffs[i] = qo
            bodies.append(view[s:s + n])
        ar: AppendMessageResult  # the sink runs at commit, in a later drive: ``ar`` (bound below) exists by then
        positions = server.append_batch_then(bodies, lambda _results, error: self._complete(error, ar, out))
        if isinstance(positions, DLedgerError):
            code = positions.code
            if code == Code.NOT_LEADER:
                out.set_result(self._not_leader(str(positions)))  # counts the refusal
            else:
                self.counters["refused"] += 1
                out.set_result(PutMessageResult(put_status_for(code), error=str(positions)))
            return
        table.update(local)
        self.counters["puts"] += 1
        self.counters["put_messages"] += len(msgs)
        phys = [p + DLEDGER_BODY_OFFSET for p in positions]
        ar = AppendMessageResult(
            wrote_offset=phys[0], wrote_bytes=sum(sizes), store_timestamp=last_ts, logics_offset=qoffs[0],
            msg_num=len(msgs), physical_offsets=phys, queue_offsets=qoffs,
            store_hosts=[m.store_host for m in msgs], end_offset=phys[-1] + sizes[-1], sizes=sizes,
        )

    def _complete(self, exc: DLedgerError | None, ar: AppendMessageResult,
                 out: "concurrent.futures.Future[PutMessageResult]") -> None:
        """The server's sink for a put's entries (DLedger loop, in the drive that decides them)."""
        if out.done():
            return
        if exc is None:
            out.set_result(PutMessageResult(PutMessageStatus.PUT_OK, ar))
            return
        # The entries were appended locally and offered to the followers: whatever failed them now
        # (quorum timeout, term change, lost leadership, a stop), a quorum may hold them and a later
        # leader commit them. Never "not stored" (SERVICE_NOT_AVAILABLE/NOT_MASTER would make the
        # producer retry into a duplicate): FLUSH_SLAVE_TIMEOUT, RocketMQ's "stored, replication not
        # confirmed" answer, with the ids and offsets they would have (issue 13.6).
        code = exc.code
        if code == Code.WAIT_QUORUM_ACK_TIMEOUT:
            self.counters["quorum_timeouts"] += 1
        else:
            self.counters["outcome_unknown"] += 1
        out.set_result(PutMessageResult(PutMessageStatus.FLUSH_SLAVE_TIMEOUT, ar,
                                        error=f"outcome unknown: the entries were proposed, then {exc}",
                                        extra={"outcome_unknown": True, "dledger_code": int(code)}))
