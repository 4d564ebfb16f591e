"""Issue 12.6: the smaller doors — nested JSON, oversize batches, mqadmin with a bad address.

A real ``mqbroker`` (127.0.0.1, shipped classic conf): a JSON body nested 100,000 deep is a 400
with no traceback in the log; an HTTP batch over ``maxBatchMessageCount`` (4096) is 413 and one
over ``maxMessageSize`` encoded bytes is 400, a remoting SEND_BATCH_MESSAGE over the count is
MESSAGE_ILLEGAL, and the broker keeps serving (the largest allowed batch is stored whole);
``mqadmin -b <bad address>`` prints one line and exits non-zero.
"""
from __future__ import annotations

import asyncio
import json
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Iterator

import pytest

from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from tools.broker_confs import master_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import REPO, wait_until
from tests.security._http_support import raw_request

pytestmark = pytest.mark.multiprocess
MAX_COUNT = 4096  # maxBatchMessageCount default


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProc]:
    tmp = tmp_path_factory.mktemp("small-doors")
    conf, port = master_conf(tmp, role="ASYNC_MASTER")
    b = BrokerProc(conf, port, "small-doors", tmp)
    try:
        b.start()
        with b.client() as c:  # one topic per test: dispatch of one test never shows in another's offsets
            for topic in ("TopicSmall", "TopicBig", "TopicRemote"):
                c.create_topic(topic, read_queue_nums=1, write_queue_nums=1)
        yield b
    finally:
        kill_all([b])


def _batch(n: int, body: str = "m") -> bytes:
    return json.dumps({"topic": "TopicBig", "queueId": 0, "messages": [{"body": body}] * n}).encode()


def _max_offset(b: BrokerProc, topic: str) -> int:
    with b.client() as c:
        return c.topic_status(topic)["queues"][0]["maxOffset"]


@pytest.mark.timeout(60)
def test_deeply_nested_json_is_400_without_traceback(broker: BrokerProc) -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    in_field = b'{"topic":"TopicSmall","body":' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    for path, raw in (("/messages", deep), ("/messages", in_field), ("/messages/batch", deep), ("/topics", deep),
                      ("/consumer-offsets", deep), ("/admin/dledger/transfer-leader", deep)):
        status, data, _ = raw_request(broker.address, "POST", path, raw)
        assert status == 400 and data["code"] == "BAD_REQUEST", (path, status, data)
        assert "nested too deeply" in data["message"] or path == "/messages" and raw is in_field, data
    status, data, _ = raw_request(broker.address, "POST", "/messages", b'{"topic":"TopicSmall","body":"ok"}')
    assert status == 200 and data["status"] == "SEND_OK"
    log = broker.log_path.read_text(errors="replace")
    assert "Traceback" not in log and "RecursionError" not in log and "unexpected error" not in log


@pytest.mark.timeout(60)
def test_oversize_batches_are_refused_and_the_broker_keeps_serving(broker: BrokerProc) -> None:
    status, data, _ = raw_request(broker.address, "POST", "/messages/batch", _batch(MAX_COUNT + 1))
    assert status == 413 and data["code"] == "REQUEST_TOO_LARGE" and "maxBatchMessageCount" in data["message"], data
    status, data, _ = raw_request(broker.address, "POST", "/messages/batch", _batch(100_000))
    assert status == 413 and data["code"] == "REQUEST_TOO_LARGE", data
    # encoded bytes over maxMessageSize (4 MiB): two 2.1 MB bodies
    status, data, _ = raw_request(broker.address, "POST", "/messages/batch", _batch(2, "x" * 2_100_000))
    assert status == 400 and data["code"] == "MESSAGE_ILLEGAL" and "maxMessageSize" in data["message"], data
    assert _max_offset(broker, "TopicBig") == 0  # nothing of a refused batch was stored
    t0 = time.monotonic()
    status, data, _ = raw_request(broker.address, "POST", "/messages/batch", _batch(MAX_COUNT, "b" * 900))
    took = time.monotonic() - t0
    assert status == 200 and data["count"] == MAX_COUNT, data
    wait_until(lambda: _max_offset(broker, "TopicBig") == MAX_COUNT, 20, "the whole batch dispatched")
    print(f"largest allowed HTTP batch ({MAX_COUNT} x 900 B) answered in {took * 1000:.0f} ms")
    assert broker.alive()


def _encode_batch(n: int) -> bytes:
    """``MessageDecoder.encodeMessages``: [total][magic][bodyCRC][flag][bodyLen][body][propsLen][props]."""
    out = bytearray()
    body = b"r"
    for _ in range(n):
        total = 4 * 5 + len(body) + 2
        out += struct.pack(">iiiii", total, 0, zlib.crc32(body), 0, len(body)) + body + struct.pack(">h", 0)
    return bytes(out)


@pytest.mark.timeout(60)
def test_remoting_batch_over_the_count_is_refused(broker: BrokerProc) -> None:
    fields = {"a": "PG", "b": "TopicRemote", "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": int(time.time() * 1000),
              "h": 0, "i": "", "j": 0, "k": False, "m": True}

    async def run() -> tuple[int, str, int]:
        c = await RemotingClient.connect("127.0.0.1", broker.api_port)
        try:
            big = await c.request(RC.SEND_BATCH_MESSAGE, fields, _encode_batch(MAX_COUNT + 1), timeout=10)
            ok = await c.request(RC.SEND_BATCH_MESSAGE, fields, _encode_batch(3), timeout=10)
            return big.code, big.remark or "", ok.code
        finally:
            await c.close()

    code, remark, ok = asyncio.run(run())
    assert code == R.MESSAGE_ILLEGAL and "maxBatchMessageCount" in remark, (code, remark)
    assert ok == R.SUCCESS
    wait_until(lambda: _max_offset(broker, "TopicRemote") == 3, 20, "the remoting batch dispatched")


@pytest.mark.timeout(60)
def test_mqadmin_bad_address_prints_one_line(tmp_path: Path) -> None:
    for addr in ("notanaddr", "127.0.0.1:99999", "http://", "127.0.0.1:abc"):
        r = subprocess.run([sys.executable, "-m", "broker.cli.mqadmin", "sendMessage", "-b", addr, "-t", "T", "-p", "x"],
                           cwd=REPO, capture_output=True, text=True, timeout=30)
        lines = r.stderr.strip().splitlines()
        assert r.returncode != 0 and len(lines) == 1, (addr, r.returncode, r.stderr)
        assert "Traceback" not in r.stderr and "host:port" in lines[0], lines
