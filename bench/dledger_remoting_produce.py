"""Produce throughput/latency of a three-node DLedger group through RocketMQ's remoting protocol,
which is what real clients (Java, C++, ali-ons) use; the HTTP single case beside it for comparison.

Usage::

    python -m bench.dledger_remoting_produce                  # short default run, JSON on stdout
    python -m bench.dledger_remoting_produce --duration 10 --out r.json

A fresh group of three ``mqbroker`` processes (``bench.dledger_broker_produce.Group``: the shipped
``conf/dledger`` files on temporary stores and free 127.0.0.1 ports) elects a leader; each case
then writes to the leader's ``listenPort``:

- ``remoting_single_64`` / ``remoting_single_256``: SEND_MESSAGE_V2, one 1 KiB message per request,
  64 / 256 requests in flight (spread over ``--connections`` pipelined connections);
- ``remoting_batch16``: SEND_BATCH_MESSAGE of 16 messages, ``--batch-inflight`` (16) requests in
  flight; ``remoting_batch16_x64`` the same with ``--batch-inflight-high`` (64) in flight: at 16 the
  rate is bound by latency (16 x 16 messages / p50), at 64 by the leader process (its threads
  share one GIL: ~0.7 cores busy there while the machine has idle CPU);
- ``http_single``: the HTTP API, ``--http-clients`` concurrent requests (bench.dledger_broker_produce).

Reported per case: messages/s, latency p50/p95/p99/max (ms), errors by code, the CPU cores each
process used and the leader's CPU-µs per message (the contention-independent figure on a shared
2-core machine). An acknowledgement means committed on a quorum. Targets (issue 15, 2 cores):
single >= 15k msg/s with p99 < 15 ms, batches >= 60k msg/s, HTTP single >= 12k msg/s. Run, not
asserted.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

from bench.dledger_broker_produce import IDS, Group, _cpu_seconds, _throughput
from bench.remoting_produce import remoting_case


def _measure(group: Group, run: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    leader = group.master()
    pids = {n: group.procs[n].child.pid for n in IDS} | {"client": os.getpid()}
    cpu0, t0 = {k: _cpu_seconds(p) for k, p in pids.items()}, time.monotonic()
    res = asyncio.run(run())
    wall = time.monotonic() - t0
    busy = {("leader" if k == leader else k): round((_cpu_seconds(p) - cpu0[k]) / wall, 2) for k, p in pids.items()}
    res["cpu_cores_busy"] = busy
    msgs = res.get("msgs_per_s") or 0
    if busy.get("leader") and msgs:
        res["leader_cpu_us_per_msg"] = round(busy["leader"] / msgs * 1e6, 1)
    res["loadavg_1m"] = float(open("/proc/loadavg").read().split()[0])
    return res


def _row(res: dict[str, Any]) -> None:
    lat = res.get("latency_ms", {})
    print(f"{res['kind']:22} {res.get('msgs_per_s', 0):>10} msg/s  p50 {lat.get('p50')} ms  p99 {lat.get('p99')} ms  "
          f"leader {res.get('leader_cpu_us_per_msg')} us/msg  errors {res.get('errors')}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--duration", type=float, default=3.0, help="seconds per case")
    p.add_argument("--connections", type=int, default=4, help="remoting connections for the single cases")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--batch-inflight", type=int, default=16, help="batch requests in flight (over 2 connections)")
    p.add_argument("--batch-inflight-high", type=int, default=64,
                   help="batch requests in flight for the second batch row (0: skip it)")
    p.add_argument("--http-clients", type=int, default=64)
    p.add_argument("--size", type=int, default=1024, help="body bytes")
    p.add_argument("--file-size", type=int, default=64 << 20, help="mappedFileSizeCommitLog (DLedger data files)")
    p.add_argument("--out", help="also write the JSON here")
    args = p.parse_args(argv)
    try:  # the client shares the machine with the three brokers: spend as little CPU as they do
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    report: dict[str, Any] = {"bench": "dledger_remoting_produce", "python": platform.python_version(),
                              "cpus": os.cpu_count(), "nodes": 3, "results": [],
                              "targets": {"remoting_single_msgs_per_s": 15000, "remoting_single_p99_ms": 15,
                                          "remoting_batch_msgs_per_s": 60000, "http_single_msgs_per_s": 12000}}
    work = Path(tempfile.mkdtemp(prefix="rmqpy-dlremoting-"))
    group = Group(work, args.file_size)
    try:
        for n in IDS:
            group.start(n)
        leader = group.wait(group.master, 60, "a master")
        port = group.procs[leader].api_port
        conns = max(1, args.connections)
        cases: list[tuple[str, Callable[[], Awaitable[dict[str, Any]]]]] = [
            ("remoting_single_64", lambda: remoting_case(port, "BenchRemotingSingle", "single", conns,
                                                         max(1, 64 // conns), args.duration, 1, args.size)),
            ("remoting_single_256", lambda: remoting_case(port, "BenchRemotingSingle", "single", conns,
                                                          max(1, 256 // conns), args.duration, 1, args.size)),
            (f"remoting_batch{args.batch}", lambda: remoting_case(port, "BenchRemotingBatch", "batch", 2,
                                                                  max(1, args.batch_inflight // 2), args.duration,
                                                                  args.batch, args.size)),
            (f"remoting_batch{args.batch}_x{args.batch_inflight_high}",
             lambda: remoting_case(port, "BenchRemotingBatch", "batch", 2, max(1, args.batch_inflight_high // 2),
                                   args.duration, args.batch, args.size)),
            ("http_single", lambda: _throughput([group.address(leader)], "single", args.http_clients,
                                                args.duration, args.batch, args.size, "raw")),
        ]
        for name, run in cases:
            if name.endswith("_x0"):
                continue
            if group.master() != leader:
                raise RuntimeError(f"leadership moved from {leader} during the run; see {work}/*.log")
            res = _measure(group, run)
            res["kind"] = name
            report["results"].append(res)
            _row(res)
    finally:
        group.stop()
        shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
