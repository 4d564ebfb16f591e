"""Master side of classic HA, one connection: admission (handshake or first report) and HAConnection.

Rules:
- An accepted socket is *pending* until :meth:`HAConnection._admit` admits it (the service hears of
  it through :meth:`ConnectionHost.on_admitted`): with
  ``haAuthToken`` the mutual handshake of :mod:`broker.ha.handshake` (its session MAC then
  guards every report and frame), without a token the first 8-byte report of RocketMQ's own
  protocol. Admission has a deadline (``min(haHandshakeTimeout, haHousekeepingInterval)``) and
  reads at most :data:`HANDSHAKE_READ_CHUNK` bytes at a time, so a pending peer holds one small
  buffer for a bounded time. Nothing is ever sent to a pending peer but handshake messages (and
  a REFUSED code): no commitlog byte before admission.
- A refusal (:meth:`HAConnection.refuse`) is counted and logged by the service; a drop after
  admission (:meth:`HAConnection.close`) is a warning line with the reason, as before.
- The bytes and checks of the replication itself live in :mod:`broker.ha.protocol`
  (``MasterConnection``); this module only moves bytes between it, the socket and the CommitLog.

Theory of operation: :meth:`HAConnection.run` admits, then runs ``_read_loop`` (feeds reports to
the state machine), ``_write_loop`` (asks it where to transfer from, reads ``get_data`` there,
writes the frames, up to ``max_write_bytes`` per round, then ``drain()`` for back-pressure, and
otherwise sleeps until woken by a put, by the first report, or by the machine's next deadline)
and ``_watchdog`` (housekeeping independent of a writer blocked in ``drain()``).
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any, Protocol

from broker.ha.handshake import MAGIC, REFUSE_BUSY, MasterHandshake, SessionMac, encode_refused
from broker.ha.protocol import (
    REPORT_SIZE,
    HAError,
    MasterConnection,
    SlaveReport,
    TransferStarted,
)
from broker.ha.settings import HASettings
from broker.tasks import wait_for

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable

log = logging.getLogger("broker.ha")

READ_CHUNK = 64 * 1024
HANDSHAKE_READ_CHUNK = 512  # a HELLO is at most 294 bytes: a pending peer cannot make us buffer more
REFUSAL_LOG_BURST = 20  # refusal lines per 10 s window before they are only counted
REFUSAL_LOG_WINDOW_MS = 10_000.0


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


def settings_with(config: Any, **overrides: Any) -> HASettings:
    """``config`` as :class:`HASettings`, with the non-None ``overrides`` (constructor kwargs) applied."""
    settings = config if isinstance(config, HASettings) else HASettings.from_config(config)
    changes = {k: v for k, v in overrides.items() if v is not None}
    if "ha_auth_token" in changes and not changes["ha_auth_token"]:
        changes["ha_auth_token"] = None
    return dataclasses.replace(settings, **changes) if changes else settings


class ConnectionHost(Protocol):
    """What a connection reads of its service (``HAService``) and the events it reports to it:
    the connection never touches the service's internals (issue 26.4)."""

    settings: HASettings
    mapped_file_size: int
    max_write_bytes: int
    poll_interval_ms: float
    commitlog: Any
    connections: list[HAConnection]
    clock: Callable[[], float]

    def on_refused(self, address: str, reason: str) -> None:
        """A peer was refused (counted and logged, rate-limited)."""

    def on_admitted(self, conn: HAConnection) -> None:
        """A peer passed admission: it is a slave connection now."""

    def on_connections_changed(self) -> None:
        """A slave sent its first valid report (or went away)."""

    def on_slave_progress(self, offset: int) -> None:
        """A slave acknowledged the commitlog up to ``offset``."""


class HAConnection:
    """One connected slave, as seen by the master (RocketMQ ``HAConnection``)."""

    def __init__(
        self,
        service: "ConnectionHost",
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.service = service
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.address = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.connected_at_ms = service.clock()
        self.machine: MasterConnection = None  # type: ignore[assignment]  # set by _admit
        self.admitted = False
        self.authenticated = False  # admitted through the haAuthToken handshake
        self.bytes_sent = 0
        self.frames_sent = 0
        self.reported = False  # counts as a slave once it sent a valid report
        self.close_reason: str | None = None
        self._wake = asyncio.Event()
        self._closed = asyncio.Event()

    def _start_machine(self, mac: SessionMac | None) -> None:
        s = self.service.settings
        self.machine = MasterConnection(
            now_ms=self.service.clock(),
            mapped_file_size=self.service.mapped_file_size,
            transfer_batch_size=s.ha_transfer_batch_size,
            heartbeat_interval_ms=s.ha_send_heartbeat_interval,
            housekeeping_interval_ms=s.ha_housekeeping_interval,
            mac=mac,
        )

    # ---------------------------------------------------------------- properties
    @property
    def slave_request_offset(self) -> int:
        return self.machine.slave_request_offset

    @property
    def slave_ack_offset(self) -> int:
        return self.machine.slave_ack_offset

    def wake(self) -> None:
        self._wake.set()

    def behind(self, offset: int) -> bool:
        """True unless this connection has already sent the commitlog up to ``offset``."""
        machine = self.machine
        if machine is None:
            return True
        nxt = machine.transfer_from
        return nxt is None or nxt < offset

    def close(self, reason: str) -> None:
        if self.close_reason is None:
            self.close_reason = reason
        self._closed.set()
        self._wake.set()
        # abort, not close: close() would wait to flush what a stuck slave will never read.
        self.writer.transport.abort()

    def refuse(self, reason: str, farewell: bytes = b"") -> None:
        """Close a connection that was not admitted: counted, one log line, nothing but ``farewell`` sent."""
        if self.close_reason is not None:
            return
        self.close_reason = reason
        self.service.on_refused(self.address, reason)
        self._closed.set()
        if farewell:  # a few bytes (REFUSED), already flushed by write() into the kernel buffer
            self.writer.write(farewell)
            self.writer.close()
        else:
            self.writer.transport.abort()

    async def _admit(self) -> bytes | None:
        """Handshake (token) or first report (open) under the deadline; bytes left over, or None if refused."""
        service = self.service
        s = service.settings
        clock = service.clock
        timeout_ms = float(min(s.ha_handshake_timeout, s.ha_housekeeping_interval))
        hs = MasterHandshake(s.ha_auth_token, s.broker_name, now_ms=clock(), timeout_ms=timeout_ms) \
            if s.ha_auth_token else None
        deadline = clock() + timeout_ms
        buf = b""
        while self.close_reason is None:
            remaining = (deadline - clock()) / 1000.0
            try:
                if remaining <= 0:
                    raise asyncio.TimeoutError
                data = await wait_for(self.reader.read(HANDSHAKE_READ_CHUNK), remaining)
            except asyncio.TimeoutError:
                what = "HA handshake" if hs is not None else "first report"
                self.refuse(f"no complete {what} within {timeout_ms:.0f} ms")
                return None
            except (ConnectionError, OSError) as exc:
                self.refuse(f"read failed before admission: {exc!r}")
                return None
            if not data:
                self.refuse("peer closed the connection before " + ("proving haAuthToken" if hs else "reporting"))
                return None
            if hs is None:
                buf += data
                if len(buf) < REPORT_SIZE:
                    continue
                if buf.startswith(MAGIC):
                    self.refuse("peer sent an authenticated HA hello, but this master has no haAuthToken "
                                "(set the same haAuthToken on master and slaves)")
                    return None
                return self._admitted(None, buf)
            out = hs.receive_data(data, clock())
            if hs.error is not None:
                self.refuse(hs.error.message, out)
                return None
            if hs.done:
                assert hs.keys is not None
                if len(service.connections) >= s.ha_max_connections:
                    self.refuse(f"{len(service.connections)} slaves already connected (limit "
                                f"{s.ha_max_connections})", encode_refused(REFUSE_BUSY))
                    return None
                self.writer.write(out)
                return self._admitted(hs.keys.for_master(), hs.leftover)
            if out:
                self.writer.write(out)
        return None

    def _admitted(self, mac: SessionMac | None, leftover: bytes) -> bytes | None:
        service = self.service
        if mac is None and len(service.connections) >= service.settings.ha_max_connections:
            self.refuse(f"{len(service.connections)} slaves already connected (limit "
                        f"{service.settings.ha_max_connections})")
            return None
        self._start_machine(mac)
        self.admitted = True
        self.authenticated = mac is not None
        service.on_admitted(self)
        return leftover

    def snapshot(self, master_max: int) -> dict[str, Any]:
        ack = self.machine.slave_ack_offset
        return {
            "address": self.address,
            "authenticated": self.authenticated,
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
        try:
            leftover = await self._admit()
        except Exception as exc:  # never let one connection take the service down
            log.exception("HA connection %s admission failed", self.address)
            self.refuse(f"internal error: {exc!r}")
            leftover = None
        if leftover is None:
            await self._wait_closed()
            return
        read_task = asyncio.create_task(self._read_loop(leftover), name=f"ha-read-{self.address}")
        write_task = asyncio.create_task(self._write_loop(), name=f"ha-write-{self.address}")
        try:
            await self._watchdog()
        finally:
            for task in (read_task, write_task):
                task.cancel()
            await asyncio.gather(read_task, write_task, return_exceptions=True)
            await self._wait_closed()

    async def _wait_closed(self) -> None:
        if not self.writer.is_closing():
            self.writer.close()
        try:
            await wait_for(self.writer.wait_closed(), 1.0)
        except asyncio.TimeoutError:
            self.writer.transport.abort()  # a peer that does not read gets no more time
        except (OSError, asyncio.CancelledError):
            pass

    async def _watchdog(self) -> None:
        """Housekeeping independent of the writer (which may sit in ``drain()`` on a stuck slave)."""
        machine = self.machine
        clock = self.service.clock
        while not self._closed.is_set():
            delay = (machine.last_read_ms + machine.housekeeping_interval_ms - clock()) / 1000.0
            try:
                await wait_for(self._closed.wait(), max(delay, 0) + 0.01)
            except asyncio.TimeoutError:
                expired = machine.check_expired(clock())
                if expired is not None:
                    log.warning("HA connection %s dropped: %s", self.address, expired.message)
                    self.close(expired.message)

    async def _read_loop(self, leftover: bytes = b"") -> None:
        service = self.service
        try:
            while True:
                data, leftover = (leftover, b"") if leftover else (await self.reader.read(READ_CHUNK), b"")
                if not data:
                    self.close("slave closed the connection")
                    return
                events = self.machine.receive_data(data, service.clock(), commitlog_max_offset(service.commitlog))
                for ev in events:
                    if isinstance(ev, SlaveReport):
                        if not self.reported:
                            self.reported = True
                            service.on_connections_changed()
                        service.on_slave_progress(ev.offset)
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
                        self.frames_sent += len(frames) // machine.pieces_per_frame
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


__all__ = ["HAConnection", "commitlog_max_offset", "commitlog_min_offset", "settings_with"]
