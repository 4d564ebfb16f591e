"""Issue 23.7: a signed HTTP request is good on the broker it was sent to, and nowhere else.

Two real ACL brokers (``mqbroker``, 127.0.0.1, the same ``plain_acl.yml``, as the nodes of one
DLedger group have): a request the first accepted, replayed byte for byte to the second, was
accepted there too (the replay guard is per node and the host was not signed). Now the
signature covers ``Host`` and each broker accepts only a ``Host`` naming itself, so the replay is
a 401 on the second broker, while the same account's own requests to it (the client signs the
address it connects to, also as ``localhost``) and the slave-sync style signer keep working.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from broker.api.client import SyncBrokerClient
from broker.api.signing import sign_headers
from tests.broker.api.broker_procs import BrokerProc, kill_all
from tests.security._http_support import ADMIN, CONSUMER, raw_request, resend, start_acl_master

pytestmark = pytest.mark.multiprocess


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProc, BrokerProc]]:
    procs: list[BrokerProc] = []
    try:
        for name in ("node-a", "node-b"):
            procs.append(start_acl_master(tmp_path_factory.mktemp(name), name=name))
        yield procs[0], procs[1]
    finally:
        kill_all(procs)


@pytest.mark.timeout(60)
def test_a_request_accepted_by_one_broker_is_refused_by_another(pair: tuple[BrokerProc, BrokerProc]) -> None:
    a, b = pair
    for method, path, account in (("GET", "/status", ADMIN), ("GET", "/topics", CONSUMER),
                                  ("GET", "/admin/config/topics", ADMIN)):
        status, data, sent = raw_request(a.address, method, path, None, account)
        assert status == 200, (path, data)
        # the same bytes to the other node: same account, good signature, never seen there
        status, data = resend(b.address, method, path, None, sent)
        assert status == 401, (path, status, data)
        assert data["code"] == "UNAUTHORIZED" and "signed for" in data["message"], data
        # and to the first node again: a replay
        status, data = resend(a.address, method, path, None, sent)
        assert status == 401 and "already used" in data["message"], data


@pytest.mark.timeout(60)
def test_host_rewritten_to_the_other_broker_breaks_the_signature(pair: tuple[BrokerProc, BrokerProc]) -> None:
    a, b = pair
    _, _, sent = raw_request(a.address, "GET", "/status", None, ADMIN)
    forged = dict(sent, Host=b.address)  # the attacker rewrites Host to match the node it replays to
    status, data = resend(b.address, "GET", "/status", None, forged)
    assert status == 401 and "Check signature failed" in data["message"], data
    # a signature made for B's address but sent to A (a misrouted or replayed request)
    headers = sign_headers("GET", "/status", None, *ADMIN, host=b.address)
    status, data = resend(a.address, "GET", "/status", None, headers)
    assert status == 401 and "signed for" in data["message"], data
    # unsigned Host (the old scheme): refused
    headers = sign_headers("GET", "/status", None, *ADMIN)
    status, data = resend(a.address, "GET", "/status", None, {**headers, "Host": a.address})
    assert status == 401 and "Check signature failed" in data["message"], data
    # honest clients sign the broker they talk to (by IP or as localhost): served by both
    for broker in pair:
        for addr in (broker.address, f"localhost:{broker.api_port}"):
            with SyncBrokerClient(addr, access_key=ADMIN[0], secret_key=ADMIN[1]) as c:
                assert c.status().get("writable") is not None
                c.create_topic("TopicBound", read_queue_nums=1, write_queue_nums=1)
            with SyncBrokerClient(addr, access_key=CONSUMER[0], secret_key=CONSUMER[1]) as c:
                assert isinstance(c.topics(), dict)
        assert broker.alive()
