"""The proxy's ``keep_dead`` blackhole (issue 24.5): after the heal the old connection stays open
and silent (as one stuck in TCP retransmission), while a new connection carries traffic."""
from __future__ import annotations

import socket
import time

import pytest

from tests.faults.harness.proxy import Fault, ProxyHub
from tests.faults.test_proxy import echo, frame, read_frames  # noqa: F401 - the echo fixture

pytestmark = pytest.mark.timeout(30)


def test_keep_dead_blackhole_leaves_the_old_connection_silent_after_the_heal(echo) -> None:  # noqa: F811
    hub = ProxyHub(seed=3)
    try:
        port = hub.add_link("a->b", echo, framed=True)
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(frame(1))
        assert read_frames(s, 1) == [b"frame-0001"]
        hub.set_fault("a->b", "fwd", Fault(blackhole=True, keep_dead=True))
        s.sendall(frame(2))
        assert read_frames(s, 1, timeout=0.5) == []
        hub.heal_all()
        time.sleep(0.2)
        s.sendall(frame(3))
        s.settimeout(0.5)
        with pytest.raises(socket.timeout):  # neither an answer nor a close: silent
            s.recv(10)
        s2 = socket.create_connection(("127.0.0.1", port))
        s2.sendall(frame(4))
        assert read_frames(s2, 1) == [b"frame-0004"]
        st = hub.stats()["a->b"]
        assert st["kept_dead"] == 1 and st["resets"] == 0, st
        s.close()
        s2.close()
    finally:
        hub.close()
