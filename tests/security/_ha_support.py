"""Helpers for the classic HA port attack tests: a fake slave and a fake master on raw sockets.

Rules: every socket has a timeout, every loop a deadline; threads are daemons joined by the
caller (``stop()``), so a test never hangs on them.
"""
from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Optional

from broker.ha.handshake import SlaveHandshake

_HEADER = struct.Struct(">qi")


class FakeClassicSlave(threading.Thread):
    """Speaks RocketMQ's open HA protocol: requests offset 0, then acks every byte it is sent.

    Against an open master this is a working slave (its acks make SYNC_MASTER puts SEND_OK);
    against an authenticated master it must receive nothing and be closed.
    """

    def __init__(self, port: int, forged_ack: int = 0, lifetime: float = 10.0) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port), 5)
        self.forged_ack = forged_ack
        self.received = 0
        self.closed_by_master = threading.Event()
        self._deadline = time.monotonic() + lifetime
        self._stop_flag = False

    def run(self) -> None:
        s = self.sock
        buf = b""
        try:
            s.sendall(struct.pack(">q", 0))
            if self.forged_ack:
                s.sendall(struct.pack(">q", self.forged_ack))
            while not self._stop_flag and time.monotonic() < self._deadline:
                s.settimeout(0.2)
                try:
                    data = s.recv(65536)
                except socket.timeout:
                    continue
                if not data:
                    break
                self.received += len(data)
                buf += data
                while len(buf) >= 12:
                    offset, size = _HEADER.unpack_from(buf)
                    if len(buf) < 12 + size:
                        break
                    buf = buf[12 + size:]
                    s.sendall(struct.pack(">q", offset + size))  # "I have it": a lie
        except OSError:
            pass
        self.closed_by_master.set()

    def stop(self) -> None:
        self._stop_flag = True
        self.join(5)
        self.sock.close()


def wrong_secret_handshake(port: int, secret: str, broker_name: str, timeout: float = 5.0) -> bytes:
    """Run the authenticated handshake with ``secret`` and return every byte the master sent
    until it closed the connection (a CHALLENGE and a REFUSED, never commitlog data)."""
    hs = SlaveHandshake(secret, broker_name, now_ms=0, timeout_ms=timeout * 1000)
    got = b""
    with socket.create_connection(("127.0.0.1", port), timeout) as s:
        s.sendall(hs.start())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = s.recv(65536)
            except (socket.timeout, OSError):
                break
            if not data:
                break
            got += data
            out = hs.receive_data(data, 0)
            if out:
                s.sendall(out)
    return got


class FakeMaster(threading.Thread):
    """Listens like a master's HA port; to whoever connects it pushes classic frames from offset 0."""

    def __init__(self, payload: bytes, lifetime: float = 20.0) -> None:
        super().__init__(daemon=True)
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(8)
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.payload = payload
        self.first_bytes: list[bytes] = []
        self._deadline = time.monotonic() + lifetime
        self._stop_flag = False

    def run(self) -> None:
        while not self._stop_flag and time.monotonic() < self._deadline:
            try:
                conn, _ = self.server.accept()
            except (socket.timeout, OSError):
                continue
            with conn:
                conn.settimeout(1.0)
                try:
                    self.first_bytes.append(conn.recv(512))
                    conn.sendall(_HEADER.pack(0, len(self.payload)) + self.payload)
                    conn.recv(512)  # until the slave hangs up (or 1 s)
                except OSError:
                    pass

    def stop(self) -> None:
        self._stop_flag = True
        self.join(5)
        self.server.close()


def idle_sockets(port: int, n: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port), 5) for _ in range(n)]


def close_all(socks: list[socket.socket]) -> None:
    for s in socks:
        try:
            s.close()
        except OSError:
            pass


def first_line(log: str, needle: str) -> Optional[str]:
    return next((line for line in log.splitlines() if needle in line), None)
