"""Pulls are bounded (issue 23.5): a real ``mqbroker`` process, raw remoting sockets and HTTP.

- One pull carries at most the per-pull byte cap (and always one message): remoting with
  Apache's ``maxTransferBytesOnMessageInMemory`` (256 KiB), HTTP with ``httpPullMaxBytes``
  (4 MiB). Before the fix one pull of 40 messages of ~1 MB answered all 40 (40 MB on remoting,
  an 54 MB JSON answer on HTTP).
- Long-polled pulls with a suspend time of an hour: at most ``longPollingMaxHeldPerConnection``
  per connection are held, the rest are answered ``SYSTEM_BUSY`` at once; the broker's RSS stays
  within a measured bound, and when the client leaves the held count is 0 at once. Before the fix
  every pull was held for the hour it asked (12,000 here), and still after the client left.
- The same with pulls padded to ~60 KB each (frames under 64 KiB reserve no
  ``serverMaxPendingBytes``): the held requests' bytes stay within ``longPollingMaxHeldBytes``.
  Before the fix 6,000 such pulls were all held (RSS +400 MB or so, for the hour).
"""
from __future__ import annotations

import json
import re
import select
import socket
import struct
import threading
import time
import urllib.request
from collections import Counter
from typing import Iterator

import pytest

from broker.remoting.codec import FrameDecoder, RemotingCommand, decode_frame, encode
from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from tools.broker_confs import classic_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import port_pair, wait_until
from tests.security._listen_support import close_all, connect, proc_status_kb

pytestmark = pytest.mark.multiprocess

BIG = 1_000_000  # body bytes of one big message (maxMessageSize is 4 MiB)
BIG_COUNT = 40
REMOTING_CAP = 256 * 1024  # maxTransferBytesOnMessageInMemory (Apache's default)
HTTP_CAP = 4 * 1024 * 1024  # httpPullMaxBytes (default)
PER_CONNECTION = 1024  # longPollingMaxHeldPerConnection (default)
CONNECTIONS, PULLS_EACH = 3, 4000
FLAG_SUSPEND = 2
HELD_BYTES_CAP = 16 * 1024 * 1024  # longPollingMaxHeldBytes (default)
PAD = 60_000  # bytes of an extra header field: the frame stays under the 64 KiB small-frame size


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProc]:
    tmp = tmp_path_factory.mktemp("pull-bounds")
    port = port_pair()  # master_conf's broker with 128 MiB commitlog files (1 MB messages)
    conf = classic_conf("broker-a.conf", tmp / "broker-a.conf", brokerRole="ASYNC_MASTER", listenPort=port,
                      haListenPort=port + 1, storePathRootDir=tmp / "broker-a",
                      storePathCommitLog=tmp / "broker-a" / "commitlog", mappedFileSizeCommitLog=128 << 20)
    b = BrokerProc(conf, port, "pull-bounds", tmp)
    try:
        b.start()
        yield b
    finally:
        kill_all([b])


def _send_fields(topic: str, queue_id: int) -> dict:
    return {"a": "PG", "b": topic, "c": "TBW102", "d": 4, "e": queue_id, "f": 0, "g": int(time.time() * 1000),
            "h": 0, "i": "TAGS\x01t\x02", "j": 0, "k": False}


def _pull_fields(topic: str, queue_id: int, offset: int, max_num: int = 32, sys_flag: int = 0,
                 suspend_ms: int = 0) -> dict:
    return {"consumerGroup": "PullBoundsGroup", "topic": topic, "queueId": queue_id, "queueOffset": offset,
            "maxMsgNums": max_num, "sysFlag": sys_flag, "commitOffset": 0, "suspendTimeoutMillis": suspend_ms,
            "subscription": "*", "subVersion": 0, "expressionType": "TAG"}


def _call(s: socket.socket, cmd: RemotingCommand, timeout: float = 20.0) -> RemotingCommand:
    s.sendall(encode(cmd))
    dec = FrameDecoder(64 << 20)
    s.settimeout(timeout)
    while True:
        data = s.recv(1 << 20)
        assert data, "the broker closed the connection"
        for frame in dec.feed(data):
            return decode_frame(frame)


def _records(body: bytes) -> list[int]:
    """Store sizes of the records of a pull body (records back to back, each led by its size)."""
    sizes, pos = [], 0
    while pos < len(body):
        (size,) = struct.unpack_from(">i", body, pos)
        assert size > 0
        sizes.append(size)
        pos += size
    assert pos == len(body)
    return sizes


def _fill(port: int, topic: str, queue_id: int, body: bytes, count: int) -> None:
    with connect(port) as s:
        for i in range(count):
            r = _call(s, RemotingCommand.request(RC.SEND_MESSAGE_V2, _send_fields(topic, queue_id), body, opaque=i + 1))
            assert r.code == R.SUCCESS, r.remark


def _max_offset(b: BrokerProc, topic: str, queue_id: int) -> int:
    with b.client() as c:
        return int(c.topic_status(topic)["queues"][queue_id]["maxOffset"])


def _metric(b: BrokerProc, name: str) -> float | None:
    with b.client() as c:
        text = c.metrics()
    m = re.search(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.M)
    return float(m.group(1)) if m else None


@pytest.mark.timeout(120)
def test_one_pull_carries_at_most_the_byte_cap_on_both_doors(broker: BrokerProc) -> None:
    port = broker.api_port
    _fill(port, "PullBig", 0, b"x" * BIG, BIG_COUNT)
    _fill(port, "PullBig", 1, b"y" * 10_000, 100)
    wait_until(lambda: _max_offset(broker, "PullBig", 0) == BIG_COUNT and _max_offset(broker, "PullBig", 1) == 100,
               20, "dispatched")
    with connect(port) as s:
        # one ~1 MB message is more than the 256 KiB cap: exactly one comes back
        r = _call(s, RemotingCommand.request(RC.PULL_MESSAGE, _pull_fields("PullBig", 0, 0, 32), opaque=1))
        assert r.code == R.SUCCESS, r.remark
        sizes = _records(r.body)
        assert len(sizes) == 1 and int(r.ext_fields["nextBeginOffset"]) == 1, (len(sizes), len(r.body))
        # 10 KB messages: as many as fit 256 KiB (Apache: at least one, never more than the cap)
        r = _call(s, RemotingCommand.request(RC.PULL_MESSAGE, _pull_fields("PullBig", 1, 0, 64), opaque=2))
        sizes = _records(r.body)
        assert 1 <= len(sizes) <= 32 and sum(sizes) <= REMOTING_CAP, (len(sizes), sum(sizes))
        assert sum(sizes) + sizes[0] > REMOTING_CAP  # full: one more would not have fitted
        assert int(r.ext_fields["nextBeginOffset"]) == len(sizes)
    url = f"http://127.0.0.1:{port}/topics/PullBig/queues/0/messages?offset=0&maxCount=1024"
    with urllib.request.urlopen(url, timeout=60) as resp:
        raw = resp.read()
    got = json.loads(raw)
    stored = [m["storeSize"] for m in got["messages"]]
    assert 1 <= len(stored) and sum(stored) <= HTTP_CAP, (len(stored), sum(stored), len(raw))
    assert got["nextBeginOffset"] == len(stored) and len(raw) < 3 * HTTP_CAP
    print(f"remoting pull: 1 record of {BIG} B; HTTP pull: {len(stored)} records, {len(raw)} B of JSON")


def _flood(port: int, pulls: int, topic: str, codes: Counter, lock: threading.Lock,
           stop: threading.Event, pad: int = 0) -> socket.socket:
    """``pulls`` long-polled pulls (suspend one hour, an extra header field of ``pad`` bytes) on a
    new connection; a reader thread counts the answer codes until ``stop`` or the socket closes."""
    s = connect(port)
    fields = _pull_fields(topic, 0, 0, 32, FLAG_SUSPEND, 3_600_000)
    if pad:
        fields["pad"] = "p" * pad
    frames = b"".join(encode(RemotingCommand.request(RC.PULL_MESSAGE, fields, opaque=i + 1)) for i in range(pulls))

    def read() -> None:
        dec = FrameDecoder(64 << 20)
        while not stop.is_set():
            try:
                if not select.select([s], [], [], 0.5)[0]:
                    continue
                data = s.recv(1 << 20)
            except (OSError, ValueError):  # closed under us
                return
            if not data:
                return
            for frame in dec.feed(data):
                with lock:
                    codes[decode_frame(frame).code] += 1

    s.settimeout(60)
    threading.Thread(target=read, daemon=True).start()
    s.sendall(frames)
    return s


@pytest.mark.timeout(120)
def test_held_pulls_are_capped_and_dropped_with_their_connection(broker: BrokerProc) -> None:
    assert broker.proc is not None
    pid, port = broker.proc.pid, broker.api_port
    with broker.client() as c:  # an empty topic: every pull finds nothing and asks to be held
        c.create_topic("PullHeld", read_queue_nums=1, write_queue_nums=1)
    baseline = proc_status_kb(pid, "VmRSS")
    codes: Counter = Counter()
    lock, stop = threading.Lock(), threading.Event()
    socks: list[socket.socket] = []
    try:
        for _ in range(CONNECTIONS):
            socks.append(_flood(port, PULLS_EACH, "PullHeld", codes, lock, stop))
        held_cap = CONNECTIONS * PER_CONNECTION
        wait_until(lambda: sum(codes.values()) >= CONNECTIONS * PULLS_EACH - held_cap, 30, "the refused pulls answered")
        time.sleep(0.5)
        held = _metric(broker, "rocketmq_broker_pull_held")
        peak = proc_status_kb(pid, "VmRSS")
        with lock:
            answered = dict(codes)
        assert held == held_cap, (held, answered)
        with broker.client() as c:  # operators see the same in /status
            assert c.status()["pullHold"]["held"] == held_cap
        assert answered == {R.SYSTEM_BUSY: CONNECTIONS * PULLS_EACH - held_cap}, answered
        assert _metric(broker, "rocketmq_broker_pull_held_refused_total") >= CONNECTIONS * PULLS_EACH - held_cap
        grown_mb = (peak - baseline) / 1024
        print(f"RSS {baseline // 1024} MB -> {peak // 1024} MB with {held_cap} held pulls")
        assert grown_mb < 150, f"RSS grew {grown_mb:.0f} MB holding {held_cap} pulls"
    finally:
        stop.set()
        close_all(socks)
    wait_until(lambda: _metric(broker, "rocketmq_broker_pull_held") == 0, 5, "held pulls dropped with their connections")
    after = proc_status_kb(pid, "VmRSS")
    print(f"RSS after the client left: {after // 1024} MB")
    assert (after - baseline) / 1024 < 150
    with broker.client() as c:  # still serving
        sent = c.send("PullHeld", b"after", queue_id=0)
        assert c.pull("PullHeld", 0, sent["queueOffset"], 1)["messages"] or wait_until(
            lambda: c.pull("PullHeld", 0, sent["queueOffset"], 1)["messages"], 10, "pull after")


@pytest.mark.timeout(120)
def test_padded_held_pulls_stay_within_the_held_bytes_cap(broker: BrokerProc) -> None:
    assert broker.proc is not None
    pid, port = broker.proc.pid, broker.api_port
    with broker.client() as c:
        c.create_topic("PullPadded", read_queue_nums=1, write_queue_nums=1)
    baseline = proc_status_kb(pid, "VmRSS")
    codes: Counter = Counter()
    lock, stop = threading.Lock(), threading.Event()
    socks: list[socket.socket] = []
    total = CONNECTIONS * 2000
    try:
        for _ in range(CONNECTIONS):
            socks.append(_flood(port, total // CONNECTIONS, "PullPadded", codes, lock, stop, pad=PAD))

        def settled() -> bool:
            held = _metric(broker, "rocketmq_broker_pull_held")
            with lock:
                return held is not None and held + sum(codes.values()) == total
        wait_until(settled, 60, "every pull held or answered")
        held, held_bytes = _metric(broker, "rocketmq_broker_pull_held"), _metric(broker, "rocketmq_broker_pull_held_bytes")
        peak = proc_status_kb(pid, "VmRSS")
        assert held is not None and held_bytes is not None
        assert 0 < held_bytes <= HELD_BYTES_CAP and held <= HELD_BYTES_CAP // PAD + 1, (held, held_bytes)
        with lock:
            assert set(codes) == {R.SYSTEM_BUSY}, dict(codes)
        grown_mb = (peak - baseline) / 1024
        print(f"padded: RSS {baseline // 1024} MB -> {peak // 1024} MB, {held:.0f} held, {held_bytes / 2**20:.1f} MiB")
        assert grown_mb < 100, f"RSS grew {grown_mb:.0f} MB"
    finally:
        stop.set()
        close_all(socks)
    wait_until(lambda: _metric(broker, "rocketmq_broker_pull_held") == 0, 5, "held pulls dropped with their connections")
    assert _metric(broker, "rocketmq_broker_pull_held_bytes") == 0
    after = proc_status_kb(pid, "VmRSS")
    print(f"padded: RSS after the client left: {after // 1024} MB")
    assert (after - baseline) / 1024 < 100
