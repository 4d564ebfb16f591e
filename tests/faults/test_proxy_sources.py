"""The fault proxy's per-dialler faults and given listen address (issue 27.5's partitions): a
connection is attributed to the node whose process dialled it, a fault set for that node cuts its
connections only, and healing it resets only the connections that lost bytes."""
from __future__ import annotations

import os
import socket

import pytest

from tests.faults.harness.proxy import Fault, ProxyHub, node_owning_socket, tcp_socket_inode
from tests.faults.test_proxy import echo, frame, read_frames  # noqa: F401 - the echo fixture


@pytest.mark.timeout(30)
def test_a_fault_for_one_dialler_cuts_its_connections_only(echo) -> None:  # noqa: F811
    hub = ProxyHub(seed=3)
    try:
        # another loopback host, the port of the echo server (a node advertising brokerIP2:haListenPort)
        port = hub.add_link("any->b", echo, framed=True, listen_host="127.0.0.2", listen_port=echo[1])
        assert port == echo[1]
        me = os.getpid()
        hub.identify_diallers(lambda: {"other": None, "me": me})
        s = socket.create_connection(("127.0.0.2", port))
        s.sendall(frame(1))
        assert read_frames(s, 1) == [b"frame-0001"]
        assert tcp_socket_inode(s.getsockname(), s.getpeername()) is not None
        assert node_owning_socket(tcp_socket_inode(s.getsockname(), s.getpeername()), {"me": me}) == "me"

        hub.set_fault("any->b", "fwd", Fault(blackhole=True), source="other")
        s.sendall(frame(2))
        assert read_frames(s, 1) == [b"frame-0002"], "another dialler's fault leaves this connection alone"

        hub.set_fault("any->b", "fwd", Fault(blackhole=True), source="me")
        assert set(hub.faulty()["any->b"]) == {"fwd@other", "fwd@me"}
        s.sendall(frame(3))
        assert read_frames(s, 1, timeout=0.5) == [], "this dialler's bytes vanish"
        hub.set_fault("any->b", "fwd", Fault(), source="me")
        s.settimeout(2)
        assert s.recv(10) == b"", "the connection that lost bytes is reset at the heal"
        hub.heal_all()
        assert hub.faulty() == {}
        s2 = socket.create_connection(("127.0.0.2", port))
        s2.sendall(frame(4))
        assert read_frames(s2, 1) == [b"frame-0004"]
        assert hub.stats()["any->b"]["dropped_units"] == 1
    finally:
        hub.close()


@pytest.mark.timeout(30)
def test_an_unknown_dialler_only_sees_the_links_own_fault(echo) -> None:  # noqa: F811
    hub = ProxyHub(seed=4)
    try:
        port = hub.add_link("a->b", echo)
        hub.identify_diallers(lambda: {"node": 1})  # pid 1 never owns the test's socket
        hub.set_fault("a->b", "fwd", Fault(blackhole=True), source="node")
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"hello")
        s.settimeout(2)
        assert s.recv(10) == b"hello"
        hub.set_fault("a->b", "fwd", Fault(blackhole=True))
        s.sendall(b"gone")
        s.settimeout(0.3)
        with pytest.raises(socket.timeout):
            s.recv(10)  # nothing comes back within 0.3 s: the link's own fault holds for everyone
    finally:
        hub.close()
