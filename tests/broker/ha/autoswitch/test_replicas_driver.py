"""ReplicasDriver (the asyncio driver of ReplicasManager) against a real in-process controller
(a one-member ``ControllerProcess`` with its remoting door on a free port), and alone.

The host is a recorder (the broker's side of the :class:`ReplicasHost` Protocol)."""
from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Callable

from broker.ha.autoswitch.metadata_file import BrokerMetadata
from broker.ha.autoswitch.replicas_driver import QUEUE_SIZE, ReplicasDriver
from broker.ha.autoswitch.replicas_messages import (
    ChangeSyncStateSet, ChangeToMaster, ChangeToSlave, ReplicasConfig, State,
)
from controller.cli import ControllerProcess
from controller.config import parse_config
from tests.broker.ha.autoswitch.fakes import EmptyHA
from tests.controller.proc_util import free_ports


class Host:
    def __init__(self) -> None:
        self.fenced: list[bool] = []
        self.ids: list[int] = []
        self.roles: list[object] = []
        self.sets: list[ChangeSyncStateSet] = []

    def set_fenced(self, fenced: bool) -> None:
        self.fenced.append(fenced)

    def set_local_broker_id(self, broker_id: int) -> None:
        self.ids.append(broker_id)

    async def change_to_master(self, action: ChangeToMaster) -> None:
        await asyncio.sleep(0)  # the broker awaits its epoch file / HA service here
        self.roles.append(action)

    async def change_to_slave(self, action: ChangeToSlave) -> None:
        self.roles.append(action)

    def change_sync_state_set(self, action: ChangeSyncStateSet) -> None:
        self.sets.append(action)


def fast(address: str, doors: tuple[str, ...]) -> ReplicasConfig:
    return ReplicasConfig("c", "b", address, doors, broker_heartbeat_interval_ms=100,
                          sync_broker_metadata_period_ms=200, first_task_delay_ms=100, register_backoff_ms=100,
                          retry_interval_ms=300, metadata_retry_ms=100, request_timeout_ms=1000)


async def until(what: str, done: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


def test_two_drivers_register_elect_and_fail_over(tmp_path: Path) -> None:
    asyncio.run(_two_drivers(tmp_path))


async def _two_drivers(tmp_path: Path) -> None:
    dport, door_port = free_ports(2)
    door = f"127.0.0.1:{door_port}"
    proc = ControllerProcess(parse_config(
        f"controllerDLegerPeers=n0-127.0.0.1:{dport}\ncontrollerDLegerSelfId=n0\n"
        f"controllerStorePath={tmp_path / 'ctl'}\nmappedFileSize=1048576\ncontrollerDLegerAllowInsecure=true\n"
        f"controllerAllowInsecure=true\nlistenPort={door_port}\ncontrollerRemotingPeers=n0-{door}\n"
        "bindAddress=127.0.0.1\nscanNotActiveBrokerInterval=200\n"), None)
    hosts = [Host(), Host()]
    drivers = [ReplicasDriver(fast(f"127.0.0.1:{p}", (door,)), EmptyHA(), h, tmp_path / f"b{i}")
               for i, (p, h) in enumerate(zip(free_ports(2), hosts))]
    await proc.start()
    try:
        await until("the controller leads", lambda: proc.controller.is_leader_ready)
        for d in drivers:
            await d.start()
        await until("both RUNNING", lambda: all(d.manager.state is State.RUNNING for d in drivers))
        await until("one master, one slave", lambda: all(h.roles for h in hosts))
        master = next(d for d in drivers if d.manager.is_master)
        slave = next(d for d in drivers if d is not master)
        mh, sh = hosts[drivers.index(master)], hosts[drivers.index(slave)]
        assert mh.fenced[0] is True and mh.fenced[-1] is False and sh.fenced[-1] is False
        assert isinstance(mh.roles[0], ChangeToMaster) and mh.roles[0].new_master_epoch == 1
        to_slave = sh.roles[0]
        assert isinstance(to_slave, ChangeToSlave)
        assert (to_slave.master_broker_id, to_slave.master_address) == (master.manager.broker_id,
                                                                        master.config.broker_address)
        assert sorted(h.ids[0] for h in hosts) == [1, 2]
        for d in drivers:
            assert d.meta.read() == BrokerMetadata("c", "b", d.manager.broker_id or -1)
            assert d.temp.read() is None
        # the HA service proposes the slave: the driver sends ALTER_SYNC_STATE_SET, the host gets the answer
        both = frozenset(h.ids[0] for h in hosts)
        master.sync_state_set_proposed(both)
        await until("the slave joined the SyncStateSet", lambda: any(s.sync_state_set == both for s in mh.sets))
        # the master stops (its connections close): the slave is elected for epoch 2
        t0 = time.monotonic()
        await master.stop()
        await until("the slave became master", lambda: slave.manager.is_master)
        print(f"\nfailover in process: {time.monotonic() - t0:.2f}s")
        promoted = [r for r in sh.roles if isinstance(r, ChangeToMaster)]
        assert len(promoted) == 1 and promoted[0].new_master_epoch == 2
        assert slave.status()["masterEpoch"] == 2 and slave.status()["controllerLeader"] == door
    finally:
        for d in drivers:
            await d.stop()
        await proc.stop()


def test_no_controller_answers_the_driver_keeps_trying_and_stops_promptly(tmp_path: Path) -> None:
    asyncio.run(_no_controller(tmp_path))


async def _no_controller(tmp_path: Path) -> None:
    dead = f"127.0.0.1:{free_ports(1)[0]}"
    host = Host()
    d = ReplicasDriver(fast("127.0.0.1:1", (dead,)), EmptyHA(), host, tmp_path)
    await d.start()
    try:
        await until("a problem is reported", lambda: bool(d.problems))
        assert "names a leader" in d.problems[-1]
        assert d.running and d.manager.state is State.INITIAL and host.fenced == [True]
    finally:
        t0 = time.monotonic()
        await d.stop()
    assert time.monotonic() - t0 < 3.0 and not d.running
    assert not (tmp_path / "brokerIdentity").exists()


def test_a_full_queue_drops_inputs_and_counts_them(tmp_path: Path) -> None:
    async def go() -> None:
        d = ReplicasDriver(fast("127.0.0.1:1", ("127.0.0.1:2",)), EmptyHA(), Host(), tmp_path)
        for _ in range(QUEUE_SIZE + 3):  # not started: nothing drains the queue
            d.sync_state_set_proposed(frozenset({1}))
        assert d.dropped == 3
        await d.stop()
    asyncio.run(go())


def test_an_alteration_answer_is_applied_before_the_next_sync_state_set_check() -> None:
    """Found by the real-process test: the ALTER answer that let the slave in arrived when the
    periodic check was due; the check read the HA service's set before the driver applied the
    answer and reported the old set back (the slave flapped out for one round). The check now
    waits for the next event."""
    from broker.ha.autoswitch.replicas_messages import SyncStateSetProposed, Tick
    from broker.ha.autoswitch.sync_state import SyncStateSet as HASyncStateSet
    from controller.codes import ControllerRequestCode as Q
    from tests.broker.ha.autoswitch.test_replicas_manager import CFG, ME, _calls, ans, elect_answer, electing, sse

    ha_set = HASyncStateSet(1, ha_max_time_slave_not_catchup_ms=15000)

    class View(EmptyHA):
        def maybe_shrink_sync_state_set(self, now_ms: int) -> frozenset[int]:
            return ha_set.maybe_shrink(now_ms)[0]

    def apply(actions: list) -> list:
        for a in actions:  # what the driver does after handle() returns
            if isinstance(a, ChangeSyncStateSet):
                ha_set.set_sync_state_set(a.sync_state_set, 0)
        return actions

    rm = electing()
    rm.ha = View()
    apply(rm.handle(elect_answer(1, ME, 3, (1,), 1, now=0)))
    apply(rm.handle(Tick(1)))
    ha_set.update_connection_last_caught_up_time(2, 50)
    [alter] = [a for a in _calls(rm.handle(SyncStateSetProposed(100, frozenset({1, 2}))))
               if a.code == Q.CONTROLLER_ALTER_SYNC_STATE_SET]
    due = 1 + CFG.check_sync_state_set_period_ms + 10
    out = apply(rm.handle(ans(alter.rid, None, sse((1, 2), 2), now=due)))
    assert ChangeSyncStateSet(frozenset({1, 2}), 2) in out
    assert not [a for a in _calls(out) if a.code == Q.CONTROLLER_ALTER_SYNC_STATE_SET]
    assert not [a for a in _calls(apply(rm.handle(Tick(due + 1)))) if a.code == Q.CONTROLLER_ALTER_SYNC_STATE_SET]
    assert rm.sync_state_set == frozenset({1, 2})


def test_a_signed_driver_registers_with_a_controller_that_requires_signatures(tmp_path: Path) -> None:
    """The shipped confs: controllers with aclEnable=true (conf/controller/plain_acl.yml), the
    broker signing with its controllerAccessKey; an unsigned driver gets no id."""
    asyncio.run(_signed(tmp_path))


async def _signed(tmp_path: Path) -> None:
    from broker.remoting.acl import PlainAccessValidator, signer
    from tests.controller.proc_util import REPO

    dport, door_port = free_ports(2)
    door = f"127.0.0.1:{door_port}"
    acl = REPO / "conf" / "controller" / "plain_acl.yml"
    proc = ControllerProcess(parse_config(
        f"controllerDLegerPeers=n0-127.0.0.1:{dport}\ncontrollerDLegerSelfId=n0\n"
        f"controllerStorePath={tmp_path / 'ctl'}\nmappedFileSize=1048576\ncontrollerDLegerAllowInsecure=true\n"
        f"aclEnable=true\nplainAclFile={acl}\n"
        f"listenPort={door_port}\ncontrollerRemotingPeers=n0-{door}\nbindAddress=127.0.0.1\n"),
        PlainAccessValidator(acl))
    signed = ReplicasDriver(fast(f"127.0.0.1:{free_ports(1)[0]}", (door,)), EmptyHA(), Host(), tmp_path / "s",
                            rpc_hook=signer("controller-broker", "sample-controller-broker-change-me"))
    unsigned = ReplicasDriver(fast(f"127.0.0.1:{free_ports(1)[0]}", (door,)), EmptyHA(), Host(), tmp_path / "u")
    await proc.start()
    try:
        await until("the controller leads", lambda: proc.controller.is_leader_ready)
        for d in (signed, unsigned):
            await d.start()
        await until("the signed broker runs as master", lambda: signed.manager.is_master)
        await until("the unsigned broker is refused", lambda: any("controllerAccessKey" in p for p in unsigned.problems))
        assert unsigned.manager.broker_id is None and not (tmp_path / "u" / "brokerIdentity").exists()
    finally:
        for d in (signed, unsigned):
            await d.stop()
        await proc.stop()


class SlowHost(Host):
    """A broker whose change to master takes longer than its controller heartbeat timeout (a long
    truncation, a slow disk): the driver must keep heartbeating meanwhile."""

    async def change_to_master(self, action: ChangeToMaster) -> None:
        await asyncio.sleep(2.0)
        self.roles.append(action)


def test_heartbeats_go_on_while_a_slow_change_to_master_is_awaited(tmp_path: Path) -> None:
    asyncio.run(_slow_change(tmp_path))


async def _slow_change(tmp_path: Path) -> None:
    dport, door_port, bport = free_ports(3)
    door = f"127.0.0.1:{door_port}"
    proc = ControllerProcess(parse_config(
        f"controllerDLegerPeers=n0-127.0.0.1:{dport}\ncontrollerDLegerSelfId=n0\n"
        f"controllerStorePath={tmp_path / 'ctl'}\nmappedFileSize=1048576\ncontrollerDLegerAllowInsecure=true\n"
        f"controllerAllowInsecure=true\nlistenPort={door_port}\ncontrollerRemotingPeers=n0-{door}\n"
        "bindAddress=127.0.0.1\nscanNotActiveBrokerInterval=100\n"), None)
    host = SlowHost()
    cfg = dataclasses.replace(fast(f"127.0.0.1:{bport}", (door,)), controller_heartbeat_timeout_ms=600)
    driver = ReplicasDriver(cfg, EmptyHA(), host, tmp_path / "b0")
    await proc.start()
    try:
        await until("the controller leads", lambda: proc.controller.is_leader_ready)
        await driver.start()
        await until("the change to master completed", lambda: bool(host.roles))
        # the controller never saw the master go silent (600 ms timeout, scans every 100 ms, a 2 s change)
        assert proc.controller.counters["brokers_expired"] == 0, proc.controller.counters
        assert [type(r).__name__ for r in host.roles] == ["ChangeToMaster"], host.roles
        assert driver.manager.master_epoch == 1 and getattr(driver, "kept_beats", 0) >= 5
    finally:
        await driver.stop()
        await proc.stop()
