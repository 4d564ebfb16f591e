"""Attacks on listenPort (remoting + HTTP on one port) of a real ``mqbroker`` process (issue 12.4/12.5).

One broker from ``conf/classic/broker-a.conf`` with small limits (read timeout 0.5 s, idle 2 s, 50
connections, 20 MiB of pending frame bytes) is shared by the tests of this module; each test
checks its own effect (a closed socket, a counter delta, the broker's peak RSS) and that the
broker keeps serving. Before the fix every attack here held its connections (and memory) forever.
"""
from __future__ import annotations

import concurrent.futures
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from broker.remoting.codec import FrameDecoder, RemotingCommand, decode_frame, encode
from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from tools.broker_confs import master_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import REPO, wait_until
from tests.security._listen_support import (all_closed, close_all, closed_by_peer, connect, frame_header,
                                            listening_hosts, other_local_address, port_counters, proc_status_kb)

pytestmark = pytest.mark.multiprocess

READ_TIMEOUT_S = 0.5
IDLE_S = 2
MAX_CONNECTIONS = 50
BUDGET = 20 * 1024 * 1024
LIMITS = {"serverReadTimeoutMillis": int(READ_TIMEOUT_S * 1000), "serverChannelMaxIdleTimeSeconds": IDLE_S,
          "serverMaxConnections": MAX_CONNECTIONS, "serverMaxPendingBytes": BUDGET}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProc]:
    tmp = tmp_path_factory.mktemp("listen-doors")
    conf, port = master_conf(tmp, role="ASYNC_MASTER", **LIMITS)
    b = BrokerProc(conf, port, "listen-doors", tmp)
    try:
        b.start()
        yield b
    finally:
        kill_all([b])


def _send_fields(topic: str) -> dict:
    return {"a": "PG", "b": topic, "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": int(time.time() * 1000), "h": 0,
            "i": "TAGS\x01t\x02", "j": 0, "k": False}


def remoting_send(s: socket.socket, topic: str, body: bytes, opaque: int = 1) -> RemotingCommand:
    """SEND_MESSAGE_V2 on a raw socket; the response (bounded wait)."""
    s.sendall(encode(RemotingCommand.request(RC.SEND_MESSAGE_V2, _send_fields(topic), body, opaque=opaque)))
    dec = FrameDecoder()
    s.settimeout(10)
    while True:
        data = s.recv(65536)
        assert data, "the broker closed a well-behaved remoting connection"
        for frame in dec.feed(data):
            return decode_frame(frame)


def assert_serving(b: BrokerProc, topic: str) -> None:
    """A remoting send and an HTTP send + pull still work."""
    with connect(b.api_port) as s:
        r = remoting_send(s, topic, b"via-remoting")
        assert r.code == R.SUCCESS, r.remark
    with b.client() as c:
        sent = c.send(topic, b"via-http", queue_id=0)
        wait_until(lambda: c.pull(topic, 0, sent["queueOffset"], 1)["messages"], 10, "the sent message to be pulled")


@pytest.mark.timeout(30)
def test_binds_only_bind_address(broker: BrokerProc) -> None:
    assert listening_hosts(broker.api_port) == ["127.0.0.1"]
    other = other_local_address()
    if other is not None:  # this host has another address: nothing listens there
        with pytest.raises(OSError):
            socket.create_connection((other, broker.api_port), 2).close()
    assert "listenPort bound on 127.0.0.1:%d" % broker.api_port in broker.log()


@pytest.mark.timeout(30)
def test_one_byte_connections_are_cut_after_read_timeout(broker: BrokerProc) -> None:
    before = port_counters(broker.address, broker.api_port)["closedReadTimeout"]
    socks = []
    try:
        for i in range(40):  # half look like remoting (length high byte 0), half like HTTP ("G")
            socks.append(connect(broker.api_port, b"\x00" if i % 2 else b"G"))
        took = all_closed(socks, timeout=READ_TIMEOUT_S + 4)
    finally:
        close_all(socks)
    assert all(t is not None for t in took), f"{took.count(None)} of 40 one-byte connections still open"
    assert max(took) < READ_TIMEOUT_S + 3
    after = port_counters(broker.address, broker.api_port)["closedReadTimeout"]
    assert after - before >= 40
    assert_serving(broker, "TopicOneByte")


@pytest.mark.timeout(30)
def test_connections_beyond_the_cap_are_refused(broker: BrokerProc) -> None:
    wait_until(lambda: port_counters(broker.address, broker.api_port)["open"] <= 1, 10, "connections to drain")
    before = port_counters(broker.address, broker.api_port)["refusedByCap"]
    existing = connect(broker.api_port)
    holders: list[socket.socket] = []
    extras: list[socket.socket] = []
    try:
        assert remoting_send(existing, "TopicCap", b"before").code == R.SUCCESS
        holders = [connect(broker.api_port) for _ in range(MAX_CONNECTIONS - 1)]
        time.sleep(0.2)  # let the broker accept them before the extras arrive (well below the idle time)
        extras = [connect(broker.api_port) for _ in range(10)]
        took = all_closed(extras, timeout=1.5)
        assert all(t is not None for t in took), f"{took.count(None)} of 10 connections beyond the cap still open"
        assert remoting_send(existing, "TopicCap", b"after", opaque=2).code == R.SUCCESS
        still_open = [closed_by_peer(h, 0.01) is None for h in holders]
        assert sum(still_open) >= MAX_CONNECTIONS - 5  # the cap refused the newcomers, not the holders
    finally:
        close_all([existing, *holders, *extras])
    wait_until(lambda: port_counters(broker.address, broker.api_port)["open"] <= 1, 10, "connections to drain")
    assert port_counters(broker.address, broker.api_port)["refusedByCap"] - before >= 10


@pytest.mark.timeout(30)
def test_partial_big_frames_are_bounded_by_the_budget(broker: BrokerProc) -> None:
    pid = broker.proc.pid
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # reset VmHWM to the current RSS
    except OSError:
        pass
    rss_before = proc_status_kb(pid, "VmRSS")
    size = 15 * 1024 * 1024
    payload = memoryview(frame_header(size) + bytes(size - 8 - 1))  # all but the last byte

    def attack(_: int) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", broker.api_port), 5)
        s.settimeout(8)
        try:
            s.sendall(payload)
        except OSError:
            pass  # refused: the broker closed the connection
        return s

    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        socks = list(pool.map(attack, range(20)))
    try:
        time.sleep(0.2)  # whatever was sent is received by now
        peak = proc_status_kb(pid, "VmHWM")
        rss_during = proc_status_kb(pid, "VmRSS")
        took = all_closed(socks, timeout=READ_TIMEOUT_S + 4)
    finally:
        close_all(socks)
    growth_mib = (peak - rss_before) / 1024
    print(f"\nbroker RSS before {rss_before // 1024} MiB, peak during 20 x 15 MiB partial frames "
          f"{peak // 1024} MiB (+{growth_mib:.1f} MiB), RSS right after {rss_during // 1024} MiB; budget "
          f"{BUDGET >> 20} MiB")
    assert growth_mib < (BUDGET >> 20) + 12, f"peak RSS grew {growth_mib:.0f} MiB with a {BUDGET >> 20} MiB budget"
    assert all(t is not None for t in took), "a partial frame's connection was held open"
    st = port_counters(broker.address, broker.api_port)
    assert st["refusedByPendingBudget"] >= 10 and st["pendingBytes"] == 0, st
    assert_serving(broker, "TopicBudget")


@pytest.mark.timeout(30)
def test_idle_connections_are_closed(broker: BrokerProc) -> None:
    before = port_counters(broker.address, broker.api_port)["closedIdle"]
    silent = connect(broker.api_port)
    http = connect(broker.api_port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")  # keep-alive, then silence
    remoting = connect(broker.api_port, encode(RemotingCommand.request(RC.GET_BROKER_RUNTIME_INFO, opaque=7)))
    try:
        took = all_closed([silent, http, remoting], timeout=IDLE_S + 5)
    finally:
        close_all([silent, http, remoting])
    assert all(t is not None for t in took), f"idle connections still open: {took}"
    assert min(t for t in took if t is not None) >= IDLE_S * 0.75  # idle, not read timeout
    assert port_counters(broker.address, broker.api_port)["closedIdle"] - before >= 3


@pytest.mark.timeout(30)
def test_slow_http_head_and_body_are_cut(broker: BrokerProc) -> None:
    head = connect(broker.api_port, b"GET /status HTTP/1.1\r\nHost: x\r\n")
    body = connect(broker.api_port, b"POST /messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: 1000\r\n\r\n{\"topic\":")
    try:
        t0 = time.monotonic()
        closed_at = None
        while time.monotonic() - t0 < 5:  # slowloris: one header byte every 100 ms, never the blank line
            try:
                head.send(b"X")
            except OSError:
                closed_at = time.monotonic() - t0
                break
            if closed_by_peer(head, 0.1) is not None:
                closed_at = time.monotonic() - t0
                break
        body_closed = closed_by_peer(body, 3)
    finally:
        close_all([head, body])
    assert closed_at is not None and closed_at < READ_TIMEOUT_S + 3, "a head trickled byte by byte was never cut"
    assert body_closed is not None, "a body that never arrives held its connection"
    with broker.client() as c:
        assert c.status()["brokerName"] == "broker-a"


def _read_answer(s: socket.socket, timeout: float) -> bytes:
    """What the peer sends until it closes or ``timeout`` passes."""
    s.settimeout(timeout)
    out = b""
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return out
            out += data
    except OSError:
        return out


@pytest.mark.timeout(30)
def test_http_bodies_are_charged_to_the_budget(broker: BrokerProc) -> None:
    """Big announced bodies reserve the pending-bytes budget; one that does not fit is refused with
    503 before it is read; one over client_max_size is 413 at once."""
    head = (b"POST /messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n{\"topic\":")
    socks = [connect(broker.api_port, head % (7 * 1024 * 1024)) for _ in range(4)]  # 28 MiB > 20 MiB
    huge = connect(broker.api_port, head % (100 * 1024 * 1024))
    try:
        answers = [_read_answer(s, READ_TIMEOUT_S + 3) for s in socks]
        huge_answer = _read_answer(huge, 3)
    finally:
        close_all([*socks, huge])
    refused = [a for a in answers if a.startswith(b"HTTP/1.1 503")]
    assert len(refused) >= 2 and all(b"SERVICE_NOT_AVAILABLE" in a for a in refused), answers
    assert huge_answer.startswith(b"HTTP/1.1 413"), huge_answer
    assert port_counters(broker.address, broker.api_port)["pendingBytes"] == 0
    assert_serving(broker, "TopicHttpBudget")


@pytest.mark.timeout(30)
def test_metrics_expose_the_counters(broker: BrokerProc) -> None:
    with broker.client() as c:
        text = c.metrics()
    for name in ("rocketmq_broker_listen_connections", "rocketmq_broker_listen_pending_bytes",
                 "rocketmq_broker_listen_refused_by_cap_total", "rocketmq_broker_listen_closed_idle_total",
                 "rocketmq_broker_listen_closed_read_timeout_total",
                 "rocketmq_broker_listen_refused_by_pending_budget_total"):
        assert f"\n{name}" in text, name


@pytest.mark.timeout(30)
def test_open_bind_address_without_acl_refuses_to_start(tmp_path: Path) -> None:
    conf, _ = master_conf(tmp_path, role="ASYNC_MASTER", bindAddress="0.0.0.0", remotingAllowInsecure="false")
    res = subprocess.run([sys.executable, "-m", "broker.cli.mqbroker", "-c", str(conf)], cwd=str(REPO),
                         capture_output=True, text=True, timeout=25, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, res.stderr
    assert len(lines) == 1 and lines[0].startswith("mqbroker: "), res.stderr
    assert "aclEnable=true" in lines[0] and "remotingAllowInsecure=true" in lines[0] and "0.0.0.0" in lines[0]
