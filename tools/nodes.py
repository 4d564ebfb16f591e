"""The project's processes as real children, one vocabulary for the tests, ``bench/`` and the demo:
:class:`Child` (one ``python -m <module>`` process with its log file), :class:`NamesrvProc`
(``mqnamesrv``), :class:`BrokerProc` (``mqbroker -c conf`` in any mode: classic, DLedger,
Controller), :class:`DLedgerServerProc` (``dledger.cli server``: a DLedger member without a
broker), and :func:`kill_all` / :func:`quietly` for a ``finally``. Groups of them are built on
these: :mod:`tools.controller_cluster` (Controller mode), the fault clusters of
``tests/faults/harness``, the confs of :mod:`tools.broker_confs`.

Rules:
- A child runs ``[*wrapper, python, -m, module, *args]`` (or another ``program``: the Apache JVMs
  a benchmark compares with) from the repository root with
  ``PYTHONUNBUFFERED=1`` (plus the caller's ``env``), stdin from /dev/null, stdout and stderr
  appended to its log file (``<log dir>/<name>.log``, the dir is made); errors quote the log's
  tail. ``new_session`` puts it in a session of its own (a terminal's Ctrl-C reaches only the
  caller, which decides how its children end: the demo).
- A start is bounded. ``NamesrvProc.start`` returns once its port accepts; ``BrokerProc.start``
  (``wait=True``) once ``/status`` answers for *this* child (its pid or a descendant's: a wrapper
  such as ``unshare`` may sit between, and a leftover broker on the port is not this one) or
  refuses an unsigned request (``aclEnable=true``: it serves). A child that exits while waited for
  raises RuntimeError with its log tail; past the bound TimeoutError, also with the tail.
  ``DLedgerServerProc.start`` does not wait: its callers ask the member over DLedger RPC (a leader,
  a refusal in its log, an exit on a foreign store), each with its own bound.
- A stop is SIGCONT (a paused process cannot act on the next signal) then SIGTERM, and the exit
  code within the bound (:data:`tools.procs.SHUTDOWN_BOUND_S`; :func:`tools.procs.wait_exit`: past
  it the stacks, SIGKILL, ShutdownTooSlow naming the process). ``kill9`` is SIGKILL (also ends a
  SIGSTOPped process) and the reap; it is idempotent and never raises for a process that is gone.
  :func:`stop_all` stops a group at once (all signalled, then each waited for within the bound).
- Whoever starts a process ends it in a ``finally`` (``kill9``, :func:`kill_all`, or a group's
  ``close``): nothing outlives a test, a benchmark or the demo.

Theory of operation: :class:`Child` owns the ``subprocess.Popen``; the three process kinds compose
one and add what a client needs (address, readiness, the broker's HTTP client and ``/status``). A
process whose command line is itself under test (``mqnamesrv -c <sample>`` with no ``--host``) is
a bare :class:`Child` with that command.
All polling is :func:`tools.procs.wait_until`. A broker run by another module (a test's fault
hook wrapping ``mqbroker``) is a :class:`BrokerProc` with ``module`` and ``env``, not a Popen of
its own.
"""
from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional, Protocol, Sequence

from broker.api.client import BrokerClientError, SyncBrokerClient
from tools.procs import REPO, SHUTDOWN_BOUND_S, ShutdownTooSlow, free_port, wait_exit, wait_until


class Child:
    """One child process ``[*wrapper, *program, *argv]`` with its output in ``log_path``;
    ``program`` defaults to ``python -m`` (``argv`` starts with the module), another program
    (a JVM's start script) is given as its command."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path, *, env: Optional[Mapping[str, str]] = None,
                 wrapper: Sequence[str] = (), new_session: bool = False,
                 program: Optional[Sequence[str]] = None) -> None:
        self.name, self.argv, self.log_path = name, list(argv), log_path
        self.program = list(program) if program is not None else [sys.executable, "-m"]
        self.env = dict(env or {})
        #: the command the next start runs under (e.g. ``unshare --time ...``); empty: none
        self.wrapper = list(wrapper)
        self.new_session = new_session
        self.proc: Optional[subprocess.Popen[bytes]] = None

    def start(self) -> "Child":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([*self.wrapper, *self.program, *self.argv], stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(REPO),
                                         start_new_session=self.new_session,
                                         env=dict(os.environ, PYTHONUNBUFFERED="1", **self.env))
        return self

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check(self) -> None:
        """Raise when the process was started and has exited (its log tail in the message)."""
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log()}")

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def terminate(self, bound: float = SHUTDOWN_BOUND_S) -> Optional[int]:
        """SIGTERM and the exit code within ``bound`` (past it: stacks, SIGKILL, ShutdownTooSlow)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a paused process cannot act on SIGTERM
            self.proc.send_signal(signal.SIGTERM)
            self.wait_exit(bound)
        return self.proc.returncode

    def wait_exit(self, bound: float = SHUTDOWN_BOUND_S) -> int:
        """Exit code of a process already signalled (or ending by itself), within ``bound``."""
        assert self.proc is not None, f"{self.name} was never started"
        return wait_exit(self.proc, self.name, bound, lambda: self.log(20_000))

    def signal(self, sig: int) -> None:
        assert self.proc is not None, f"{self.name} was never started"
        self.proc.send_signal(sig)

    def log(self, chars: int = 6000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return ""


class Killable(Protocol):
    def kill9(self) -> None: ...


def quietly(fn: Callable[[], Any]) -> None:
    """Run a cleanup step; its error must not mask the error that led to the cleanup."""
    try:
        fn()
    except Exception:  # noqa: BLE001 - best effort
        pass


def kill_all(procs: Iterable[Killable]) -> None:
    """SIGKILL every process of ``procs`` (paused ones too), for a ``finally``; never raises."""
    for p in procs:
        quietly(p.kill9)


def stop_all(children: Iterable[Child], bound: float = SHUTDOWN_BOUND_S) -> dict[str, Optional[int]]:
    """SIGTERM to every live child at once (SIGCONT first), then each one's exit code within
    ``bound`` (name -> code; None: never started). One past the bound is killed with its stacks
    logged; the first :class:`~tools.procs.ShutdownTooSlow` is raised once all were waited for."""
    every = list(children)
    started = [c for c in every if c.proc is not None]
    for c in started:
        if c.alive():
            c.signal(signal.SIGCONT)  # a paused process cannot act on SIGTERM
            c.signal(signal.SIGTERM)
    codes: dict[str, Optional[int]] = {c.name: None for c in every}
    slow: Optional[ShutdownTooSlow] = None
    for c in started:
        try:
            codes[c.name] = c.wait_exit(bound)
        except ShutdownTooSlow as exc:
            slow = slow or exc
    if slow is not None:
        raise slow
    return codes


# ---- name server --------------------------------------------------------------------------------
class NamesrvProc:
    """One ``mqnamesrv`` on a free (or the given) 127.0.0.1 port; log ``namesrv-<port>.log`` in ``log_dir``.

    ``expiry_ms`` / ``scan_interval_ms``: the name server's test knobs (defaults: RocketMQ's 120 s / 10 s)."""

    def __init__(self, log_dir: Path, *, port: Optional[int] = None, expiry_ms: int = 120_000,
                 scan_interval_ms: int = 10_000) -> None:
        self.port = port or free_port()
        self.args = ["-p", str(self.port), "--host", "127.0.0.1", "--broker-expiry-ms", str(expiry_ms),
                     "--scan-interval-ms", str(scan_interval_ms)]
        self.child = Child("mqnamesrv", ["namesrv", *self.args], log_dir / f"namesrv-{self.port}.log")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.child.log_path

    @property
    def proc(self) -> Optional[subprocess.Popen[bytes]]:
        return self.child.proc

    def start(self, timeout: float = 20.0) -> "NamesrvProc":
        self.child.argv = ["namesrv", *self.args]  # ``args`` may have grown since __init__ (e.g. ``-c conf``)
        self.child.start()

        def listening() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", self.port), 0.5):
                    return True
            except OSError:
                return False
        wait_until(listening, timeout, f"mqnamesrv listening on {self.port}", check=self.child.check,
                   error=lambda msg: TimeoutError(f"{msg}:\n{self.log()}"))
        return self

    def alive(self) -> bool:
        return self.child.alive()

    def kill9(self) -> None:
        self.child.kill9()

    def log(self, chars: int = 6000) -> str:
        return self.child.log(chars)

    def route(self, topic: str, timeout: float = 5.0) -> Optional[dict[str, Any]]:
        """The name server's route of ``topic`` (GET_ROUTEINFO_BY_TOPIC), or None."""
        from broker.remoting.client import RemotingClient
        from broker.remoting.codes import RequestCode, ResponseCode

        async def run() -> Optional[dict[str, Any]]:
            cl = await RemotingClient.connect("127.0.0.1", self.port)
            try:
                r = await cl.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, b"", timeout=timeout)
            finally:
                await cl.close()
            return json.loads(r.body) if r.code == ResponseCode.SUCCESS and r.body else None
        try:
            return asyncio.run(run())
        except (OSError, asyncio.TimeoutError, ValueError):
            return None


# ---- brokers ------------------------------------------------------------------------------------
class BrokerProc:
    """One ``mqbroker -c conf`` (any mode); its HTTP API and remoting door share ``api_port``.

    ``name`` names it in messages; ``log_name`` (default ``name``) its log file and child;
    ``ha_port`` / ``store_root``: what its conf says, for callers that need them (None: unknown);
    ``module`` / ``env`` / ``wrapper`` / ``new_session``: how the child runs (:class:`Child`);
    ``ready_timeout``: the bound of ``start`` / ``wait_ready`` when none is given."""

    def __init__(self, conf: Path, api_port: int, name: str, log_dir: Path, *, log_name: Optional[str] = None,
                 ha_port: Optional[int] = None, store_root: Optional[Path] = None,
                 module: str = "broker.cli.mqbroker", env: Optional[Mapping[str, str]] = None,
                 wrapper: Sequence[str] = (), new_session: bool = False, ready_timeout: float = 30.0) -> None:
        self.conf, self.api_port, self.name = conf, api_port, name
        self.ha_port, self.store_root, self.ready_timeout = ha_port, store_root, ready_timeout
        label = log_name or name
        self.child = Child(label, [module, "-c", str(conf)], log_dir / f"{label}.log", env=env, wrapper=wrapper,
                           new_session=new_session)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.api_port}"

    @property
    def log_path(self) -> Path:
        return self.child.log_path

    @property
    def proc(self) -> Optional[subprocess.Popen[bytes]]:
        return self.child.proc

    @proc.setter
    def proc(self, value: Optional[subprocess.Popen[bytes]]) -> None:
        self.child.proc = value

    @property
    def wrapper(self) -> list[str]:
        """The command the next start runs under (e.g. ``unshare --time ...``); empty: none."""
        return self.child.wrapper

    @wrapper.setter
    def wrapper(self, value: Sequence[str]) -> None:
        self.child.wrapper = list(value)

    def client(self, timeout: float = 15.0) -> SyncBrokerClient:
        return SyncBrokerClient(self.address, timeout=timeout)

    def start(self, wait: bool = True, timeout: Optional[float] = None) -> "BrokerProc":
        self.child.start()
        if wait:
            self.wait_ready(timeout)
        return self

    def status(self, timeout: float = 2.0) -> Optional[dict[str, Any]]:
        """``GET /status`` of this process, or None (not running, not answering)."""
        if not self.alive():
            return None
        try:
            with self.client(timeout=timeout) as c:
                return c.status()
        except (BrokerClientError, OSError):
            return None

    def wait_ready(self, timeout: Optional[float] = None) -> None:
        """Until this process (not a leftover on the port) answers ``/status`` (fenced or not)."""
        bound = self.ready_timeout if timeout is None else timeout

        def ready() -> bool:
            try:
                with self.client(timeout=2.0) as c:
                    st = c.status()
            except BrokerClientError as exc:
                return exc.status in (401, 403)  # aclEnable=true: an unsigned /status is refused, so it serves
            except OSError:
                return False
            return st.get("writable") is not None and self._started_by_us(st.get("pid"))
        wait_until(ready, bound, f"{self.name} ready on {self.address}", interval=0.1, check=self.child.check,
                   error=lambda msg: TimeoutError(f"{msg}:\n{self.log()}"))

    def _started_by_us(self, pid: Any) -> bool:
        """``pid`` is our child or its descendant (a wrapper such as ``unshare`` may sit between)."""
        if self.proc is None:
            return True
        for _ in range(4):
            if pid == self.proc.pid:
                return True
            try:
                stat = Path(f"/proc/{int(pid)}/stat").read_text()
                pid = int(stat.rsplit(")", 1)[1].split()[1])  # field 4: the parent's pid
            except (OSError, ValueError, TypeError, IndexError):
                return False
        return False

    def alive(self) -> bool:
        return self.child.alive()

    def check(self) -> None:
        """Raise RuntimeError (with the log tail) when the process was started and has exited."""
        self.child.check()

    def stop(self, timeout: float = SHUTDOWN_BOUND_S) -> Optional[int]:
        """SIGTERM and the exit code (a clean shutdown is 0); a broker still running after
        ``timeout`` s is a failure (``ShutdownTooSlow``, with its stacks and log)."""
        return self.child.terminate(timeout)

    def wait_exit(self, timeout: float = SHUTDOWN_BOUND_S) -> int:
        """Exit code of a broker already signalled (or stopping by itself), within the bound."""
        return self.child.wait_exit(timeout)

    def kill9(self) -> None:
        self.child.kill9()

    def pause(self) -> None:
        self.child.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.child.signal(signal.SIGCONT)

    def log(self, chars: int = 6000) -> str:
        return self.child.log(chars)


# ---- DLedger servers ----------------------------------------------------------------------------
class DLedgerServerProc:
    """One ``dledger.cli server`` member, no broker: ``group``, ``self_id``, ``peers`` in DLedger's
    ``n0-host:port;n1-host:port`` form, its store under ``store``; ``args``: the further server
    flags the caller chooses (file sizes, timers, ``--auth-token``, log level); output in
    ``log_path``. The child is named ``self_id`` (the key of :func:`stop_all`'s codes)."""

    def __init__(self, log_path: Path, *, group: str, self_id: str, peers: str, store: Path,
                 args: Sequence[str] = ()) -> None:
        self.self_id = self_id
        self.child = Child(self_id, ["dledger.cli", "server", "--group", group, "--id", self_id, "--peers", peers,
                                     "--store", str(store), *args], log_path)

    @property
    def proc(self) -> Optional[subprocess.Popen[bytes]]:
        return self.child.proc

    @property
    def log_path(self) -> Path:
        return self.child.log_path

    def start(self) -> "DLedgerServerProc":
        """Start the member and return at once (module docstring: the caller waits its own way)."""
        self.child.start()
        return self

    def alive(self) -> bool:
        return self.child.alive()

    def stop(self, bound: float = SHUTDOWN_BOUND_S) -> Optional[int]:
        """SIGTERM and the exit code (a clean shutdown is 0) within ``bound``; past it the member is
        killed and :class:`~tools.procs.ShutdownTooSlow` raised. None: never started."""
        return self.child.terminate(bound)

    def wait_exit(self, bound: float = SHUTDOWN_BOUND_S) -> int:
        """Exit code of a member that ends by itself (a refused store) or was signalled, within ``bound``."""
        return self.child.wait_exit(bound)

    def kill9(self) -> None:
        self.child.kill9()

    def log(self, chars: int = 6000) -> str:
        return self.child.log(chars)
