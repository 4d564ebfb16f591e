"""Issue 27, the driver's half: a NOTIFY_BROKER_ROLE_CHANGED push reaches the ReplicasManager as
a wake-up with its content dropped, and a flood of pushes queues one and counts the rest, so it
cannot fill the driver's queue and crowd out the other inputs. (The manager's half, a push
producing only a CONTROLLER_GET_REPLICA_INFO and the answer driving the role, is in
test_replicas_manager.py; the forged push over a live socket in tests/broker/test_controller_mode.py.)"""
from __future__ import annotations

import asyncio
from pathlib import Path

from broker.ha.autoswitch.replicas_driver import QUEUE_SIZE, ReplicasDriver
from broker.ha.autoswitch.replicas_messages import (
    ChangeSyncStateSet, ChangeToMaster, ChangeToSlave, ReplicasConfig, RoleChangeNotified,
)
from tests.broker.ha.autoswitch.fakes import EmptyHA as View


class Host:
    def set_fenced(self, fenced: bool) -> None:
        pass

    def set_local_broker_id(self, broker_id: int) -> None:
        pass

    async def change_to_master(self, action: ChangeToMaster) -> None:
        raise AssertionError("a push never changes the role by itself")

    async def change_to_slave(self, action: ChangeToSlave) -> None:
        raise AssertionError("a push never changes the role by itself")

    def change_sync_state_set(self, action: ChangeSyncStateSet) -> None:
        pass


def test_a_flood_of_role_change_pushes_queues_one_wake_up_and_counts_the_rest(tmp_path: Path) -> None:
    async def go() -> None:
        d = ReplicasDriver(ReplicasConfig("c", "b", "127.0.0.1:1", ("127.0.0.1:2",)), View(), Host(), tmp_path)
        for epoch in range(QUEUE_SIZE + 3):  # not started: nothing drains the queue
            d.role_change_notified({"masterBrokerId": "1", "masterEpoch": str(epoch)}, b'{"syncStateSet":[1]}')
        assert d._queue.qsize() == 1 and d.hints_dropped == QUEUE_SIZE + 2 and d.dropped == 0
        queued = d._queue.get_nowait()
        assert isinstance(queued, RoleChangeNotified) and not queued.fields and queued.body is None
        d.sync_state_set_proposed(frozenset({1}))  # the other inputs still find room
        assert d.dropped == 0 and d.status()["roleChangeHintsDropped"] == QUEUE_SIZE + 2
        await d.stop()
    asyncio.run(go())


def test_the_processor_asks_no_admin_account_and_answers_success() -> None:
    """The push carries no authority, so the processor itself checks nothing: a request the ACL
    hook let through with a non-admin account is answered SUCCESS (before issue 27: NO_PERMISSION).
    (The hook in broker/remoting/acl.py still asks an account for 1008 first.)"""
    from types import SimpleNamespace

    from broker.remoting.acl import REQUEST_ACCOUNT, PlainAccount
    from broker.remoting.codec import RemotingCommand
    from broker.remoting.processors.controller_notify import NOTIFY_BROKER_ROLE_CHANGED, ControllerNotifyProcessor

    woken: list[int] = []
    p = ControllerNotifyProcessor(lambda fields, body: woken.append(1))
    cmd = RemotingCommand.request(NOTIFY_BROKER_ROLE_CHANGED, {"masterBrokerId": 2, "masterEpoch": 99}, b"x")

    async def run() -> int:
        REQUEST_ACCOUNT.set(PlainAccount("reader", "secret"))  # this task's context only
        return (await p.notify(cmd, SimpleNamespace(remote_addr="10.0.0.9:5"))).code  # type: ignore[arg-type]
    assert asyncio.run(run()) == 0 and woken == [1] and p.received == 1
