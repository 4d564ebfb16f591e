"""Slave side of AutoSwitch HA (Apache 5.3.3 ``AutoSwitchHAClient``), asyncio.

Rules:
- The bytes, states, truncation decision and checks are
  :mod:`broker.ha.autoswitch.protocol` (``SlaveMachine``); this module carries out its steps on
  the local commitlog (:class:`WritableLog`) and :class:`EpochFileCache`, in order:
  ``truncate(offset)`` (default ``truncate_dirty_files``; a broker passes its store's
  ``truncateFiles``, which also cuts its ConsumeQueues), ``truncate_suffix_by_offset``,
  ``append_entry``, ``append_data`` at exactly the local max offset, ``on_confirm_offset``.
- A refused append, a refused truncation point (no common epoch), a malformed frame, an offset
  mismatch or ``haHousekeepingInterval`` of silence ends the session with one log line naming
  why; the client reconnects after ``retry_ms`` (Apache waits 5 s; a refused truncation point
  is retried too, since the master may change).
- With ``haAuthToken`` each session first runs the mutual handshake of
  :mod:`broker.ha.handshake` (the slave proves the secret first, then checks the master's
  proof) and every frame carries a MAC; without a token the bytes are Apache's.

Theory of operation: ``_run`` loops connect -> ``_session`` -> wait. A session runs the
optional handshake, sends the machine's handshake, then reads: each whole frame becomes a step
whose actions are carried out before the next frame is decoded (the next one is checked against
the new max offset); a timer task sends the periodic re-ack or expires a silent master.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Callable, Optional, Protocol

from broker.ha.autoswitch.epoch_file import EpochFileCache
from broker.ha.autoswitch.frames import HAConnectionState
from broker.ha.autoswitch.protocol import (
    AppendData,
    AppendEpoch,
    Close,
    Send,
    SetConfirmOffset,
    SlaveMachine,
    Step,
    TruncateEpochs,
    TruncateLog,
)
from broker.ha.autoswitch.service import now_ms
from broker.ha.handshake import SessionMac, SlaveHandshake
from broker.ha.settings import HASettings
from broker.tasks import wait_for

log = logging.getLogger("broker.ha.autoswitch")

READ_CHUNK = 1024 * 1024


class WritableLog(Protocol):
    """What the slave does to its commitlog (``broker.store.commitlog.CommitLog`` has it)."""

    @property
    def max_offset(self) -> int: ...
    def append_data(self, start_offset: int, data: bytes | bytearray | memoryview) -> bool: ...
    def truncate_dirty_files(self, offset: int) -> None: ...


def parse_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"HA master address {address!r} is not host:port")
    return host, int(port)


class AutoSwitchHAClient:
    """Follows the master at ``master_address`` (``host:haPort``) as broker ``slave_broker_id``."""

    def __init__(self, commitlog: WritableLog, epochs: EpochFileCache, slave_broker_id: int,
                 settings: HASettings, *, master_address: Optional[str] = None,
                 sync_from_last_file: bool = False, async_learner: bool = False,
                 truncate: Optional[Callable[[int], None]] = None,
                 on_confirm_offset: Optional[Callable[[int], None]] = None,
                 on_append: Optional[Callable[[int], None]] = None,
                 retry_ms: float = 1000.0, clock: Callable[[], float] = now_ms) -> None:
        self.commitlog = commitlog
        self.epochs = epochs
        self.settings = settings
        self.master_address = master_address
        self.truncate = truncate or commitlog.truncate_dirty_files
        self.on_confirm_offset = on_confirm_offset
        self.on_append = on_append
        self.retry_ms = retry_ms
        self.clock = clock
        self.machine = SlaveMachine(slave_broker_id, sync_from_last_file=sync_from_last_file,
                                    async_learner=async_learner,
                                    heartbeat_interval_ms=settings.ha_send_heartbeat_interval,
                                    housekeeping_interval_ms=settings.ha_housekeeping_interval)
        self.last_error: Optional[str] = None
        self.sessions = 0
        self._task: Optional[asyncio.Task[None]] = None
        self._stopping = False
        self._address_changed = asyncio.Event()
        self._timer_reason: Optional[str] = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="autoswitch-ha-client")

    async def shutdown(self) -> None:
        self._stopping = True
        self._address_changed.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def update_ha_master_address(self, address: Optional[str]) -> None:
        if address != self.master_address:
            self.master_address = address
            self._address_changed.set()

    async def _run(self) -> None:
        while not self._stopping:
            address = self.master_address
            if not address:
                self._address_changed.clear()
                await self._address_changed.wait()
                continue
            host, port = parse_address(address)
            try:
                reader, writer = await wait_for(asyncio.open_connection(host, port, limit=READ_CHUNK), 3.0)
            except (OSError, asyncio.TimeoutError) as exc:
                self.last_error = f"connect to {address} failed: {exc!r}"
            else:
                try:
                    self._timer_reason = None
                    reason = await self._session(reader, writer)
                    self.last_error = self._timer_reason or reason
                except Exception as exc:  # keep following after anything unexpected
                    self.last_error = f"internal error: {exc!r}"
                    log.exception("AutoSwitch HA client session with %s failed", address)
                finally:
                    if self.machine.state is not HAConnectionState.READY:
                        self.machine.closed()
                    writer.transport.abort()
                log.info("AutoSwitch HA client: session with %s ended: %s", address, self.last_error)
            if self._stopping:
                return
            self._address_changed.clear()
            try:
                await wait_for(self._address_changed.wait(), self.retry_ms / 1000.0)
            except asyncio.TimeoutError:
                pass

    async def _authenticate(self, reader: asyncio.StreamReader,
                            writer: asyncio.StreamWriter) -> tuple[SessionMac, bytes] | str:
        s = self.settings
        assert s.ha_auth_token
        hs = SlaveHandshake(s.ha_auth_token, s.broker_name, now_ms=self.clock(), timeout_ms=s.ha_handshake_timeout)
        writer.write(hs.start())
        while not hs.done:
            try:
                data = await wait_for(reader.read(4096), max(0.0, (hs.deadline_ms - self.clock()) / 1000.0))
            except (asyncio.TimeoutError, OSError) as exc:
                return f"no complete HA handshake: {exc!r}"
            if not data:
                return "master closed the connection during the HA handshake"
            out = hs.receive_data(data, self.clock())
            if hs.error is not None:
                return hs.error.message
            if out:
                writer.write(out)
        assert hs.keys is not None
        return hs.keys.for_slave(), hs.leftover

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str:
        mac: Optional[SessionMac] = None
        leftover = b""
        if self.settings.ha_auth_token:
            got = await self._authenticate(reader, writer)
            if isinstance(got, str):
                log.warning("AutoSwitch HA client: refusing master %s: %s", self.master_address, got)
                return got
            mac, leftover = got
        self.sessions += 1
        machine = self.machine
        outcome = self._apply(machine.connected(self.clock(), self.commitlog.max_offset, mac), writer)
        timer = asyncio.create_task(self._timer(writer))
        try:
            while outcome is None:
                data = leftover or await reader.read(READ_CHUNK)
                leftover = b""
                if not data:
                    return "master closed the connection"
                machine.receive_data(data, self.clock())
                while outcome is None:
                    step = machine.next_step(self.clock(), self.commitlog.max_offset,
                                             self.epochs.get_all_entries())
                    if step is None:
                        break
                    outcome = self._apply(step, writer)
            return outcome
        except OSError as exc:
            return f"read failed: {exc!r}"
        finally:
            timer.cancel()
            await asyncio.gather(timer, return_exceptions=True)

    def _apply(self, step: Step, writer: asyncio.StreamWriter) -> Optional[str]:
        """Carry out a step's actions; why the session ends, or None."""
        for action in step.actions:
            if isinstance(action, Send):
                writer.write(action.data)
            elif isinstance(action, TruncateLog):
                log.info("AutoSwitch HA client: truncating the commitlog to %d (was %d)", action.offset,
                         self.commitlog.max_offset)
                self.truncate(action.offset)
            elif isinstance(action, TruncateEpochs):
                self.epochs.truncate_suffix_by_offset(action.offset)
            elif isinstance(action, AppendEpoch):
                self.epochs.append_entry(action.entry)
            elif isinstance(action, AppendData):
                local = self.commitlog.max_offset
                if not self.commitlog.append_data(action.offset, action.data):
                    reason = (f"commitlog refused {len(action.data)} bytes at master offset {action.offset} "
                              f"(slave max offset {local})")
                    log.error("AutoSwitch HA client: %s", reason)
                    return reason
                if self.on_append is not None:
                    self.on_append(self.commitlog.max_offset)
            elif isinstance(action, SetConfirmOffset):
                if self.on_confirm_offset is not None:
                    self.on_confirm_offset(action.offset)
            elif isinstance(action, Close):
                log.warning("AutoSwitch HA client dropping master %s: %s", self.master_address, action.reason)
                return action.reason
        return None

    async def _timer(self, writer: asyncio.StreamWriter) -> None:
        machine = self.machine
        while True:
            deadline = machine.next_deadline()
            delay = 0.1 if deadline is None else max(0.0, (deadline - self.clock()) / 1000.0) + 0.001
            await asyncio.sleep(delay)
            step = machine.poll(self.clock())
            reason = self._apply(step, writer) if step is not None else None
            if reason is not None:
                self._timer_reason = reason
                writer.transport.abort()  # the reader sees the end and returns
                return
