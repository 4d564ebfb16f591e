"""Slave side of classic HA: HAClient pulls the master's commitlog into the local one.

Rules:
- The client only ever *appends* raw bytes to the local CommitLog, through
  ``commitlog.append_data(offset, data)`` at exactly ``offset`` (which the protocol has checked
  equals the local max offset). It never builds ConsumeQueues or indexes: the store's normal
  dispatch (ReputMessageService) reads the appended bytes like any other committed bytes, so
  the slave's CQs are built exactly as the master's were. ``on_append(max_offset)`` (optional)
  lets the store wake its dispatcher instead of waiting for its next poll.
- A refused append (``append_data`` returns False or raises) drops the connection with both
  offsets in the log line; reconnecting re-reports the real local max offset, so the master
  resumes from there. No byte is ever written anywhere but at the local max offset.
- Reconnect with exponential backoff (``backoff_initial_ms`` doubling up to ``backoff_max_ms``,
  reset after a connection that exchanged data). One log line per state change (connected,
  disconnected and why), never per frame.
- The protocol (reports, frames, checks, heartbeat and housekeeping timing) is
  :class:`broker.ha.protocol.SlaveConnection`; this module is the asyncio driver around it.
- With ``haAuthToken`` every session starts with the handshake of :mod:`broker.ha.handshake`
  (bounded by ``haHandshakeTimeout``): the slave sends no report and appends no byte until the
  master has proven the same secret and brokerName, and every later frame must carry a valid
  MAC. A master that cannot prove it is refused with one warning line per distinct reason (then
  the usual backoff). Without a token the classic protocol runs, byte for byte RocketMQ's.

Theory of operation: ``_run`` loops connect -> ``_session`` -> backoff. A session runs the
handshake when there is a token, then sends the initial report (the local max offset, RocketMQ's request offset), then one task reads from the
socket, feeds the state machine, appends each ``DataFrame`` and sends the report the machine
returns after the appends (one report per read, not per frame), while a second task sleeps
until the machine's next deadline to send heartbeat reports or to expire a silent master.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

from broker.ha.handshake import SessionMac, SlaveHandshake
from broker.ha.protocol import DataFrame, HAError, SlaveConnection
from broker.ha.service import commitlog_max_offset, settings_with
from broker.tasks import wait_for

log = logging.getLogger("broker.ha")

READ_CHUNK = 1024 * 1024


def _now_ms() -> float:
    return time.monotonic() * 1000.0


def parse_address(address: str) -> tuple[str, int]:
    """``"host:port"`` (IPv6 as ``[::1]:port``) -> (host, port); ValueError when malformed."""
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"bad HA master address {address!r} (want host:port)")
    return host.strip("[]"), int(port)


class HAClient:
    """Slave side of replication (RocketMQ ``HAService.HAClient``)."""

    def __init__(
        self,
        commitlog: Any,
        master_ha_address: str | None = None,
        config: Any = None,
        *,
        on_append: Callable[[int], None] | None = None,
        backoff_initial_ms: float = 200.0,
        backoff_max_ms: float = 5000.0,
        connect_timeout_ms: float = 3000.0,
        clock: Callable[[], float] = _now_ms,
        broker_name: str | None = None,
        auth_token: str | None = None,
    ) -> None:
        self.commitlog = commitlog
        self.settings = settings_with(config, broker_name=broker_name, ha_auth_token=auth_token)
        if master_ha_address is None:
            master_ha_address = self.settings.ha_master_address
        if master_ha_address:
            parse_address(master_ha_address)
        self.master_address: str | None = master_ha_address or None
        self.on_append = on_append
        self.backoff_initial_ms = backoff_initial_ms
        self.backoff_max_ms = backoff_max_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.clock = clock
        self.connected = False
        self.bytes_received = 0
        self.frames_received = 0
        self.connect_count = 0
        self.last_reported_offset = -1
        self.last_error: str | None = None
        self.handshake_failures = 0
        self._last_handshake_error: str | None = None
        self._machine: SlaveConnection | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._address_changed = asyncio.Event()
        self._writer: asyncio.StreamWriter | None = None

    # ---------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        if self._task is None:
            self._stopping = False
            self._task = asyncio.create_task(self._run(), name="ha-client")

    async def shutdown(self) -> None:
        self._stopping = True
        self._address_changed.set()
        if self._writer is not None and not self._writer.is_closing():
            self._writer.close()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self.connected = False

    def update_master_address(self, address: str | None) -> None:
        """Switch masters (None: stop replicating); the current connection is dropped."""
        if address:
            parse_address(address)
        if address == self.master_address:
            return
        log.info("HA master address changed from %s to %s", self.master_address, address)
        self.master_address = address or None
        self._address_changed.set()
        if self._writer is not None and not self._writer.is_closing():
            self._writer.close()

    def status(self) -> dict[str, Any]:
        return {
            "connected": self.connected,
            "master_address": self.master_address,
            "last_reported_offset": self.last_reported_offset,
            "max_offset": commitlog_max_offset(self.commitlog),
            "bytes_received": self.bytes_received,
            "frames_received": self.frames_received,
            "connect_count": self.connect_count,
            "last_error": self.last_error,
            "auth": "haAuthToken" if self.settings.ha_auth_token else "open",
            "handshake_failures": self.handshake_failures,
        }

    # ---------------------------------------------------------------- loops
    async def _run(self) -> None:
        backoff = self.backoff_initial_ms
        failing_since_log = False
        while not self._stopping:
            address = self.master_address
            if not address:
                self._address_changed.clear()
                await self._address_changed.wait()
                continue
            host, port = parse_address(address)
            try:
                reader, writer = await wait_for(
                    asyncio.open_connection(host, port, limit=READ_CHUNK), self.connect_timeout_ms / 1000.0
                )
            except (OSError, asyncio.TimeoutError) as exc:
                self.last_error = f"connect to {address} failed: {exc!r}"
                if not failing_since_log:
                    log.warning("HA client: %s; retrying with backoff", self.last_error)
                    failing_since_log = True
                await self._sleep_or_address_change(backoff)
                backoff = min(backoff * 2, self.backoff_max_ms)
                continue
            failing_since_log = False
            received_before = self.bytes_received
            try:
                await self._session(address, reader, writer)
            except Exception as exc:  # keep replicating after anything unexpected
                self.last_error = f"internal error: {exc!r}"
                log.exception("HA client session with %s failed", address)
            finally:
                self.connected = False
                self._writer = None
                if not writer.is_closing():
                    writer.close()
                try:
                    await wait_for(writer.wait_closed(), 1.0)
                except (OSError, asyncio.TimeoutError):
                    pass
            if self._stopping:
                break
            log.info("HA client disconnected from %s: %s", address, self.last_error)  # one line per drop
            if self.bytes_received > received_before:
                backoff = self.backoff_initial_ms
            await self._sleep_or_address_change(backoff)
            backoff = min(backoff * 2, self.backoff_max_ms)

    async def _sleep_or_address_change(self, ms: float) -> None:
        self._address_changed.clear()
        try:
            await wait_for(self._address_changed.wait(), ms / 1000.0)
        except asyncio.TimeoutError:
            pass

    async def _handshake(
        self, address: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[SessionMac, bytes] | str:
        """Prove haAuthToken and check the master's proof: (session MAC, leftover bytes) or why not."""
        s = self.settings
        assert s.ha_auth_token
        hs = SlaveHandshake(s.ha_auth_token, s.broker_name, now_ms=self.clock(), timeout_ms=s.ha_handshake_timeout)
        writer.write(hs.start())
        while not hs.done:
            remaining = (hs.deadline_ms - self.clock()) / 1000.0
            try:
                if remaining <= 0:
                    raise asyncio.TimeoutError
                data = await wait_for(reader.read(4096), remaining)
            except asyncio.TimeoutError:
                return self._handshake_failed(address, f"no complete HA handshake within {s.ha_handshake_timeout} ms")
            except (ConnectionError, OSError) as exc:
                return f"read failed during the HA handshake: {exc!r}"
            if not data:
                return self._handshake_failed(
                    address, "master closed the connection during the HA handshake (it logs why: a different "
                    "haAuthToken or brokerName, no haAuthToken there, or its connection limit)")
            out = hs.receive_data(data, self.clock())
            if hs.error is not None:
                return self._handshake_failed(address, hs.error.message)
            if out:
                writer.write(out)
        assert hs.keys is not None
        self._last_handshake_error = None
        return hs.keys.for_slave(), hs.leftover

    def _handshake_failed(self, address: str, reason: str) -> str:
        self.handshake_failures += 1
        if reason != self._last_handshake_error:  # one line per distinct reason, not per retry
            log.warning("HA client: refusing master %s: %s", address, reason)
            self._last_handshake_error = reason
        return reason

    async def _session(self, address: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        s = self.settings
        self._writer = writer
        mac: SessionMac | None = None
        leftover = b""
        if s.ha_auth_token:
            outcome = await self._handshake(address, reader, writer)
            if isinstance(outcome, str):
                self.last_error = outcome
                return
            mac, leftover = outcome
        machine = SlaveConnection(
            slave_max_offset=commitlog_max_offset(self.commitlog),
            now_ms=self.clock(),
            heartbeat_interval_ms=s.ha_send_heartbeat_interval,
            housekeeping_interval_ms=s.ha_housekeeping_interval,
            max_frame_size=s.ha_max_frame_size,
            mac=mac,
        )
        self._machine = machine
        writer.write(machine.initiate(self.clock()))
        self.last_reported_offset = machine.reported_offset
        self.connected = True
        self.connect_count += 1
        log.info("HA client connected to master %s (%s), reported offset %d", address,
                 "haAuthToken verified" if mac is not None else "open protocol", machine.reported_offset)
        timer = asyncio.create_task(self._timer(machine, writer), name="ha-client-timer")
        try:
            reason = await self._read_loop(machine, reader, writer, leftover)
        finally:
            timer.cancel()
            await asyncio.gather(timer, return_exceptions=True)
            self._machine = None
        if machine.error is not None:  # expiry by the timer closes the socket under the reader
            reason = machine.error.message
        self.last_error = reason

    async def _read_loop(
        self, machine: SlaveConnection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
        leftover: bytes = b"",
    ) -> str:
        """Replicate until the connection ends; returns why it ended."""
        commitlog = self.commitlog
        while True:
            try:
                data, leftover = (leftover, b"") if leftover else (await reader.read(READ_CHUNK), b"")
            except (ConnectionError, OSError) as exc:
                return f"read failed: {exc!r}"
            if not data:
                return "master closed the connection"
            self.bytes_received += len(data)
            events = machine.receive_data(data, self.clock())
            appended = False
            for ev in events:
                if isinstance(ev, DataFrame):
                    refused = self._append(ev)
                    if refused is not None:
                        log.error("HA client: %s", refused)
                        return refused
                    appended = True
                    self.frames_received += 1
                elif isinstance(ev, HAError):
                    log.warning("HA client dropping connection to %s: %s", self.master_address, ev.message)
                    return ev.message
                else:
                    self.frames_received += 1
            if appended:
                max_offset = commitlog_max_offset(commitlog)
                report = machine.appended(max_offset, self.clock())
                if report is not None:
                    writer.write(report)
                    self.last_reported_offset = machine.reported_offset
                if self.on_append is not None:
                    self.on_append(max_offset)
            if writer.transport.get_write_buffer_size() > 1024 * 1024:
                await writer.drain()

    def _append(self, ev: DataFrame) -> str | None:
        """Append one frame; None on success, else why the commitlog refused it."""
        local = commitlog_max_offset(self.commitlog)
        try:
            if self.commitlog.append_data(ev.offset, ev.data):
                return None
            reason = "append_data returned False"
        except Exception as exc:
            reason = repr(exc)
        return (
            f"commitlog refused {len(ev.data)} bytes at master offset {ev.offset} "
            f"(slave max offset {local}): {reason}"
        )

    async def _timer(self, machine: SlaveConnection, writer: asyncio.StreamWriter) -> None:
        while True:
            delay = (machine.next_deadline() - self.clock()) / 1000.0
            await asyncio.sleep(max(delay, 0) + 0.001)
            due = machine.poll(self.clock())
            if isinstance(due, HAError):
                log.warning("HA client dropping connection to %s: %s", self.master_address, due.message)
                writer.close()
                return
            if due is not None:
                writer.write(due)
                self.last_reported_offset = machine.reported_offset


__all__ = ["HAClient", "parse_address"]
