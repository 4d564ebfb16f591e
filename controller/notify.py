"""``NOTIFY_BROKER_ROLE_CHANGED`` pushes: Apache RocketMQ 5.3.3's ``ControllerManager.NotifyService``
and ``doNotifyBrokerRoleChanged``.

Rules:
- After a successful election the controller tells each live broker of the set, at the broker's
  registered address, a oneway ``NOTIFY_BROKER_ROLE_CHANGED`` (1008) with the header
  ``masterAddress``, ``masterEpoch``, ``syncStateSetEpoch``, ``masterBrokerId``
  (``NotifyBrokerRoleChangedRequestHeader``) and a ``SyncStateSet`` body; a connection is opened
  for it and closed after (Apache's remoting client keeps a pool; a push is rare).
- A newer push to an address (higher masterEpoch) cancels an older one still running (Apache's
  ``NotifyTask`` rule); an equal or older one does not.
- Bounded: at most :data:`MAX_IN_FLIGHT` pushes at a time (more are dropped and counted: the
  broker also learns the master from its periodic ``CONTROLLER_GET_REPLICA_INFO``); each push is
  bounded by :data:`PUSH_TIMEOUT_S` (Apache's 3 s ``invokeOneway``). A failure is logged, never
  retried (Apache's).
- Unsigned: Apache's controller sends it without an RPC hook; a broker whose door requires
  signatures refuses it and relies on its periodic query.

Theory of operation: one asyncio task per push, tracked by address; ``send`` is injectable so a
test can observe pushes without a broker.
"""
from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass
from typing import Awaitable, Callable, Optional

from broker.remoting.client import RemotingClient
from broker.remoting.codec import RemotingCommand
from controller.bodies import SyncStateSet
from controller.codes import ControllerRequestCode
from dledger.aio import wait_for

log = logging.getLogger("controller.notify")

MAX_IN_FLIGHT = 256
PUSH_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class RoleChangeEntry:
    """``RoleChangeNotifyEntry``: what every broker of the set is told."""

    master_address: Optional[str]
    master_broker_id: int
    master_epoch: int
    sync_state_set_epoch: int
    sync_state_set: tuple[int, ...]

    def command(self) -> RemotingCommand:
        fields = {"masterBrokerId": str(self.master_broker_id), "masterEpoch": str(self.master_epoch),
                  "syncStateSetEpoch": str(self.sync_state_set_epoch)}
        if self.master_address is not None:
            fields["masterAddress"] = self.master_address
        return RemotingCommand.request(ControllerRequestCode.NOTIFY_BROKER_ROLE_CHANGED, fields,
                                       SyncStateSet(self.sync_state_set, self.sync_state_set_epoch).encode())


async def send_oneway(address: str, cmd: RemotingCommand) -> None:
    host, _, port = address.rpartition(":")
    client = await wait_for(RemotingClient.connect(host, int(port)), PUSH_TIMEOUT_S)
    try:
        await wait_for(client.invoke_oneway(cmd), PUSH_TIMEOUT_S)
    finally:
        await client.close()


class RoleChangeNotifier:
    def __init__(self, send: Callable[[str, RemotingCommand], Awaitable[None]] = send_oneway) -> None:
        self.send = send
        self.tasks: dict[str, tuple[int, "asyncio.Task[None]"]] = {}
        self.counters = {"pushes": 0, "push_failures": 0, "pushes_dropped": 0, "pushes_superseded": 0}

    def notify(self, address: str, entry: RoleChangeEntry) -> None:
        old = self.tasks.get(address)
        if old is not None and not old[1].done():
            if entry.master_epoch > old[0]:
                old[1].cancel()
                self.counters["pushes_superseded"] += 1
        elif len(self.tasks) >= MAX_IN_FLIGHT:
            self.counters["pushes_dropped"] += 1
            log.warning("not notifying %s of master %s epoch %d: %d pushes in flight", address,
                        entry.master_broker_id, entry.master_epoch, len(self.tasks))
            return
        task = asyncio.get_running_loop().create_task(self._push(address, entry))
        self.tasks[address] = (entry.master_epoch, task)
        task.add_done_callback(functools.partial(self._done, address))

    def _done(self, address: str, task: "asyncio.Task[None]") -> None:
        cur = self.tasks.get(address)
        if cur is not None and cur[1] is task:
            del self.tasks[address]

    async def _push(self, address: str, entry: RoleChangeEntry) -> None:
        log.info("notify broker %s that role changed: master %s (%s) epoch %d", address, entry.master_broker_id,
                 entry.master_address, entry.master_epoch)
        try:
            await self.send(address, entry.command())
            self.counters["pushes"] += 1
        except (OSError, ConnectionError, asyncio.TimeoutError, ValueError) as exc:
            self.counters["push_failures"] += 1
            log.warning("failed to notify broker %s that role changed: %s", address, exc)

    async def close(self) -> None:
        tasks = [t for _, t in self.tasks.values()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=2.0)
        self.tasks.clear()
