"""Helpers of the HTTP ACL and small-doors attack tests: ACL brokers, raw signed requests.

Every broker started here is a real ``mqbroker`` process on 127.0.0.1 free ports; callers stop
it in ``finally`` (fixtures do).
"""
from __future__ import annotations

import http.client
import json
import time
from pathlib import Path
from typing import Any, Optional

from broker.api.signing import sign_headers
from tools.broker_confs import master_conf
from tools.nodes import BrokerProc

ADMIN = ("rmq-admin-key", "admin-secret-0123456789")
PRODUCER = ("rmq-prod-key", "prod-secret-0123456789")
CONSUMER = ("rmq-cons-key", "cons-secret-0123456789")
NOBODY = ("rmq-nobody-key", "nobody-secret-0123456789")
SLAVE = ("rmq-slave-key", "slave-secret-0123456789")
METRICS_TOKEN = "prometheus-scrape-token-0123456789"
SECRETS = [a[1] for a in (ADMIN, PRODUCER, CONSUMER, NOBODY, SLAVE)]

ACL_YAML = f"""
globalWhiteRemoteAddresses:
  - 10.250.250.*
accounts:
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
  - accessKey: {PRODUCER[0]}
    secretKey: {PRODUCER[1]}
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - TopicA=PUB
  - accessKey: {CONSUMER[0]}
    secretKey: {CONSUMER[1]}
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms:
      - TopicA=SUB
    groupPerms:
      - GroupA=SUB
  - accessKey: {NOBODY[0]}
    secretKey: {NOBODY[1]}
    admin: false
  - accessKey: {SLAVE[0]}
    secretKey: {SLAVE[1]}
    admin: true
"""


def start_acl_master(tmp: Path, name: str = "acl-master", **extra: Any) -> BrokerProc:
    acl = tmp / "plain_acl.yml"
    acl.write_text(ACL_YAML)
    conf, port = master_conf(tmp, role="ASYNC_MASTER", aclEnable="true", plainAclFile=acl,
                             metricsBearerToken=METRICS_TOKEN, **extra)
    return BrokerProc(conf, port, name, tmp).start()


def raw_request(address: str, method: str, path: str, body: Optional[bytes] = None,
                account: Optional[tuple[str, str]] = None, *, now_ms: Optional[int] = None,
                headers: Optional[dict[str, str]] = None) -> tuple[int, Any, dict[str, str]]:
    """One HTTP exchange on a fresh connection: (status, JSON or text, headers sent)."""
    sent = dict(headers or {})
    if account is not None:
        sent.update(sign_headers(method, path, body, *account, now_ms=now_ms, host=address))
    host, _, port = address.rpartition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request(method, path, body=body, headers=sent)
        resp = conn.getresponse()
        text = resp.read().decode("utf-8", "replace")
    finally:
        conn.close()
    try:
        data: Any = json.loads(text)
    except ValueError:
        data = text
    return resp.status, data, sent


def resend(address: str, method: str, path: str, body: Optional[bytes], sent: dict[str, str]) -> tuple[int, Any]:
    """Send exactly the same request (same signature headers) again: a replay."""
    status, data, _ = raw_request(address, method, path, body, headers=sent)
    return status, data


def now_ms() -> int:
    return int(time.time() * 1000)
