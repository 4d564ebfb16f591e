"""Produce throughput over RocketMQ's remoting protocol next to the HTTP API, same broker pair.

Usage::

    python -m bench.remoting_produce                      # short default run, JSON on stdout
    python -m bench.remoting_produce --duration 5 --inflight 64 --roles SYNC_MASTER --out r.json

For each role a fresh classic master + slave pair is started (``bench.broker_produce.Pair``),
then, on the master's ``listenPort`` (which speaks both protocols):
- ``http_single``: ``--clients`` concurrent HTTP produce requests (bench.broker_produce's case);
- ``remoting_single``: the project's pipelined Python client, SEND_MESSAGE_V2 with ``--inflight``
  requests in flight on each of ``--connections`` connections;
- ``remoting_batch``: SEND_BATCH_MESSAGE of ``--batch`` messages, same pipelining.
Reported per case: messages/s, MiB/s of bodies, latency p50/p95/p99/max (ms), errors by code.
Run, not asserted (DESIGN §6); the 2-core machine is shared, so expect noise.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import platform
import struct
import sys
import time
from typing import Any

from bench.broker_produce import _run_case, print_row, rates, running_pair, write_report
from broker.remoting.client import RemotingClient
from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from broker.remoting.codes import response_name


def _header(topic: str, qid: int, props: str) -> dict[str, Any]:
    return {"a": "BenchPG", "b": topic, "c": "TBW102", "d": 4, "e": qid, "f": 0, "g": int(time.time() * 1000),
            "h": 0, "i": props, "j": 0, "k": False}


def encode_batch(bodies: list[bytes]) -> bytes:
    """MessageDecoder.encodeMessages: [total][magic][crc][flag][bodyLen][body][propLen][props]."""
    out = bytearray()
    for body in bodies:
        props = b""
        total = 20 + len(body) + 2 + len(props)
        out += struct.pack(">iiiii", total, 0, 0, 0, len(body)) + body + struct.pack(">h", len(props)) + props
    return bytes(out)


async def remoting_case(port: int, topic: str, kind: str, connections: int, inflight: int, duration: float,
                        batch: int, size: int) -> dict[str, Any]:
    body = os.urandom(size // 2).hex().encode()[:size]
    batch_body = encode_batch([body] * batch)
    latencies: list[float] = []
    errors: dict[str, int] = {}
    sent = 0
    stop_at = time.monotonic() + duration
    clients = [await RemotingClient.connect("127.0.0.1", port) for _ in range(connections)]

    async def worker(cl: RemotingClient, i: int) -> None:
        nonlocal sent
        qid = i % 4
        while time.monotonic() < stop_at:
            if kind == "single":
                cmd = RemotingCommand.request(RC.SEND_MESSAGE_V2, _header(topic, qid, "TAGS\x01bench\x02"), body)
                n = 1
            else:
                cmd = RemotingCommand.request(RC.SEND_BATCH_MESSAGE, _header(topic, qid, ""), batch_body)
                n = batch
            t0 = time.perf_counter()
            try:
                resp = await cl.invoke(cmd, timeout=30)
            except (asyncio.TimeoutError, ConnectionError) as exc:
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                continue
            if resp.code != R.SUCCESS:
                name = response_name(resp.code)
                errors[name] = errors.get(name, 0) + 1
                continue
            latencies.append((time.perf_counter() - t0) * 1000)
            sent += n

    warm = await clients[0].invoke(RemotingCommand.request(RC.SEND_MESSAGE_V2, _header(topic, 0, ""), b"warm-up"))
    assert warm.code == R.SUCCESS, warm.remark
    t0 = time.monotonic()
    await asyncio.gather(*(worker(cl, i) for cl in clients for i in range(inflight)))
    elapsed = time.monotonic() - t0
    for cl in clients:
        await cl.close()
    return {"kind": f"remoting_{kind}", "connections": connections, "inflight_per_connection": inflight,
            "batch": batch if kind == "batch" else 1, "body_bytes": size, **rates(sent, latencies, elapsed, size),
            "errors": errors}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--roles", default="ASYNC_MASTER,SYNC_MASTER")
    p.add_argument("--duration", type=float, default=3.0, help="seconds per case")
    p.add_argument("--clients", type=int, default=16, help="concurrent HTTP requests (http_single)")
    p.add_argument("--connections", type=int, default=1, help="remoting connections")
    p.add_argument("--inflight", type=int, default=32, help="requests in flight per remoting connection")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--size", type=int, default=1024, help="body bytes")
    p.add_argument("--out", help="also write the JSON here")
    args = p.parse_args(argv)
    report: dict[str, Any] = {"bench": "remoting_produce", "python": platform.python_version(),
                              "cpus": os.cpu_count(), "results": []}
    for role in [r.strip() for r in args.roles.split(",") if r.strip()]:
        with running_pair(role) as pair:
            res = asyncio.run(_run_case(f"127.0.0.1:{pair.mport}", "BenchHttp", "single", args.clients,
                                        args.duration, args.batch, args.size))
            res["kind"] = "http_single"
            cases = [res]
            for kind in ("single", "batch"):
                cases.append(asyncio.run(remoting_case(pair.mport, f"BenchRemoting{kind.title()}", kind,
                                                       args.connections, args.inflight, args.duration, args.batch,
                                                       args.size)))
            for res in cases:
                res["role"] = role
                report["results"].append(res)
                print_row(f"{role:12} {res['kind']:16}", res)
    return write_report(report, args.out)


if __name__ == "__main__":
    sys.exit(main())
