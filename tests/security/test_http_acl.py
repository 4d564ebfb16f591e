"""Issue 12.2: with aclEnable=true every HTTP route needs a signed request of a plain_acl.yml account.

One real ACL broker (``mqbroker``, 127.0.0.1) serves every case: each route is refused without a
signature, with a wrong signature, with a timestamp outside the 5-minute window (a request
captured earlier and replayed later), as an in-window replay of an accepted request, and with
an account lacking RocketMQ's permission (PUB / SUB / admin); the right account is served.
Refusals are 401/403 JSON with one log line each and no secret. The slave's metadata sync
authenticates with its own account (innerAccessKey) and a wrong one logs a clear refusal.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest

from broker.api.client import SyncBrokerClient
from broker.api.signing import sign_headers
from tools.broker_confs import slave_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import REPO, wait_until
from tests.security._http_support import (ADMIN, CONSUMER, METRICS_TOKEN, NOBODY, PRODUCER, SECRETS, SLAVE,
                                          now_ms, raw_request, resend, start_acl_master)

pytestmark = pytest.mark.multiprocess
SKEW = 6 * 60 * 1000  # beyond the broker's 5-minute window


@pytest.fixture(scope="module")
def acl_master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("http-acl")
    b = start_acl_master(tmp, slaveSyncIntervalMs=500)
    try:
        with SyncBrokerClient(b.address, access_key=ADMIN[0], secret_key=ADMIN[1]) as admin:
            admin.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
        with SyncBrokerClient(b.address, access_key=PRODUCER[0], secret_key=PRODUCER[1]) as prod:
            sent = prod.send("TopicA", "hello", keys="k1", queue_id=0)
        yield {"broker": b, "tmp": tmp, "msgId": sent["msgId"], "offset": sent["commitLogOffset"]}
    finally:
        kill_all([b])


def _j(obj: Any) -> bytes:
    return json.dumps(obj).encode()


# method, path, body, the account that may, an account that may not (None: any account may)
ROUTES: list[tuple[str, str, Optional[bytes], tuple[str, str], Optional[tuple[str, str]]]] = [
    ("POST", "/messages", _j({"topic": "TopicA", "body": "x"}), PRODUCER, CONSUMER),
    ("POST", "/messages/batch", _j({"topic": "TopicA", "messages": [{"body": "a"}, {"body": "b"}]}), PRODUCER, CONSUMER),
    ("GET", "/topics/TopicA/queues/0/messages?offset=0&maxCount=1", None, CONSUMER, PRODUCER),
    ("GET", "/messages/by-id/{msgId}", None, CONSUMER, PRODUCER),
    ("GET", "/messages/by-offset/{offset}", None, CONSUMER, PRODUCER),
    ("GET", "/messages/by-key?topic=TopicA&key=k1", None, CONSUMER, PRODUCER),
    ("GET", "/topics", None, NOBODY, None),
    ("POST", "/topics", _j({"topic": "TopicNew", "readQueueNums": 1}), ADMIN, PRODUCER),
    ("GET", "/topics/TopicA", None, PRODUCER, NOBODY),
    ("GET", "/consumer-offsets?group=GroupA&topic=TopicA", None, CONSUMER, PRODUCER),
    ("GET", "/consumer-offsets", None, ADMIN, CONSUMER),
    ("POST", "/consumer-offsets", _j({"group": "GroupA", "topic": "TopicA", "queueId": 0, "offset": 1}), CONSUMER,
     PRODUCER),
    ("GET", "/status", None, NOBODY, None),
    ("GET", "/admin/config/topics", None, ADMIN, CONSUMER),
    ("GET", "/admin/dledger", None, NOBODY, None),
    ("POST", "/admin/dledger/transfer-leader", _j({"to": "n1"}), ADMIN, CONSUMER),
    ("POST", "/admin/dledger/preferred-leader", _j({"ids": []}), ADMIN, CONSUMER),
    ("GET", "/metrics", None, NOBODY, None),
    ("GET", "/no/such/route", None, NOBODY, None),
]


def _refused(status: int, data: Any, http_status: int, code: str, text: str = "") -> None:
    assert status == http_status, (status, data)
    assert isinstance(data, dict) and data.get("code") == code, data
    assert text in data.get("message", ""), data


@pytest.mark.timeout(120)
@pytest.mark.parametrize("method,path,body,right,wrong", ROUTES, ids=[f"{r[0]} {r[1].split('?')[0]}" for r in ROUTES])
def test_route_needs_a_signed_request_with_permission(acl_master: dict[str, Any], method: str, path: str,
                                                      body: Optional[bytes], right: tuple[str, str],
                                                      wrong: Optional[tuple[str, str]]) -> None:
    addr = acl_master["broker"].address
    path = path.format(msgId=acl_master["msgId"], offset=acl_master["offset"])
    status, data, _ = raw_request(addr, method, path, body)
    _refused(status, data, 401, "UNAUTHORIZED", "No accessKey is configured")
    status, data, _ = raw_request(addr, method, path, body, (right[0], "not-the-right-secret-123"))
    _refused(status, data, 401, "UNAUTHORIZED", f"Check signature failed for accessKey={right[0]}")
    status, data, _ = raw_request(addr, method, path, body, ("rmq-stranger", "whatever-secret-123"))
    _refused(status, data, 401, "UNAUTHORIZED", "No acl config for rmq-stranger")
    # captured 6 minutes ago and replayed now, or signed with a clock 6 minutes ahead
    for ts in (now_ms() - SKEW, now_ms() + SKEW):
        status, data, _ = raw_request(addr, method, path, body, right, now_ms=ts)
        _refused(status, data, 401, "UNAUTHORIZED", "window")
    if wrong is not None:
        status, data, _ = raw_request(addr, method, path, body, wrong)
        _refused(status, data, 403, "NO_PERMISSION")
    status, data, sent = raw_request(addr, method, path, body, right)
    assert status not in (401, 403) and status < 500, (status, data)
    if not path.startswith(("/admin/dledger", "/no/")):
        assert status == 200, (status, data)
    status, data = resend(addr, method, path, body, sent)  # the same signed request, within the window
    _refused(status, data, 401, "UNAUTHORIZED", "replayed")


@pytest.mark.timeout(60)
def test_open_health_metrics_token_offset_reset_and_log(acl_master: dict[str, Any]) -> None:
    b: BrokerProc = acl_master["broker"]
    addr = b.address
    status, data, _ = raw_request(addr, "GET", "/health")
    assert (status, data) == (200, {"ok": True})  # liveness stays open, and says nothing else
    status, text, _ = raw_request(addr, "GET", "/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert status == 200 and "rocketmq_broker_" in text
    status, data, _ = raw_request(addr, "GET", "/metrics", headers={"Authorization": "Bearer guessed-token-123"})
    _refused(status, data, 401, "UNAUTHORIZED")
    status, data, _ = raw_request(addr, "GET", "/status", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    _refused(status, data, 401, "UNAUTHORIZED")  # the scrape token opens /metrics only
    # a consumer commits forward, but moving its offset back is a reset: admin only
    commit = {"group": "GroupA", "topic": "TopicA", "queueId": 0}
    status, data, _ = raw_request(addr, "POST", "/consumer-offsets", json.dumps({**commit, "offset": 1}).encode(), CONSUMER)
    assert status == 200, data
    status, data, _ = raw_request(addr, "POST", "/consumer-offsets", json.dumps({**commit, "offset": 0}).encode(), CONSUMER)
    _refused(status, data, 403, "NO_PERMISSION", "admin")
    status, data, _ = raw_request(addr, "POST", "/consumer-offsets", json.dumps({**commit, "offset": 0}).encode(), ADMIN)
    assert status == 200, data
    # a signed body changed in flight
    good = json.dumps({"topic": "TopicA", "body": "x"}).encode()
    headers = sign_headers("POST", "/messages", good, *PRODUCER)
    status, data, _ = raw_request(addr, "POST", "/messages", good.replace(b'"x"', b'"y"'), headers=headers)
    _refused(status, data, 401, "UNAUTHORIZED", "Check signature failed")
    log = b.log_path.read_text(errors="replace")
    refusals = [x for x in log.splitlines() if "HTTP ACL refused" in x]
    assert refusals and all(" from 127.0.0.1:" in x and ("(401): " in x or "(403): " in x) for x in refusals)
    assert "Traceback" not in log
    for secret in SECRETS:
        assert secret not in log
    assert b.alive()


@pytest.mark.timeout(60)
def test_mqadmin_signs_with_env_credentials(acl_master: dict[str, Any]) -> None:
    addr = acl_master["broker"].address
    base = {k: v for k, v in os.environ.items() if k not in ("RMQ_ACCESS_KEY", "RMQ_SECRET_KEY")}
    cmd = [sys.executable, "-m", "broker.cli.mqadmin", "topicList", "-b", addr]
    ok = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=30,
                        env={**base, "RMQ_ACCESS_KEY": NOBODY[0], "RMQ_SECRET_KEY": NOBODY[1]})
    assert ok.returncode == 0 and "TopicA" in ok.stdout, ok.stderr
    no = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=30, env=base)
    assert no.returncode == 1 and no.stderr.strip() == "UNAUTHORIZED: No accessKey is configured", no.stderr
    flags = subprocess.run(cmd + ["--access-key", PRODUCER[0], "--secret-key", PRODUCER[1]], cwd=REPO,
                           capture_output=True, text=True, timeout=30, env=base)
    assert flags.returncode == 0 and "TopicA" in flags.stdout, flags.stderr


@pytest.mark.timeout(90)
def test_slave_syncs_metadata_with_its_own_account(acl_master: dict[str, Any]) -> None:
    master: BrokerProc = acl_master["broker"]
    tmp: Path = acl_master["tmp"]
    good_dir, bad_dir = tmp / "good-slave", tmp / "bad-slave"
    good_dir.mkdir()
    bad_dir.mkdir()
    procs: list[BrokerProc] = []
    try:
        conf, port = slave_conf(good_dir, master.api_port, innerAccessKey=SLAVE[0], innerSecretKey=SLAVE[1],
                                slaveSyncIntervalMs=500)
        good = BrokerProc(conf, port, "good-slave", good_dir)
        procs.append(good)
        conf, port = slave_conf(bad_dir, master.api_port, innerAccessKey=SLAVE[0],
                                innerSecretKey="not-the-slave-secret-1", slaveSyncIntervalMs=500)
        bad = BrokerProc(conf, port, "bad-slave", bad_dir)
        procs.append(bad)
        good.start()
        bad.start()

        def topics(p: BrokerProc) -> set[str]:
            with p.client(timeout=5) as c:
                return {t["topicName"] for t in c.topics().get("topics", [])}

        wait_until(lambda: "TopicA" in topics(good), 20, "the slave synced TopicA from the ACL master")
        wait_until(lambda: "refused the metadata sync" in bad.log_path.read_text(errors="replace"), 20,
                   "the wrongly keyed slave logs the refusal")
        bad_log = bad.log_path.read_text(errors="replace")
        line = next(x for x in bad_log.splitlines() if "refused the metadata sync" in x)
        assert f"master 127.0.0.1:{master.api_port}" in line and f"accessKey={SLAVE[0]}" in line
        assert "Check signature failed" in line and "ERROR" in line
        assert bad_log.count("refused the metadata sync") == 1  # one line, not one per round
        assert "TopicA" not in topics(bad)
        assert "over HTTP" not in bad_log  # no silent fallback to another door
        for p in (good, bad):
            assert "not-the-slave-secret-1" not in p.log_path.read_text(errors="replace")
            assert SLAVE[1] not in p.log_path.read_text(errors="replace")
    finally:
        kill_all(procs)
