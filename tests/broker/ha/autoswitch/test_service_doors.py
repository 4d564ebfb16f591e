"""AutoSwitch HA master doors (issue 27): a fresh slave of a store migrated from DLedger mode is
refused with the fix named (HA never ships the frozen regions below ``classicFrom``, and never
starts a slave above them, which would give it a log silently lacking every old message); the
number of open sockets is bounded. Real sockets on 127.0.0.1, bounded waits, all stopped."""
from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from broker.ha.autoswitch.client import AutoSwitchHAClient
from broker.ha.autoswitch.epoch_file import EPOCH_FILE_NAME, EpochEntry, EpochFileCache
from broker.ha.autoswitch.service import AutoSwitchHAService
from broker.ha.autoswitch.sync_state import SyncStateSet
from tests.broker.ha.autoswitch.test_service import Node, settings, wait_until
from tests.broker.store.test_commitlog_regions import classic_from, classic_store, regions_doc, write_regions
from tests.support.rmqfixtures import SETS


@pytest.mark.timeout(60)
async def test_a_fresh_slave_of_a_migrated_master_is_refused_with_the_fix(store_copy, tmp_path: Path) -> None:
    fs = SETS["plain"]
    root = store_copy(fs.mixed)
    write_regions(root, regions_doc(fs))
    store = classic_store(root)
    store.load()
    fresh = Node(tmp_path / "fresh", 2)
    service = client = None
    try:
        store.start()
        cl = store.commitlog
        start = classic_from(fs)
        assert cl.classic_from == start and cl.max_offset == start
        epochs = EpochFileCache(root / EPOCH_FILE_NAME)  # a master elected on the migrated store: <1, classicFrom>
        assert epochs.append_entry(EpochEntry(1, cl.max_offset))
        service = AutoSwitchHAService(cl, epochs, SyncStateSet(1), settings(mapped_file_size_commit_log=1024 * 1024),
                                      host="127.0.0.1")
        await service.start()
        client = AutoSwitchHAClient(fresh.cl, fresh.epochs, 2, settings(), master_address=f"127.0.0.1:{service.port}",
                                    retry_ms=50)
        await client.start()
        await wait_until(lambda: service.last_refused is not None, what="the refusal")
        assert service.last_refused is not None
        assert f"asks for offset 0, below classicFrom {start}" in service.last_refused
        assert "mqupgrade reseed --from" in service.last_refused
        assert fresh.cl.max_offset == 0  # not one byte shipped: no frozen DLedger bytes, no log starting above them
    finally:
        if client is not None:
            await client.shutdown()
        if service is not None:
            await service.shutdown()
        fresh.close()
        store.shutdown()


@pytest.mark.timeout(30)
async def test_open_sockets_are_bounded(tmp_path: Path) -> None:
    master = Node(tmp_path / "m", 1)
    master.become_master(1)
    service = AutoSwitchHAService(master.cl, master.epochs, SyncStateSet(1),
                                  settings(ha_max_connections=2, ha_max_pending_connections=1), host="127.0.0.1")
    held: list[socket.socket] = []
    try:
        await service.start()
        for _ in range(3):  # idle sockets (open protocol, no token): they hold the three slots
            held.append(socket.create_connection(("127.0.0.1", service.port)))
        await wait_until(lambda: len(service._tasks) == 3, what="three sockets accepted")
        extra = socket.create_connection(("127.0.0.1", service.port))
        held.append(extra)
        await wait_until(lambda: service.refused_connections == 1, what="the fourth refused")
        extra.settimeout(5)
        assert await asyncio.get_running_loop().run_in_executor(None, extra.recv, 1) == b""  # closed by the master
        assert len(service._tasks) == 3
    finally:
        for s in held:
            s.close()
        await service.shutdown()
        master.close()
