"""Issue 24.5: silent peers are detected (pure rule), reset and redialled (real sockets, proxy)."""
from __future__ import annotations

import asyncio
import socket

import pytest

from dledger.config import DLedgerConfig
from dledger.rpc.liveness import SilenceDetector, tune_socket
from dledger.rpc.transport import PeerTransport
from tools.procs import free_ports
from tests.faults.harness.proxy import Fault, ProxyHub

pytestmark = pytest.mark.timeout(60)


def test_a_peer_is_silent_only_after_silence_s_of_waiting_with_nothing_heard() -> None:
    d = SilenceDetector(1.0)
    assert d.due(100.0) == []                  # nothing sent: never silent
    d.heard("a", 0.0)
    d.sent("a", 10.0)
    d.sent("a", 10.5)                          # the first unanswered frame starts the clock
    assert d.due(10.9) == []
    assert d.due(11.0) == ["a"]
    assert d.due(11.5) == []                   # the clock restarted at the reset
    d.sent("a", 11.6)
    assert d.due(12.5) == []                   # reset at 11.0: the next one silence_s later at the earliest
    assert d.due(12.6) == ["a"]


def test_an_answer_clears_the_wait_and_an_idle_peer_is_never_silent() -> None:
    d = SilenceDetector(0.5)
    d.sent("a", 0.0)
    d.heard("a", 0.4)
    assert d.due(10.0) == []                   # answered, then nothing sent
    d.sent("a", 10.0)
    d.heard("b", 10.0)
    assert d.due(10.6) == ["a"]                # heard long ago (0.4), waiting since 10.0
    with pytest.raises(ValueError):
        SilenceDetector(0)


def test_sockets_get_keepalive_and_tcp_user_timeout() -> None:
    with socket.socket() as s:
        done = tune_socket(s, 2000)
        assert s.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        if hasattr(socket, "TCP_USER_TIMEOUT"):
            assert "TCP_USER_TIMEOUT" in done
            assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 2000
    assert tune_socket(None, 2000) == []


def test_link_timeouts_derive_from_the_election_timeout() -> None:
    c = DLedgerConfig(election_timeout_min_ms=500, election_timeout_max_ms=1000)
    assert c.link_timeouts() == {"silence_s": 1.0, "dial_timeout_s": 1.0, "tcp_user_timeout_ms": 2000}
    c = DLedgerConfig(peer_silence_timeout_ms=300, peer_dial_timeout_ms=400, tcp_user_timeout_ms=900)
    assert c.link_timeouts() == {"silence_s": 0.3, "dial_timeout_s": 0.4, "tcp_user_timeout_ms": 900}
    with pytest.raises(ValueError, match="peer_silence_timeout_ms"):
        DLedgerConfig(peer_silence_timeout_ms=-1).validate()


async def test_a_silent_link_is_reset_and_redialled_after_a_heal_on_dead_connections() -> None:
    """Both links between a and b go through a proxy that blackholes them with ``keep_dead``: at
    the heal the old connections stay open and silent. a keeps sending; b must get a's messages
    again within silence + dial timeout of the heal, and a counts the resets."""
    hub = ProxyHub(7)
    ports = free_ports(2)
    real = {"a": ("127.0.0.1", ports[0]), "b": ("127.0.0.1", ports[1])}
    via = {"a->b": hub.add_link("a->b", real["b"], framed=True), "b->a": hub.add_link("b->a", real["a"], framed=True)}
    got: dict[str, list] = {"a": [], "b": []}
    nodes = {}
    for me, other in (("a", "b"), ("b", "a")):
        peers = {me: real[me], other: ("127.0.0.1", via[f"{me}->{other}"])}
        nodes[me] = PeerTransport("g", me, peers, secret="a-shared-secret-of-16+",
                                  on_peer_message=lambda src, m, me=me: got[me].append(m),
                                  silence_s=0.3, dial_timeout_s=0.5)
    loop = asyncio.get_running_loop()

    async def chatter(stop: asyncio.Event) -> None:  # a asks, b answers (as Raft does)
        i = 0
        while not stop.is_set():
            nodes["a"].send("b", {"i": i})
            for m in list(got["b"]):
                got["b"].remove(m)
                nodes["b"].send("a", {"ack": m["i"]})
            i += 1
            await asyncio.sleep(0.02)

    stop = asyncio.Event()
    for n in nodes.values():
        await n.start()
    task = asyncio.ensure_future(chatter(stop))
    try:
        async def acked_after(t: float, bound: float = 10.0) -> float:
            n = len(got["a"])
            while loop.time() - t < bound:
                if len(got["a"]) > n:
                    return loop.time() - t
                await asyncio.sleep(0.01)
            raise AssertionError(f"no answer within {bound}s; stats {nodes['a'].stats()}")

        await acked_after(loop.time())
        for link in via:
            for d in ("fwd", "rev"):
                await asyncio.to_thread(hub.set_fault, link, d, Fault(blackhole=True, keep_dead=True))
        await asyncio.sleep(1.5)
        await asyncio.to_thread(hub.heal_all)
        took = await acked_after(loop.time())
        print(f"answers again {took:.2f} s after the heal; resets {nodes['a'].stats()['silent_resets']}")
        assert took < 0.3 + 0.5 + 0.5, took
        assert nodes["a"].stats()["silent_resets"] >= 1
        assert nodes["a"].stats()["peers"]["b"]["silent_resets"] >= 1
    finally:
        stop.set()
        await task
        for n in nodes.values():
            await n.stop()
        await asyncio.to_thread(hub.close)
