"""Benchmark: mqupgrade inspect + plan + apply on sparse multi-GiB stores; prints JSON.

What it shows: on the nodes that already hold the data the upgrade costs the same at 1, 4 and
8 GiB. Each store has ``mappedFileSizeCommitLog`` = 1 GiB files; every file holds real records
(``--data-per-file`` bytes, default 256 KiB) followed by its end-of-file blank and a hole, the
ConsumeQueues/IndexFile/checkpoint are built by the store's own dispatch. The group is:
n0 = master, n1 = a slave behind by the last ``--behind`` records, n2 = a caught-up slave
(scenario ``replicas``) or a brand-new node (scenario ``seed``, whose copy is O(master data),
reported apart). Timings are wall-clock seconds on whatever machine runs it; not asserted.

Usage: ``python bench/upgrade_apply.py [--sizes 1,4,8] [--dir /tmp/x] [--keep]``
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker.store.message import MessageExt, blank_record, encode_batch, patch_offsets  # noqa: E402
from broker.store.record_walk import iter_records  # noqa: E402
from broker.store.message_store import DefaultMessageStore  # noqa: E402
from upgrade.apply import apply_plan  # noqa: E402
from upgrade.inspect import inspect_store, inspect_stores  # noqa: E402
from upgrade.plan import make_plan, parse_self_ids  # noqa: E402

GIB = 1 << 30
PEERS = "n0-127.0.0.1:40911;n1-127.0.0.1:40912;n2-127.0.0.1:40913"
SETTINGS = {"mapped_file_size_commit_log": GIB, "max_hash_slot_num": 10_000, "max_index_num": 40_000,
            "warm_mapped_file_enable": False}


def build_store(root: Path, files: int, data_per_file: int) -> tuple[int, int]:
    """Sparse store of ``files`` 1 GiB files; returns (max offset, records)."""
    cl = root / "commitlog"
    cl.mkdir(parents=True)
    queue_offsets = [0] * 4
    count = 0
    end = 0
    for i in range(files):
        start = i * GIB
        msgs = []
        size = 0
        while size < data_per_file:
            n = count + len(msgs)
            m = MessageExt(topic="BenchTopic", body=b"x" * (200 + n % 600), queue_id=n % 4,
                           properties={"TAGS": f"Tag{n % 3}", "KEYS": f"key-{n}"},
                           born_timestamp=1_700_000_000_000 + n, store_timestamp=1_700_000_000_000 + n)
            msgs.append(m)
            size += 300 + n % 600
        batch = encode_batch(msgs)
        for m, s in zip(msgs, batch.starts):
            patch_offsets(batch.data, s, queue_offsets[m.queue_id], start + s)
            queue_offsets[m.queue_id] += 1
        count += len(msgs)
        with open(cl / f"{start:020d}", "wb") as fh:
            fh.truncate(GIB)
            fh.write(batch.data)
            if i + 1 < files:
                fh.write(blank_record(GIB - len(batch.data)))
            else:
                end = start + len(batch.data)
    store = DefaultMessageStore(store_path_root_dir=str(root), **SETTINGS)  # builds CQs, index, checkpoint
    store.load()
    store.start()
    store.shutdown()
    return end, count


def cut_tail(root: Path, cut: int) -> None:
    f = root / "commitlog" / f"{cut - cut % GIB:020d}"
    with open(f, "r+b") as fh:
        fh.seek(cut % GIB)
        fh.write(bytes(1 << 20))


def run_size(base: Path, gib: int, data_per_file: int, behind: int, scenario: str) -> dict:
    m, s1, s2 = base / "m", base / "s1", base / "s2"
    t0 = time.perf_counter()
    end, records = build_store(m, gib, data_per_file)
    subprocess.run(["cp", "-r", "--sparse=always", str(m), str(s1)], check=True)
    if scenario == "replicas":
        subprocess.run(["cp", "-r", "--sparse=always", str(m), str(s2)], check=True)
    last = inspect_store(m)
    pos = last.max_offset - last.max_offset % GIB
    with open(m / "commitlog" / f"{pos:020d}", "rb") as fh:
        buf = fh.read(data_per_file * 2)
    rows = [p for p, _ in iter_records(buf)]
    cut = pos + rows[-behind]
    cut_tail(s1, cut)
    build = time.perf_counter() - t0

    t = time.perf_counter()
    master_only = inspect_store(m)
    t_inspect_master = time.perf_counter() - t
    t = time.perf_counter()
    insp = inspect_stores([str(m), str(s1)] + ([str(s2)] if scenario == "replicas" else []))
    t_inspect_all = time.perf_counter() - t
    t = time.perf_counter()
    plan = make_plan("g0", PEERS, parse_self_ids(f"n0={m},n1={s1},n2={s2}"), conf_dir=base / "conf")
    t_plan = time.perf_counter() - t
    assert plan.ok, plan.refusals
    plan.save(base / "plan.json")
    steps: list[tuple[str, float]] = []
    last_t = [time.perf_counter()]

    def echo(line: str) -> None:
        now = time.perf_counter()
        steps.append((line, now - last_t[0]))
        last_t[0] = now

    t = time.perf_counter()
    apply_plan(base / "plan.json", freeze=True, echo=echo)
    t_apply = time.perf_counter() - t
    per_node: dict[str, float] = {}
    per_kind: dict[str, float] = {}
    for line, dt in steps:
        kind, node = line.split("] ", 1)[1].split(" ")[:2]
        node = node.rstrip(":")
        per_node[node] = per_node.get(node, 0.0) + dt
        per_kind[f"{node}:{kind}"] = per_kind.get(f"{node}:{kind}", 0.0) + dt
    return {
        "store_gib": gib, "scenario": scenario, "files": gib, "records": records, "max_offset": end,
        "allocated_mib": round(master_only.data_bytes / (1 << 20), 2),
        "build_s": round(build, 2),
        "inspect_master_s": round(t_inspect_master, 4), "inspect_master_walked_bytes": master_only.walked_bytes,
        "inspect_all_s": round(t_inspect_all, 4),
        "compared_bytes_read": sum(c.read_bytes for c in insp.comparisons),
        "plan_s": round(t_plan, 4), "apply_s": round(t_apply, 4),
        "apply_master_n0_s": round(per_node.get("n0", 0.0), 4),
        "apply_per_node_s": {k: round(v, 4) for k, v in sorted(per_node.items())},
        "apply_per_step_s": {k: round(v, 4) for k, v in sorted(per_kind.items())},
        "slave_behind_bytes": end - cut,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,4,8", help="store sizes in GiB (comma separated)")
    ap.add_argument("--scenarios", default="replicas,seed")
    ap.add_argument("--data-per-file", type=int, default=256 * 1024)
    ap.add_argument("--behind", type=int, default=50, help="records the slave n1 is missing")
    ap.add_argument("--dir", help="work directory (default: a temp dir, removed afterwards)")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="mqupgrade-bench-"))
    results = []
    try:
        for scenario in args.scenarios.split(","):
            for gib in (int(x) for x in args.sizes.split(",")):
                base = work / f"{scenario}-{gib}g"
                if base.exists():
                    shutil.rmtree(base)
                base.mkdir(parents=True)
                results.append(run_size(base, gib, args.data_per_file, args.behind, scenario))
                print(json.dumps(results[-1]), file=sys.stderr)
                if not args.keep:
                    shutil.rmtree(base)
    finally:
        if not args.keep and not args.dir:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"benchmark": "upgrade_apply", "results": results}, indent=2))


if __name__ == "__main__":
    main()
