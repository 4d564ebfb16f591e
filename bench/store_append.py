"""Store append benchmark: msgs/s and MB/s of CommitLog puts, against the raw disk.

Prints one JSON document: for 128 B and 1 KiB bodies, ASYNC_FLUSH and SYNC_FLUSH, single and
batch puts, the append rate (messages are built before the clock starts; encoding, CRC, queue
offset assignment, the mmap copy and the flush policy are measured), plus the raw sequential
write bandwidth of the same directory measured in the same run (1 MiB ``os.write`` + one
``fdatasync``) and each case's ratio to it.

    python bench/store_append.py            # ~30-50 s
    python bench/store_append.py --quick    # a few seconds
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker.store.commitlog import ASYNC_FLUSH, SYNC_FLUSH, CommitLog  # noqa: E402
from broker.store.message import MessageExt, encoded_length  # noqa: E402

MiB = 1 << 20


def raw_write_bandwidth(directory: Path, total: int) -> float:
    """MB/s of sequential 1 MiB writes + one fdatasync (the page-cache-to-disk path we compete with)."""
    path = directory / "raw.bin"
    chunk = os.urandom(MiB)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        for _ in range(total // MiB):
            os.write(fd, chunk)
        os.fdatasync(fd)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        path.unlink()
    return total / elapsed / 1e6


def make_messages(n: int, body_size: int) -> list[MessageExt]:
    body = bytes(range(256)) * (body_size // 256 + 1)
    return [MessageExt(topic="BenchTopic", body=body[:body_size], queue_id=i % 8,
                       properties={"KEYS": f"k{i}", "TAGS": "TagA"},
                       born_timestamp=1_700_000_000_000 + i, born_host=("127.0.0.1", 50000))
            for i in range(n)]


def run_case(directory: Path, body_size: int, flush: str, batch: int, seconds: float,
             file_size: int, warm: bool = False) -> dict[str, object]:
    cl_dir = directory / f"cl-{body_size}-{flush}-{batch}"
    cl = CommitLog(cl_dir, file_size, flush_disk_type=flush, flush_interval_ms=500,
                   warm_mapped_file=warm)
    cl.load()
    cl.start()
    pool = make_messages(max(batch, 4096), body_size)
    groups = [pool[i:i + batch] for i in range(0, len(pool) - batch + 1, batch)]
    record = encoded_length(pool[0])
    # warm-up: create the first file (and its pre-allocated successor) outside the clock
    cl.put_messages(groups[0])
    time.sleep(0.3)
    msgs = 0
    statuses: dict[str, int] = {}
    start = time.perf_counter()
    deadline = start + seconds
    g = 0
    while time.perf_counter() < deadline:
        for _ in range(16 if batch > 1 else 64):
            r = cl.put_messages(groups[g % len(groups)])
            statuses[r.status.value] = statuses.get(r.status.value, 0) + 1
            msgs += batch
            g += 1
    elapsed = time.perf_counter() - start
    flushes = cl.flush_service.flush_count
    cl.shutdown()
    shutil.rmtree(cl_dir, ignore_errors=True)
    rate = msgs / elapsed
    return {
        "body_bytes": body_size, "record_bytes": record, "flush": flush, "batch": batch,
        "msgs": msgs, "seconds": round(elapsed, 3), "msgs_per_s": round(rate),
        "MB_per_s": round(rate * record / 1e6, 1), "flush_passes": flushes, "statuses": statuses,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a few seconds in total")
    ap.add_argument("--dir", help="directory on the disk to measure (default: a temp dir)")
    ap.add_argument("--warm", action="store_true",
                    help="pre-touch new files with zeros (warmMapedFileEnable); doubles disk writes")
    args = ap.parse_args()
    seconds = 0.4 if args.quick else 3.0
    raw_total = 64 * MiB if args.quick else 512 * MiB
    file_size = 64 * MiB if args.quick else 256 * MiB
    base = Path(tempfile.mkdtemp(prefix="store-bench-", dir=args.dir))
    try:
        raw = raw_write_bandwidth(base, raw_total)
        cases = []
        for body in (128, 1024):
            for flush in (ASYNC_FLUSH, SYNC_FLUSH):
                for batch in (1, 256):
                    c = run_case(base, body, flush, batch, seconds, file_size, args.warm)
                    c["ratio_to_raw_disk"] = round(float(c["MB_per_s"]) / raw, 3)
                    cases.append(c)
        raw_after = raw_write_bandwidth(base, raw_total)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    target = next(c for c in cases if c["body_bytes"] == 1024 and c["flush"] == ASYNC_FLUSH and c["batch"] > 1)
    print(json.dumps({
        "benchmark": "store_append",
        "python": sys.version.split()[0],
        "raw_sequential_write_MB_per_s": round(raw, 1),
        "raw_sequential_write_MB_per_s_after": round(raw_after, 1),
        "mapped_file_size": file_size,
        "warm_mapped_file": args.warm,
        "cases": cases,
        "target_1KiB_batch_async_msgs_per_s": 150_000,
        "target_met": target["msgs_per_s"] >= 150_000,
    }, indent=2))


if __name__ == "__main__":
    main()
