"""Issue 23.9: small inputs that used to get through — a non-UTF-8 signing header, a name ending in "\\n".

One real ACL broker (``mqbroker``, 127.0.0.1): a signing header with bytes that are not UTF-8,
sent with a known AccessKey, is a 401 with a clear message (it was a 500 carrying the exception
text, and one full traceback in the log per request); a flood of them leaves a bounded number of
one-line log entries. A topic name ending in a newline is refused by both doors (HTTP ``POST
/topics`` and remoting ``UPDATE_AND_CREATE_TOPIC``, each signed by the admin) and never created
(the checks used ``re.match`` with ``$``, which matches before a final newline).
"""
from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Iterator

import pytest

from broker.api.client import SyncBrokerClient
from broker.remoting.acl import signer
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from tools.nodes import BrokerProc, kill_all
from tests.security._http_support import ADMIN, NOBODY, now_ms, raw_request, start_acl_master

pytestmark = pytest.mark.multiprocess


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProc]:
    b = start_acl_master(tmp_path_factory.mktemp("small-inputs"), name="small-inputs")
    try:
        yield b
    finally:
        kill_all([b])


def _raw_exchange(port: int, head: bytes, timeout: float = 10.0) -> tuple[int, bytes]:
    """Send one raw HTTP request head; (status, body) of the answer (bounded wait)."""
    with socket.create_connection(("127.0.0.1", port), timeout) as s:
        s.sendall(head)
        s.settimeout(timeout)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        head_part, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head_part.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(body) < length:
            chunk = s.recv(65536)
            if not chunk:
                break
            body += chunk
    return int(head_part.split(b" ")[1]), body


@pytest.mark.timeout(90)
def test_non_utf8_signing_header_is_401_with_one_line_logs(broker: BrokerProc) -> None:
    port = broker.api_port
    cases = {
        "nonce": (b"X-RMQ-Nonce: \xff\xfe\x80abc\r\n", b"X-RMQ-Signature: AAAA\r\n"),
        "signature": (b"X-RMQ-Nonce: 0123\r\n", b"X-RMQ-Signature: \xc3\x28\xa0\xa1\r\n"),
        "timestamp": (b"X-RMQ-Nonce: 0123\r\n", b"X-RMQ-Signature: AAAA\r\n"),
    }
    before = broker.log_path.read_text(errors="replace")
    n = 0
    for what, (nonce, sig) in cases.items():
        ts = b"\xff" + str(now_ms()).encode() if what == "timestamp" else str(now_ms()).encode()
        for _ in range(40):
            head = (b"GET /status HTTP/1.1\r\nHost: 127.0.0.1:" + str(port).encode() + b"\r\n"
                    b"X-RMQ-AccessKey: " + NOBODY[0].encode() + b"\r\nX-RMQ-Timestamp: " + ts + b"\r\n"
                    + nonce + sig + b"Connection: close\r\n\r\n")
            status, body = _raw_exchange(port, head)
            n += 1
            assert status in (400, 401), (what, status, body[:300])
            data = json.loads(body)
            assert data["code"] in ("UNAUTHORIZED", "BAD_REQUEST"), data
            assert "UTF-8" in data["message"] or "ASCII" in data["message"], data
            assert "Traceback" not in data["message"] and "codec" not in data["message"], data
    # an honest request still works
    status, data, _ = raw_request(broker.address, "GET", "/status", None, ADMIN)
    assert status == 200, data
    time.sleep(0.3)
    log = broker.log_path.read_text(errors="replace")[len(before):]
    assert "Traceback" not in log and "SYSTEM_ERROR" not in log, log[-3000:]
    lines = [x for x in log.splitlines() if "UTF-8" in x or "ASCII" in x or "refusals not logged" in x]
    print(f"{n} non-UTF-8 signed requests -> {len(lines)} log lines")
    assert 1 <= len(lines) <= 60, lines[:5]  # rate-limited, one line each


def _create_over_remoting(port: int, topic: str) -> tuple[int, str]:
    async def run() -> tuple[int, str]:
        c = await RemotingClient.connect("127.0.0.1", port, rpc_hook=signer(*ADMIN))
        try:
            r = await c.request(RC.UPDATE_AND_CREATE_TOPIC, {"topic": topic, "readQueueNums": 1, "writeQueueNums": 1,
                                                             "perm": 6}, timeout=10)
            return r.code, r.remark or ""
        finally:
            await c.close()

    return asyncio.run(run())


@pytest.mark.timeout(60)
def test_topic_names_ending_in_newline_are_refused_on_both_doors(broker: BrokerProc) -> None:
    status, data, _ = raw_request(broker.address, "POST", "/topics",
                                  json.dumps({"topic": "TopicNlHttp\n", "readQueueNums": 1}).encode(), ADMIN)
    assert status == 400 and data["code"] in ("MESSAGE_ILLEGAL", "BAD_REQUEST"), (status, data)
    code, remark = _create_over_remoting(broker.api_port, "TopicNlRemoting\n")
    assert code != R.SUCCESS, remark
    # the honest names are created on both doors
    status, data, _ = raw_request(broker.address, "POST", "/topics",
                                  json.dumps({"topic": "TopicOkHttp", "readQueueNums": 1}).encode(), ADMIN)
    assert status == 200, data
    code, remark = _create_over_remoting(broker.api_port, "TopicOkRemoting")
    assert code == R.SUCCESS, remark
    with SyncBrokerClient(broker.address, access_key=ADMIN[0], secret_key=ADMIN[1]) as c:
        names = json.dumps(c.topics())
    assert "TopicOkHttp" in names and "TopicOkRemoting" in names
    assert "TopicNlHttp" not in names and "TopicNlRemoting" not in names, names
    assert broker.alive()
