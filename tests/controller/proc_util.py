"""Controller processes for tests: free ports, confs, start / kill / stop, and a client.

Every wait is bounded; :class:`Group` stops what it started (``stop_all`` in the tests' finally).
"""
from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Optional

from broker.remoting.client import RemotingClient
from broker.remoting.codec import RemotingCommand
from controller.codes import ControllerRequestCode as Q

REPO = Path(__file__).resolve().parents[2]


def free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


class Group:
    """``n`` controller processes on 127.0.0.1 (conf per member under ``base``)."""

    def __init__(self, base: Path, n: int = 3, extra: str = "") -> None:
        self.base = base
        ports = free_ports(3 * n)
        self.ids = [f"n{i}" for i in range(n)]
        self.raft = {pid: ports[3 * i] for i, pid in enumerate(self.ids)}
        self.door = {pid: ports[3 * i + 1] for i, pid in enumerate(self.ids)}
        self.http = {pid: ports[3 * i + 2] for i, pid in enumerate(self.ids)}
        peers = ";".join(f"{p}-127.0.0.1:{self.raft[p]}" for p in self.ids)
        doors = ";".join(f"{p}-127.0.0.1:{self.door[p]}" for p in self.ids)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.confs: dict[str, Path] = {}
        for pid in self.ids:
            conf = base / f"{pid}.conf"
            conf.write_text(
                f"controllerDLegerGroup=g\ncontrollerDLegerPeers={peers}\ncontrollerDLegerSelfId={pid}\n"
                f"controllerRemotingPeers={doors}\nlistenPort={self.door[pid]}\ncontrollerHttpPort={self.http[pid]}\n"
                f"controllerStorePath={base / pid}\nmappedFileSize=4194304\n"
                "controllerDLegerAuthToken=test-controller-secret-0123456789\n" + extra)
            self.confs[pid] = conf

    def start(self, pid: str) -> None:
        log = open(self.base / f"{pid}.log", "ab")
        self.procs[pid] = subprocess.Popen([sys.executable, "-m", "controller", "-c", str(self.confs[pid])],
                                           cwd=str(REPO), stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def start_all(self) -> None:
        for pid in self.ids:
            self.start(pid)

    def kill9(self, pid: str) -> None:
        p = self.procs.pop(pid)
        p.send_signal(signal.SIGKILL)
        p.wait(10)

    def stop(self, pid: str) -> None:
        p = self.procs.pop(pid, None)
        if p is None:
            return
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)

    def stop_all(self) -> None:
        for pid in list(self.procs):
            self.stop(pid)

    def log_tail(self, pid: str, n: int = 4000) -> str:
        path = self.base / f"{pid}.log"
        return path.read_bytes()[-n:].decode("utf-8", "replace") if path.exists() else ""

    def status(self, pid: str) -> Optional[dict[str, Any]]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http[pid]}/status", timeout=2) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            return None


async def connect(port: int, timeout: float = 20.0, **kw: Any) -> RemotingClient:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await RemotingClient.connect("127.0.0.1", port, **kw)
        except OSError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def find_leader(group: Group, timeout: float = 30.0, exclude: tuple[str, ...] = ()) -> str:
    """The member answering GET_METADATA_INFO with isLeader=true."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in group.ids:
            if pid in exclude or pid not in group.procs:
                continue
            try:
                c = await RemotingClient.connect("127.0.0.1", group.door[pid])
            except OSError:
                continue
            try:
                r = await c.request(Q.CONTROLLER_GET_METADATA_INFO, timeout=2)
                if r.ext_fields.get("isLeader") == "true":
                    return pid
            except (OSError, asyncio.TimeoutError):
                pass
            finally:
                await c.close()
        await asyncio.sleep(0.2)
    raise AssertionError(f"no controller leader within {timeout} s: " +
                         " | ".join(group.log_tail(p, 1500) for p in group.procs))


def request(code: int, fields: Optional[dict[str, Any]] = None, body: bytes = b"") -> RemotingCommand:
    return RemotingCommand.request(code, {k: str(v) for k, v in (fields or {}).items()}, body)
