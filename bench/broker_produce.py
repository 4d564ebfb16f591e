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
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from broker.api.client import BrokerClient, BrokerClientError, SyncBrokerClient
from tools.procs import REPO, port_pair, wait_exit, write_conf


def _conf(template: str, out: Path, **kv: Any) -> Path:
    return write_conf(REPO / "conf" / "classic" / template, out, kv)


def _wait(pred: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except BrokerClientError:
            pass
        time.sleep(0.1)
    raise TimeoutError(what)


class Pair:
    def __init__(self, role: str, work: Path) -> None:
        self.work = work
        self.mport, self.sport = port_pair(), port_pair()
        common = {"mappedFileSizeCommitLog": 64 << 20, "autoCreateTopicEnable": "true"}
        self.mconf = _conf("broker-a.conf", work / "m.conf", brokerRole=role, listenPort=self.mport,
                           haListenPort=self.mport + 1, storePathRootDir=work / "m",
                           storePathCommitLog=work / "m" / "commitlog", **common)
        self.sconf = _conf("broker-a-s.conf", work / "s.conf", listenPort=self.sport, haListenPort=self.sport + 1,
                           haMasterAddress=f"127.0.0.1:{self.mport + 1}", storePathRootDir=work / "s",
                           storePathCommitLog=work / "s" / "commitlog", **common)
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        for conf, name in ((self.mconf, "m"), (self.sconf, "s")):
            log = open(self.work / f"{name}.log", "wb")
            self.procs.append(subprocess.Popen([sys.executable, "-m", "broker.cli.mqbroker", "-c", str(conf)],
                                               stdout=log, stderr=subprocess.STDOUT, cwd=REPO))
        m = SyncBrokerClient(f"127.0.0.1:{self.mport}", timeout=2)
        _wait(lambda: m.status(), 30, "master up")
        _wait(lambda: SyncBrokerClient(f"127.0.0.1:{self.sport}", timeout=2).status(), 30, "slave up")
        _wait(lambda: m.status()["ha"].get("connections"), 30, "slave connected")

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            wait_exit(p, f"broker pid {p.pid}")  # within SHUTDOWN_BOUND_S, or ShutdownTooSlow


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
