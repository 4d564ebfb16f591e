"""The fault proxy on a local echo server: forwarding, blackhole (+ reset on heal), frame loss, delay."""
from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from tests.faults.harness.proxy import Fault, ProxyHub


@pytest.fixture
def echo():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=lambda c=conn: _echo(c), daemon=True).start()

    def _echo(c: socket.socket) -> None:
        with c:
            while data := c.recv(65536):
                c.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    yield srv.getsockname()
    stop.set()
    srv.close()


def frame(i: int) -> bytes:
    payload = f"frame-{i:04d}".encode()
    return struct.pack(">I", len(payload)) + payload


def read_frames(s: socket.socket, n: int, timeout: float = 2.0) -> list[bytes]:
    s.settimeout(timeout)
    buf = b""
    out = []
    try:
        while len(out) < n:
            buf += s.recv(65536) or b""
            while len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">I", buf[:4])[0]:
                k = 4 + struct.unpack(">I", buf[:4])[0]
                out.append(buf[4:k])
                buf = buf[k:]
    except (socket.timeout, ConnectionError):
        pass
    return out


@pytest.mark.timeout(30)
def test_forward_blackhole_heal_reset(echo) -> None:
    hub = ProxyHub(seed=1)
    try:
        port = hub.add_link("a->b", echo, framed=True)
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(frame(1))
        assert read_frames(s, 1) == [b"frame-0001"]
        hub.set_fault("a->b", "fwd", Fault(blackhole=True))
        s.sendall(frame(2))
        assert read_frames(s, 1, timeout=0.5) == []  # silently dropped, connection still open
        hub.heal_all()
        time.sleep(0.2)
        s.settimeout(2)
        assert s.recv(10) == b""  # the connection that lost bytes was reset at the heal
        s2 = socket.create_connection(("127.0.0.1", port))
        s2.sendall(frame(3))
        assert read_frames(s2, 1) == [b"frame-0003"]
        assert hub.stats()["a->b"]["dropped_units"] == 1
    finally:
        hub.close()


@pytest.mark.timeout(30)
def test_framed_loss_keeps_stream_valid_and_delay_keeps_order(echo) -> None:
    hub = ProxyHub(seed=7)
    try:
        port = hub.add_link("a->b", echo, framed=True)
        hub.set_fault("a->b", "fwd", Fault(loss=0.5))
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"".join(frame(i) for i in range(200)))
        got = read_frames(s, 200, timeout=1.0)
        ids = [int(g[6:]) for g in got]
        assert got[:2] == [b"frame-0000", b"frame-0001"]  # handshake frames are never dropped
        assert 40 < len(got) < 160 and ids == sorted(ids)  # whole frames lost, the rest intact and in order
        hub.set_fault("a->b", "fwd", Fault(delay_ms=200, jitter_ms=50))
        t0 = time.monotonic()
        s.sendall(frame(900) + frame(901))
        assert read_frames(s, 2) == [b"frame-0900", b"frame-0901"] and time.monotonic() - t0 >= 0.19
    finally:
        hub.close()
