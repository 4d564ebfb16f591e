"""Master side of classic HA: HAService (accept + GroupTransferService) and HAConnection.

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

Theory of operation: ``_handle`` (one task per accepted socket) owns an ``HAConnection``,
whose ``_read_loop`` feeds reports to the state machine and whose ``_write_loop`` asks it where
to transfer from, reads ``get_data`` there, writes the frames (up to ``max_write_bytes`` per
round, then ``drain()`` for back-pressure) and otherwise sleeps until woken by a put, by the
first report, or by the machine's next heartbeat/housekeeping deadline.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import heapq
import itertools
import logging
import time
from typing import Any, Callable

from broker.ha.protocol import (
    HAError,
    MasterConnection,
    SlaveReport,
    TransferStarted,
)
from broker.ha.settings import HASettings
from broker.store.put_result import PutMessageStatus

log = logging.getLogger("broker.ha")

READ_CHUNK = 64 * 1024


def _now_ms() -> float:
    return time.monotonic() * 1000.0


def commitlog_max_offset(commitlog: Any) -> int:
    """``commitlog.max_offset`` whether it is a property or a method."""
    value = commitlog.max_offset
    return int(value() if callable(value) else value)


def commitlog_min_offset(commitlog: Any) -> int:
    """``commitlog.min_offset`` (-1 or 0 for an empty commitlog)."""
    value = getattr(commitlog, "min_offset", 0)
    return int(value() if callable(value) else value)


def _committed_bytes(commitlog: Any, offset: int) -> memoryview | None:
    """Non-empty committed bytes starting exactly at ``offset``, or None.

    Accepts both shapes of ``get_data``: a ``SelectMappedBufferResult`` (``start_offset``,
    ``buffer``) or a bare buffer.
    """
    result = commitlog.get_data(offset)
    if result is None:
        return None
    buffer = getattr(result, "buffer", result)
    start = getattr(result, "start_offset", offset)
    if start != offset or not len(buffer):
        return None
    return memoryview(buffer)


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


class HAConnection:
    """One connected slave, as seen by the master (RocketMQ ``HAConnection``)."""

    def __init__(
        self,
        service: "HAService",
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.service = service
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.address = f"{peer[0]}:{peer[1]}" if peer else "?"
        now = service.clock()
        s = service.settings
        self.machine = MasterConnection(
            now_ms=now,
            mapped_file_size=service.mapped_file_size,
            transfer_batch_size=s.ha_transfer_batch_size,
            heartbeat_interval_ms=s.ha_send_heartbeat_interval,
            housekeeping_interval_ms=s.ha_housekeeping_interval,
        )
        self.connected_at_ms = now
        self.bytes_sent = 0
        self.frames_sent = 0
        self.reported = False  # counts as a slave once it sent a valid report
        self.close_reason: str | None = None
        self._wake = asyncio.Event()
        self._closed = asyncio.Event()

    # ---------------------------------------------------------------- properties
    @property
    def slave_request_offset(self) -> int:
        return self.machine.slave_request_offset

    @property
    def slave_ack_offset(self) -> int:
        return self.machine.slave_ack_offset

    def wake(self) -> None:
        self._wake.set()

    def close(self, reason: str) -> None:
        if self.close_reason is None:
            self.close_reason = reason
        self._closed.set()
        self._wake.set()
        # abort, not close: close() would wait to flush what a stuck slave will never read.
        self.writer.transport.abort()

    def snapshot(self, master_max: int) -> dict[str, Any]:
        ack = self.machine.slave_ack_offset
        return {
            "address": self.address,
            "request_offset": self.machine.slave_request_offset,
            "acked_offset": ack,
            "transfer_from": self.machine.transfer_from,
            "lag_bytes": master_max - ack if ack >= 0 else None,
            "bytes_sent": self.bytes_sent,
            "frames_sent": self.frames_sent,
            "connected_ms": round(self.service.clock() - self.connected_at_ms),
        }

    # ---------------------------------------------------------------- loops
    async def run(self) -> None:
        read_task = asyncio.create_task(self._read_loop(), name=f"ha-read-{self.address}")
        write_task = asyncio.create_task(self._write_loop(), name=f"ha-write-{self.address}")
        try:
            await self._watchdog()
        finally:
            for task in (read_task, write_task):
                task.cancel()
            await asyncio.gather(read_task, write_task, return_exceptions=True)
            if not self.writer.is_closing():
                self.writer.close()
            try:
                await asyncio.wait_for(self.writer.wait_closed(), 1.0)
            except (OSError, asyncio.TimeoutError, asyncio.CancelledError):
                pass

    async def _watchdog(self) -> None:
        """Housekeeping independent of the writer (which may sit in ``drain()`` on a stuck slave)."""
        machine = self.machine
        clock = self.service.clock
        while not self._closed.is_set():
            delay = (machine.last_read_ms + machine.housekeeping_interval_ms - clock()) / 1000.0
            try:
                await asyncio.wait_for(self._closed.wait(), max(delay, 0) + 0.01)
            except asyncio.TimeoutError:
                expired = machine.check_expired(clock())
                if expired is not None:
                    log.warning("HA connection %s dropped: %s", self.address, expired.message)
                    self.close(expired.message)

    async def _read_loop(self) -> None:
        service = self.service
        try:
            while True:
                data = await self.reader.read(READ_CHUNK)
                if not data:
                    self.close("slave closed the connection")
                    return
                events = self.machine.receive_data(data, service.clock(), commitlog_max_offset(service.commitlog))
                for ev in events:
                    if isinstance(ev, SlaveReport):
                        if not self.reported:
                            self.reported = True
                            service._connections_changed()
                        service._notify_transfer_some(ev.offset)
                    elif isinstance(ev, TransferStarted):
                        log.info(
                            "HA slave %s requested offset %d, master transfers from %d",
                            self.address, ev.request_offset, ev.transfer_from,
                        )
                        self._wake.set()
                    elif isinstance(ev, HAError):
                        log.warning("HA connection %s dropped: %s", self.address, ev.message)
                        self.close(ev.message)
                        return
        except (ConnectionError, OSError) as exc:
            self.close(f"read failed: {exc!r}")
        except Exception as exc:  # never let one connection take the service down
            log.exception("HA connection %s read loop failed", self.address)
            self.close(f"internal error: {exc!r}")

    async def _write_loop(self) -> None:
        service = self.service
        machine = self.machine
        commitlog = service.commitlog
        writer = self.writer
        max_bytes = service.max_write_bytes
        loop = asyncio.get_running_loop()
        try:
            while not self._closed.is_set():
                self._wake.clear()
                now = service.clock()
                due = machine.poll(now)
                if isinstance(due, HAError):
                    log.warning("HA connection %s dropped: %s", self.address, due.message)
                    self.close(due.message)
                    return
                if due is not None:
                    writer.write(due)
                    self.frames_sent += 1
                    self.bytes_sent += len(due)
                nxt = machine.transfer_from
                if nxt is not None:
                    min_offset = commitlog_min_offset(commitlog)
                    if nxt < min_offset:
                        msg = f"slave needs offset {nxt} but the master's commitlog starts at {min_offset}"
                        log.warning("HA connection %s dropped: %s", self.address, msg)
                        self.close(msg)
                        return
                    data = _committed_bytes(commitlog, nxt)
                    if data is not None:
                        frames = machine.frames_for(data, now, max_bytes=max_bytes)
                        del data
                        writer.writelines(frames)
                        self.frames_sent += len(frames) // 2
                        self.bytes_sent += sum(len(f) for f in frames)
                        await writer.drain()
                        continue  # more may be ready (next file, or beyond max_bytes)
                if due is not None:
                    await writer.drain()
                timeout = (machine.next_deadline() - service.clock()) / 1000.0
                if nxt is not None:
                    timeout = min(timeout, service.poll_interval_ms / 1000.0)
                if timeout > 0:
                    handle = loop.call_later(timeout + 0.001, self._wake.set)
                    try:
                        await self._wake.wait()
                    finally:
                        handle.cancel()
        except (ConnectionError, OSError) as exc:
            self.close(f"write failed: {exc!r}")
        except Exception as exc:
            log.exception("HA connection %s write loop failed", self.address)
            self.close(f"internal error: {exc!r}")


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
        wire_replica_hook: bool = True,
        clock: Callable[[], float] = _now_ms,
    ) -> None:
        self.commitlog = commitlog
        self.settings = config if isinstance(config, HASettings) else HASettings.from_config(config)
        self.host = host
        self.port = self.settings.ha_listen_port if port is None else port
        self.mapped_file_size = int(
            mapped_file_size
            or getattr(commitlog, "mapped_file_size", None)
            or self.settings.mapped_file_size_commit_log
        )
        self.poll_interval_ms = poll_interval_ms
        self.max_write_bytes = max_write_bytes
        self.wire_replica_hook = wire_replica_hook
        self.clock = clock
        self.connections: list[HAConnection] = []
        self._push2slave_max_offset = 0
        self._waiters: list[tuple[int, int, asyncio.Future[PutMessageStatus]]] = []
        self._seq = itertools.count()
        self._stale = 0
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    # ---------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._handle, self.host, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        if self.wire_replica_hook and getattr(self.commitlog, "replica_hook", False) is None:
            self.commitlog.replica_hook = self.replica_hook
        log.info("HAService listening on %s:%d (%s)", self.host, self.port, self.settings.broker_role)

    async def shutdown(self) -> None:
        if getattr(self.commitlog, "replica_hook", None) == self.replica_hook:
            self.commitlog.replica_hook = None
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for conn in list(self.connections):
            conn.close("master shutting down")
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for _, _, fut in self._waiters:
            if not fut.done():
                fut.set_result(PutMessageStatus.FLUSH_SLAVE_TIMEOUT)
        self._waiters.clear()
        log.info("HAService stopped")

    @property
    def listen_port(self) -> int:
        return self.port

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = HAConnection(self, reader, writer)
        self.connections.append(conn)
        log.info("HA connection from %s", conn.address)
        try:
            await conn.run()
        finally:
            self.connections.remove(conn)
            self._tasks.discard(task)
            log.info("HA connection %s closed (%s)", conn.address, conn.close_reason)
            if conn.reported:
                self._connections_changed()

    def _connections_changed(self) -> None:
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
            "connection_count": self.connection_count,
            "master_max_offset": master_max,
            "push2slave_max_offset": self._push2slave_max_offset,
            "slaves": [c.snapshot(master_max) for c in self.connections],
        }

    # ---------------------------------------------------------------- data path
    def notify_put(self, next_offset: int | None = None) -> None:
        """New committed bytes exist: wake every connection. Safe from other threads."""
        loop = self._loop
        if loop is None:
            return
        if _on_loop(loop):
            for conn in self.connections:
                conn.wake()
        else:
            loop.call_soon_threadsafe(self.notify_put, next_offset)

    def _notify_transfer_some(self, offset: int) -> None:
        if offset <= self._push2slave_max_offset:
            return
        self._push2slave_max_offset = offset
        waiters = self._waiters
        while waiters and waiters[0][0] <= offset:
            _, _, fut = heapq.heappop(waiters)
            if not fut.done():
                fut.set_result(PutMessageStatus.PUT_OK)

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
        timeout = self.settings.sync_flush_timeout if timeout_ms is None else timeout_ms
        heapq.heappush(self._waiters, (next_offset, next(self._seq), fut))
        self.notify_put(next_offset)  # RocketMQ: getWaitNotifyObject().wakeupAll()
        handle = loop.call_later(timeout / 1000.0, self._expire, fut)
        fut.add_done_callback(lambda _f: handle.cancel())
        return fut

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
        if _on_loop(loop):
            for conn in self.connections:
                conn.wake()
            if self.settings.broker_role != "SYNC_MASTER":
                return None
            return self.request_slave_ack(end)
        self.notify_put(end)
        if self.settings.broker_role != "SYNC_MASTER":
            return None
        out: concurrent.futures.Future[PutMessageStatus] = concurrent.futures.Future()

        def submit() -> None:
            fut = self.request_slave_ack(end)
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


__all__ = ["HAConnection", "HAService", "PutMessageStatus", "commitlog_max_offset"]
