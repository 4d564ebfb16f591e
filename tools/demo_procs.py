"""Process helpers for the demo (``tools.demo``): free ports, conf files, broker child processes.

Rules:
- Every broker is a real ``mqbroker -c FILE`` child process (``python -m broker.cli.mqbroker``)
  in its own session (``start_new_session``), so a Ctrl-C in the terminal reaches the demo only
  and the demo decides how its children end. Each one is registered in a :class:`Procs` set; the
  demo calls :meth:`Procs.kill_all` in ``finally`` (SIGKILL of whatever is still alive), so
  nothing outlives the demo, also on Ctrl-C or an error.
- A clean stop is SIGTERM and a wait for exit code 0 (the broker's orderly shutdown removes its
  ``abort`` file); a broker that hangs is SIGKILLed and reported as not clean.
- Ports are 127.0.0.1 ports the kernel just handed out (bound, then released); a group of ports
  that must keep a fixed distance (listenPort, listenPort+1 for HA, listenPort+10 for the node
  ``mqupgrade plan`` adds) is checked as a whole.
- Each broker's stdout/stderr goes to ``<log dir>/<name>.log``; errors quote its tail.

Theory of operation: thin wrappers over ``subprocess.Popen`` and the synchronous HTTP client
(:class:`broker.api.client.SyncBrokerClient`), polled with :func:`wait_until`; ports, conf files
and polling are :mod:`tools.procs` (shared with bench and tests), raising DemoError.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, TypeVar

from broker.api.client import BrokerClientError, SyncBrokerClient
from tools import procs as devprocs
from tools.procs import REPO, SHUTDOWN_BOUND_S, free_ports, write_conf  # noqa: F401 - the demo's names

T = TypeVar("T")


class DemoError(Exception):
    """Something in the demo did not go as it must (one line for the user, no traceback)."""


# ---- ports, conf files, waiting (tools.procs, with DemoError) -----------------------------------
def port_with_offsets(offsets: Iterable[int], avoid: Iterable[int] = ()) -> int:
    """A free port ``p`` with ``p + d`` free for every ``d`` in ``offsets`` and none in ``avoid``."""
    return devprocs.port_with_offsets(offsets, avoid, error=DemoError)


def read_conf_value(path: Path, key: str) -> Optional[str]:
    for line in path.read_text(encoding="utf-8").splitlines():
        k, eq, v = line.partition("=")
        if eq and not k.lstrip().startswith("#") and k.strip() == key:
            return v.strip()
    return None


def wait_until(predicate: Callable[[], Optional[T]], timeout: float, what: str, interval: float = 0.05,
               check: Optional[Callable[[], None]] = None) -> T:
    """Poll ``predicate`` until it returns something truthy; ``check`` may raise (a child died)."""
    return devprocs.wait_until(predicate, timeout, what, interval, check, error=DemoError)


# ---- broker processes ---------------------------------------------------------------------------
class BrokerProc:
    """One ``mqbroker -c conf`` child process and its HTTP API address."""

    def __init__(self, name: str, conf: Path, api_port: int, log_dir: Path) -> None:
        self.name, self.conf, self.api_port = name, conf, api_port
        self.log_path = log_dir / f"{name}.log"
        self.proc: Optional[subprocess.Popen[bytes]] = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.api_port}"

    def start(self) -> "BrokerProc":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "broker.cli.mqbroker", "-c", str(self.conf)], stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(REPO), start_new_session=True,
                env=dict(os.environ, PYTHONUNBUFFERED="1"))
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise DemoError(f"{self.name} exited with code {self.proc.returncode}; last log lines:\n{self.log_tail()}")

    def status(self, timeout: float = 3.0) -> Optional[dict[str, Any]]:
        """``GET /status``, or None while the broker does not answer."""
        try:
            with SyncBrokerClient(self.address, timeout=timeout) as c:
                return c.status()
        except (BrokerClientError, OSError):
            return None

    def client(self, timeout: float = 15.0) -> SyncBrokerClient:
        return SyncBrokerClient(self.address, timeout=timeout)

    def wait_ready(self, timeout: float = 60.0) -> dict[str, Any]:
        return wait_until(self.status, timeout, f"{self.name} to answer on {self.address}", 0.1, self.check_alive)

    def stop(self, timeout: float = SHUTDOWN_BOUND_S, signalled: bool = False) -> bool:
        """SIGTERM (once: unless ``signalled``) and wait; True when it exited with 0 (a clean shutdown)."""
        if self.proc is None:
            return True
        if self.proc.poll() is None:
            if not signalled:
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                return False
        return self.proc.returncode == 0

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return "(no log)"


def spark_jvms_of(parent: int) -> set[int]:
    """Pids of the Spark JVMs (``SparkSubmit``) that are children of ``parent`` (Linux /proc)."""
    out = set()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid == parent and b"org.apache.spark.deploy.SparkSubmit" in (d / "cmdline").read_bytes():
                out.add(int(d.name))
        except (OSError, IndexError, ValueError):
            continue
    return out


def kill_pids(pids: Iterable[int], grace: float = 0.0) -> None:
    """End our child processes ``pids``: SIGTERM and up to ``grace`` seconds, then SIGKILL; reaped.

    A Spark JVM outlives the Python driver by a few seconds (it notices the closed pipe), and one
    interrupted while starting does not notice at all; the demo ends its own before it exits.
    """
    pending = set(pids)
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        if not pending or (sig == signal.SIGTERM and grace <= 0):
            continue
        for pid in pending:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while pending and time.monotonic() < deadline:
            for pid in list(pending):
                try:
                    done, _ = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:  # not ours to reap (or already reaped)
                    done = 0 if Path(f"/proc/{pid}").exists() else pid
                if done:
                    pending.discard(pid)
            time.sleep(0.05)


class Procs:
    """Every child the demo started; :meth:`kill_all` in ``finally`` leaves nothing running."""

    def __init__(self) -> None:
        self.items: list[BrokerProc] = []

    def add(self, p: BrokerProc) -> BrokerProc:
        self.items.append(p)
        return p

    def stop_all(self, procs: Iterable[BrokerProc]) -> list[str]:
        """SIGTERM to all of ``procs`` at once, then wait: names of those that did not stop cleanly."""
        live = [p for p in procs if p.alive()]
        for p in live:
            assert p.proc is not None
            p.proc.send_signal(signal.SIGTERM)
        return [f"{p.name} (exit code {p.proc.returncode if p.proc else None})" for p in live
                if not p.stop(signalled=True)]

    def kill_all(self) -> None:
        for p in self.items:
            try:
                p.kill9()
            except Exception:  # noqa: BLE001 - best effort, never mask the original error
                pass
