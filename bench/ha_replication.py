"""Classic HA benchmark: master -> slave replication over loopback, and SYNC_MASTER put latency.

Everything runs in one process and one asyncio loop (as in a broker: store, HAService and, for
the slave, HAClient), with two real DefaultMessageStores in a temporary directory and a real
TCP connection on 127.0.0.1. Prints one JSON document. Run, not asserted.

Phases:
- ``catch_up``: the master holds N messages before the slave connects; time until the slave's
  commitlog reaches the master's max offset (pure transfer + append, no producer).
- ``streaming``: the slave is connected; producers put N messages in batches (ASYNC_MASTER);
  time from the first put until the slave has the last byte.
- ``sync_latency``: SYNC_MASTER, one producer, sequential single-message puts; per-put latency
  (append + slave ack) percentiles, and the same on an ASYNC_MASTER for the baseline.
- ``sync_concurrent``: SYNC_MASTER, C concurrent producers of single messages; puts/s.

Every phase runs once per ``--auth`` mode: ``open`` (RocketMQ's protocol, no haAuthToken) and
``token`` (haAuthToken: handshake, then a 16-byte HMAC-SHA256 tag on every frame and report), so
the cost of authentication is read off side by side.

Usage: ``python bench/ha_replication.py [--messages 20000] [--body 1024] [--sync-puts 2000]
[--auth open|token|both]``
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker.ha.client import HAClient  # noqa: E402
from broker.ha.service import HAService  # noqa: E402
from broker.ha.settings import HASettings  # noqa: E402
from broker.store.message import MessageExt  # noqa: E402
from broker.store.message_store import DefaultMessageStore, open_store  # noqa: E402
from broker.store.put_result import PutMessageStatus  # noqa: E402


def make_msg(i: int, body: bytes) -> MessageExt:
    return MessageExt(topic="BenchHa", body=body, queue_id=i % 8, properties={"KEYS": f"k{i}"},
                      born_timestamp=int(time.time() * 1000))


def pct(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(p / 100.0 * len(s)))]


BENCH_TOKEN = "bench-ha-secret-0123456789"
AUTH: dict[str, str | None] = {"open": None, "token": BENCH_TOKEN}


class Rig:
    def __init__(self, root: Path, role: str, file_size: int, token: str | None = None) -> None:
        self.root = root
        self.file_size = file_size
        self.settings = HASettings(ha_listen_port=0, broker_role=role, mapped_file_size_commit_log=file_size,
                                   ha_auth_token=token, broker_name="bench")
        self.master = self._store("master", role)
        self.service = HAService(self.master.commitlog, self.settings, host="127.0.0.1")
        self.slave: DefaultMessageStore | None = None
        self.client: HAClient | None = None

    def _store(self, name: str, role: str) -> DefaultMessageStore:
        return open_store(self.root / name, mapped_file_size_commit_log=self.file_size,
                          message_index_enable=False, broker_role=role)

    async def start_slave(self) -> None:
        self.slave = slave = self._store("slave", "SLAVE")
        self.client = HAClient(slave.commitlog, f"127.0.0.1:{self.service.listen_port}", self.settings,
                               on_append=lambda _o: slave.wake_dispatch())
        await self.client.start()
        while self.service.connection_count == 0:
            await asyncio.sleep(0.001)

    async def wait_caught_up(self, timeout: float = 120.0) -> None:
        assert self.slave is not None
        deadline = time.monotonic() + timeout
        target = self.master.commitlog.max_offset
        while self.slave.commitlog.max_offset < target:
            if time.monotonic() > deadline:
                raise TimeoutError("slave did not catch up")
            await asyncio.sleep(0.0005)

    async def close(self) -> None:
        if self.client is not None:
            await self.client.shutdown()
        await self.service.shutdown()
        if self.slave is not None:
            self.slave.shutdown()
        self.master.shutdown()


async def put_batches(store: DefaultMessageStore, n: int, body: bytes, batch: int, producers: int) -> None:
    per = n // producers

    async def producer(p: int) -> None:
        base = p * per
        for i in range(base, base + per, batch):
            res = await store.put_messages_async([make_msg(j, body) for j in range(i, min(i + batch, base + per))])
            assert res.status.stored, res.status

    await asyncio.gather(*(producer(p) for p in range(producers)))


async def phase_catch_up(root: Path, args: argparse.Namespace, body: bytes) -> dict[str, Any]:
    rig = Rig(root / "catch_up", "ASYNC_MASTER", args.file_size, args.token)
    try:
        await rig.service.start()
        await put_batches(rig.master, args.messages, body, 64, 1)
        nbytes = rig.master.commitlog.max_offset
        t0 = time.perf_counter()
        await rig.start_slave()
        await rig.wait_caught_up()
        dt = time.perf_counter() - t0
        return {"messages": args.messages, "bytes": nbytes, "seconds": round(dt, 4),
                "MB_per_s": round(nbytes / dt / 1e6, 1), "msgs_per_s": round(args.messages / dt)}
    finally:
        await rig.close()


async def phase_streaming(root: Path, args: argparse.Namespace, body: bytes) -> dict[str, Any]:
    rig = Rig(root / "streaming", "ASYNC_MASTER", args.file_size, args.token)
    try:
        await rig.service.start()
        await rig.start_slave()
        t0 = time.perf_counter()
        await put_batches(rig.master, args.messages, body, args.batch, 4)
        t_put = time.perf_counter() - t0
        await rig.wait_caught_up()
        dt = time.perf_counter() - t0
        nbytes = rig.master.commitlog.max_offset
        return {"messages": args.messages, "batch": args.batch, "producers": 4, "bytes": nbytes,
                "put_seconds": round(t_put, 4), "replicated_seconds": round(dt, 4),
                "MB_per_s": round(nbytes / dt / 1e6, 1), "msgs_per_s": round(args.messages / dt)}
    finally:
        await rig.close()


async def sequential_latency(rig: Rig, n: int, body: bytes) -> list[float]:
    lat: list[float] = []
    for i in range(n):
        t = time.perf_counter()
        res = await rig.master.put_message_async(make_msg(i, body))
        lat.append((time.perf_counter() - t) * 1e6)
        assert res.status is PutMessageStatus.PUT_OK, res.status
    return lat


def summary_us(lat: list[float]) -> dict[str, float]:
    return {"puts": len(lat), "mean_us": round(statistics.fmean(lat), 1), "p50_us": round(pct(lat, 50), 1),
            "p90_us": round(pct(lat, 90), 1), "p99_us": round(pct(lat, 99), 1), "max_us": round(max(lat), 1)}


async def phase_sync(root: Path, args: argparse.Namespace, body: bytes) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for role in ("ASYNC_MASTER", "SYNC_MASTER"):
        rig = Rig(root / f"lat_{role}", role, args.file_size, args.token)
        try:
            await rig.service.start()
            await rig.start_slave()
            await sequential_latency(rig, 100, body)  # warm-up
            out[role] = summary_us(await sequential_latency(rig, args.sync_puts, body))
            if role == "SYNC_MASTER":
                n = args.sync_puts
                t0 = time.perf_counter()
                lat: list[float] = []

                async def producer(p: int) -> None:
                    for i in range(n // args.concurrency):
                        t = time.perf_counter()
                        res = await rig.master.put_message_async(make_msg(i, body))
                        lat.append((time.perf_counter() - t) * 1e6)
                        assert res.status is PutMessageStatus.PUT_OK, res.status

                await asyncio.gather(*(producer(p) for p in range(args.concurrency)))
                dt = time.perf_counter() - t0
                out["SYNC_MASTER_concurrent"] = {"producers": args.concurrency,
                                                 "puts_per_s": round(len(lat) / dt), **summary_us(lat)}
        finally:
            await rig.close()
    return out


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    body = os.urandom(args.body)
    out: dict[str, Any] = {"benchmark": "ha_replication", "python": platform.python_version(),
                           "body_bytes": args.body, "file_size": args.file_size}
    for mode in (("open", "token") if args.auth == "both" else (args.auth,)):
        args.token = AUTH[mode]
        with tempfile.TemporaryDirectory(prefix="ha-bench-", dir=args.dir) as tmp:
            root = Path(tmp)
            out[mode] = {
                "catch_up": await phase_catch_up(root, args, body),
                "streaming": await phase_streaming(root, args, body),
                "latency": await phase_sync(root, args, body),
            }
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--sync-puts", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--file-size", type=int, default=128 * 1024 * 1024)
    ap.add_argument("--auth", choices=("open", "token", "both"), default="both",
                    help="open: no haAuthToken; token: handshake + MACed frames; both: side by side")
    ap.add_argument("--dir", default=None, help="parent of the temporary store directories")
    args = ap.parse_args(argv)
    print(json.dumps(asyncio.run(main_async(args)), indent=2))


if __name__ == "__main__":
    main()
