"""Issue 23.7: a signed HTTP request is good on the broker it was sent to, and nowhere else.

Two real ACL brokers (``mqbroker``, 127.0.0.1, the same ``plain_acl.yml``), then a real
three-node DLedger group with ACL: a request the first broker (the leader) accepted, replayed
byte for byte to the second (a follower), was accepted there too (the replay guard is per node
and the host was not signed). Now the signature covers ``Host`` and each broker accepts only a
``Host`` naming itself, so the replay is a 401 there, while the same account's own requests to
it (the client signs the address it connects to, also as ``localhost``) keep working.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from broker.api.client import SyncBrokerClient
from broker.api.signing import sign_headers
from tools.procs import free_ports, write_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import REPO, wait_until
from tests.security._http_support import ACL_YAML, ADMIN, CONSUMER, SLAVE, raw_request, resend, start_acl_master

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


IDS = ("n0", "n1", "n2")


def _is_master(address: str) -> bool:
    try:
        with SyncBrokerClient(address, timeout=3.0, access_key=ADMIN[0], secret_key=ADMIN[1]) as c:
            st = c.status()
        return bool(st.get("isMaster")) and st.get("brokerId") == 0
    except Exception:  # noqa: BLE001 - not up yet
        return False


@pytest.mark.timeout(120)
def test_a_request_accepted_by_the_leader_is_refused_by_the_followers(tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL_YAML)
    ports = free_ports(6)
    http = dict(zip(IDS, ports[:3]))
    peers = ";".join(f"{n}-127.0.0.1:{p}" for n, p in zip(IDS, ports[3:]))
    http_peers = ";".join(f"{n}-127.0.0.1:{http[n]}" for n in IDS)
    procs: dict[str, BrokerProc] = {}
    try:
        for n in IDS:
            root = tmp_path / f"dledger-{n}"
            conf = write_conf(REPO / "conf" / "dledger" / f"broker-{n}.conf", tmp_path / f"broker-{n}.conf",
                              {"listenPort": http[n], "dLegerPeers": peers, "dLegerPeersHttp": http_peers,
                               "storePathRootDir": root, "storePathCommitLog": root / "commitlog",
                               "mappedFileSizeCommitLog": 1 << 20, "aclEnable": "true", "plainAclFile": acl,
                               "innerAccessKey": SLAVE[0], "innerSecretKey": SLAVE[1],
                               "remotingAllowInsecure": "false"})
            procs[n] = BrokerProc(conf, http[n], n, tmp_path).start(wait=False)
        for p in procs.values():
            p.wait_ready(60)
        leader = wait_until(lambda: next((n for n in IDS if _is_master(f"127.0.0.1:{http[n]}")), None), 60,
                            "a DLedger leader")
        leader_addr = f"127.0.0.1:{http[leader]}"
        for method, path in (("GET", "/status"), ("GET", "/admin/config/topics"), ("GET", "/admin/dledger")):
            status, data, sent = raw_request(leader_addr, method, path, None, ADMIN)
            assert status == 200, (path, data)
            for n in IDS:
                if n == leader:
                    continue
                status, data = resend(f"127.0.0.1:{http[n]}", method, path, None, sent)
                assert status == 401 and "signed for" in data["message"], (n, path, status, data)
        for n in IDS:  # each node serves requests signed for itself
            status, data, _ = raw_request(f"127.0.0.1:{http[n]}", "GET", "/status", None, ADMIN)
            assert status == 200, (n, data)
    finally:
        kill_all(list(procs.values()))
