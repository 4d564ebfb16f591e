"""ControllerModeHA's put path (``commitlog.replica_hook``) and role bookkeeping, in process with
a fake HA service: what a put waits for under inSyncReplicas / minInSyncReplicas /
allAckInSyncStateSet, and what shutdown answers the waiting ones."""
from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import pytest

from broker.controller_mode import ControllerModeHA
from broker.ha.autoswitch.replicas_messages import ChangeSyncStateSet
from broker.store.put_result import PutMessageStatus
from broker.tasks import wait_for


class Host:
    def change_to_master(self, role: str = "SYNC_MASTER") -> None: ...

    def change_to_slave(self, broker_id: int, master_api_address: Optional[str]) -> None: ...


class Service:
    """The AutoSwitch HA service as the put path sees it: acks arrive when the test says."""

    def __init__(self) -> None:
        self.acked = asyncio.Event()
        self.woken = 0
        self.connections: set[Any] = set()

    def notify_put(self) -> None:
        self.woken += 1

    async def wait_for_ack(self, next_offset: int, ack_nums: int, timeout_s: float) -> bool:
        try:
            await wait_for(self.acked.wait(), timeout_s)
        except asyncio.TimeoutError:
            return False
        return True


def mode(tmp_path: Path, **store: Any) -> ControllerModeHA:
    bc = SimpleNamespace(broker_name="b", broker_cluster_name="c", controller_addr="127.0.0.1:1",
                         enable_controller_mode=True)
    sc = SimpleNamespace(**{"sync_flush_timeout": 200, **store})
    m = ControllerModeHA(Host(), bc, sc, broker_address="127.0.0.1:2", bind_address="127.0.0.1", listen_port=0,
                         root_dir=tmp_path)
    m.set_local_broker_id(1)
    return m


AR = SimpleNamespace(end_offset=100)


def test_one_ack_answers_at_once_and_wakes_the_senders(tmp_path: Path) -> None:
    async def go() -> None:
        m = mode(tmp_path)
        svc = Service()
        m.service, m._loop = svc, asyncio.get_running_loop()  # type: ignore[assignment]
        m.change_sync_state_set(ChangeSyncStateSet(frozenset({1, 2}), 2))
        assert await m._replica_hook(AR) is PutMessageStatus.PUT_OK and svc.woken == 1
    asyncio.run(go())


def test_all_ack_waits_for_the_set_and_times_out_as_flush_slave_timeout(tmp_path: Path) -> None:
    async def go() -> None:
        m = mode(tmp_path, all_ack_in_sync_state_set=True)
        svc = Service()
        m.service, m._loop = svc, asyncio.get_running_loop()  # type: ignore[assignment]
        m.change_sync_state_set(ChangeSyncStateSet(frozenset({1, 2}), 2))
        assert await m._replica_hook(AR) is PutMessageStatus.FLUSH_SLAVE_TIMEOUT  # no ack in 200 ms
        waiting = m._replica_hook(AR)
        svc.acked.set()
        assert await waiting is PutMessageStatus.PUT_OK
    asyncio.run(go())


def test_below_min_in_sync_replicas_is_slave_not_available(tmp_path: Path) -> None:
    async def go() -> None:
        m = mode(tmp_path, min_in_sync_replicas=2, in_sync_replicas=2)
        m.service, m._loop = Service(), asyncio.get_running_loop()  # type: ignore[assignment]
        m.change_sync_state_set(ChangeSyncStateSet(frozenset({1}), 1))
        assert await m._replica_hook(AR) is PutMessageStatus.SLAVE_NOT_AVAILABLE
    asyncio.run(go())


def test_shutdown_answers_the_waiting_puts_and_every_later_one(tmp_path: Path) -> None:
    async def go() -> None:
        m = mode(tmp_path, all_ack_in_sync_state_set=True, sync_flush_timeout=60_000)
        m.service, m._loop = Service(), asyncio.get_running_loop()  # type: ignore[assignment]
        m.change_sync_state_set(ChangeSyncStateSet(frozenset({1, 2}), 2))
        waiting = m._replica_hook(AR)
        await asyncio.sleep(0)
        m.release_waiting_puts()
        assert await waiting is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        assert await m._ack_future(200) is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        for t in list(m._ack_tasks):
            t.cancel()
    asyncio.run(go())


def test_health_says_fenced_until_the_controller_gives_a_role(tmp_path: Path) -> None:
    m = mode(tmp_path)
    problem = m.health_problem()
    assert problem is not None and "no role from the controller" in problem and "127.0.0.1:1" in problem
    m.role = "SLAVE"
    assert m.health_problem() is None


def test_an_unreadable_epoch_file_is_a_start_error_naming_it(tmp_path: Path) -> None:
    from broker.classic_ha import HAStartError

    (tmp_path / "epochFileCheckpoint").write_text("garbage\n")
    (tmp_path / "epochFileCheckpoint.bak").write_text("garbage\n")
    m = mode(tmp_path)
    store = SimpleNamespace(commitlog=None)
    with pytest.raises(HAStartError) as err:
        asyncio.run(m.start(store, False))  # type: ignore[arg-type]
    assert "epochFileCheckpoint" in str(err.value)


def test_a_replica_dispatches_only_up_to_the_confirm_offset_a_master_all(tmp_path: Path) -> None:
    m = mode(tmp_path)
    reput = SimpleNamespace(reput_from_offset=300)
    m.store_access = SimpleNamespace(commitlog=SimpleNamespace(max_offset=1000),  # type: ignore[assignment]
                                     store=SimpleNamespace(reput=reput))
    assert m._reput_limit() == 300  # fenced, no confirm offset yet: nothing new
    m._on_confirm(700)
    assert m._reput_limit() == 700  # a slave: what its master confirmed
    m._on_confirm(5000)
    assert m._reput_limit() == 1000  # never past its own log
    m._master_reads = True
    assert m._reput_limit() == 1000  # a master (and one becoming master): all of it
