"""Produce throughput/latency through the broker HTTP API on a three-node DLedger group, and the
client-visible failover time after kill -9 of the leader.

Usage::

    python -m bench.dledger_broker_produce                    # short default run, JSON on stdout
    python -m bench.dledger_broker_produce --duration 10 --clients 64 --batch 16 --failovers 3

A fresh group of three ``mqbroker`` processes is started from ``conf/dledger/broker-n{0,1,2}.conf``
(temporary store dirs, free 127.0.0.1 ports). Producers are asyncio clients in this process that
find the leader through NOT_MASTER redirects: ``--client raw`` (default, :class:`RawHttpProducer`:
the same JSON requests over keep-alive HTTP/1.1 on plain asyncio streams, ~40 us of client CPU
per request) or ``--client aiohttp`` (:class:`broker.api.client.MasterFollowingProducer`, ~110-140
us per request: on this 2-core machine that CPU is taken from the brokers being measured). Cases:

- ``single``: ``--clients`` concurrent writers, one 1 KiB message per request; ``batch``:
  ``--batch-clients`` writers, ``--batch`` messages per request (one DLedger entry each).
  Reported: messages/s, MiB/s of bodies, request latency p50/p95/p99/max (ms), errors by code,
  and the CPU each process used (cores busy, leader CPU-µs per message): on a shared machine
  the CPU share the leader gets bounds the rate, and ``msgs_per_leader_core_s`` is the
  contention-independent figure. An acknowledgement means committed on a quorum (flushed on
  two of three nodes).
- ``failover`` (``--failovers`` rounds): ``--failover-clients`` writers produce continuously;
  the leader is killed with SIGKILL; *failover time* = kill -> first write acknowledged by
  another node; *stall* = longest gap between two acknowledgements around the kill. The killed
  node is restarted and the group waited on until every node has committed the same index
  before the next round.

Reference numbers on this machine (DESIGN §6): Apache DLedger 0.3.1.2, 3 nodes, 1 KiB, 64
synchronous clients: 2,757 appends/s, p99 69 ms; failover after kill -9 5.2 s. Numbers are run,
not asserted; the machine (2 cores) is shared with the three brokers *and* the client, so expect
noise.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from broker.api.client import BrokerClientError, MasterFollowingProducer
from tools.broker_confs import dledger_group_confs
from tools.nodes import BrokerProc, kill_all, stop_all
from tools.procs import wait_until

IDS = ("n0", "n1", "n2")


class Group:
    """Three DLedger-mode brokers (:class:`tools.nodes.BrokerProc`); always stop() in ``finally``."""

    def __init__(self, work: Path, file_size: int) -> None:
        self.work = work
        confs = dledger_group_confs(work, len(IDS), mappedFileSizeCommitLog=file_size)
        self.procs = {n: BrokerProc(conf, port, n, work) for n, (conf, port) in zip(IDS, confs)}

    def address(self, n: str) -> str:
        return self.procs[n].address

    def start(self, n: str) -> None:
        self.procs[n].start(wait=False)

    def status(self, n: str) -> dict[str, Any] | None:
        return self.procs[n].status(timeout=3)

    def master(self) -> str | None:
        return next((n for n in IDS if (st := self.status(n)) and st.get("isMaster")), None)

    def _check(self) -> None:
        """A node that exited by itself (not our kill -9) ends the run."""
        for n, p in self.procs.items():
            if p.proc is not None and p.proc.poll() not in (None, -signal.SIGKILL):
                raise RuntimeError(f"{n} exited with {p.proc.returncode}; see {p.log_path}")

    def wait(self, pred: Any, timeout: float, what: str) -> Any:
        return wait_until(pred, timeout, what, check=self._check)

    def in_sync(self) -> bool:
        seen = set()
        for n in IDS:
            st = self.status(n)
            if st is None or "dledger" not in st:
                return False
            d = st["dledger"]
            if d["committedIndex"] != d["endIndex"] or st.get("dispatchBehindBytes"):
                return False
            seen.add(d["committedIndex"])
        return len(seen) == 1

    def kill9(self, n: str) -> None:
        self.procs[n].kill9()

    def stop(self) -> None:
        try:
            stop_all(p.child for p in self.procs.values())  # within SHUTDOWN_BOUND_S, or ShutdownTooSlow
        finally:
            kill_all(self.procs.values())


class RawHttpProducer:
    """A lean load generator for the broker's HTTP API (``--client raw``, the default).

    The same requests and answers as :class:`MasterFollowingProducer` (``POST /messages``,
    ``POST /messages/batch``, JSON, base64 bodies, ``NOT_MASTER`` redirects, seed rotation on a
    connection failure), but HTTP/1.1 keep-alive spoken directly over asyncio streams with one
    connection per request in flight and the request bytes built once per (topic, queue, body):
    aiohttp's client costs ~110 us of CPU per request here, more than the broker's HTTP layer,
    and on a 2-core machine the load generator's CPU is taken from the brokers under test.
    """

    def __init__(self, seeds: list[str], timeout: float = 30.0) -> None:
        self.seeds = list(seeds)
        self.current = self.seeds[0]
        self.timeout = timeout
        self._idle: dict[str, list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = {}
        self._cache: dict[tuple[Any, ...], bytes] = {}

    async def __aenter__(self) -> "RawHttpProducer":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        for conns in self._idle.values():
            for _, w in conns:
                w.close()
        self._idle.clear()

    def _request(self, path: str, key: tuple[Any, ...], payload: Any) -> bytes:
        raw = self._cache.get(key)
        if raw is None:
            body = json.dumps(payload, separators=(",", ":")).encode()
            raw = self._cache[key] = (f"POST {path} HTTP/1.1\r\nHost: broker\r\nContent-Type: application/json\r\n"
                                      f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        return raw

    def _retarget(self, address: str, exc: BrokerClientError) -> None:
        if self.current != address:
            return
        master = exc.body.get("masterAddress") if exc.code == "NOT_MASTER" else None
        if master and master != address:
            self.current = master
        else:
            i = self.seeds.index(address) if address in self.seeds else -1
            self.current = self.seeds[(i + 1) % len(self.seeds)]

    async def _exchange(self, address: str, raw: bytes) -> tuple[int, bytes, bool]:
        idle = self._idle.setdefault(address, [])
        if idle:
            reader, writer = idle.pop()
        else:
            host, _, port = address.rpartition(":")
            reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(raw)
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            status = int(lines[0].split(None, 2)[1])
            length, close = 0, False
            for line in lines[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"connection" and value.strip().lower() == b"close":
                    close = True
            body = await reader.readexactly(length) if length else b""
        except BaseException:
            writer.close()
            raise
        if close:
            writer.close()
        else:
            idle.append((reader, writer))
        return status, body, close

    async def _once(self, path: str, key: tuple[Any, ...], payload: Any) -> dict[str, Any]:
        address = self.current
        raw = self._request(path, key, payload)
        try:
            async with asyncio.timeout(self.timeout):  # no extra task per request, unlike wait_for
                status, body, _ = await self._exchange(address, raw)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            err = BrokerClientError("CONNECT_FAILED", f"{address}: {exc!r}")
            self._retarget(address, err)
            raise err from None
        except asyncio.TimeoutError:
            err = BrokerClientError("TIMEOUT", f"no answer from {address} in {self.timeout}s")
            self._retarget(address, err)
            raise err from None
        try:
            data = json.loads(body)
        except ValueError:
            data = {"code": f"HTTP_{status}", "message": body[:200].decode("utf-8", "replace")}
        if status >= 300:
            err = BrokerClientError(str(data.get("code", "UNKNOWN")), str(data.get("message", "")), status, data)
            self._retarget(address, err)
            raise err
        data["brokerAddress"] = address
        return data

    async def send_once(self, topic: str, body: bytes, queue_id: int) -> dict[str, Any]:
        return await self._once("/messages", ("s", topic, queue_id, body), {
            "topic": topic, "queueId": queue_id, "body": base64.b64encode(body).decode("ascii"), "bodyEncoding": "base64"})

    async def send_batch_once(self, topic: str, bodies: list[bytes], queue_id: int) -> dict[str, Any]:
        return await self._once("/messages/batch", ("b", topic, queue_id, tuple(bodies)), {
            "topic": topic, "queueId": queue_id,
            "messages": [{"body": base64.b64encode(b).decode("ascii"), "bodyEncoding": "base64"} for b in bodies]})


def _producer(kind: str, seeds: list[str], timeout: float) -> Any:
    return RawHttpProducer(seeds, timeout) if kind == "raw" else MasterFollowingProducer(seeds, timeout=timeout)


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process (Linux /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _pct(sorted_ms: list[float], q: float) -> float:
    return round(sorted_ms[min(len(sorted_ms) - 1, int(q * len(sorted_ms)))], 3) if sorted_ms else 0.0


async def _throughput(seeds: list[str], kind: str, clients: int, duration: float, batch: int, size: int,
                      client: str = "raw") -> dict[str, Any]:
    body = os.urandom(size // 2).hex().encode()[:size]
    topic = f"Bench{kind.title()}"
    latencies: list[float] = []
    errors: dict[str, int] = {}
    sent = 0
    async with MasterFollowingProducer(seeds, timeout=30) as warm:
        await warm.send(topic, b"warm-up", queue_id=0)  # retries until a master takes it
        seeds = [warm.current] + [s for s in seeds if s != warm.current]
    async with _producer(client, seeds, 30) as prod:
        stop_at = time.monotonic() + duration

        async def worker(i: int) -> None:
            nonlocal sent
            while time.monotonic() < stop_at:
                t0 = time.perf_counter()
                try:
                    if kind == "single":
                        await prod.send_once(topic, body, queue_id=i % 4)
                    else:
                        await prod.send_batch_once(topic, [body] * batch, queue_id=i % 4)
                except BrokerClientError as exc:
                    errors[exc.code] = errors.get(exc.code, 0) + 1
                    continue
                latencies.append((time.perf_counter() - t0) * 1000)
                sent += 1 if kind == "single" else batch

        t0 = time.monotonic()
        await asyncio.gather(*(worker(i) for i in range(clients)))
        elapsed = time.monotonic() - t0
    lat = sorted(latencies)
    return {"kind": kind, "client": client, "clients": clients, "batch": batch if kind == "batch" else 1, "body_bytes": size,
            "messages": sent, "requests": len(lat), "seconds": round(elapsed, 2),
            "msgs_per_s": round(sent / elapsed, 1), "mib_per_s": round(sent * size / elapsed / (1 << 20), 2),
            "latency_ms": {"p50": _pct(lat, 0.5), "p95": _pct(lat, 0.95), "p99": _pct(lat, 0.99),
                           "max": round(lat[-1], 3) if lat else 0.0},
            "errors": errors}


async def _failover(group: Group, clients: int, size: int, client: str = "raw") -> dict[str, Any]:
    body = b"f" * size
    acks: list[tuple[float, str]] = []
    failures = 0
    stop = asyncio.Event()
    old = group.master()
    assert old is not None, "no master before the kill"
    seeds = [group.address(n) for n in IDS]

    async with _producer(client, seeds, 3) as prod:
        async def worker(i: int) -> None:
            nonlocal failures
            while not stop.is_set():
                try:
                    r = await prod.send_once("BenchFailover", body, queue_id=i % 4)
                except (BrokerClientError, asyncio.TimeoutError):
                    failures += 1
                    await asyncio.sleep(0.002)
                    continue
                acks.append((time.monotonic(), r["brokerAddress"]))

        tasks = [asyncio.ensure_future(worker(i)) for i in range(clients)]
        await asyncio.sleep(1.5)
        t_kill = time.monotonic()
        await asyncio.to_thread(group.kill9, old)
        deadline = t_kill + 30
        while not any(t > t_kill and a != group.address(old) for t, a in acks) and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.5)
        stop.set()
        await asyncio.gather(*tasks)
    after = [t for t, a in acks if t > t_kill and a != group.address(old)]
    before = [t for t, _ in acks if t <= t_kill]
    stall = (min(after) - max(before)) if after and before else None
    return {"killed": old, "failover_s": round(min(after) - t_kill, 3) if after else None,
            "stall_s": round(stall, 3) if stall is not None else None,
            "acked_before_kill": len(before), "acked_after_kill": len(after), "failed_attempts": failures}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--duration", type=float, default=3.0, help="seconds per throughput case")
    p.add_argument("--clients", type=int, default=64, help="concurrent writers, single messages")
    p.add_argument("--batch-clients", type=int, default=16, help="concurrent writers, batches")
    p.add_argument("--batch", type=int, default=16, help="messages per batch request")
    p.add_argument("--size", type=int, default=1024, help="body bytes")
    p.add_argument("--failovers", type=int, default=2, help="kill -9 rounds (0: none)")
    p.add_argument("--failover-clients", type=int, default=16)
    p.add_argument("--file-size", type=int, default=64 << 20, help="mappedFileSizeCommitLog (DLedger data files)")
    p.add_argument("--client", choices=("raw", "aiohttp"), default="raw",
                   help="load generator: lean keep-alive HTTP/1.1 (raw) or broker.api.client's MasterFollowingProducer")
    p.add_argument("--out", help="also write the JSON here")
    args = p.parse_args(argv)
    try:  # the client shares the machine with the three brokers: spend as little CPU as they do
        import uvloop  # noqa: WPS433

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    report: dict[str, Any] = {"bench": "dledger_broker_produce", "python": platform.python_version(),
                              "cpus": os.cpu_count(), "nodes": 3, "results": [], "failovers": [],
                              "reference": {"apache_dledger_appends_per_s_1k_64_clients": 2757,
                                            "apache_dledger_p99_ms": 69, "apache_failover_s": 5.2}}
    work = Path(tempfile.mkdtemp(prefix="rmqpy-dlbench-"))
    group = Group(work, args.file_size)
    try:
        for n in IDS:
            group.start(n)
        group.wait(group.master, 60, "a master")
        seeds = [group.address(n) for n in IDS]
        for kind, clients in (("single", args.clients), ("batch", args.batch_clients)):
            leader = group.master()
            pids = {n: group.procs[n].child.pid or 0 for n in IDS} | {"client": os.getpid()}
            cpu0, t0 = {k: _cpu_seconds(p) for k, p in pids.items()}, time.monotonic()
            res = asyncio.run(_throughput(seeds, kind, clients, args.duration, args.batch, args.size, args.client))
            wall = time.monotonic() - t0
            busy = {("leader" if k == leader else k): round((_cpu_seconds(p) - cpu0[k]) / wall, 2) for k, p in pids.items()}
            res["cpu_cores_busy"] = busy
            if busy.get("leader"):
                res["msgs_per_leader_core_s"] = round(res["msgs_per_s"] / busy["leader"])
            res["loadavg_1m"] = float(open("/proc/loadavg").read().split()[0])
            report["results"].append(res)
            print(f"{kind:6} {res['msgs_per_s']:>10} msg/s  p50 {res['latency_ms']['p50']} ms  "
                  f"p99 {res['latency_ms']['p99']} ms  errors {res['errors']}", file=sys.stderr)
        for _ in range(args.failovers):
            group.wait(group.in_sync, 60, "all nodes in sync")
            res = asyncio.run(_failover(group, args.failover_clients, args.size, args.client))
            report["failovers"].append(res)
            print(f"failover: killed {res['killed']}, first ack elsewhere after {res['failover_s']} s, "
                  f"stall {res['stall_s']} s", file=sys.stderr)
            group.start(res["killed"])
            group.wait(group.in_sync, 60, "the restarted node caught up")
        times = sorted(f["failover_s"] for f in report["failovers"] if f["failover_s"] is not None)
        if times:
            report["failover_s_median"] = times[len(times) // 2]
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
