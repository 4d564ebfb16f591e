"""Bad input never breaks a broker: malformed HTTP, oversize messages, bad names, garbage on the
HA port, bad conf files, a held store lock. Errors are JSON with a code; nothing stored is lost."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from broker.api.client import BrokerClientError, body_bytes
from tools.broker_confs import classic_conf, master_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import REPO, port_pair, wait_until

pytestmark = pytest.mark.multiprocess

MAX = 4096


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProc]:
    tmp = tmp_path_factory.mktemp("bad")
    conf, port = master_conf(tmp, "SYNC_MASTER", maxMessageSize=MAX, syncFlushTimeout=500)
    proc = BrokerProc(conf, port, "bad-master", tmp)
    try:
        proc.start()
        yield proc
    finally:
        kill_all([proc])


def _post(broker: BrokerProc, path: str, raw: bytes) -> tuple[int, dict]:
    with broker.client() as c:
        status, text = c.request("POST", path, raw, {"Content-Type": "application/json"})
    return status, json.loads(text)  # always JSON, never a traceback


@pytest.mark.timeout(60)
@pytest.mark.parametrize("path,raw,code", [
    ("/messages", b"{not json", "BAD_REQUEST"),
    ("/messages", b"", "BAD_REQUEST"),
    ("/messages", b"[1,2]", "BAD_REQUEST"),
    ("/messages", b'{"body":"x"}', "BAD_REQUEST"),
    ("/messages", b'{"topic":"bad topic","body":"x"}', "MESSAGE_ILLEGAL"),
    ("/messages", b'{"topic":"' + b"t" * 256 + b'","body":"x"}', "MESSAGE_ILLEGAL"),
    ("/messages", b'{"topic":"../etc","body":"x"}', "MESSAGE_ILLEGAL"),
    ("/messages", b'{"topic":"TBW102","body":"x"}', "MESSAGE_ILLEGAL"),
    ("/messages", b'{"topic":"T1"}', "MESSAGE_ILLEGAL"),
    ("/messages", b'{"topic":"T1","body":"!!","bodyEncoding":"base64"}', "MESSAGE_ILLEGAL"),
    ("/messages", b'{"topic":"T1","body":"x","bodyEncoding":"rot13"}', "MESSAGE_ILLEGAL"),
    ("/messages", b'{"topic":"T1","body":"x","queueId":-1}', "BAD_REQUEST"),
    ("/messages", b'{"topic":"T1","body":"x","queueId":"0"}', "BAD_REQUEST"),
    ("/messages", b'{"topic":"T1","body":"x","properties":{"a":1}}', "MESSAGE_ILLEGAL"),
    ("/messages", b'{"topic":"T1","body":"x","properties":{"UNIQ_KEY":"x"}}', "MESSAGE_ILLEGAL"),
    ("/messages", b'{"topic":"T1","body":"x","tags":"a\\u0001b"}', "MESSAGE_ILLEGAL"),
    ("/messages", b'{"topic":"T1","body":"' + b"x" * (MAX + 1) + b'"}', "MESSAGE_ILLEGAL"),
    ("/messages/batch", b'{"topic":"T1","messages":[]}', "MESSAGE_ILLEGAL"),
    ("/messages/batch", b'{"topic":"T1","messages":[{"body":"' + b"x" * 3000 + b'"},{"body":"' + b"y" * 3000 + b'"}]}',
     "MESSAGE_ILLEGAL"),
    ("/messages", b"x" * (3 * MAX + 70 * 1024), "REQUEST_TOO_LARGE"),
    ("/topics", b'{"topic":"a/b"}', "MESSAGE_ILLEGAL"),
    ("/topics", b'{"topic":"T2","readQueueNums":0}', "BAD_REQUEST"),
    ("/consumer-offsets", b'{"group":"g","topic":"T1","queueId":0,"offset":-5}', "BAD_REQUEST"),
    ("/consumer-offsets", b'{"group":"g h","topic":"T1","queueId":0,"offset":5}', "BAD_REQUEST"),
    ("/messages", b'{"topic":"T1","body":"\xff\xfe"}', "BAD_REQUEST"),             # not UTF-8
    ("/messages", b'{"topic":"T1","body":"\\ud800"}', "BAD_REQUEST"),               # a lone surrogate
    ("/messages", b'{"topic":"T1","body":"x","queueId":1e400}', "BAD_REQUEST"),    # infinity
    ("/consumer-offsets", b'{"group":"g","topic":"T1","queueId":0,"offset":99999999999999999999999}',
     "BAD_REQUEST"),                                                                # past a Java long
])
def test_bad_requests_get_json_errors(broker: BrokerProc, path: str, raw: bytes, code: str) -> None:
    status, body = _post(broker, path, raw)
    assert body["code"] == code, body
    assert status >= 400 and body["message"]


@pytest.mark.timeout(60)
def test_bad_reads_and_routes(broker: BrokerProc) -> None:
    with broker.client() as c:
        for method, path, code in [
            ("GET", "/nope", "NOT_FOUND"),
            ("DELETE", "/messages", "METHOD_NOT_ALLOWED"),
            ("GET", "/topics/NoSuchTopic/queues/0/messages", "TOPIC_NOT_EXIST"),
            ("GET", "/topics/NoSuchTopic/queues/x/messages", "BAD_REQUEST"),
            ("GET", "/topics/T1/queues/0/messages?offset=abc", "BAD_REQUEST"),
            ("GET", "/messages/by-id/ZZZ", "BAD_REQUEST"),
            ("GET", "/messages/by-offset/-1", "BAD_REQUEST"),
            ("GET", "/messages/by-offset/999999999", "MESSAGE_NOT_FOUND"),
            ("GET", "/messages/by-key?topic=T1", "BAD_REQUEST"),
            ("GET", "/admin/config/passwd", "NOT_FOUND"),
        ]:
            status, text = c.request(method, path)
            assert json.loads(text)["code"] == code, (path, text)
            assert status >= 400


@pytest.mark.timeout(60)
def test_no_slave_means_slave_not_available_but_stored(broker: BrokerProc) -> None:
    with broker.client() as c:
        with pytest.raises(BrokerClientError) as exc:
            c.send("TopicNoSlave", "kept", queue_id=0)
        assert exc.value.code == "SLAVE_NOT_AVAILABLE" and exc.value.status == 503
        assert body_bytes(c.by_offset(exc.value.body["commitLogOffset"])) == b"kept"


@pytest.mark.timeout(60)
def test_garbage_on_ha_port_is_dropped_broker_keeps_running(broker: BrokerProc) -> None:
    ha_port = broker.api_port + 1
    with broker.client() as c:
        before = c.status()["commitLog"]["maxOffset"]
    for garbage in (os.urandom(3), os.urandom(4096), b"\xff" * 8 * 10, b"GET / HTTP/1.1\r\n\r\n"):
        with socket.create_connection(("127.0.0.1", ha_port), timeout=5) as s:
            s.sendall(garbage)
            s.settimeout(5)
            try:
                while s.recv(65536):  # whatever the master sends, it must end the connection
                    pass
            except (socket.timeout, ConnectionResetError):
                pass
    assert broker.alive()
    with broker.client() as c:
        wait_until(lambda: c.status()["ha"]["connections"] == 0, 10, "garbage connections dropped")
        with pytest.raises(BrokerClientError) as exc:  # still no (real) slave
            c.send("TopicAfterGarbage", "still works", queue_id=0)
        assert exc.value.code == "SLAVE_NOT_AVAILABLE"
        assert c.status()["commitLog"]["maxOffset"] > before


def _mqbroker(conf: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "broker.cli.mqbroker", "-c", str(conf)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.timeout(90)
def test_bad_conf_files_and_held_lock(broker: BrokerProc, tmp_path: Path) -> None:
    typo = classic_conf("broker-a.conf", tmp_path / "typo.conf", brokerRol="SLAVE")
    r = _mqbroker(typo)
    assert r.returncode == 2 and "unknown key 'brokerRol'" in r.stderr and "brokerRole" in r.stderr
    assert "Traceback" not in r.stderr
    bad_value = classic_conf("broker-a.conf", tmp_path / "val.conf", listenPort="ten")
    r = _mqbroker(bad_value)
    assert r.returncode == 2 and "listenPort" in r.stderr and "Traceback" not in r.stderr
    r = _mqbroker(tmp_path / "missing.conf")
    assert r.returncode == 2 and "cannot read config file" in r.stderr
    # a second broker on the same store: lock held -> exit 3, the first keeps running
    conf_text = broker.conf.read_text()
    same_store = tmp_path / "same-store.conf"
    other = port_pair()
    same_store.write_text(conf_text.replace(f"listenPort={broker.api_port}", f"listenPort={other}")
                          .replace(f"haListenPort={broker.api_port + 1}", f"haListenPort={other + 1}"))
    r = _mqbroker(same_store)
    assert r.returncode == 3 and "lock" in r.stderr.lower() and "Traceback" not in r.stderr, r.stderr
    assert broker.alive()
    with broker.client() as c:
        assert c.status()["writable"] is True
