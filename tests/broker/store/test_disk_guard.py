"""Issue 24.4: puts are refused before the disk fills, and disk pressure is visible.

Before: on a nearly full disk puts kept succeeding to 100% (the 90% refusal lived in retention's
10-second round, which a fast producer outran) while /health said 200. The disk here is
simulated (the guard's ``space`` function): it fills by exactly the bytes the store appends,
from 89% to 100% in well under a second.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from broker.api.client import BrokerClient, BrokerClientError
from broker.config.conf_file import load_conf
from broker.controller import BrokerController
from broker.store.disk_guard import DiskGuard
from broker.store.message import MessageExt
from broker.store.message_store import DefaultMessageStore
from broker.store.put_result import PutMessageStatus
from tools.broker_confs import master_conf

TOTAL = 64 << 20  # a 64 MiB "disk"


async def _health(address: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://{address}/health") as resp:
            return resp.status, await resp.json()


def _filling_disk(store: DefaultMessageStore, used_at_start: float) -> None:
    """The disk fills with the commitlog: used = start + bytes appended."""
    base = store.commitlog.max_offset

    def space(_path: str) -> tuple[float, int]:
        used = used_at_start * TOTAL + (store.commitlog.max_offset - base)
        return used / TOTAL, max(0, TOTAL - int(used))

    store.disk_guard.space = space


def test_puts_stop_above_the_hard_ratio_before_the_disk_is_full(tmp_path: Path) -> None:
    with DefaultMessageStore(store_path_root_dir=str(tmp_path / "s"), mapped_file_size_commit_log=1 << 20) as store:
        store.disk_guard.min_free_bytes = 1 << 20
        # this "disk" is 64 MiB: re-measure every 64 KiB appended (the default 8 MiB suits real disks);
        # the 50 ms timer alone is not what the test relies on, a fast machine appends 1.6 MB sooner
        store.disk_guard.recheck_bytes = 64 << 10
        _filling_disk(store, 0.89)
        body = b"x" * 4000
        stored = refused = 0
        for _ in range(400):  # 1.6 MB: would take the disk from 89% past 91%
            r = store.put_message(MessageExt(topic="TopicDisk", body=body, queue_id=0))
            if r.status == PutMessageStatus.PUT_OK:
                stored += 1
            else:
                assert r.status == PutMessageStatus.SERVICE_NOT_AVAILABLE and "used, above 90%" in (r.error or "") and "disk full" in (r.error or "")
                refused += 1
        ratio, _free = store.disk_guard.space("")
        assert refused > 0 and stored > 0
        assert 0.90 < ratio < 0.902, ratio  # stopped within 64 KiB of crossing 90%, far from 100%
        st = store.disk_guard.status()
        assert st["refusingPuts"] and st["refusedPuts"] == refused and st["disks"]["commitlog"]["usedRatio"] > 0.9


def test_free_space_below_a_commitlog_file_stops_puts_too(tmp_path: Path) -> None:
    guard = DiskGuard({"commitlog": "/x"}, min_free_bytes=1 << 30, space=lambda p: (0.5, 512 << 20))
    assert "disk full" in (guard.check(100) or "") and "512 MiB free, less than one commitlog file" in (guard.check(100) or "")
    ok = DiskGuard({"commitlog": "/x"}, min_free_bytes=1 << 30, space=lambda p: (0.5, 2 << 30))
    assert ok.check(100) is None


@pytest.mark.timeout(60)
async def test_health_status_and_metrics_say_the_disk_is_full(tmp_path: Path) -> None:
    conf, _port = master_conf(tmp_path, "ASYNC_MASTER")
    parsed = load_conf(conf)
    controller = BrokerController(parsed.broker, parsed.store, conf_path=str(conf))
    await controller.start()
    try:
        async with BrokerClient(controller.api_address) as c:
            await c.send("TopicDisk", "fits", queue_id=0)
            assert await _health(controller.api_address) == (200, {"ok": True})
            controller.store.disk_guard.space = lambda _p: (0.97, 1 << 30)
            controller.store.disk_guard.interval_s = 0.0
            with pytest.raises(BrokerClientError) as exc:
                await c.send("TopicDisk", "no room", queue_id=0)
            assert "97.0% used" in str(exc.value)
            st = await c.status()
            assert st["disk"]["refusingPuts"] and st["disk"]["refusedPuts"] >= 1
            metrics = await c.metrics()
            assert "rocketmq_broker_disk_space_refusing_puts 1" in metrics
            assert 'rocketmq_broker_disk_used_ratio{disk="commitlog"} 0.97' in metrics
            status, body = await _health(controller.api_address)
            assert status == 503 and "97.0% used" in body["error"], body
            controller.store.disk_guard.space = lambda _p: (0.5, 1 << 30)
            await c.send("TopicDisk", "room again", queue_id=0)
            assert await _health(controller.api_address) == (200, {"ok": True})
    finally:
        await controller.shutdown()
