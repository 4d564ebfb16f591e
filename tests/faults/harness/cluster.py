"""Real broker processes for fault runs: a three-node DLedger group and a classic master/slave pair.

Rules
-----
* Every node is an ``mqbroker`` process on 127.0.0.1 free ports with a private store root under
  the run directory; confs come from ``conf/dledger`` and ``conf/classic`` with overrides.
* Every peer link goes through the run's :class:`~.proxy.ProxyHub`: in DLedger mode node ``a``
  reaches peer ``b`` at the proxy port of link ``"a->b"`` (its own ``dLegerPeers`` entry is its
  real port; each node gets its own peer list), frame-aware because DLedger RPC is
  length-prefixed. Messages from ``a`` to ``b`` travel on ``a``'s outbound connection, so
  cutting ``a->b`` (both directions of that link) silences exactly a->b. In classic mode the
  slave dials the master's HA port through link ``"s->m"`` (byte mode). Clients talk to the HTTP
  APIs directly.
* A cluster never outlives its test: :meth:`Cluster.kill_all` (SIGKILL, also ends SIGSTOPped
  processes) and :meth:`Cluster.close` (proxies, tmpfs mounts) run in ``finally``.
* The processes are :class:`tools.nodes.BrokerProc` (the project's one process harness); what is
  specific to fault runs stays here: the proxy wiring, the fault handler in every broker, tmpfs
  disks, reading the replicas' stores back.
* :meth:`Cluster.read_replicas` reads the stores of cleanly stopped nodes with the project's
  store code (DLedger entries up to the checkpointed committed index, or the classic commitlog),
  and checks each message's ConsumeQueue unit; it returns the workload topic's messages in log
  order plus a list of problems found while reading.
"""
from __future__ import annotations

import struct
import subprocess
from pathlib import Path
from typing import Any, Optional

from broker.api.client import BrokerClientError, SyncBrokerClient
from broker.store.consume_queue import ConsumeQueueStore
from broker.store.message import BLANK_MAGIC_CODE, MessageFormatError, decode_message
from tools.nodes import BrokerProc, kill_all, stop_all
from tools.procs import REPO, free_ports, write_conf

from .proxy import ProxyHub

TOPIC = "TopicFault"
QUEUES = 4
KEY_PROP = "FKEY"
DLEDGER_IDS = ("n0", "n1", "n2")


def fault_broker(conf: Path, api_port: int, name: str, run_dir: Path) -> BrokerProc:
    """A broker with Python's fault handler on (SIGBUS/SIGSEGV tracebacks in its log); its
    ``wrapper`` may put its next start under ``unshare --time ...`` (the clock nemesis)."""
    return BrokerProc(conf, api_port, name, run_dir, env={"PYTHONFAULTHANDLER": "1"})


# Retention on a full disk deletes the oldest files whatever their age (cleanFileForciblyEnable,
# as Apache): right for a broker, but the checker demands every acknowledged message on every
# replica, so disk-full's node must not drop history here. Retention has its own tests
# (tests/broker/store/test_clean.py); puts are still refused on the full disk.
NO_FORCED_CLEAN = {"cleanFileForciblyEnable": "false"}


class Cluster:
    mode = "?"

    def __init__(self, run_dir: Path, seed: int, file_size: int) -> None:
        self.run_dir = run_dir
        self.hub = ProxyHub(seed)
        self.file_size = file_size
        self.procs: dict[str, BrokerProc] = {}
        self.roots: dict[str, Path] = {}
        self.http: dict[str, int] = {}
        self.mounts: list[Path] = []
        self.paused: set[str] = set()

    # ------------------------------------------------------------------ processes
    @property
    def names(self) -> list[str]:
        return list(self.procs)

    def address(self, n: str) -> str:
        return f"127.0.0.1:{self.http[n]}"

    @property
    def seeds(self) -> list[str]:
        return [self.address(n) for n in self.names]

    def node_of(self, address: str) -> str:
        return next((n for n in self.names if self.address(n) == address), address)

    def start(self, *names: str, timeout: float = 60.0) -> None:
        for n in names or self.names:
            self.procs[n].start(wait=False)
        for n in names or self.names:
            self.procs[n].wait_ready(timeout)

    def alive(self, n: str) -> bool:
        return self.procs[n].alive()

    def kill9(self, n: str) -> None:
        self.paused.discard(n)
        self.procs[n].kill9()

    def pause(self, n: str) -> None:
        self.procs[n].pause()
        self.paused.add(n)

    def resume(self, n: str) -> None:
        if n in self.paused and self.procs[n].alive():
            self.procs[n].resume()
        self.paused.discard(n)

    def status(self, n: str, timeout: float = 2.0) -> Optional[dict[str, Any]]:
        if not self.procs[n].alive() or n in self.paused:
            return None
        try:
            with SyncBrokerClient(self.address(n), timeout=timeout) as c:
                return c.status()
        except (BrokerClientError, OSError, ValueError):
            return None

    def stop_clean(self) -> dict[str, Optional[int]]:
        """SIGTERM every live node at once; returns exit codes (0 = clean)."""
        for n in list(self.paused):
            self.resume(n)
        live = [p.child for p in self.procs.values() if p.alive()]
        return stop_all(live)  # within SHUTDOWN_BOUND_S, or ShutdownTooSlow with the stacks

    def kill_all(self) -> None:
        kill_all(self.procs.values())
        self.paused.clear()

    def close(self) -> None:
        self.kill_all()
        self.hub.close()
        for m in self.mounts:
            subprocess.run(["umount", "-l", str(m)], capture_output=True)
        self.mounts.clear()

    # ------------------------------------------------------------------ disks
    def mount_tmpfs(self, path: Path, size: str) -> bool:
        """A size-limited tmpfs at ``path`` (a real ENOSPC); False when mounting is not permitted."""
        path.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
        if r.returncode == 0:
            self.mounts.append(path)
            return True
        return False

    # ------------------------------------------------------------------ network
    def links_from_to(self, a: str, b: str) -> list[str]:
        """Proxy links carrying traffic from node ``a`` to node ``b``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ stores
    def data_files(self, n: str) -> list[Path]:
        """The node's commitlog data files in order (DLedger data or classic commitlog)."""
        raise NotImplementedError

    def read_replicas(self) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
        raise NotImplementedError

    @staticmethod
    def _msg(m: Any) -> Optional[dict[str, Any]]:
        if m.topic != TOPIC:
            return None
        key = m.properties.get(KEY_PROP) or bytes(m.body).split(b"|", 1)[0].decode(errors="replace")
        return {"key": key, "phys": m.commitlog_offset, "queue": m.queue_id, "qoff": m.queue_offset}

    @staticmethod
    def _check_cq(root: Path, n: str, msgs: list[dict[str, Any]], problems: list[str]) -> None:
        cqs = ConsumeQueueStore(root, read_only=True)
        cqs.load()
        try:
            for m in msgs:
                cq = cqs.find_consume_queue(TOPIC, m["queue"], create=False)
                unit = cq.get(m["qoff"]) if cq is not None else None
                if unit is None or unit[0] != m["phys"]:
                    problems.append(f"{n}: ConsumeQueue q{m['queue']}/{m['qoff']} is {unit}, commitlog has {m['key']} at {m['phys']}")
                    if len(problems) > 50:
                        return
        finally:
            cqs.shutdown()


class DLedgerCluster(Cluster):
    mode = "dledger"

    def __init__(self, run_dir: Path, seed: int, file_size: int = 64 << 10, roots: Optional[dict[str, Path]] = None,
                 **extra: Any) -> None:
        super().__init__(run_dir, seed, file_size)
        ports = free_ports(6)
        self.http = {n: ports[i] for i, n in enumerate(DLEDGER_IDS)}
        self.raft = {n: ports[3 + i] for i, n in enumerate(DLEDGER_IDS)}
        self.roots = dict(roots or {n: run_dir / f"store-{n}" for n in DLEDGER_IDS})
        self.proxy_port: dict[tuple[str, str], int] = {}
        for a in DLEDGER_IDS:
            for b in DLEDGER_IDS:
                if a != b:
                    self.proxy_port[(a, b)] = self.hub.add_link(f"{a}->{b}", ("127.0.0.1", self.raft[b]), framed=True)
        http_peers = ";".join(f"{n}-127.0.0.1:{self.http[n]}" for n in DLEDGER_IDS)
        for n in DLEDGER_IDS:
            peers = ";".join(f"{p}-127.0.0.1:{self.raft[p] if p == n else self.proxy_port[(n, p)]}" for p in DLEDGER_IDS)
            overrides = {"listenPort": self.http[n], "dLegerPeers": peers, "dLegerPeersHttp": http_peers,
                         "storePathRootDir": self.roots[n], "storePathCommitLog": self.roots[n] / "commitlog",
                         "mappedFileSizeCommitLog": file_size, "slaveSyncIntervalMs": 500,
                         "dLegerElectionTimeoutMs": "500-1000", **NO_FORCED_CLEAN, **extra}
            conf = write_conf(REPO / "conf" / "dledger" / f"broker-{n}.conf", run_dir / f"broker-{n}.conf", overrides)
            self.procs[n] = fault_broker(conf, self.http[n], n, run_dir)

    def links_from_to(self, a: str, b: str) -> list[str]:
        return [f"{a}->{b}"]

    def leader(self) -> Optional[str]:
        """The single live node that is master (DLedger leader with leader-ready), else None."""
        found = [n for n in self.names if (st := self.status(n)) is not None and st.get("isMaster")]
        return found[0] if len(found) == 1 else None

    def in_sync(self) -> Optional[int]:
        ends = set()
        for n in self.names:
            st = self.status(n)
            if st is None or "dledger" not in st:
                return None
            d = st["dledger"]
            if d["committedIndex"] != d["endIndex"] or st.get("dispatchBehindBytes"):
                return None
            ends.add(d["committedIndex"])
        return ends.pop() if len(ends) == 1 else None

    def data_files(self, n: str) -> list[Path]:
        d = self.roots[n] / f"dledger-{n}" / "data"
        return sorted(p for p in d.iterdir() if p.name.isdigit()) if d.exists() else []

    def read_replicas(self) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
        from dledger.store.file_store import DLedgerMmapFileStore
        from dledger.store.state_files import CheckpointFile

        out: dict[str, list[dict[str, Any]]] = {}
        problems: list[str] = []
        for n in self.names:
            root = self.roots[n]
            committed = CheckpointFile(root / f"dledger-{n}").load_committed_index()
            msgs: list[dict[str, Any]] = []
            if committed is None:
                problems.append(f"{n}: no committed index in its checkpoint")
                committed = -1
            store = DLedgerMmapFileStore(root, n, data_file_size=self.file_size)
            store.startup()
            try:
                for i in range(max(store.ledger_begin_index, 0), committed + 1):
                    e = store.get(i)
                    try:
                        m = decode_message(e.body, check_crc=True)
                    except MessageFormatError as exc:
                        problems.append(f"{n}: entry {i} at pos {e.pos} does not decode: {exc}")
                        continue
                    if m.commitlog_offset != e.pos + 48:
                        problems.append(f"{n}: entry {i} PHY_POS {m.commitlog_offset} != pos {e.pos} + 48")
                    if (rec := self._msg(m)) is not None:
                        msgs.append(rec)
            finally:
                store.shutdown()
            self._check_cq(root, n, msgs, problems)
            out[n] = msgs
        return out, problems


class ClassicPair(Cluster):
    """Master ``m`` (SYNC_MASTER by default) and slave ``s``; the slave's HA link is proxied."""

    mode = "classic"

    def __init__(self, run_dir: Path, seed: int, file_size: int = 64 << 10, role: str = "SYNC_MASTER",
                 **extra: Any) -> None:
        super().__init__(run_dir, seed, file_size)
        ports = free_ports(3)
        self.http = {"m": ports[0], "s": ports[2]}
        ha_port = ports[1]
        self.roots = {"m": run_dir / "store-m", "s": run_dir / "store-s"}
        link_port = self.hub.add_link("s->m", ("127.0.0.1", ha_port), framed=False)
        common = {"mappedFileSizeCommitLog": file_size, **NO_FORCED_CLEAN, **extra}
        # ASYNC_FLUSH flushes every 64 pages or 60 s here, so a crash has an unflushed tail to tear
        # (torn-write tears only past the checkpoint's flushed offset: below it bytes were fsync'ed)
        mconf = write_conf(REPO / "conf" / "classic" / "broker-a.conf", run_dir / "broker-m.conf",
                           {"brokerRole": role, "listenPort": self.http["m"], "haListenPort": ha_port,
                            "storePathRootDir": self.roots["m"], "storePathCommitLog": self.roots["m"] / "commitlog",
                            "flushCommitLogLeastPages": 64, "flushCommitLogThoroughInterval": 60_000, **common})
        sconf = write_conf(REPO / "conf" / "classic" / "broker-a-s.conf", run_dir / "broker-s.conf",
                           {"listenPort": self.http["s"], "haListenPort": free_ports(1)[0],
                            "haMasterAddress": f"127.0.0.1:{link_port}", "storePathRootDir": self.roots["s"],
                            "storePathCommitLog": self.roots["s"] / "commitlog", **common})
        self.procs = {"m": fault_broker(mconf, self.http["m"], "m", run_dir),
                      "s": fault_broker(sconf, self.http["s"], "s", run_dir)}

    def links_from_to(self, a: str, b: str) -> list[str]:
        return ["s->m"]

    def leader(self) -> Optional[str]:
        st = self.status("m")
        return "m" if st is not None and st.get("isMaster") else None

    def in_sync(self) -> Optional[int]:
        m, s = self.status("m"), self.status("s")
        if m is None or s is None:
            return None
        mo = m["commitLog"]["maxOffset"]
        so = s["commitLog"]["maxOffset"]
        return mo if mo == so and not s.get("dispatchBehindBytes") and not m.get("dispatchBehindBytes") else None

    def data_files(self, n: str) -> list[Path]:
        d = self.roots[n] / "commitlog"
        return sorted(p for p in d.iterdir() if p.name.isdigit() and len(p.name) == 20) if d.exists() else []

    def read_replicas(self) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
        out: dict[str, list[dict[str, Any]]] = {}
        problems: list[str] = []
        hdr = struct.Struct(">ii")
        for n in self.names:
            msgs: list[dict[str, Any]] = []
            for f in self.data_files(n):
                data = f.read_bytes()
                pos = 0
                while pos + 8 <= len(data):
                    total, magic = hdr.unpack_from(data, pos)
                    if total == 0 or magic == BLANK_MAGIC_CODE:
                        break
                    try:
                        m = decode_message(data, pos, check_crc=True)
                    except MessageFormatError as exc:
                        problems.append(f"{n}: {f.name} record at {pos} does not decode: {exc}")
                        break
                    if m.commitlog_offset != int(f.name) + pos:
                        problems.append(f"{n}: {f.name}+{pos}: PHY_POS {m.commitlog_offset}")
                    if (rec := self._msg(m)) is not None:
                        msgs.append(rec)
                    pos += total
            self._check_cq(self.roots[n], n, msgs, problems)
            out[n] = msgs
        return out, problems

