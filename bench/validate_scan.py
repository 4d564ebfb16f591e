"""Scan throughput of ``mqupgrade validate``: single process vs local[1] vs local[2]; prints JSON.

Rules:
- The store is real: every scanned byte is a record made by the shared codecs
  (``broker.store.message.encode_batch``; DLedger headers per ``dledger.entry``), with correct
  PHY_POS, entry pos/index/term, queue offsets, a DLedger index, ConsumeQueues and checkpoint,
  so the validator must find it clean (the bench asserts ``ok``). One template of K encoded
  messages is tiled through the files and the offset fields are patched with numpy, so a store
  of several GiB takes seconds to build. It is cached under ``--cache`` and reused.
- Layout: one old commitlog file + N DLedger data files of ``--file-size`` bytes, the divide
  between them; 4 queues of one topic; bodies uniformly ``body/2 .. 3*body/2`` bytes.
- Each configuration runs the full validation (all six checks); throughput = planned bytes
  (commitlog + DLedger data + index + CQ) / wall time of the scan job. Runs with and without
  body CRCs. Before each run the store is read once (this machine's proactive reclaim evicts
  cold page-cache pages) and, on Spark, one tiny job starts the Python workers (their start-up,
  about a second once per session, is not scan time): these are CPU numbers.
- Next to the wall-clock figure each row carries the tasks' own CPU seconds
  (``scan_task_cpu_seconds``) and ``cpu_gb_per_s_per_core`` = bytes / CPU seconds, which the
  load of a shared machine disturbs far less; ``load_1m`` before/after says how busy it was.

What the store does not model: properties put ``TAGS`` first (Apache 4.9.8 writes ``KEYS``
first; both are on the vectorised tags path while the key lies in the first 112 property bytes)
and DLedger entry body CRCs are 0 as Apache writes them; this project's DLedger writes them,
which adds a second CRC pass over each entry (~0.8 us per 2 KiB entry per core).

Usage: ``python bench/validate_scan.py [--quick] [--cache DIR] [--files N] [--file-size B]``.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker.store import message as codec  # noqa: E402
from broker.store.java_hash import java_string_hash  # noqa: E402
from dledger import entry as dl_codec  # noqa: E402

TOPIC = "BenchTopic"
QUEUES = 4
CQ_FILE = 300_000 * 20
INDEX_FILE = 32 * 5 * 1024 * 1024


def _template(k: int, body: int, seed: int) -> tuple[list[bytes], list[int]]:
    rnd = random.Random(seed)
    msgs = []
    tags = []
    for i in range(k):
        tag = f"tag{i % 8}"
        props = {"TAGS": tag, "KEYS": f"key-{i}", "UNIQ_KEY": f"{seed:08X}{i:024X}"}
        n = rnd.randint(body // 2, body * 3 // 2)
        msgs.append(codec.MessageExt(topic=TOPIC, body=rnd.randbytes(n), queue_id=0, properties=props,
                                     born_timestamp=1_700_000_000_000 + i, store_timestamp=1_700_000_000_100 + i,
                                     born_host=("127.0.0.1", 40000), store_host=("127.0.0.1", 10911)))
        tags.append(java_string_hash(tag))
    batch = codec.encode_batch(msgs)
    recs = [bytes(batch.data[s:s + n]) for s, n in zip(batch.starts, batch.sizes)]
    return recs, tags


def _put(buf: np.ndarray, at: np.ndarray, values: np.ndarray, width: int) -> None:
    raw = values.astype(f">i{width}").view(np.uint8).reshape(-1, width)
    buf[at[:, None] + np.arange(width)] = raw


def _fill(buf: np.ndarray, blobs: list[bytes], k0: int, file_size: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Tile blobs (cyclically from k0) into buf while >= 8 bytes stay free; (positions, kinds, n)."""
    sizes = np.array([len(b) for b in blobs], dtype=np.int64)
    k = len(blobs)
    est = file_size // int(sizes.min()) + 2
    kinds = (k0 + np.arange(est)) % k
    ends = np.cumsum(sizes[kinds])
    n = int(np.searchsorted(ends + 8, file_size, side="right"))
    kinds, pos = kinds[:n], np.concatenate(([0], ends[:n - 1])).astype(np.int64)
    cycle = b"".join(blobs)
    cyc = np.frombuffer(cycle, np.uint8)
    starts = np.concatenate(([0], np.cumsum(sizes)))
    at = 0
    i = 0
    while i < n:  # copy runs of consecutive template items in one slice
        kk = int(kinds[i])
        run = min(k - kk, n - i)
        length = int(starts[kk + run] - starts[kk])
        buf[at:at + length] = cyc[starts[kk]:starts[kk] + length]
        at += length
        i += run
    return pos, kinds, n


def build_store(root: Path, file_size: int, dl_files: int, body: int) -> dict:
    recs, tags = _template(512, body, 42)
    rec_sizes = np.array([len(r) for r in recs], dtype=np.int64)
    tags_arr = np.array(tags, dtype=np.int64)
    entries = []
    for r in recs:
        hdr = dl_codec.HEADER.pack(dl_codec.CURRENT_MAGIC, 48 + len(r), 0, 0, 0, 0, 0, 0, len(r))
        entries.append(hdr + r)
    (root / "commitlog").mkdir(parents=True)
    (root / "dledger-n0" / "data").mkdir(parents=True)
    (root / "dledger-n0" / "index").mkdir(parents=True)
    cq_off, cq_size, cq_tags = [], [], []
    seq = 0
    buf = np.zeros(file_size, dtype=np.uint8)
    # old commitlog: one file of classic records, then the upgrade's blank up to the divide
    pos, kinds, n = _fill(buf, recs, 0, file_size)
    g = seq + np.arange(n)
    _put(buf, pos + 12, g % QUEUES, 4)
    _put(buf, pos + 20, g // QUEUES, 8)
    _put(buf, pos + 28, pos, 8)
    end = int(pos[-1] + rec_sizes[kinds[-1]])
    _put(buf, np.array([end]), np.array([file_size - end]), 4)
    _put(buf, np.array([end + 4]), np.array([codec.BLANK_MAGIC_CODE]), 4)
    buf.tofile(root / "commitlog" / f"{0:020d}")
    cq_off.append(pos), cq_size.append(rec_sizes[kinds]), cq_tags.append(tags_arr[kinds])
    seq += n
    units = []
    index = 0
    for f in range(dl_files):
        start = file_size * (f + 1)
        buf[:] = 0
        pos, kinds, n = _fill(buf, entries, seq % len(recs), file_size)
        g = seq + np.arange(n)
        idx = index + np.arange(n)
        _put(buf, pos + 8, idx, 8)
        _put(buf, pos + 16, np.ones(n, np.int64), 8)
        _put(buf, pos + 24, start + pos, 8)
        _put(buf, pos + 48 + 12, g % QUEUES, 4)
        _put(buf, pos + 48 + 20, g // QUEUES, 8)
        _put(buf, pos + 48 + 28, start + pos + 48, 8)
        end = int(pos[-1] + rec_sizes[kinds[-1]] + 48)
        _put(buf, np.array([end]), np.array([-1]), 4)
        _put(buf, np.array([end + 4]), np.array([file_size - end]), 4)
        buf.tofile(root / "dledger-n0" / "data" / f"{start:020d}")
        u = np.zeros(n, dtype=[("magic", ">i4"), ("pos", ">i8"), ("size", ">i4"), ("index", ">i8"), ("term", ">i8")])
        u["magic"], u["pos"], u["size"], u["index"], u["term"] = 1, start + pos, rec_sizes[kinds] + 48, idx, 1
        units.append(u)
        cq_off.append(start + pos + 48), cq_size.append(rec_sizes[kinds]), cq_tags.append(tags_arr[kinds])
        seq += n
        index += n
    del buf
    ipath = root / "dledger-n0" / "index" / f"{0:020d}"
    with open(ipath, "wb") as fh:
        for u in units:  # (np.concatenate would convert the big-endian fields to native order)
            fh.write(u.tobytes())
        fh.truncate(max(INDEX_FILE, fh.tell()))
    (root / "dledger-n0" / "checkpoint").write_text(f"committedIndex={index - 1}\nendIndex={index - 1}\n")
    (root / "dledger-n0" / "currterm").write_text("currTerm=1\nvoteLeader=n0\n")
    off, size, tg = np.concatenate(cq_off), np.concatenate(cq_size), np.concatenate(cq_tags)
    for q in range(QUEUES):
        cu = np.zeros(len(off[q::QUEUES]), dtype=[("off", ">i8"), ("size", ">i4"), ("tags", ">i8")])
        cu["off"], cu["size"], cu["tags"] = off[q::QUEUES], size[q::QUEUES], tg[q::QUEUES]
        qdir = root / "consumequeue" / TOPIC / str(q)
        qdir.mkdir(parents=True)
        per = CQ_FILE // 20
        for k in range(0, len(cu), per):
            with open(qdir / f"{k * 20:020d}", "wb") as fh:
                fh.write(cu[k:k + per].tobytes())
                fh.truncate(CQ_FILE)
    return {"messages": int(seq), "entries": int(index), "file_size": file_size, "dl_files": dl_files, "body": body}


def _warm_files(root: Path) -> None:
    """Read every store file once (into one reused buffer) so the page cache holds the store."""
    buf = bytearray(8 << 20)
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        with open(path, "rb", buffering=0) as fh:
            while fh.readinto(buf):
                pass


def _warm_workers(spark: object) -> None:
    """Start every Python worker and import the scan code (not part of the timed scan)."""
    sc = spark.sparkContext  # type: ignore[attr-defined]
    n = sc.defaultParallelism
    sc.parallelize(range(n * 4), n * 4).map(lambda _x: __import__("upgrade.validate.tasks").__name__).collect()


def _run(root: Path, mode: str, crc: bool, range_size: int) -> dict:
    from upgrade.validate.job import run_validation

    _warm_files(root)
    load0 = os.getloadavg()[0]
    if mode == "single-process":
        rep = run_validation([str(root)], local=True, range_size=range_size, progress=False, check_crc=crc)
    else:
        from upgrade.validate.session import make_spark_session

        spark = make_spark_session(mode, app_name="bench-validate")
        try:
            _warm_workers(spark)
            rep = run_validation([str(root)], spark=spark, range_size=range_size, progress=False, check_crc=crc)
        finally:
            spark.stop()
    assert rep["ok"], json.dumps(rep["checks"], default=str)[:2000]
    p = rep["params"]
    cpu = p["scan_task_cpu_seconds"]
    return {"mode": mode, "crc": crc, "bytes": p["bytes_planned"], "ranges": p["ranges"], "scan_seconds": p["scan_seconds"],
            "gb_per_s": p["scan_gb_per_s"], "scan_task_cpu_seconds": cpu,
            "cpu_gb_per_s_per_core": round(p["bytes_planned"] / cpu / 1e9, 3) if cpu else None,
            "detail_rescans": p["detail_rescans"], "messages": rep["nodes"]["n0"]["messages"],
            "load_1m": [round(load0, 2), round(os.getloadavg()[0], 2)]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small store (3 x 64 MiB), for a smoke run")
    ap.add_argument("--cache", default=os.environ.get("MQ_BENCH_CACHE", "/tmp/mqvalidate-bench"))
    ap.add_argument("--files", type=int, default=None, help="DLedger data files (default 4; quick 2)")
    ap.add_argument("--file-size", type=int, default=None, help="bytes per file (default 1 GiB; quick 64 MiB)")
    ap.add_argument("--body", type=int, default=2048, help="mean body size in bytes")
    ap.add_argument("--range-size", type=int, default=None, help="bytes per task (default 64 MiB; quick 8 MiB)")
    ap.add_argument("--modes", default="single-process,local[1],local[2]")
    ap.add_argument("--repeat", type=int, default=2, help="runs per configuration (the best is reported)")
    args = ap.parse_args(argv)
    files = args.files or (2 if args.quick else 4)
    fsize = args.file_size or ((64 << 20) if args.quick else (1 << 30))
    rsize = args.range_size or ((8 << 20) if args.quick else (64 << 20))
    root = Path(args.cache) / f"store-{fsize}-{files}-{args.body}"
    meta_path = root / "bench-meta.json"
    t0 = time.time()
    if not meta_path.exists():
        if root.exists():
            import shutil
            shutil.rmtree(root)
        meta = build_store(root, fsize, files, args.body)
        meta["build_seconds"] = round(time.time() - t0, 1)
        meta_path.write_text(json.dumps(meta))
    meta = json.loads(meta_path.read_text())
    results = []
    for mode in args.modes.split(","):
        for crc in (True, False):
            runs = [_run(root, mode, crc, rsize) for _ in range(args.repeat)]
            best = min(runs, key=lambda x: x["scan_seconds"])
            best["all_scan_seconds"] = [x["scan_seconds"] for x in runs]
            best["all_gb_per_s"] = [x["gb_per_s"] for x in runs]
            best["all_cpu_gb_per_s_per_core"] = [x["cpu_gb_per_s_per_core"] for x in runs]
            best["all_load_1m"] = [x["load_1m"] for x in runs]
            results.append(best)
            print(json.dumps(best), file=sys.stderr)
    out = {"store": str(root), "store_bytes": (files + 1) * fsize, **meta, "range_size": rsize,
           "cpus": os.cpu_count(), "note": "best of --repeat runs (all runs listed); page cache and Spark workers warmed before each run; "
           "machine shared (see load_1m before/after each run)",
           "results": results}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
