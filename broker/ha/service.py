"""Master side of classic HA: HAService (accept + admission limits + GroupTransferService).

Rules:
- ``HAService`` listens on ``haListenPort`` and runs one :class:`HAConnection` per slave. The
  bytes and checks live in :mod:`broker.ha.protocol` (``MasterConnection``); this module only
  moves bytes between it, the socket and the CommitLog, on the broker's single asyncio loop.
- The CommitLog is only *read*, through ``get_data(offset)`` (committed bytes from ``offset``
  to the end of the written part of that file), ``max_offset`` and ``min_offset``. Nothing
  uncommitted is ever sent.
- Wiring: ``start()`` installs :meth:`HAService.replica_hook` as ``commitlog.replica_hook`` (if
  the slot is free; ``shutdown()`` removes it). The store calls it after every append: it wakes
  every connection (any role) and, on a SYNC_MASTER, returns a ``concurrent.futures.Future``
  resolved with the ack outcome, so both the store's async and blocking put paths work (the
  blocking one only off the loop thread). Without the hook, :meth:`HAService.notify_put` does
  the waking, and a caught-up connection also re-checks every ``poll_interval_ms`` (100 ms,
  RocketMQ's ``allWaitForRunning(100)``), so a missing wake-up costs latency, never data.
- Acks: ``push2slave_max_offset`` is the highest offset any slave has acknowledged since this
  service started; it never goes down (a slave that disconnects after acking did store those
  bytes). With several slaves a SYNC_MASTER put is acknowledged as soon as **any** slave has it,
  as RocketMQ 4.x's ``GroupTransferService`` does (it compares with the single
  ``push2SlaveMaxOffset``); "all slaves" / quorum semantics are DLedger's job.
- ``is_slave_ok(put_where)`` is RocketMQ's ``isSlaveOK``: at least one slave connected and
  ``put_where - push2slave_max_offset < haSlaveFallbehindMax``. One deliberate difference: a
  connection counts as a slave only once it has sent a valid report, so a port scanner or a
  garbage-sending peer cannot make SYNC_MASTER puts wait instead of failing fast.
- :meth:`HAService.wait_for_slave_ack` gives GroupTransferService semantics: ``SLAVE_NOT_AVAILABLE``
  at once when not ``is_slave_ok``; ``PUT_OK`` as soon as an ack >= ``next_offset`` arrives;
  ``FLUSH_SLAVE_TIMEOUT`` after ``timeout_ms`` (default ``sync_flush_timeout``). The put itself is
  never rolled back (RocketMQ neither).
- A misbehaving peer (garbage, offsets beyond our max, silence for ``haHousekeepingInterval``)
  gets one warning line and its connection closed; other connections are untouched.
- Doors (issue 12): a connection is *pending* until admitted, and only admitted connections are
  in :attr:`HAService.connections` (woken, sent commitlog bytes, counted by ``connection_count``,
  ``is_slave_ok`` and ``push2slave_max_offset``). With ``haAuthToken`` admission is the mutual
  handshake of :mod:`broker.ha.handshake`, and every later report and frame is MACed; without
  a token (open, RocketMQ's own protocol) admission is the first 8 bytes of a report. A pending
  socket gets ``min(haHandshakeTimeout, haHousekeepingInterval)`` to be admitted; at most
  ``ha_max_pending_connections`` are held, the oldest dropped for a newcomer (so idle sockets
  cannot lock a real slave out), and at most ``ha_max_connections`` are admitted. Every refusal
  is counted (``refused_connections`` in :meth:`HAService.status`) and logged as one line naming
  the remote address and why (at most :data:`REFUSAL_LOG_BURST` lines per 10 s, then a count).
  A refused peer never receives a commitlog byte.

Theory of operation: ``_handle`` (one task per accepted socket) makes room among the pending
sockets, then runs an ``HAConnection`` (:mod:`broker.ha.connection`: admission, then the read,
write and watchdog loops). Reports reach :meth:`HAService.on_slave_progress`, which raises
``push2slave_max_offset`` and resolves the GroupTransferService waiters (a heap by offset). A
put costs one future and two heap entries: its timeout is a second heap (by deadline) under one
shared timer armed at the earliest pending deadline, as Apache's GroupTransferService checks its
requests per wake-up instead of a timer each; the replica hook wakes the connections once, and
the broker's after-put :meth:`HAService.notify_put` wakes only a connection that has not yet
sent the put's bytes.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import heapq
import itertools
import logging
import threading
from typing import Any, Callable

from dledger.ratelog import RateLimitedLog

from broker.ha.connection import (  # noqa: F401 - commitlog_*_offset re-exported for client.py
    REFUSAL_LOG_BURST,
    REFUSAL_LOG_WINDOW_MS,
    HAConnection,
    _now_ms,
    commitlog_max_offset,
    commitlog_min_offset,
    settings_with,
)
from broker.store.put_result import PutMessageStatus

log = logging.getLogger("broker.ha")


class HAService:
    """Master side of classic replication (RocketMQ ``HAService`` without the HAClient)."""

    def __init__(
        self,
        commitlog: Any,
        config: Any = None,
        *,
        host: str = "0.0.0.0",
        port: int | None = None,
        mapped_file_size: int | None = None,
        poll_interval_ms: float = 100.0,
        max_write_bytes: int = 1024 * 1024,
        clock: Callable[[], float] = _now_ms,
        broker_name: str | None = None,
        auth_token: str | None = None,
    ) -> None:
        self.commitlog = commitlog
        self.settings = settings_with(config, broker_name=broker_name, ha_auth_token=auth_token)
        self.host = host
        self.port = self.settings.ha_listen_port if port is None else port
        self.mapped_file_size = int(
            mapped_file_size
            or getattr(commitlog, "mapped_file_size", None)
            or self.settings.mapped_file_size_commit_log
        )
        self.poll_interval_ms = poll_interval_ms
        self.max_write_bytes = max_write_bytes
        self.clock = clock
        self.connections: list[HAConnection] = []  # admitted only
        self.pending: list[HAConnection] = []  # accepted, not (yet) admitted
        self.refused_count = 0
        self._refusal_log = RateLimitedLog(log, REFUSAL_LOG_BURST, REFUSAL_LOG_WINDOW_MS / 1000.0,
                                           clock=lambda: self.clock() / 1000.0, prefix="HA port: ")
        self._push2slave_max_offset = 0
        self._waiters: list[tuple[int, int, asyncio.Future[PutMessageStatus]]] = []  # heap by offset
        self._deadlines: list[tuple[float, int, asyncio.Future[PutMessageStatus]]] = []  # heap by loop time
        self._timer: asyncio.TimerHandle | None = None  # one timer, at the earliest pending deadline
        self._timer_at = 0.0
        self._seq = itertools.count()
        self._stale = 0
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0  # threading.get_ident() of the thread that runs _loop (start)
        self._stopped_waiting = False  # shutdown: no put waits for a slave ack any more

    # ---------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._server = await asyncio.start_server(self._handle, self.host, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        if getattr(self.commitlog, "replica_hook", False) is None:
            self.commitlog.replica_hook = self.replica_hook
        log.info("HAService listening on %s:%d (%s, %s)", self.host, self.port, self.settings.broker_role,
                 "haAuthToken handshake" if self.settings.ha_auth_token else "open: no haAuthToken")

    async def shutdown(self) -> None:
        if getattr(self.commitlog, "replica_hook", None) == self.replica_hook:
            self.commitlog.replica_hook = None
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for conn in list(self.connections) + list(self.pending):
            conn.close("master shutting down")
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for _, _, fut in self._waiters:
            if not fut.done():
                fut.set_result(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        self._waiters.clear()
        self._clear_deadlines()
        log.info("HAService stopped")

    @property
    def listen_port(self) -> int:
        return self.port

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = HAConnection(self, reader, writer)
        cap = self.settings.ha_max_pending_connections
        while len(self.pending) >= max(cap, 1):  # the oldest pending socket makes room
            self.pending.pop(0).refuse(f"dropped for a newer connection: {cap} connections were waiting "
                                       "to be admitted (handshake not complete)")
        self.pending.append(conn)
        try:
            await conn.run()
        finally:
            for group in (self.pending, self.connections):
                if conn in group:
                    group.remove(conn)
            self._tasks.discard(task)
            if conn.admitted:
                log.info("HA connection %s closed (%s)", conn.address, conn.close_reason)
            if conn.reported:
                self.on_connections_changed()

    # ---------------------------------------------------------------- connection events (ConnectionHost)
    def on_admitted(self, conn: HAConnection) -> None:
        if conn in self.pending:
            self.pending.remove(conn)
        self.connections.append(conn)
        log.info("HA connection from %s admitted (%s)", conn.address,
                 "haAuthToken verified" if conn.authenticated else "open protocol, no haAuthToken")

    def on_refused(self, address: str, reason: str) -> None:
        """Count a refusal and log it: one line per peer, at most REFUSAL_LOG_BURST per window."""
        self.refused_count += 1
        self._refusal_log.warning("refused", "connection from %s refused: %s", address, reason)

    def on_connections_changed(self) -> None:
        pass  # hook point for metrics; connection_count is computed on demand

    # ---------------------------------------------------------------- state
    @property
    def connection_count(self) -> int:
        """Connected slaves (connections that sent at least one valid report)."""
        return sum(1 for c in self.connections if c.reported and c.close_reason is None)

    @property
    def push2slave_max_offset(self) -> int:
        return self._push2slave_max_offset

    def is_slave_ok(self, master_put_where: int) -> bool:
        """RocketMQ ``isSlaveOK``: a slave is connected and not too far behind."""
        return (
            self.connection_count > 0
            and master_put_where - self._push2slave_max_offset < self.settings.ha_slave_fallbehind_max
        )

    def status(self) -> dict[str, Any]:
        master_max = commitlog_max_offset(self.commitlog)
        return {
            "listen_port": self.port,
            "auth": "haAuthToken" if self.settings.ha_auth_token else "open",
            "connection_count": self.connection_count,
            "authenticated_slave_count": sum(1 for c in self.connections if c.authenticated and c.reported
                                             and c.close_reason is None),
            "pending_connections": len(self.pending),
            "refused_connections": self.refused_count,
            "master_max_offset": master_max,
            "push2slave_max_offset": self._push2slave_max_offset,
            "slaves": [c.snapshot(master_max) for c in self.connections if c.close_reason is None],
        }

    # ---------------------------------------------------------------- data path
    def notify_put(self, next_offset: int | None = None) -> None:
        """New committed bytes exist: wake every connection that has not sent up to ``next_offset``
        yet (every connection when it is None). Safe from other threads. The broker calls it after
        each put has completed (``StoreAccess.on_put``), by when the replica hook's wake-up has
        usually sent those bytes already: no write-loop turn for nothing then."""
        loop = self._loop
        if loop is None:
            return
        if self._on_own_loop(loop):
            for conn in self.connections:
                if next_offset is None or conn.behind(next_offset):
                    conn.wake()
        else:
            loop.call_soon_threadsafe(self.notify_put, next_offset)

    def _on_own_loop(self, loop: asyncio.AbstractEventLoop) -> bool:
        """``asyncio.get_running_loop() is loop`` (``loop``: the one :meth:`start` ran on) without
        its ``getpid()`` system call (CPython 3.11 makes one per call, twice per put here): a running
        loop runs in the thread that started it, and every call made in that thread is on it."""
        return threading.get_ident() == self._loop_thread and loop.is_running()

    def on_slave_progress(self, offset: int) -> None:
        if offset <= self._push2slave_max_offset:
            return
        self._push2slave_max_offset = offset
        waiters = self._waiters
        while waiters and waiters[0][0] <= offset:
            _, _, fut = heapq.heappop(waiters)
            if not fut.done():
                fut.set_result(PutMessageStatus.PUT_OK)
        deadlines = self._deadlines
        while deadlines and deadlines[0][2].done():  # acked in order, so these are the oldest
            heapq.heappop(deadlines)

    def request_slave_ack(self, next_offset: int, timeout_ms: float | None = None) -> "asyncio.Future[PutMessageStatus]":
        """GroupTransferService request (call on the loop): a future resolved with the outcome."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[PutMessageStatus] = loop.create_future()
        if not self.is_slave_ok(next_offset):
            fut.set_result(PutMessageStatus.SLAVE_NOT_AVAILABLE)
            return fut
        if self._push2slave_max_offset >= next_offset:
            fut.set_result(PutMessageStatus.PUT_OK)
            return fut
        if self._stopped_waiting:
            fut.set_result(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
            return fut
        self._wait(loop, fut, next_offset, timeout_ms)
        self.notify_put(next_offset)  # RocketMQ: getWaitNotifyObject().wakeupAll()
        return fut

    def _request(self, loop: asyncio.AbstractEventLoop, next_offset: int) -> "asyncio.Future[PutMessageStatus]":
        """:meth:`request_slave_ack` for the replica hook, which has already woken the connections."""
        fut: asyncio.Future[PutMessageStatus] = loop.create_future()
        if not self.is_slave_ok(next_offset):
            fut.set_result(PutMessageStatus.SLAVE_NOT_AVAILABLE)
        elif self._push2slave_max_offset >= next_offset:
            fut.set_result(PutMessageStatus.PUT_OK)
        elif self._stopped_waiting:
            fut.set_result(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        else:
            self._wait(loop, fut, next_offset, None)
        return fut

    def _wait(self, loop: asyncio.AbstractEventLoop, fut: "asyncio.Future[PutMessageStatus]", next_offset: int,
              timeout_ms: float | None) -> None:
        """Queue ``fut`` for an ack >= ``next_offset``; one shared timer answers it at its deadline
        (GroupTransferService checks its requests once per wake-up, not with a timer each)."""
        timeout = self.settings.sync_flush_timeout if timeout_ms is None else timeout_ms
        seq = next(self._seq)
        heapq.heappush(self._waiters, (next_offset, seq, fut))
        deadline = loop.time() + timeout / 1000.0
        heapq.heappush(self._deadlines, (deadline, seq, fut))
        if self._timer is None or deadline < self._timer_at:
            self._arm(loop, deadline)

    def _arm(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = loop.call_at(at, self._on_deadline)

    def _on_deadline(self) -> None:
        """The shared timer: every waiter past its deadline is answered FLUSH_SLAVE_TIMEOUT."""
        self._timer = None
        loop = self._loop
        if loop is None:
            return
        now = loop.time()
        deadlines = self._deadlines
        while deadlines and (deadlines[0][0] <= now or deadlines[0][2].done()):
            _, _, fut = heapq.heappop(deadlines)
            if not fut.done():
                self._expire(fut)
        if deadlines:
            self._arm(loop, deadlines[0][0])

    def _clear_deadlines(self) -> None:
        self._deadlines.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def stop_waiting(self) -> int:
        """Shutdown, first step: every put waiting for a slave ack is answered FLUSH_SLAVE_TIMEOUT
        now (stored on this master, not confirmed by a slave: what the put would have answered
        at its timeout), and so is every later one; returns how many were waiting."""
        self._stopped_waiting = True
        released = 0
        for _, _, fut in self._waiters:
            if not fut.done():
                fut.set_result(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
                released += 1
        self._waiters.clear()
        self._clear_deadlines()
        return released

    async def wait_for_slave_ack(self, next_offset: int, timeout_ms: float | None = None) -> PutMessageStatus:
        """Wait until a slave acked ``next_offset`` (the end offset of the put).

        PUT_OK, FLUSH_SLAVE_TIMEOUT after ``timeout_ms`` (default ``sync_flush_timeout``), or
        SLAVE_NOT_AVAILABLE at once when :meth:`is_slave_ok` is false.
        """
        return await self.request_slave_ack(next_offset, timeout_ms)

    def replica_hook(
        self, append_result: Any
    ) -> "asyncio.Future[PutMessageStatus] | concurrent.futures.Future[PutMessageStatus] | None":
        """``CommitLog.replica_hook``: wake the senders; on a SYNC_MASTER, a future for the ack.

        Called by the store after every append (any role). ``append_result`` is an
        ``AppendMessageResult`` (its ``end_offset``, or ``wrote_offset + wrote_bytes``, is the
        offset the slave must reach). Called on the loop it returns an ``asyncio.Future`` (which
        ``asyncio.wrap_future`` passes through, saving a thread hop); from another thread a
        ``concurrent.futures.Future`` the caller may block on.
        """
        end = getattr(append_result, "end_offset", 0) or (
            append_result.wrote_offset + append_result.wrote_bytes
        )
        loop = self._loop
        if loop is None:
            return None
        if self._on_own_loop(loop):
            for conn in self.connections:
                conn.wake()
            if self.settings.broker_role != "SYNC_MASTER":
                return None
            return self._request(loop, end)
        self.notify_put(end)
        if self.settings.broker_role != "SYNC_MASTER":
            return None
        out: concurrent.futures.Future[PutMessageStatus] = concurrent.futures.Future()

        def submit() -> None:
            assert loop is not None
            fut = self._request(loop, end)
            fut.add_done_callback(lambda f: out.set_result(f.result()) if not f.cancelled() else out.cancel())

        loop.call_soon_threadsafe(submit)
        return out

    def _expire(self, fut: "asyncio.Future[PutMessageStatus]") -> None:
        if not fut.done():
            fut.set_result(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
            self._stale += 1  # its heap entry stays until an ack passes it
            self._prune_waiters()

    def _prune_waiters(self) -> None:
        if self._stale > 256 and self._stale * 2 > len(self._waiters):
            self._waiters = [w for w in self._waiters if not w[2].done()]
            heapq.heapify(self._waiters)
            self._stale = 0


__all__ = ["HAConnection", "HAService", "PutMessageStatus", "commitlog_max_offset", "settings_with"]
