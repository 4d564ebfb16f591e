"""Master side of AutoSwitch HA (Apache 5.3.3 ``AutoSwitchHAService`` + ``AutoSwitchHAConnection``), asyncio.

Rules:
- The bytes, states and checks are :mod:`broker.ha.autoswitch.protocol` (``MasterMachine``); the
  SyncStateSet and confirm offset are :mod:`broker.ha.autoswitch.sync_state`. This module only
  moves bytes between them, the sockets and the commitlog, on one asyncio loop.
- The commitlog is only read (:class:`ReadableLog`: ``get_data``, ``max_offset``,
  ``min_offset``); the epoch history is read from the :class:`EpochFileCache` the broker
  appended to when it became master (``changeToMaster``, planned by ``sync_state.ChangeToMaster``).
- With ``haAuthToken`` a connection first runs the mutual handshake of
  :mod:`broker.ha.handshake` (the same as classic HA), and every frame after it carries a MAC;
  without a token the bytes are Apache's, so Apache slaves can follow us. A failed handshake
  closes the socket before a single commitlog byte is sent.
- A connection whose slave ack raises the SyncStateSet proposal, or which closes while in the
  set, calls ``on_sync_state_set_changed(proposal)`` (the broker sends ALTER_SYNC_STATE_SET and
  applies the answer with :meth:`AutoSwitchHAService.set_sync_state_set`). :meth:`shrink` is
  ``maybeShrinkSyncStateSet`` for the broker's periodic task.
- On an empty commitlog no transfer starts (``MasterMachine.start_transfer`` says why; Apache's
  ``getMinOffset`` is -1 there too and it only sends heartbeats): the slaves' heartbeat acks count
  as caught up, so a slave outside the SyncStateSet is proposed at each of them until it is in.
- :meth:`wait_for_ack` is ``GroupTransferService``: the put ending at ``next_offset`` is
  acknowledged once :func:`sync_state.transfer_ok` holds, or times out (False).
- At most ``ha_max_connections + ha_max_pending_connections`` sockets are open at once; a socket
  beyond that is closed as it is accepted (counted, logged at 1, 10, 100 and every 1000th).
  Classic HA's finer rule (the oldest pending socket dropped for a newcomer, so idle sockets
  cannot lock a real slave out) is not here yet: with ``haAuthToken`` set an unauthenticated
  socket is closed after ``ha_handshake_timeout``, which bounds how long one can hold a slot.
- A slave asking for an offset below the commitlog's ``classic_from`` (a store migrated from
  DLedger mode: the frozen regions below it are DLedger-framed and never shipped) is refused
  with a reason naming the fix (seed it from a replica), recorded in ``last_refused``; starting it
  at ``classic_from`` instead would give it a log that silently lacks every old message.

Theory of operation: one task per accepted socket (``_Connection.run``): the optional
handshake, then a reader (feeds the machine, carries out its steps) and a writer (cuts frames
from ``get_data`` at the machine's ``transfer_from``; when nothing is left it marks the slave
caught up, as Apache, and sleeps until woken by :meth:`notify_put`, a step, or the machine's
next deadline, where ``poll`` sends a heartbeat or expires the connection).
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable, Optional, Protocol

from broker.ha.autoswitch.epoch_file import EpochFileCache
from broker.ha.autoswitch.protocol import Close, MasterMachine, Send, SlaveAcked, StartTransfer, Step
from broker.ha.autoswitch.sync_state import SyncStateSet, transfer_ok
from broker.ha.handshake import MasterHandshake, SessionMac
from broker.ha.settings import HASettings
from broker.tasks import wait_for

log = logging.getLogger("broker.ha.autoswitch")

READ_CHUNK = 64 * 1024
HANDSHAKE_READ_CHUNK = 512
POLL_INTERVAL_S = 0.1  # Apache's allWaitForRunning(100) when nothing is left to send
MAX_WRITE_BUFFER = 1024 * 1024


def now_ms() -> float:
    return time.monotonic() * 1000.0


class DataView(Protocol):
    @property
    def start_offset(self) -> int: ...
    @property
    def buffer(self) -> memoryview: ...


class ReadableLog(Protocol):
    """What the master reads of its commitlog (``broker.store.commitlog.CommitLog`` has it)."""

    @property
    def max_offset(self) -> int: ...
    @property
    def min_offset(self) -> int: ...
    #: where the writable classic commitlog starts (0, or ``classicFrom`` of a store migrated from
    #: DLedger mode: the frozen regions below it are never shipped)
    classic_from: int
    def get_data(self, offset: int) -> Optional[DataView]: ...


def committed_at(commitlog: ReadableLog, offset: int) -> Optional[memoryview]:
    """Non-empty committed bytes starting exactly at ``offset``, else None."""
    result = commitlog.get_data(offset)
    if result is None or result.start_offset != offset or not len(result.buffer):
        return None
    return result.buffer


class AutoSwitchHAService:
    """Accepts slaves on ``port`` (0: a free one) and replicates ``commitlog`` to them."""

    def __init__(self, commitlog: ReadableLog, epochs: EpochFileCache, sync: SyncStateSet,
                 settings: HASettings, *, host: str = "0.0.0.0", port: Optional[int] = None,
                 on_sync_state_set_changed: Optional[Callable[[frozenset[int]], None]] = None,
                 clock: Callable[[], float] = now_ms) -> None:
        self.commitlog = commitlog
        self.epochs = epochs
        self.sync = sync
        self.settings = settings
        self.host = host
        self.port = settings.ha_listen_port if port is None else port
        self.on_sync_state_set_changed = on_sync_state_set_changed
        self.clock = clock
        self.connections: set[_Connection] = set()
        self.push_to_slave_max_offset = 0
        self.refused_connections = 0  # sockets closed at once: the connection bound was reached
        self.last_refused: Optional[str] = None  # the last slave refused for asking below classic_from
        self._server: Optional[asyncio.base_events.Server] = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._acked = asyncio.Event()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("AutoSwitch HA listening on %s:%d (%s)", self.host, self.port,
                 "haAuthToken handshake" if self.settings.ha_auth_token else "open: Apache's bytes")

    async def shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for conn in list(self.connections):
            conn.close("master shutting down")
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._acked.set()

    # ------------------------------------------------------------------ broker-facing
    def notify_put(self) -> None:
        """New bytes in the commitlog: wake every writer."""
        for conn in self.connections:
            conn.wake()

    def set_sync_state_set(self, members: frozenset[int]) -> None:
        self.sync.set_sync_state_set(members, self.commitlog.max_offset)

    def shrink(self) -> None:
        proposal, changed = self.sync.maybe_shrink(self.clock())
        if changed:
            self._changed(proposal)

    def confirm_offset(self) -> int:
        return self.sync.get_confirm_offset(self.commitlog.max_offset)

    async def wait_for_ack(self, next_offset: int, ack_nums: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            if transfer_ok(ack_nums, next_offset, sync_state_set=self.sync.get_sync_state_set(),
                           acks=self.sync.acks, push_to_slave_max_offset=self.push_to_slave_max_offset):
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._server is None:
                return False
            self._acked.clear()
            try:
                await wait_for(self._acked.wait(), remaining)
            except asyncio.TimeoutError:
                pass

    # ------------------------------------------------------------------ internals
    def _changed(self, proposal: frozenset[int]) -> None:
        log.info("AutoSwitch HA: SyncStateSet proposal %s", sorted(proposal))
        if self.on_sync_state_set_changed is not None:
            self.on_sync_state_set_changed(proposal)

    def _on_ack(self, ack: SlaveAcked) -> None:
        proposal = self.sync.on_slave_ack(ack.slave_id, ack.offset, ack.caught_up_ms,
                                          max_phy_offset=self.commitlog.max_offset,
                                          leader_epoch=self.epochs.last_entry())
        self.push_to_slave_max_offset = max(self.push_to_slave_max_offset, ack.offset)
        self._acked.set()
        if proposal is not None:
            self._changed(proposal)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        cap = max(1, self.settings.ha_max_connections + self.settings.ha_max_pending_connections)
        if len(self._tasks) >= cap:  # every socket is a task: the door's bound (haMaxConnections + pending)
            self.refused_connections += 1
            if self.refused_connections in (1, 10, 100) or self.refused_connections % 1000 == 0:
                log.warning("AutoSwitch HA: refused a connection: %d sockets are open (haMaxConnections %d + "
                            "haMaxPendingConnections %d); %d refused so far", len(self._tasks),
                            self.settings.ha_max_connections, self.settings.ha_max_pending_connections,
                            self.refused_connections)
            writer.transport.abort()
            return
        self._tasks.add(task)
        conn = _Connection(self, reader, writer)
        try:
            await conn.run()
        except Exception:  # one connection never takes the service down
            log.exception("AutoSwitch HA connection %s failed", conn.address)
        finally:
            self.connections.discard(conn)
            self._tasks.discard(task)
            if conn.slave_id >= 0:
                proposal = self.sync.connection_removed(conn.slave_id)
                if proposal is not None:
                    self._changed(proposal)
            log.info("AutoSwitch HA connection %s (slave %d) closed: %s", conn.address, conn.slave_id,
                     conn.close_reason)
            writer.transport.abort()


class _Connection:
    """One slave (``AutoSwitchHAConnection``)."""

    def __init__(self, service: AutoSwitchHAService, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.service = service
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.address = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.close_reason: Optional[str] = None
        self.slave_id = -1
        self.machine: Optional[MasterMachine] = None
        self._not_started: Optional[str] = None
        self._wake = asyncio.Event()
        self._closed = asyncio.Event()

    def wake(self) -> None:
        self._wake.set()

    def close(self, reason: str) -> None:
        if self.close_reason is None:
            self.close_reason = reason
        self._closed.set()
        self._wake.set()
        self.writer.transport.abort()

    async def _authenticate(self) -> Optional[tuple[SessionMac, bytes]]:
        s = self.service.settings
        assert s.ha_auth_token
        clock = self.service.clock
        hs = MasterHandshake(s.ha_auth_token, s.broker_name, now_ms=clock(), timeout_ms=s.ha_handshake_timeout)
        deadline = clock() + s.ha_handshake_timeout
        while not hs.done:
            try:
                data = await wait_for(self.reader.read(HANDSHAKE_READ_CHUNK),
                                              max(0.0, (deadline - clock()) / 1000.0))
            except (asyncio.TimeoutError, OSError) as exc:
                self.close(f"no complete HA handshake: {exc!r}")
                return None
            if not data:
                self.close("peer closed during the HA handshake")
                return None
            out = hs.receive_data(data, clock())
            if out:
                self.writer.write(out)
            if hs.error is not None:
                self.close(hs.error.message)
                return None
        assert hs.keys is not None
        return hs.keys.for_master(), hs.leftover

    async def run(self) -> None:
        service = self.service
        s = service.settings
        mac: Optional[SessionMac] = None
        leftover = b""
        if s.ha_auth_token:
            got = await self._authenticate()
            if got is None:
                return
            mac, leftover = got
        self.machine = MasterMachine(service.epochs, now_ms=service.clock(),
                                     mapped_file_size=s.mapped_file_size_commit_log,
                                     transfer_batch_size=s.ha_transfer_batch_size,
                                     heartbeat_interval_ms=s.ha_send_heartbeat_interval,
                                     housekeeping_interval_ms=s.ha_housekeeping_interval, mac=mac)
        service.connections.add(self)
        reader = asyncio.create_task(self._read_loop(self.machine, leftover))
        writer = asyncio.create_task(self._write_loop(self.machine))
        try:
            await self._closed.wait()
        finally:
            for t in (reader, writer):
                t.cancel()
            await asyncio.gather(reader, writer, return_exceptions=True)

    def _apply(self, machine: MasterMachine, step: Step) -> None:
        service = self.service
        for action in step.actions:
            if isinstance(action, Send):
                self.writer.write(action.data)
            elif isinstance(action, SlaveAcked):
                service._on_ack(action)
            elif isinstance(action, StartTransfer):
                self._start(machine)
            elif isinstance(action, Close):
                self.close(action.reason)
        if machine.slave is not None and self.slave_id < 0:
            self.slave_id = machine.slave_id
            service.sync.connection_added(self.slave_id)
        self._wake.set()

    def _start(self, machine: MasterMachine) -> None:
        cl = self.service.commitlog
        asked = machine.slave_request_offset
        if 0 <= asked < cl.classic_from:
            # A store migrated from DLedger mode: the bytes below classicFrom are frozen regions in
            # DLedger framing that HA must never write into a slave's classic files. Starting the
            # slave at classicFrom instead would give it a log that silently lacks every old message.
            refusal = (f"slave {machine.slave_id} asks for offset {asked}, below classicFrom {cl.classic_from}: this store "
                       "was migrated from DLedger mode and the messages below classicFrom are frozen regions HA does not "
                       "ship; seed the slave first with `mqupgrade reseed --from <a replica's store root> --to <this slave's "
                       "store root>` (its broker stopped), then start it")
            log.warning("AutoSwitch HA refuses %s: %s", self.address, refusal)
            self.service.last_refused = refusal
            self.close(refusal)
            return
        why = machine.start_transfer(cl.min_offset, cl.max_offset)
        if why is not None and why != self._not_started:
            self._not_started = why
            log.info("AutoSwitch HA slave %d: transfer not started yet: %s", machine.slave_id, why)

    async def _read_loop(self, machine: MasterMachine, leftover: bytes) -> None:
        service = self.service
        while not self._closed.is_set():
            try:
                data = leftover or await self.reader.read(READ_CHUNK)
            except OSError as exc:
                self.close(f"read failed: {exc!r}")
                return
            leftover = b""
            if not data:
                self.close("slave closed the connection")
                return
            machine.receive_data(data, service.clock())
            while not self._closed.is_set():
                step = machine.next_step(service.clock(), service.commitlog.max_offset)
                if step is None:
                    break
                self._apply(machine, step)

    async def _write_loop(self, machine: MasterMachine) -> None:
        service = self.service
        while not self._closed.is_set():
            self._wake.clear()
            if machine.transfer_from is None and machine.slave_request_offset >= 0:
                self._start(machine)
            sent = False
            start = machine.transfer_from
            if start is not None:
                data = committed_at(service.commitlog, start)
                if data is not None:
                    got = machine.next_frame(data, now_ms=service.clock(),
                                             master_max_offset=service.commitlog.max_offset,
                                             confirm_offset=service.confirm_offset())
                    if isinstance(got, Close):
                        self.close(got.reason)
                        return
                    if got is not None:
                        self.writer.writelines(got[0])
                        sent = True
                elif self.slave_id >= 0:
                    service.sync.update_connection_last_caught_up_time(self.slave_id, service.clock())
            step = machine.poll(service.clock(), service.confirm_offset())
            if step is not None:
                self._apply(machine, step)
            if self.writer.transport.get_write_buffer_size() > MAX_WRITE_BUFFER:
                await self.writer.drain()
            if sent:
                await asyncio.sleep(0)
                continue
            deadline = machine.next_deadline()
            delay = POLL_INTERVAL_S if deadline is None else min(
                POLL_INTERVAL_S, max(0.0, (deadline - service.clock()) / 1000.0) + 0.001)
            try:
                await wait_for(self._wake.wait(), delay)
            except asyncio.TimeoutError:
                pass
