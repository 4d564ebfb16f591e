"""Single-node append throughput of the DLedger file store, printed as JSON.

Rules
-----
* One :class:`DLedgerMmapFileStore` per scenario in a fresh temp dir (removed afterwards),
  with the RocketMQ-style PHY_POS append hook registered and entry CRC on (the defaults a
  broker runs with); ``--no-hook`` / ``--no-crc`` switch them off.
* Scenarios: body 128 B and 1 KiB x batch size (1 = ``append_as_leader`` per body, >1 =
  ``append_batch_as_leader``) x durability (``none``: no flush inside the timed loop, one
  final flush counted; ``per-batch``: ``flush()`` after every batch, i.e. group commit of one
  batch). Also follower appends of the leader's raw bytes (``get_raw`` ->
  ``append_batch_as_follower``), the replication path.
* Each scenario appends ``--mib`` MiB of bodies (capped by ``--max-count``); data files are
  ``--file-mib`` MiB so file rolls and blank records are part of the measurement.
* Reported per scenario: appends/s, body MiB/s, wall seconds, entries, files created.

Theory of operation
-------------------
The loop body is what the broker's event loop would do: build the bodies beforehand (not
timed), call the store, read the monotonic clock. Nothing else runs in the process.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dledger.store.file_store import DLedgerMmapFileStore  # noqa: E402


def _hook(entry: Any, buf: memoryview, body_offset: int) -> None:
    struct.pack_into(">q", buf, body_offset + 28, entry.pos + body_offset)


def _store(d: Path, args: argparse.Namespace) -> DLedgerMmapFileStore:
    s = DLedgerMmapFileStore(d, "n0", data_file_size=args.file_mib << 20, entry_crc=not args.no_crc).startup()
    if not args.no_hook:
        s.add_append_hook(_hook)
    return s


def leader_scenario(size: int, batch: int, durability: str, args: argparse.Namespace) -> dict[str, Any]:
    count = min(args.max_count, max(batch, (args.mib << 20) // size))
    count -= count % batch
    bodies = [bytes([i % 251]) * size for i in range(batch)]
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        store = _store(Path(tmp), args)
        t0 = time.perf_counter()
        if batch == 1:
            body = bodies[0]
            for _ in range(count):
                store.append_as_leader(body, 1)
                if durability == "per-batch":
                    store.flush()
        else:
            for _ in range(count // batch):
                store.append_batch_as_leader(bodies, 1)
                if durability == "per-batch":
                    store.flush()
        store.flush()
        elapsed = time.perf_counter() - t0
        files = len(store.data_file_list.files)
        assert store.ledger_end_index == count - 1
        store.shutdown()
    return _result("leader", size, batch, durability, count, elapsed, files)


def follower_scenario(size: int, batch: int, args: argparse.Namespace) -> dict[str, Any]:
    count = min(args.max_count, max(batch, (args.mib << 20) // size))
    count -= count % batch
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        leader = _store(Path(tmp) / "l", args)
        for _ in range(count // batch):
            leader.append_batch_as_leader([bytes(size)] * batch, 1)
        follower = _store(Path(tmp) / "f", args)
        t0 = time.perf_counter()
        i = 0
        while i < count:
            views = leader.get_raw(i, i + batch)
            follower.append_batch_as_follower(views)
            i += len(views)
        follower.flush()
        elapsed = time.perf_counter() - t0
        files = len(follower.data_file_list.files)
        leader.shutdown()
        follower.shutdown()
    return _result("follower", size, batch, "none", count, elapsed, files)


def _result(role: str, size: int, batch: int, durability: str, count: int, elapsed: float,
            files: int) -> dict[str, Any]:
    return {"role": role, "body_bytes": size, "batch": batch, "durability": durability, "entries": count,
            "seconds": round(elapsed, 4), "appends_per_s": round(count / elapsed),
            "body_mib_per_s": round(count * size / elapsed / (1 << 20), 1), "data_files": files}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="128,1024")
    p.add_argument("--batches", default="1,32,256")
    p.add_argument("--mib", type=int, default=64, help="MiB of bodies per scenario")
    p.add_argument("--max-count", type=int, default=300_000)
    p.add_argument("--file-mib", type=int, default=64)
    p.add_argument("--dir", default=None, help="parent dir for the temp stores")
    p.add_argument("--no-hook", action="store_true")
    p.add_argument("--no-crc", action="store_true")
    p.add_argument("--no-durable", action="store_true", help="skip the flush-per-batch scenarios")
    p.add_argument("--quick", action="store_true", help="8 MiB per scenario")
    args = p.parse_args(argv)
    if args.quick:
        args.mib, args.max_count = 8, 50_000
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        for batch in (int(b) for b in args.batches.split(",")):
            results.append(leader_scenario(size, batch, "none", args))
            if not args.no_durable and batch > 1:
                results.append(leader_scenario(size, batch, "per-batch", args))
            if batch > 1:
                results.append(follower_scenario(size, batch, args))
    print(json.dumps({"bench": "dledger_store_append", "python": platform.python_version(),
                      "cpus": os.cpu_count(), "hook": not args.no_hook, "entry_crc": not args.no_crc,
                      "file_mib": args.file_mib, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
