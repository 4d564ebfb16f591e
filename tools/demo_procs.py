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

Theory of operation: the brokers are :class:`tools.nodes.BrokerProc` (the process harness shared
with bench and tests) made by :meth:`Procs.broker`; ports, conf files and polling are
:mod:`tools.procs`. What is the demo's own is how failures read: :func:`wait_until`,
:meth:`Procs.ready` and a child's exit raise DemoError (one line for the user), and
:meth:`Procs.stop_all` names the brokers that did not stop cleanly instead of raising.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Callable, Iterable, Optional, TypeVar

from tools import nodes
from tools import procs as devprocs
from tools.nodes import BrokerProc
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
    """Poll ``predicate`` until it returns something truthy; ``check`` may raise (a child died:
    its RuntimeError becomes a DemoError)."""
    return devprocs.wait_until(predicate, timeout, what, interval, _as_demo_error(check) if check else None,
                               error=DemoError)


# ---- broker processes: tools.nodes.BrokerProc, errors as DemoError -------------------------------
def _as_demo_error(check: Callable[[], None]) -> Callable[[], None]:
    """``check`` with its RuntimeError (a child exited; its log tail) raised as DemoError."""
    def run() -> None:
        try:
            check()
        except RuntimeError as exc:
            raise DemoError(str(exc)) from None
    return run


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
    """Every broker the demo started; :meth:`kill_all` in ``finally`` leaves nothing running."""

    def __init__(self) -> None:
        self.items: list[BrokerProc] = []

    def broker(self, name: str, conf: Path, api_port: int, log_dir: Path) -> BrokerProc:
        """A broker of the demo (not started): ``mqbroker -c conf`` in a session of its own."""
        p = BrokerProc(conf, api_port, name, log_dir, new_session=True, ready_timeout=60.0)
        self.items.append(p)
        return p

    @staticmethod
    def ready(*procs: BrokerProc, timeout: float = 60.0) -> None:
        """Until each of ``procs`` answers (``BrokerProc.wait_ready``); a failure is a DemoError."""
        for p in procs:
            try:
                p.wait_ready(timeout)
            except (RuntimeError, TimeoutError) as exc:
                raise DemoError(str(exc)) from None

    @staticmethod
    def stop_all(procs: Iterable[BrokerProc]) -> list[str]:
        """SIGTERM to all of ``procs`` at once, then wait: names of those that did not stop cleanly
        (one past the bound is killed, its stacks in its log)."""
        live = [p for p in procs if p.alive()]
        try:
            nodes.stop_all(p.child for p in live)
        except devprocs.ShutdownTooSlow:
            pass  # killed; named below by its exit code
        return [f"{p.name} (exit code {p.proc.returncode if p.proc else None})" for p in live
                if p.proc is None or p.proc.returncode != 0]

    def kill_all(self) -> None:
        nodes.kill_all(self.items)
