"""Produce throughput and latency through the HTTP API against classic master/slave pairs.

Usage::

    python -m bench.broker_produce                       # short default run, JSON on stdout
    python -m bench.broker_produce --duration 10 --clients 32 --batch 32 --size 1024 --roles SYNC_MASTER

For each role (ASYNC_MASTER, SYNC_MASTER) a fresh master + slave pair is started from the
conf/classic templates (temporary store dirs, free 127.0.0.1 ports, ASYNC_FLUSH), the slave is
waited for, then ``--clients`` concurrent asyncio clients send for ``--duration`` seconds:
single messages, then batches of ``--batch``. Reported per case: messages/s, MiB/s of bodies,
request latency p50/p95/p99/max (ms), errors by code. Numbers are run, not asserted (DESIGN §6);
the machine is shared, so expect noise.
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from broker.api.client import BrokerClient, BrokerClientError, SyncBrokerClient
from tools.broker_confs import master_conf, slave_conf
from tools.nodes import BrokerProc, kill_all, stop_all
from tools.procs import wait_until


class Pair:
    """A classic master (``role``) and its slave under ``work``: :class:`tools.nodes.BrokerProc`."""

    def __init__(self, role: str, work: Path) -> None:
        self.work = work
        common = {"mappedFileSizeCommitLog": 64 << 20, "autoCreateTopicEnable": "true"}
        mconf, self.mport = master_conf(work, role, **common)
        sconf, self.sport = slave_conf(work, self.mport, **common)
        self.procs = [BrokerProc(mconf, self.mport, "m", work), BrokerProc(sconf, self.sport, "s", work)]

    def start(self) -> None:
        for p in self.procs:
            p.start(wait=False)
        for p in self.procs:
            p.wait_ready(30)
        master = self.procs[0]
        wait_until(lambda: ((master.status() or {}).get("ha") or {}).get("connections"), 30, "slave connected",
                   interval=0.1)

    def stop(self) -> None:
        try:
            stop_all(p.child for p in self.procs)  # within SHUTDOWN_BOUND_S, or ShutdownTooSlow
        finally:
            kill_all(self.procs)


@contextlib.contextmanager
def running_pair(role: str) -> Iterator[Pair]:
    """A started master + slave pair in a fresh temporary directory; stopped and removed after."""
    work = Path(tempfile.mkdtemp(prefix="rmqpy-bench-"))
    pair = Pair(role, work)
    try:
        pair.start()
        yield pair
    finally:
        pair.stop()
        shutil.rmtree(work, ignore_errors=True)


def _pct(sorted_ms: list[float], q: float) -> float:
    if not sorted_ms:
        return 0.0
    return round(sorted_ms[min(len(sorted_ms) - 1, int(q * len(sorted_ms)))], 3)


def rates(sent: int, latencies: list[float], elapsed: float, size: int) -> dict[str, Any]:
    """The measured part of a case's row: counts, rates and request latency percentiles (ms)."""
    lat = sorted(latencies)
    return {
        "messages": sent, "requests": len(lat), "seconds": round(elapsed, 2),
        "msgs_per_s": round(sent / elapsed, 1), "mib_per_s": round(sent * size / elapsed / (1 << 20), 2),
        "latency_ms": {"p50": _pct(lat, 0.5), "p95": _pct(lat, 0.95), "p99": _pct(lat, 0.99),
                       "max": round(lat[-1], 3) if lat else 0.0},
    }


def print_row(prefix: str, res: dict[str, Any]) -> None:
    """One progress line on stderr (stdout is the JSON report)."""
    print(f"{prefix} {res['msgs_per_s']:>10} msg/s  p50 {res['latency_ms']['p50']} ms  "
          f"p99 {res['latency_ms']['p99']} ms  errors {res['errors']}", file=sys.stderr)


def write_report(report: dict[str, Any], out: str | None) -> int:
    """The JSON report on stdout and, with ``--out``, in that file; the exit code."""
    text = json.dumps(report, indent=2)
    print(text)
    if out:
        Path(out).write_text(text)
    return 0


async def _run_case(address: str, topic: str, kind: str, clients: int, duration: float, batch: int,
                    size: int) -> dict[str, Any]:
    body = os.urandom(size // 2).hex().encode()[:size]
    latencies: list[float] = []
    errors: dict[str, int] = {}
    sent = 0
    stop_at = time.monotonic() + duration

    async def worker(c: BrokerClient, i: int) -> None:
        nonlocal sent
        qid = i % 4
        while time.monotonic() < stop_at:
            t0 = time.perf_counter()
            try:
                if kind == "single":
                    await c.send(topic, body, queue_id=qid)
                    n = 1
                else:
                    await c.send_batch(topic, [body] * batch, queue_id=qid)
                    n = batch
            except BrokerClientError as exc:
                errors[exc.code] = errors.get(exc.code, 0) + 1
                continue
            latencies.append((time.perf_counter() - t0) * 1000)
            sent += n

    async with BrokerClient(address, timeout=30) as c:
        await c.send(topic, b"warm-up", queue_id=0)
        t0 = time.monotonic()
        await asyncio.gather(*(worker(c, i) for i in range(clients)))
        elapsed = time.monotonic() - t0
    return {"kind": kind, "clients": clients, "batch": batch if kind == "batch" else 1, "body_bytes": size,
            **rates(sent, latencies, elapsed, size), "errors": errors}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--roles", default="ASYNC_MASTER,SYNC_MASTER")
    p.add_argument("--duration", type=float, default=3.0, help="seconds per case")
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--size", type=int, default=1024, help="body bytes")
    p.add_argument("--out", help="also write the JSON here")
    args = p.parse_args(argv)
    report: dict[str, Any] = {"bench": "broker_produce", "python": platform.python_version(), "cpus": os.cpu_count(),
                              "results": []}
    for role in [r.strip() for r in args.roles.split(",") if r.strip()]:
        with running_pair(role) as pair:
            for kind in ("single", "batch"):
                res = asyncio.run(_run_case(f"127.0.0.1:{pair.mport}", f"Bench{kind.title()}", kind, args.clients,
                                            args.duration, args.batch, args.size))
                res["role"] = role
                report["results"].append(res)
                print_row(f"{role:12} {kind:6}", res)
            slave = SyncBrokerClient(f"127.0.0.1:{pair.sport}").status()["commitLog"]["maxOffset"]
            master = SyncBrokerClient(f"127.0.0.1:{pair.mport}").status()["commitLog"]["maxOffset"]
            report.setdefault("final_offsets", {})[role] = {"master": master, "slave": slave}
    return write_report(report, args.out)


if __name__ == "__main__":
    sys.exit(main())
