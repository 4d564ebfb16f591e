"""The asyncio driver of :class:`broker.ha.autoswitch.replicas_manager.ReplicasManager`: it feeds
the sans-I/O machine its events with the monotonic time and carries out its actions.

Rules:
- One task (``_run``) owns the machine: every event goes through one bounded queue
  (:data:`QUEUE_SIZE`) and is handled in arrival order; between events the task wakes every
  :attr:`tick_ms` to feed a :class:`Tick` (the machine's timers are due times checked on each event).
- Controller calls (:class:`ControllerCall`) run as their own tasks over our remoting client, each
  bounded by ``request_timeout_ms`` (connect included); the answer comes back as
  :class:`Answered`, anything else (refused connection, timeout, closed connection) as
  :class:`CallFailed`. The machine bounds how many are in flight (one per step); the driver also
  caps them (:data:`MAX_CALLS`): beyond, a call fails at once. A dropped outcome is harmless: the
  machine counts a call unanswered after ``request_timeout_ms`` as failed.
- Heartbeats (:class:`SendHeartbeat`) are oneway, one task per controller address at a time: a
  heartbeat to an address whose previous one is still being written is skipped (the next period
  sends a fresh one).
- File actions are done inline, in order, each followed by its :class:`FileDone` before the next
  event (the machine waits for it); a write that raises is ``FileDone(ok=False)`` with the reason.
- Role actions go to the broker through :class:`ReplicasHost` in the order the machine emitted
  them; ``change_to_master`` / ``change_to_slave`` are awaited (epoch file, HA service or client),
  so no later event sees a half-changed broker. While one is awaited the last heartbeat sent to
  each controller is sent again every ``broker_heartbeat_interval_ms`` (the machine emits
  heartbeats only between events: a long change would otherwise look like a dead broker). One that raises is logged and the broker stays
  fenced (the next replica-info poll with a newer epoch tries again).
- An answer ``NO_PERMISSION`` (the controllers require signatures) is also logged as a problem
  naming the keys that sign the broker's calls (the machine only sees "no leader" / a refusal).
- Inputs from elsewhere (:meth:`role_change_notified` from the broker's door,
  :meth:`sync_state_set_proposed` from the HA service) are ``put_nowait``: a full queue drops
  them with a log line (the periodic replica-info poll and SyncStateSet check catch up).
- A ``NOTIFY_BROKER_ROLE_CHANGED`` push is a wake-up, never an order (issue 27): its header and
  body are dropped unread and the machine only asks the controller
  (:class:`~broker.ha.autoswitch.replicas_manager_calls.RefreshGate`). At most one push waits in
  the queue; pushes while one waits are counted (``hints_dropped``), so a flood of pushes
  cannot fill the queue and crowd out the other inputs.
- :meth:`stop` feeds :class:`Shutdown`, cancels the task and every call, and closes the
  connections (bounded; cancellation-safe through :mod:`broker.tasks`).

Theory of operation: ``_run`` waits for the next event (or the tick), hands it to
``ReplicasManager.handle`` and performs the returned actions; inline actions that produce a
follow-up event (a :class:`FileDone`) are handled before the next queued one, exactly as the
in-process end-to-end test feeds the machine.
"""
from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Awaitable, Callable, Mapping, Optional, Protocol

from broker.ha.autoswitch.metadata_file import broker_metadata_file, temp_broker_metadata_file
from broker.ha.autoswitch.replicas_manager import ReplicasManager
from broker.ha.autoswitch.replicas_messages import (
    Action, Answered, CallFailed, ChangeSyncStateSet, ChangeToMaster, ChangeToSlave, ClearTempMetadata,
    ControllerCall, Event, FileDone, HAView, Problem, ReplicasConfig, RoleChangeNotified, SendHeartbeat,
    SetFenced, SetLocalBrokerId, Shutdown, Start, SyncStateSetProposed, Tick, WriteMetadata, WriteTempMetadata,
)
from broker.remoting.client import RemotingClient
from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import ResponseCode
from broker.tasks import cancel_and_wait, wait_for
from controller.codes import ControllerRequestCode as Q
from controller.headers import to_ext_fields

log = logging.getLogger("broker.ha.autoswitch.replicas")

QUEUE_SIZE = 1024
MAX_CALLS = 64
DEFAULT_TICK_MS = 100
NO_PERMISSION = ResponseCode.NO_PERMISSION


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class ReplicasHost(Protocol):
    """What the driver does to the broker (``BrokerController`` through ``ControllerMode``)."""

    def set_fenced(self, fenced: bool) -> None: ...

    def set_local_broker_id(self, broker_id: int) -> None: ...

    async def change_to_master(self, action: ChangeToMaster) -> None: ...

    async def change_to_slave(self, action: ChangeToSlave) -> None: ...

    def change_sync_state_set(self, action: ChangeSyncStateSet) -> None: ...


class ReplicasDriver:
    """Runs one broker's ReplicasManager (see the module rules)."""

    def __init__(self, config: ReplicasConfig, ha: HAView, host: ReplicasHost, identity_dir: str | Path, *,
                 rpc_hook: Optional[Callable[[RemotingCommand], None]] = None, tick_ms: int = DEFAULT_TICK_MS,
                 clock: Callable[[], int] = monotonic_ms) -> None:
        self.config = config
        self.manager = ReplicasManager(config, ha)
        self.host = host
        self.meta = broker_metadata_file(identity_dir)
        self.temp = temp_broker_metadata_file(identity_dir)
        self.rpc_hook = rpc_hook
        self.tick_ms = tick_ms
        self.clock = clock
        self.problems: list[str] = []  # the last few Problem texts, for /status
        self.dropped = 0  # inputs dropped on a full queue
        self.hints_dropped = 0  # 1008 pushes dropped because one was already queued
        self._hint_queued = False
        self.role_changes = 0
        self._queue: asyncio.Queue[Event] = asyncio.Queue(QUEUE_SIZE)
        self._task: Optional[asyncio.Task[None]] = None
        self._calls: set[asyncio.Task[None]] = set()
        self._beating: dict[str, asyncio.Task[None]] = {}
        self._last_beat: dict[str, SendHeartbeat] = {}  # the last heartbeat per controller (kept up during a role change)
        self.kept_beats = 0  # heartbeats sent again while a role change was awaited
        self._clients: dict[str, RemotingClient] = {}
        self._connecting: dict[str, asyncio.Lock] = {}

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Read ``brokerIdentity`` (and its temp file), then run the machine from :class:`Start`."""
        start = Start(self.clock(), self.meta.read(), self.temp.read())
        self._task = asyncio.get_running_loop().create_task(self._run(start), name="replicas-manager")

    async def stop(self) -> None:
        if self._task is not None:
            task, self._task = self._task, None
            await cancel_and_wait(task)
        self.manager.handle(Shutdown(self.clock()))
        for t in list(self._calls) + list(self._beating.values()):
            await cancel_and_wait(t)
        self._calls.clear()
        self._beating.clear()
        for c in list(self._clients.values()):
            await c.close()
        self._clients.clear()

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    # ------------------------------------------------------------------ inputs from the broker
    def role_change_notified(self, fields: Mapping[str, str], body: Optional[bytes]) -> None:
        """NOTIFY_BROKER_ROLE_CHANGED received on the broker's door: a wake-up; ``fields`` and
        ``body`` are what the push claims and are dropped unread (see the rules)."""
        if self._hint_queued:
            self.hints_dropped += 1
            return
        self._hint_queued = self._offer(RoleChangeNotified(self.clock(), {}, None))

    def sync_state_set_proposed(self, members: frozenset[int]) -> None:
        """The AutoSwitch HA service's ``syncStateSetChangedListener``."""
        self._offer(SyncStateSetProposed(self.clock(), frozenset(members)))

    def _offer(self, event: Event) -> bool:
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped += 1
            log.warning("ReplicasManager: event queue full, %s dropped (the periodic poll catches up)",
                        type(event).__name__)
            return False
        return True

    # ------------------------------------------------------------------ the loop
    async def _run(self, start: Start) -> None:
        await self._feed(start)
        while True:
            try:
                event: Event = await wait_for(self._queue.get(), self.tick_ms / 1000.0)
            except asyncio.TimeoutError:
                event = Tick(self.clock())
            if isinstance(event, RoleChangeNotified):
                self._hint_queued = False
            await self._feed(event)

    async def _feed(self, first: Event) -> None:
        pending: list[Event] = [first]
        while pending:
            for action in self.manager.handle(pending.pop(0)):
                try:
                    follow = await self._do(action)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - one failed action never ends the driver
                    log.exception("ReplicasManager action %s failed", type(action).__name__)
                    self._problem(f"{type(action).__name__} failed: {exc!r}")
                    follow = None
                if follow is not None:
                    pending.append(follow)

    async def _do(self, a: Action) -> Optional[Event]:
        if isinstance(a, ControllerCall):
            self._spawn_call(a)
        elif isinstance(a, SendHeartbeat):
            self._spawn_heartbeat(a)
        elif isinstance(a, (WriteTempMetadata, WriteMetadata, ClearTempMetadata)):
            return self._file(a)
        elif isinstance(a, SetLocalBrokerId):
            self.host.set_local_broker_id(a.broker_id)
        elif isinstance(a, SetFenced):
            self.host.set_fenced(a.fenced)
        elif isinstance(a, ChangeToMaster):
            self.role_changes += 1
            await self._beating_while(self.host.change_to_master(a))
        elif isinstance(a, ChangeToSlave):
            self.role_changes += 1
            await self._beating_while(self.host.change_to_slave(a))
        elif isinstance(a, ChangeSyncStateSet):
            self.host.change_sync_state_set(a)
        elif isinstance(a, Problem):
            self._problem(a.text)
        return None

    def _problem(self, text: str) -> None:
        log.warning("ReplicasManager: %s", text)
        self.problems = (self.problems + [text])[-5:]

    def _file(self, a: Action) -> FileDone:
        try:
            if isinstance(a, WriteTempMetadata):
                self.temp.write(a.metadata)
            elif isinstance(a, WriteMetadata):
                self.meta.write(a.metadata)
            else:
                self.temp.clear()
        except OSError as exc:
            return FileDone(self.clock(), ok=False, reason=f"{exc.filename or ''}: {exc.strerror or exc}")
        return FileDone(self.clock())

    # ------------------------------------------------------------------ controller calls
    async def _client(self, address: str) -> RemotingClient:
        lock = self._connecting.setdefault(address, asyncio.Lock())
        async with lock:
            c = self._clients.get(address)
            if c is None or c.is_closed:
                host, _, port = address.rpartition(":")
                c = await RemotingClient.connect(host, int(port), rpc_hook=self.rpc_hook)
                self._clients[address] = c
            return c

    def _spawn_call(self, a: ControllerCall) -> None:
        if len(self._calls) >= MAX_CALLS:
            self._offer(CallFailed(a.rid, self.clock(), "too many controller calls in flight"))
            return
        task = asyncio.get_running_loop().create_task(self._call(a), name=f"controller-call-{a.code}")
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)

    async def _call(self, a: ControllerCall) -> None:
        timeout = self.config.request_timeout_ms / 1000.0
        body = a.body.encode() if a.body is not None else b""
        try:
            c = await wait_for(self._client(a.address), timeout)
            r = await c.request(a.code, to_ext_fields(a.header), body, timeout=timeout)
        except (OSError, ConnectionError, asyncio.TimeoutError, ValueError) as exc:
            outcome: Event = CallFailed(a.rid, self.clock(), f"{a.address}: {exc!r}")
        else:
            if r.code == NO_PERMISSION:
                self._problem(f"controller {a.address} refused request {a.code}: {r.remark} (sign the broker's "
                              f"controller calls: controllerAccessKey/controllerSecretKey)")
            outcome = Answered(a.rid, self.clock(), r.code, r.remark, dict(r.ext_fields), r.body or None)
        await self._queue.put(outcome)

    async def _beating_while(self, change: Awaitable[None]) -> None:
        """Await a role change (it may take seconds: a truncation, a slow disk) while the last
        heartbeat sent to each controller is sent again every ``broker_heartbeat_interval_ms``: the
        machine emits heartbeats only between events, and a silent broker longer than
        ``controllerHeartBeatTimeoutMills`` would be declared dead in the middle of becoming master."""
        keep = asyncio.get_running_loop().create_task(self._keep_beating(), name="controller-hb-keep")
        try:
            await change
        finally:
            await cancel_and_wait(keep)

    async def _keep_beating(self) -> None:
        while True:
            await asyncio.sleep(self.config.broker_heartbeat_interval_ms / 1000.0)
            for beat in list(self._last_beat.values()):
                self.kept_beats += 1
                self._spawn_heartbeat(beat)

    def _spawn_heartbeat(self, a: SendHeartbeat) -> None:
        self._last_beat[a.address] = a
        busy = self._beating.get(a.address)
        if busy is not None and not busy.done():
            return
        self._beating[a.address] = asyncio.get_running_loop().create_task(self._heartbeat(a), name="controller-hb")

    async def _heartbeat(self, a: SendHeartbeat) -> None:
        timeout = self.config.request_timeout_ms / 1000.0
        try:
            c = await wait_for(self._client(a.address), timeout)
            await wait_for(c.invoke_oneway(RemotingCommand.request(Q.BROKER_HEARTBEAT, to_ext_fields(a.header))),
                           timeout)
        except (OSError, ConnectionError, asyncio.TimeoutError, ValueError) as exc:
            log.debug("heartbeat to controller %s failed: %r", a.address, exc)

    # ------------------------------------------------------------------ status
    def status(self) -> dict[str, object]:
        m = self.manager
        return {"state": m.state.value, "brokerControllerId": m.broker_id, "controllerLeader": m.leader,
                "masterBrokerId": m.master_broker_id, "masterAddress": m.master_address,
                "masterEpoch": m.master_epoch, "syncStateSet": sorted(m.sync_state_set),
                "syncStateSetEpoch": m.sync_state_set_epoch, "isMaster": m.is_master,
                "controllerAddr": list(self.config.controller_addresses), "roleChanges": self.role_changes,
                "droppedEvents": self.dropped, "roleChangeHints": m.hints.hints + self.hints_dropped,
                "roleChangeHintsCoalesced": m.hints.coalesced,
                "roleChangeHintsDropped": m.hints.dropped + self.hints_dropped, "problems": list(self.problems)}
