"""Test helpers: real ``mqbroker`` processes on 127.0.0.1 free ports, conf files from conf/classic.

Every test that uses :class:`BrokerProc` must stop/kill it in a ``finally`` (or use the
``procs`` list pattern: append, then ``kill_all(procs)`` in ``finally``).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from broker.api.client import BrokerClientError, SyncBrokerClient
from tools import procs as devprocs
from tools.procs import REPO, port_pair, wait_until  # noqa: F401 - imported from here by tests

CONF_DIR = REPO / "conf" / "classic"


def write_conf(template: str, out: Path, **overrides: Any) -> Path:
    """Copy ``conf/classic/<template>`` to ``out`` with keys replaced/added (RocketMQ key names)."""
    return devprocs.write_conf(CONF_DIR / template, out, overrides)


class BrokerProc:
    def __init__(self, conf: Path, api_port: int, name: str, log_dir: Path) -> None:
        self.conf = conf
        self.api_port = api_port
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_fh: Any = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.api_port}"

    def client(self, timeout: float = 15.0) -> SyncBrokerClient:
        return SyncBrokerClient(self.address, timeout=timeout)

    def start(self, wait: bool = True, timeout: float = 30.0) -> "BrokerProc":
        self._log_fh = open(self.log_path, "ab")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen([sys.executable, "-m", "broker.cli.mqbroker", "-c", str(self.conf)],
                                     stdout=self._log_fh, stderr=subprocess.STDOUT, cwd=str(REPO), env=env)
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with self.client(timeout=2.0) as c:
                    st = c.status()
                    # the port answers for *this* process, not a leftover broker of an earlier test
                    if st.get("writable") is not None and self._started_by_us(st.get("pid")):
                        return
            except BrokerClientError as exc:
                if exc.status in (401, 403):  # aclEnable=true: an unsigned /status is refused, so it serves
                    return
            time.sleep(0.1)
        raise TimeoutError(f"{self.name} not ready after {timeout}s:\n{self.log()}")

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
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = devprocs.SHUTDOWN_BOUND_S) -> int | None:
        """SIGTERM and wait for the exit code (a clean shutdown is 0); a broker that is still
        running after ``timeout`` s is a failure (``ShutdownTooSlow``, with its stacks and log)."""
        if self.proc is None:
            return None
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                devprocs.wait_exit(self.proc, self.name, timeout, lambda: self.log(20_000))
        finally:
            self._close_log()
        return self.proc.returncode

    def wait_exit(self, timeout: float = devprocs.SHUTDOWN_BOUND_S) -> int:
        """Exit code of a broker already signalled (or stopping by itself), within the bound."""
        assert self.proc is not None
        return devprocs.wait_exit(self.proc, self.name, timeout, lambda: self.log(20_000))

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._close_log()

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def _close_log(self) -> None:
        if self._log_fh is not None:
            self._log_fh.close()
            self._log_fh = None

    def log(self, chars: int = 6000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return ""


def kill_all(procs: Iterable[BrokerProc]) -> None:
    for p in procs:
        try:
            p.kill9()  # SIGKILL also ends a SIGSTOPped process
        except Exception:  # noqa: BLE001 - best effort cleanup
            pass


def master_conf(tmp: Path, role: str = "SYNC_MASTER", **extra: Any) -> tuple[Path, int]:
    port = port_pair()
    conf = write_conf("broker-a.conf", tmp / "broker-a.conf", brokerRole=role, listenPort=port, haListenPort=port + 1,
                      storePathRootDir=tmp / "broker-a", storePathCommitLog=tmp / "broker-a" / "commitlog",
                      mappedFileSizeCommitLog=1 << 20, **extra)
    return conf, port


def slave_conf(tmp: Path, master_port: int, **extra: Any) -> tuple[Path, int]:
    port = port_pair()
    conf = write_conf("broker-a-s.conf", tmp / "broker-a-s.conf", listenPort=port, haListenPort=port + 1,
                      haMasterAddress=f"127.0.0.1:{master_port + 1}", storePathRootDir=tmp / "broker-a-s",
                      storePathCommitLog=tmp / "broker-a-s" / "commitlog", mappedFileSizeCommitLog=1 << 20, **extra)
    return conf, port


def commitlog_bytes(root: Path, upto: int) -> bytes:
    """The first ``upto`` bytes of the commitlog under ``root`` (files concatenated in order)."""
    out = bytearray()
    for f in sorted((root / "commitlog").iterdir()):
        if len(out) >= upto:
            break
        out += f.read_bytes()
    return bytes(out[:upto])


def dledger_single_conf(tmp: Path, root: Path, group: str = "g0", self_id: str = "n0", **extra: Any) -> tuple[Path, int]:
    """A one-member DLedger broker over ``root`` (the Apache fixtures' g0/n0, 1 MiB files)."""
    http, raft = devprocs.free_ports(2)
    conf = devprocs.write_conf(REPO / "conf" / "dledger" / "broker-n0.conf", tmp / f"{self_id}.conf", {
        "listenPort": http, "dLegerGroup": group, "dLegerSelfId": self_id, "dLegerPeers": f"{self_id}-127.0.0.1:{raft}",
        "dLegerPeersHttp": f"{self_id}-127.0.0.1:{http}", "storePathRootDir": root, "storePathCommitLog": root / "commitlog",
        "mappedFileSizeCommitLog": 1 << 20, "maxHashSlotNum": 10000, "maxIndexNum": 40000, **extra})
    return conf, http


def dledger_group_confs(tmp: Path, n: int = 3, *, conf_dir: Path | None = None, conf_name: str = "n{i}.conf",
                        store_name: str = "n{i}", per_member: Callable[[int], dict[str, Any]] = lambda i: {}, **extra: Any) -> list[tuple[Path, int]]:
    """``n`` DLedger broker confs (``conf/dledger/broker-n<i>.conf``) on free ports, one group:
    ``(conf path, listenPort)`` per member; stores under ``tmp/<store_name>``, ``extra`` for all
    members, ``per_member(i)`` for one; confs in ``conf_dir`` (default ``tmp``)."""
    ports = devprocs.free_ports(2 * n)
    http, raft = ports[:n], ports[n:]
    peers = ";".join(f"n{i}-127.0.0.1:{raft[i]}" for i in range(n))
    peers_http = ";".join(f"n{i}-127.0.0.1:{http[i]}" for i in range(n))
    out = []
    for i in range(n):
        root = tmp / store_name.format(i=i)
        conf = devprocs.write_conf(REPO / "conf" / "dledger" / f"broker-n{i}.conf", (conf_dir or tmp) / conf_name.format(i=i), {
            "listenPort": http[i], "dLegerPeers": peers, "dLegerPeersHttp": peers_http, "storePathRootDir": root,
            "storePathCommitLog": root / "commitlog", "mappedFileSizeCommitLog": 1 << 20, **extra, **per_member(i)})
        out.append((conf, http[i]))
    return out
