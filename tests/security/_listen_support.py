"""Helpers for the listenPort attack tests: raw sockets, the broker's memory, listening sockets.

Rules: every wait is bounded; sockets are closed by the caller (``closing`` lists).
"""
from __future__ import annotations

import socket
import struct
import time
from pathlib import Path
from typing import Iterable, Optional

from broker.api.client import SyncBrokerClient


def connect(port: int, first: bytes = b"", timeout: float = 5.0) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout)
    if first:
        s.sendall(first)
    return s


def closed_by_peer(s: socket.socket, timeout: float) -> Optional[float]:
    """Seconds until the peer closed ``s`` (EOF or reset), or None if still open after ``timeout``.
    Bytes the peer sends (an HTTP error answer) are read and ignored."""
    t0 = time.monotonic()
    deadline = t0 + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        s.settimeout(left)
        try:
            data = s.recv(65536)
        except socket.timeout:
            return None
        except OSError:  # reset
            return time.monotonic() - t0
        if not data:
            return time.monotonic() - t0


def all_closed(socks: Iterable[socket.socket], timeout: float) -> list[Optional[float]]:
    """``closed_by_peer`` for each socket against one shared deadline (so the whole wait is bounded)."""
    t0 = time.monotonic()
    out = []
    for s in socks:
        left = max(0.01, timeout - (time.monotonic() - t0))
        took = closed_by_peer(s, left)
        out.append(None if took is None else time.monotonic() - t0)
    return out


def close_all(socks: Iterable[socket.socket]) -> None:
    for s in socks:
        try:
            s.close()
        except OSError:
            pass


def frame_header(total_length: int) -> bytes:
    """The first 8 bytes of a JSON remoting frame of ``total_length`` bytes (prefix included)."""
    return struct.pack(">ii", total_length - 4, 20)  # header length 20; body fills the rest


def proc_status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def listening_hosts(port: int) -> list[str]:
    """Local addresses with a socket in LISTEN on ``port`` (from /proc/net/tcp and tcp6)."""
    hosts = []
    for name in ("tcp", "tcp6"):
        path = Path(f"/proc/net/{name}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            parts = line.split()
            local, state = parts[1], parts[3]
            addr_hex, port_hex = local.split(":")
            if state != "0A" or int(port_hex, 16) != port:
                continue
            raw = bytes.fromhex(addr_hex)
            if name == "tcp":
                hosts.append(socket.inet_ntop(socket.AF_INET, raw[::-1]))
            else:  # four little-endian 32-bit words
                words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                hosts.append(socket.inet_ntop(socket.AF_INET6, words))
    return hosts


def other_local_address() -> Optional[str]:
    """A non-loopback IPv4 address of this host (no packet is sent), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
            addr = s.getsockname()[0]
        except OSError:
            return None
    return None if addr.startswith("127.") or addr == "0.0.0.0" else addr


def listen_status(address: str) -> dict:
    with SyncBrokerClient(address, timeout=10.0) as c:
        return c.status().get("listen", {})


def port_counters(address: str, port: int) -> dict[str, int]:
    """The port's counters from /status; missing ones read 0 (so an attack's own assertion, not a
    KeyError, is what fails on a broker without them)."""
    got = listen_status(address).get("ports", {}).get(str(port), {})
    keys = ("open", "accepted", "refusedByCap", "closedIdle", "closedReadTimeout", "refusedByPendingBudget",
            "pendingBytes")
    return {k: int(got.get(k, 0)) for k in keys}
