"""Issue 23.6: no single account or address can lock the others (the admin above all) out.

One real ACL broker (``mqbroker``, 127.0.0.1) with a small cap (``serverMaxConnections`` 40, idle
2 s) serves the socket cases; each test checks its own effect and that the broker keeps serving.
- Unauthenticated sockets filling the cap (kept "alive" with refused requests) no longer lock the
  admin out of HTTP or remoting: a newcomer evicts the least-proven connection, an admin's
  connection is never evicted. Before the fix the admin's connections were closed at once.
- A refused request does not reset the idle clock: such a socket is closed as idle (before: never).
- A deny-all account cannot fill the replay guard with future-dated requests: a timestamp more
  than 60 s ahead is refused (before: accepted, remembered for ~10 minutes), and the guard keeps
  one book per account, so one account's flood never pushes out another's signatures.
"""
from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Iterator

import pytest

from broker.api.client import SyncBrokerClient
from broker.api.signing import ReplayGuard
from broker.remoting.acl import signer
from broker.remoting.client import RemotingClient
from broker.remoting.codec import RemotingCommand, encode
from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from tools.nodes import BrokerProc, kill_all
from tools.procs import wait_until
from tests.security._http_support import ADMIN, NOBODY, PRODUCER, now_ms, raw_request, start_acl_master
from tests.security._listen_support import close_all, closed_by_peer, connect

pytestmark = pytest.mark.multiprocess
CAP = 40
IDLE_S = 2


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProc]:
    b = start_acl_master(tmp_path_factory.mktemp("lockouts"), name="lockouts", serverMaxConnections=CAP,
                         serverChannelMaxIdleTimeSeconds=IDLE_S, serverReadTimeoutMillis=1000)
    try:
        yield b
    finally:
        kill_all([b])


def _unsigned_request(opaque: int) -> bytes:
    """A remoting request the ACL refuses (no AccessKey)."""
    return encode(RemotingCommand.request(RC.GET_MAX_OFFSET, {"topic": "TopicA", "queueId": 0}, b"", opaque=opaque))


def _counters(b: BrokerProc) -> dict[str, int]:
    with SyncBrokerClient(b.address, access_key=ADMIN[0], secret_key=ADMIN[1]) as c:
        got = c.status().get("listen", {}).get("ports", {}).get(str(b.api_port), {})
    return {k: int(v) for k, v in got.items() if isinstance(v, int)}


def _drain(b: BrokerProc) -> None:
    wait_until(lambda: _counters(b).get("open", 0) <= 2, 15, "the port's connections to drain")


class _Holders:
    """``n`` unauthenticated sockets; a thread sends each a refused request every 0.3 s."""

    def __init__(self, port: int, n: int) -> None:
        self.socks = [connect(port) for _ in range(n)]
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        opaque = 0
        while not self._stop.wait(0.3):
            for s in self.socks:
                opaque += 1
                try:
                    s.sendall(_unsigned_request(opaque))
                except OSError:
                    pass

    def close(self) -> None:
        self._stop.set()
        self._t.join(5)
        close_all(self.socks)


def _admin_over_remoting(port: int, topic: str) -> int:
    async def run() -> int:
        c = await RemotingClient.connect("127.0.0.1", port, rpc_hook=signer(*ADMIN))
        try:
            r = await c.request(RC.UPDATE_AND_CREATE_TOPIC, {"topic": topic, "readQueueNums": 1, "writeQueueNums": 1,
                                                             "perm": 6}, timeout=5)
            return r.code
        finally:
            await c.close()

    return asyncio.run(run())


@pytest.mark.timeout(90)
def test_unauthenticated_sockets_cannot_lock_the_admin_out(broker: BrokerProc) -> None:
    _drain(broker)
    before = _counters(broker)
    holders = _Holders(broker.api_port, CAP)
    late: list[socket.socket] = []
    try:
        time.sleep(0.5)
        # the cap is full of sockets that never authenticated: the admin still gets in, both doors
        status, data, _ = raw_request(broker.address, "GET", "/status", None, ADMIN)
        assert status == 200, data
        assert _admin_over_remoting(broker.api_port, "TopicLockout") == R.SUCCESS
        # an admin's connection, once authenticated, survives a wave of newcomers
        async def keep_admin() -> tuple[int, int]:
            c = await RemotingClient.connect("127.0.0.1", broker.api_port, rpc_hook=signer(*ADMIN))
            try:
                first = await c.request(RC.GET_BROKER_CONFIG, {}, timeout=5)
                for _ in range(2 * CAP):
                    late.append(await asyncio.to_thread(connect, broker.api_port))
                await asyncio.sleep(0.3)
                second = await c.request(RC.GET_BROKER_CONFIG, {}, timeout=5)
                return first.code, second.code
            finally:
                await c.close()

        assert asyncio.run(keep_admin()) == (R.SUCCESS, R.SUCCESS)
        after = _counters(broker)
        assert after.get("evictedForNewcomer", 0) - before.get("evictedForNewcomer", 0) >= 2 * CAP
        assert after.get("open", 0) <= CAP
    finally:
        holders.close()
        close_all(late)
    # a producer (authenticated, not admin) is served once the flood is gone
    with SyncBrokerClient(broker.address, access_key=ADMIN[0], secret_key=ADMIN[1]) as c:
        c.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
    with SyncBrokerClient(broker.address, access_key=PRODUCER[0], secret_key=PRODUCER[1]) as c:
        assert c.send("TopicA", "after-the-flood")["status"] == "SEND_OK"
    assert broker.alive()


@pytest.mark.timeout(60)
def test_refused_requests_do_not_reset_the_idle_clock(broker: BrokerProc) -> None:
    _drain(broker)
    remoting = connect(broker.api_port)
    http = connect(broker.api_port)
    try:
        t0 = time.monotonic()
        closed: dict[str, float] = {}
        n = 0
        while time.monotonic() - t0 < IDLE_S * 3 and len(closed) < 2:
            n += 1
            for name, s, data in (("remoting", remoting, _unsigned_request(n)),
                                  ("http", http, b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n")):
                if name in closed:
                    continue
                try:
                    s.sendall(data)
                except OSError:
                    closed[name] = time.monotonic() - t0
                    continue
                if closed_by_peer(s, 0.3) is not None:
                    closed[name] = time.monotonic() - t0
        print(f"sockets sending refused requests closed after {closed} (idle {IDLE_S} s)")
        assert set(closed) == {"remoting", "http"}, closed
        assert all(t <= IDLE_S + 2.5 for t in closed.values()), closed
    finally:
        close_all([remoting, http])
    status, data, _ = raw_request(broker.address, "GET", "/status", None, ADMIN)
    assert status == 200, data


@pytest.mark.timeout(60)
def test_future_dated_requests_are_refused_and_cannot_crowd_out_others(broker: BrokerProc) -> None:
    for ahead_ms in (4 * 60 * 1000, 90 * 1000):
        status, data, _ = raw_request(broker.address, "GET", "/topics", None, NOBODY, now_ms=now_ms() + ahead_ms)
        assert status == 401 and "ahead of the broker's clock" in data["message"], (ahead_ms, status, data)
    # a small clock difference is fine
    status, data, _ = raw_request(broker.address, "GET", "/topics", None, NOBODY, now_ms=now_ms() + 20_000)
    assert status == 200, data
    # a flood by one account leaves the others' requests alone
    t0 = time.monotonic()
    for i in range(300):
        status, data, _ = raw_request(broker.address, "GET", "/topics", None, NOBODY, now_ms=now_ms() + 55_000)
        assert status == 200, data
    status, data, _ = raw_request(broker.address, "GET", "/status", None, ADMIN)
    assert status == 200, data
    print(f"300 future-dated signed requests in {time.monotonic() - t0:.1f} s, honest request still served")


def test_replay_guard_books_are_per_account() -> None:
    """The table itself (small sizes): one account filling its book with future-dated signatures
    only raises its own floor; another account's fresh request is admitted, and the whole guard
    never holds more than its capacity."""
    g = ReplayGuard(capacity=1000, window_ms=300_000, per_account=400)
    now = 1_000_000_000
    for i in range(5000):
        g.admit("deny-all", f"flood-{i}", now + 59_000, now)
    assert len(g) <= 1000
    assert g.admit("admin", "honest-1", now, now) is None
    assert g.admit("admin", "honest-1", now, now) is not None  # still a replay
    assert g.admit("deny-all", "late", now, now) is not None  # the flooder's floor rose, not the admin's
    for acct in range(10):  # many accounts: the biggest book gives way, the total stays bounded
        for i in range(300):
            assert g.admit(f"acct{acct}", f"s{i}", now + i, now) is None
    assert len(g) <= 1000
    # entries expire by their own timestamp: after the window everything is forgotten
    later = now + 59_000 + 300_001
    assert g.admit("admin", "after", later, later) is None
    assert len(g) <= 1000


class _Conn:
    def __init__(self, addr: str, trust: int = 0, last: float = 0.0) -> None:
        from broker.remoting.limits import ConnectionClock

        self.remote_addr, self.clock, self.closed_for = addr, ConnectionClock(last_activity=last), None
        self.clock.prove(trust)

    def guard_close(self, reason: str) -> None:
        self.closed_for = reason


def test_eviction_order_spares_admins_and_small_addresses() -> None:
    """The port guard's rule (no sockets): the biggest address gives way first, least proven and
    longest idle first; admins are never evicted; a port full of admins refuses."""
    from broker.remoting.limits import ADMIN_TRUST, AUTHENTICATED_TRUST, EVICTED, ListenLimits, PortGuard

    g = PortGuard("unit", ListenLimits(max_connections=5, evict_unproven=True))
    admin = _Conn("10.0.0.9:1", ADMIN_TRUST, last=0.0)
    producer = _Conn("10.0.0.2:1", AUTHENTICATED_TRUST, last=0.0)
    flood = [_Conn(f"10.0.0.1:{i}", last=float(i)) for i in range(3)]
    for c in (admin, producer, *flood):
        assert g.admit(c)
    newcomer = _Conn("10.0.0.3:1", last=100.0)
    assert g.admit(newcomer)
    assert flood[0].closed_for == EVICTED and all(c.closed_for is None for c in (admin, producer, *flood[1:]))
    for i in range(10):  # the flood keeps coming: it only pushes out its own, then others one by one
        assert g.admit(_Conn(f"10.0.0.1:{100 + i}", last=200.0 + i))
    assert admin.closed_for is None and admin in g.conns
    assert producer.closed_for is None and newcomer.closed_for is None  # other addresses untouched
    assert g.stats.evicted == 11
    only_admins = PortGuard("admins", ListenLimits(max_connections=2, evict_unproven=True))
    assert only_admins.admit(_Conn("a:1", ADMIN_TRUST)) and only_admins.admit(_Conn("a:2", ADMIN_TRUST))
    assert not only_admins.admit(_Conn("b:1")) and only_admins.stats.refused_by_cap == 1
