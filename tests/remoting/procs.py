"""Test helpers: a real ``mqnamesrv`` process on a free 127.0.0.1 port, and remoting shortcuts.

Every test that starts a :class:`NamesrvProc` kills it in a ``finally`` (``kill9`` is idempotent).
"""
from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

from tools.procs import free_port
from broker.remoting.client import RemotingClient
from broker.remoting.codec import RemotingCommand

REPO = Path(__file__).resolve().parents[2]


class NamesrvProc:
    def __init__(self, log_dir: Path, *, port: Optional[int] = None, expiry_ms: int = 120_000,
                 scan_interval_ms: int = 10_000) -> None:
        self.port = port or free_port()
        self.args = ["-p", str(self.port), "--host", "127.0.0.1", "--broker-expiry-ms", str(expiry_ms),
                     "--scan-interval-ms", str(scan_interval_ms)]
        self.log_path = log_dir / f"namesrv-{self.port}.log"
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self._fh: Any = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> "NamesrvProc":
        self._fh = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "namesrv", *self.args], stdout=self._fh,
                                     stderr=subprocess.STDOUT, cwd=str(REPO), env=dict(os.environ, PYTHONUNBUFFERED="1"))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mqnamesrv exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), 0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"mqnamesrv not listening after {timeout}s:\n{self.log()}")

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-6000:]
        except FileNotFoundError:
            return ""


def request(port: int, code: int, fields: Optional[dict[str, Any]] = None, body: bytes = b"",
            timeout: float = 5.0, **kw: Any) -> RemotingCommand:
    """One request on a fresh connection (sync wrapper for tests)."""
    async def run() -> RemotingCommand:
        cl = await RemotingClient.connect("127.0.0.1", port, **kw)
        try:
            return await cl.request(code, fields, body, timeout=timeout)
        finally:
            await cl.close()
    return asyncio.run(run())
