"""DLedgerCommitLog put benchmark: a single-node DLedger group in-process, through DefaultMessageStore.

Prints one JSON document with, for 1 KiB bodies (``--body``):
- ``single_sync``: one blocking ``put_message`` at a time (latency-bound: each put waits for its
  DLedger commit, i.e. the group fsync);
- ``single_async_<n>``: ``n`` concurrent ``put_message_async`` from one asyncio loop (the broker's
  HTTP path: many clients in flight, commits grouped by DLedger's flusher);
- ``batch_<b>``: blocking ``put_messages`` of ``b`` messages (one DLedger entry per message).
Each case: messages/s, MB/s of bodies, put latency p50/p99 (ms), and the store's committed
bytes. Messages are built before the clock starts; encoding, queue offsets, the DLedger append
(hook, CRC, pwrite), the fsync, commit and the thread hops are measured. Dispatch (CQ/index)
runs concurrently, as in a broker.

    python bench/dledger_commitlog_put.py            # ~40 s
    python bench/dledger_commitlog_put.py --quick    # a few seconds
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.procs import free_port  # noqa: E402
from broker.store.message import MessageExt  # noqa: E402
from broker.store.message_store import DefaultMessageStore  # noqa: E402


def make_messages(n: int, body_size: int) -> list[MessageExt]:
    body = (bytes(range(256)) * (body_size // 256 + 1))[:body_size]
    return [MessageExt(topic="BenchTopic", body=body, queue_id=i % 8, properties={"KEYS": f"k{i}", "TAGS": "TagA"},
                       born_timestamp=1_700_000_000_000 + i, born_host=("127.0.0.1", 50000))
            for i in range(n)]


def open_store(root: Path, file_size: int) -> DefaultMessageStore:
    store = DefaultMessageStore(store_path_root_dir=str(root), mapped_file_size_commit_log=file_size,
                                enable_dleger_commit_log=True, warm_mapped_file_enable=False,
                                dledger_settings={"group": "bench", "self_id": "n0",
                                                  "peers": f"n0-127.0.0.1:{free_port()}",
                                                  "allow_insecure": True})  # one loopback member
    store.load()
    store.start()
    if not store.commitlog.wait_leader_ready(15):
        raise SystemExit("single-node DLedger group did not become a ready leader")
    return store


def summarise(name: str, n_msgs: int, body: int, elapsed: float, lat: list[float], store: DefaultMessageStore,
              **extra: Any) -> dict[str, Any]:
    lat.sort()
    return {
        "case": name, "messages": n_msgs, "seconds": round(elapsed, 3),
        "msgs_per_s": round(n_msgs / elapsed, 1), "mb_per_s": round(n_msgs * body / elapsed / 1e6, 2),
        "latency_ms_p50": round(1000 * statistics.median(lat), 3) if lat else None,
        "latency_ms_p99": round(1000 * lat[min(len(lat) - 1, int(len(lat) * 0.99))], 3) if lat else None,
        "committed_pos": store.get_max_phy_offset(), **extra,
    }


def case_sync(store: DefaultMessageStore, msgs: list[MessageExt], batch: int, seconds: float, body: int) -> dict:
    lat: list[float] = []
    sent = i = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        chunk = msgs[i:i + batch] if i + batch <= len(msgs) else msgs[:batch]
        i = (i + batch) % len(msgs)
        t0 = time.perf_counter()
        res = store.put_messages(chunk) if batch > 1 else store.put_message(chunk[0])
        lat.append(time.perf_counter() - t0)
        if not res.ok:
            raise SystemExit(f"put failed: {res.status} {res.error}")
        sent += len(chunk)
    elapsed = time.perf_counter() - start
    return summarise("single_sync" if batch == 1 else f"batch_{batch}", sent, body, elapsed, lat, store, batch=batch)


async def _async_case(store: DefaultMessageStore, msgs: list[MessageExt], inflight: int, seconds: float) -> tuple:
    lat: list[float] = []
    sent = 0
    stop = time.perf_counter() + seconds

    async def client(k: int) -> None:
        nonlocal sent
        j = k
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            res = await store.put_message_async(msgs[j % len(msgs)])
            lat.append(time.perf_counter() - t0)
            if not res.ok:
                raise SystemExit(f"put failed: {res.status} {res.error}")
            sent += 1
            j += inflight

    start = time.perf_counter()
    await asyncio.gather(*(client(k) for k in range(inflight)))
    return sent, time.perf_counter() - start, lat


def case_async(store: DefaultMessageStore, msgs: list[MessageExt], inflight: int, seconds: float, body: int) -> dict:
    sent, elapsed, lat = asyncio.run(_async_case(store, msgs, inflight, seconds))
    return summarise(f"single_async_{inflight}", sent, body, elapsed, lat, store, inflight=inflight)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--seconds", type=float, default=5.0, help="per case")
    ap.add_argument("--quick", action="store_true", help="1 s per case")
    ap.add_argument("--dir", default=None, help="where to put the store (default: a temp dir)")
    args = ap.parse_args()
    seconds = 1.0 if args.quick else args.seconds
    base = Path(args.dir or tempfile.mkdtemp(prefix="dledger-put-"))
    root = base / "store"
    msgs = make_messages(4096, args.body)
    results = []
    store = open_store(root, 1 << 30)
    try:
        case_sync(store, msgs, 1, min(0.3, seconds), args.body)  # warm-up
        results.append(case_sync(store, msgs, 1, seconds, args.body))
        for inflight in (16, 64):
            results.append(case_async(store, msgs, inflight, seconds, args.body))
        for batch in (16, 128):
            results.append(case_sync(store, msgs, batch, seconds, args.body))
        status = store.commitlog.status()
    finally:
        store.shutdown()
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    print(json.dumps({
        "bench": "dledger_commitlog_put", "body_bytes": args.body, "seconds_per_case": seconds,
        "python": platform.python_version(), "cpus": os.cpu_count(),
        "results": results,
        "dledger": {k: status.get(k) for k in ("role", "term", "end_index", "committed_index")},
    }, indent=2))


if __name__ == "__main__":
    main()
