"""AutoSwitch HA asyncio drivers end to end, in-process: a classic CommitLog replicated to another
over 127.0.0.1 on a free port, epochs and SyncStateSet included; a failover with truncation of the
old master's unreplicated tail; the haAuthToken handshake. Everything started is stopped in a
``finally``; waits are bounded."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from broker.ha.autoswitch.client import AutoSwitchHAClient
from broker.ha.autoswitch.epoch_file import EPOCH_FILE_NAME, EpochEntry, EpochFileCache
from broker.ha.autoswitch.service import AutoSwitchHAService
from broker.ha.autoswitch.sync_state import ALL_ACK_IN_SYNC_STATE_SET, SyncStateSet
from broker.ha.settings import HASettings
from broker.store.commitlog import CommitLog
from broker.store.message import MessageExt

SIZE = 4096


def settings(**kw: object) -> HASettings:
    base: dict[str, object] = dict(ha_listen_port=0, mapped_file_size_commit_log=SIZE, ha_send_heartbeat_interval=5000,
                                   ha_housekeeping_interval=20000, ha_transfer_batch_size=1500, broker_name="b1")
    base.update(kw)
    return HASettings(**base)  # type: ignore[arg-type]


def msg(i: int) -> MessageExt:
    return MessageExt(topic="T", body=bytes([i % 251]) * 300, queue_id=0, properties={"KEYS": f"k{i}"},
                      born_timestamp=1000 + i, store_timestamp=2000 + i)


def open_log(path: Path) -> CommitLog:
    cl = CommitLog(path / "commitlog", SIZE, warm_mapped_file=False)
    cl.load()
    return cl


def put(cl: CommitLog, start: int, n: int) -> None:
    assert cl.put_messages([msg(i) for i in range(start, start + n)]).ok


def read_all(cl: CommitLog, start: int = 0) -> bytes:
    out = bytearray()
    at = start
    while at < cl.max_offset:
        got = cl.get_data(at)
        assert got is not None and got.start_offset == at
        assert len(got.buffer) > 0
        out += got.buffer
        at += len(got.buffer)
    return bytes(out)


async def wait_until(pred, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


class Node:
    """A replica: commitlog + epoch file under ``root``."""

    def __init__(self, root: Path, broker_id: int) -> None:
        self.root = root
        self.broker_id = broker_id
        self.cl = open_log(root)
        self.epochs = EpochFileCache(root / EPOCH_FILE_NAME)
        self.confirm = -1

    def become_master(self, epoch: int) -> None:
        # sync_state.ChangeToMaster's epoch steps (nothing dirty to cut here)
        if self.epochs.last_epoch() >= epoch:
            self.epochs.truncate_suffix_by_epoch(epoch)
        assert self.epochs.append_entry(EpochEntry(epoch, self.cl.max_offset))

    def close(self) -> None:
        self.cl.shutdown()


@pytest.mark.timeout(60)
async def test_replicates_a_commitlog_with_epochs_and_sync_state_set(tmp_path: Path) -> None:
    master, slave = Node(tmp_path / "m", 1), Node(tmp_path / "s", 2)
    master.become_master(1)
    put(master.cl, 0, 30)  # several 4 KiB files
    sync = SyncStateSet(1, all_ack_in_sync_state_set=True)
    sync.set_sync_state_set({1}, master.cl.max_offset)
    proposals: list[frozenset[int]] = []
    # a short heartbeat: the slave learns the confirm offset from the frame after the ack
    fast = settings(ha_send_heartbeat_interval=200)
    service = AutoSwitchHAService(master.cl, master.epochs, sync, fast, host="127.0.0.1",
                                  on_sync_state_set_changed=proposals.append)
    client = None
    try:
        await service.start()
        assert service.port > 0
        client = AutoSwitchHAClient(slave.cl, slave.epochs, 2, fast, master_address=f"127.0.0.1:{service.port}",
                                    on_confirm_offset=lambda o: setattr(slave, "confirm", o))
        await client.start()
        await wait_until(lambda: slave.cl.max_offset == master.cl.max_offset, what="catch-up")
        assert read_all(slave.cl) == read_all(master.cl)
        assert slave.epochs.get_all_entries() == master.epochs.get_all_entries() == [EpochEntry(1, 0)]
        await wait_until(lambda: proposals, what="SyncStateSet proposal")
        assert proposals[0] == {1, 2}
        service.set_sync_state_set(proposals[0])  # the controller agreed
        # more writes: the ALL-ack put waits for the slave, then the confirm offset follows
        put(master.cl, 30, 10)
        service.notify_put()
        end = master.cl.max_offset
        assert await service.wait_for_ack(end, ALL_ACK_IN_SYNC_STATE_SET, 10.0)
        assert sync.acks[2] == end
        await wait_until(lambda: service.confirm_offset() == end, what="confirm offset")
        await wait_until(lambda: slave.confirm == end, what="slave confirm offset")
        # persisted: the slave's epoch file reloads to the same history
        again = EpochFileCache(slave.root / EPOCH_FILE_NAME)
        again.init_cache_from_file()
        assert again.get_all_entries() == [EpochEntry(1, 0)]
    finally:
        if client is not None:
            await client.shutdown()
        await service.shutdown()
        master.close()
        slave.close()


@pytest.mark.timeout(60)
async def test_failover_truncates_the_old_masters_tail(tmp_path: Path) -> None:
    a, b = Node(tmp_path / "a", 1), Node(tmp_path / "b", 2)
    a.become_master(1)
    put(a.cl, 0, 12)
    service = AutoSwitchHAService(a.cl, a.epochs, SyncStateSet(1), settings(), host="127.0.0.1")
    client = None
    service_b = None
    client_a = None
    try:
        await service.start()
        client = AutoSwitchHAClient(b.cl, b.epochs, 2, settings(), master_address=f"127.0.0.1:{service.port}")
        await client.start()
        await wait_until(lambda: b.cl.max_offset == a.cl.max_offset, what="catch-up")
        common = a.cl.max_offset
        await client.shutdown()
        client = None
        put(a.cl, 12, 5)  # a writes a tail nobody receives, then dies
        await service.shutdown()
        assert a.cl.max_offset > common

        b.become_master(2)  # b elected in epoch 2 at the common end, writes on
        put(b.cl, 100, 9)
        service_b = AutoSwitchHAService(b.cl, b.epochs, SyncStateSet(2), settings(), host="127.0.0.1")
        await service_b.start()
        client_a = AutoSwitchHAClient(a.cl, a.epochs, 1, settings(), master_address=f"127.0.0.1:{service_b.port}")
        await client_a.start()
        await wait_until(lambda: a.cl.max_offset == b.cl.max_offset and a.epochs.last_epoch() == 2, what="catch-up")
        assert read_all(a.cl) == read_all(b.cl)
        assert a.epochs.get_all_entries() == b.epochs.get_all_entries()
        assert [(e.epoch, e.start_offset) for e in a.epochs.get_all_entries()] == [(1, 0), (2, common)]
    finally:
        for c in (client, client_a):
            if c is not None:
                await c.shutdown()
        for s in (service, service_b):
            if s is not None:
                await s.shutdown()
        a.close()
        b.close()


@pytest.mark.timeout(60)
async def test_diverged_replica_is_refused_and_untouched(tmp_path: Path) -> None:
    master, slave = Node(tmp_path / "m", 1), Node(tmp_path / "s", 2)
    master.become_master(2)
    put(master.cl, 0, 5)
    slave.become_master(1)  # a history that shares no epoch with the master's
    put(slave.cl, 50, 3)
    before = read_all(slave.cl)
    service = AutoSwitchHAService(master.cl, master.epochs, SyncStateSet(1), settings(), host="127.0.0.1")
    client = None
    try:
        await service.start()
        client = AutoSwitchHAClient(slave.cl, slave.epochs, 2, settings(), master_address=f"127.0.0.1:{service.port}",
                                    retry_ms=50)
        await client.start()
        await wait_until(lambda: client.last_error is not None and "no consistent point" in client.last_error,
                         what="refusal")
        assert read_all(slave.cl) == before and slave.epochs.get_all_entries() == [EpochEntry(1, 0)]
    finally:
        if client is not None:
            await client.shutdown()
        await service.shutdown()
        master.close()
        slave.close()


@pytest.mark.timeout(60)
async def test_ha_auth_token_handshake_guards_the_session(tmp_path: Path) -> None:
    master, slave, stranger = Node(tmp_path / "m", 1), Node(tmp_path / "s", 2), Node(tmp_path / "x", 3)
    master.become_master(1)
    put(master.cl, 0, 8)
    service = AutoSwitchHAService(master.cl, master.epochs, SyncStateSet(1), settings(ha_auth_token="s3cret"),
                                  host="127.0.0.1")
    clients: list[AutoSwitchHAClient] = []
    try:
        await service.start()
        addr = f"127.0.0.1:{service.port}"
        good = AutoSwitchHAClient(slave.cl, slave.epochs, 2, settings(ha_auth_token="s3cret"), master_address=addr)
        bad = AutoSwitchHAClient(stranger.cl, stranger.epochs, 3, settings(ha_auth_token="wrong"), master_address=addr,
                                 retry_ms=50)
        clients += [good, bad]
        await good.start()
        await bad.start()
        await wait_until(lambda: slave.cl.max_offset == master.cl.max_offset, what="catch-up")
        assert read_all(slave.cl) == read_all(master.cl)
        await wait_until(lambda: bad.last_error is not None and bad.sessions == 0 and "haAuthToken" in bad.last_error,
                         what="refusal")
        assert stranger.cl.max_offset == 0 and stranger.epochs.entry_size == 0
    finally:
        for c in clients:
            await c.shutdown()
        await service.shutdown()
        for n in (master, slave, stranger):
            n.close()


@pytest.mark.timeout(60)
async def test_a_slave_that_leaves_is_proposed_out_and_shrink_drops_a_laggard(tmp_path: Path) -> None:
    master, slave = Node(tmp_path / "m", 1), Node(tmp_path / "s", 2)
    master.become_master(1)
    put(master.cl, 0, 4)
    sync = SyncStateSet(1, ha_max_time_slave_not_catchup_ms=2000)
    proposals: list[frozenset[int]] = []
    service = AutoSwitchHAService(master.cl, master.epochs, sync, settings(), host="127.0.0.1",
                                  on_sync_state_set_changed=proposals.append)
    client = None
    try:
        await service.start()
        service.set_sync_state_set(frozenset({1}))
        client = AutoSwitchHAClient(slave.cl, slave.epochs, 2, settings(), master_address=f"127.0.0.1:{service.port}")
        await client.start()
        await wait_until(lambda: proposals == [{1, 2}], what="expansion")
        service.set_sync_state_set(proposals[0])
        service.shrink()  # caught up just now: stays
        assert len(proposals) == 1
        await client.shutdown()
        client = None
        await wait_until(lambda: len(proposals) == 2, what="removal")
        assert proposals[1] == {1}
        service.set_sync_state_set(frozenset({1, 2}))  # say the controller still lists it
        sync.caught_up_ms[2] = time.monotonic() * 1000.0 - 5000.0
        service.shrink()
        assert proposals[2] == {1}
    finally:
        if client is not None:
            await client.shutdown()
        await service.shutdown()
        master.close()
        slave.close()
