"""A Controller-mode cluster of real processes: N ``mqcontroller``, one ``mqnamesrv`` and M
Controller-mode ``mqbroker`` of one broker set, on free 127.0.0.1 ports, confs and stores in a
work dir.

Used by the tests (``tests/broker/test_controller_mode.py``, ``tests/faults/``), the benchmark
``bench/controller_failover.py`` and the migration tests; in ``tools/`` (not the test tree)
because bench must run without the tests.

Rules:
- Every conf is generated under the work dir: the controllers' from scratch (DLedger peers,
  remoting doors, ``controllerHttpPort``, no ACL), the brokers' from
  ``conf/controller/broker/broker-a-n<i>.conf`` (n0's for i >= 2, ``brokerElectionPriority``
  i + 1) with ports, store root, ``controllerAddr`` and ``namesrvAddr`` replaced and the fast
  timings of :data:`FAST_BROKER` (heartbeat 200 ms, controller heartbeat timeout 2 s, ...);
  ``broker_extra`` / ``controller_extra`` override them. :meth:`ControllerCluster.add_broker`
  adds a broker later, from a given template and store root (a migrated store).
- Every wait is bounded and says what it waited for; a child that exits while it is waited for
  raises with its log tail.
- :meth:`ControllerCluster.close` is ``finally``-safe and idempotent: brokers and name server
  are SIGKILLed (a SIGSTOPped one too), controllers get SIGTERM then SIGKILL. Nothing outlives it.
- Who is master is read from the brokers' HTTP ``/status`` (``isMaster`` and ``brokerId`` 0,
  exactly one); who leads the controllers from the controllers' HTTP ``/status`` (``isLeader``).
- ``links`` (a :class:`Links`, e.g. a fault proxy; default none: every address is the real one)
  interposes on the peer links, named by node (``controller-n0``, ``broker-n0``, ``namesrv``):
  each controller dials each other controller's DLedger port through its own link
  (``controller-a`` -> ``controller-b``, a per-controller peer list); every broker reaches a
  controller's door through one shared link (``*`` -> ``controller-b-door``: the door is both
  in ``controllerAddr`` and in ``controllerRemotingPeers``, whose entry the controllers hand the
  brokers as the leader's address, so it cannot differ per broker); each broker reaches the name
  server through its own link; a broker's HA port is reached through one shared link
  (``*`` -> ``broker-b-ha``) listening on ``brokerIP2:haListenPort`` (a slave asks the master
  for exactly that pair), so the link keeps the port on another loopback host. Not interposed:
  the clients' and the HTTP ``/status`` doors, and what dials a broker's remoting door (clients,
  other brokers' metadata calls, the controllers' role pushes): one port serves them all.

Theory of operation: the processes are :mod:`tools.nodes`' (:class:`~tools.nodes.Child` per
controller in :class:`ControllerGroup`, :class:`~tools.nodes.NamesrvProc`,
:class:`~tools.nodes.BrokerProc` per broker, logs ``broker-<name>.log``), and
:class:`ControllerCluster` composes them; all
polling goes through :func:`tools.procs.wait_until`. Reading back: :func:`read_queues` pulls a
topic's queues over HTTP from a per-queue cursor (``read_all`` from 0). Load:
:class:`ContinuousProducer` keeps closed-loop writers sending on a thread of its own and records
every acknowledgement with the broker that stored it, so a fault test or a benchmark can demand
each one back from every replica.
"""
from __future__ import annotations

import asyncio
import itertools
import json
import signal
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Protocol

from broker.api.client import BrokerClientError, MasterFollowingProducer, SyncBrokerClient
from tools.nodes import BrokerProc, Child, NamesrvProc, quietly
from tools.procs import REPO, SHUTDOWN_BOUND_S, free_ports, wait_until, write_conf

CONF_DIR = REPO / "conf" / "controller" / "broker"
#: the controllers' extra conf lines: no ACL on loopback, fast scans of dead brokers / masters
FAST_CONTROLLER: dict[str, Any] = {"controllerAllowInsecure": "true", "scanNotActiveBrokerInterval": 300,
                                   "scanInactiveMasterInterval": 1000}
#: the brokers' timings: a dead master is noticed within ~2 s, metadata synced every 0.5 s
FAST_BROKER: dict[str, Any] = {
    "mappedFileSizeCommitLog": 1 << 20, "controllerAccessKey": "", "controllerSecretKey": "",
    "brokerHeartbeatInterval": 200, "controllerHeartBeatTimeoutMills": 2000, "syncBrokerMetadataPeriod": 500,
    "checkSyncStateSetPeriod": 500, "syncControllerMetadataPeriod": 2000, "haSendHeartbeatInterval": 500,
    "slaveSyncIntervalMs": 500, "syncFlushTimeout": 1000}


class Links(Protocol):
    """Interposes on a peer link (module rules), e.g. a fault proxy."""

    def link(self, src: str, dst: str, target: tuple[str, int], *, framed: bool = False,
             same_port: bool = False) -> tuple[str, int]:
        """The address ``src`` (``"*"``: any node) dials to reach ``dst`` listening at ``target``;
        ``framed``: u32be length-prefixed frames (DLedger RPC); ``same_port``: the answer must keep
        ``target``'s port (a 127.0.0.0/8 host other than ``target``'s)."""
        ...


def _addr(a: tuple[str, int]) -> str:
    return f"{a[0]}:{a[1]}"


def http_json(port: int, path: str = "/status", timeout: float = 2.0) -> Optional[dict[str, Any]]:
    """``GET http://127.0.0.1:<port><path>`` as JSON, or None when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            out = json.loads(r.read())
            return out if isinstance(out, dict) else None
    except (OSError, ValueError):
        return None


# ---- controllers --------------------------------------------------------------------------------
class ControllerGroup:
    """``n`` controller processes ``n0..`` (DLedger group ``g``), confs and stores under ``base``;
    ``links``: their DLedger links and doors interposed (module rules)."""

    def __init__(self, base: Path, n: int = 3, extra: Optional[Mapping[str, Any]] = None,
                 links: Optional[Links] = None) -> None:
        self.base = base
        ports = free_ports(3 * n)
        self.ids = [f"n{i}" for i in range(n)]
        self.raft = {pid: ports[3 * i] for i, pid in enumerate(self.ids)}
        self.door = {pid: ports[3 * i + 1] for i, pid in enumerate(self.ids)}
        self.http = {pid: ports[3 * i + 2] for i, pid in enumerate(self.ids)}
        local = {pid: ("127.0.0.1", self.raft[pid]) for pid in self.ids}
        #: the door address brokers dial and controllers advertise (a link's when interposed)
        self.door_address = {pid: ("127.0.0.1", self.door[pid]) for pid in self.ids}
        if links is not None:
            self.door_address = {pid: links.link("*", f"controller-{pid}-door", a)
                                 for pid, a in self.door_address.items()}
        doors = ";".join(f"{p}-{_addr(self.door_address[p])}" for p in self.ids)
        lines = {**FAST_CONTROLLER, **(extra or {})}
        self.children: dict[str, Child] = {}
        for pid in self.ids:
            seen = {p: local[p] if p == pid or links is None
                    else links.link(f"controller-{pid}", f"controller-{p}", local[p], framed=True) for p in self.ids}
            peers = ";".join(f"{p}-{_addr(seen[p])}" for p in self.ids)
            conf = base / f"controller-{pid}.conf"
            conf.parent.mkdir(parents=True, exist_ok=True)
            conf.write_text(
                f"controllerDLegerGroup=g\ncontrollerDLegerPeers={peers}\ncontrollerDLegerSelfId={pid}\n"
                f"controllerRemotingPeers={doors}\nlistenPort={self.door[pid]}\nbindAddress=127.0.0.1\n"
                f"controllerHttpPort={self.http[pid]}\ncontrollerStorePath={base / ('controller-' + pid)}\n"
                "mappedFileSize=4194304\ncontrollerDLegerAuthToken=test-controller-secret-0123456789\n"
                + "".join(f"{k}={v}\n" for k, v in lines.items()))
            self.children[pid] = Child(f"controller-{pid}", ["controller", "-c", str(conf)],
                                       base / f"controller-{pid}.log")

    @property
    def addresses(self) -> str:
        """``controllerAddr`` of the brokers: every door, ``;``-separated."""
        return ";".join(_addr(self.door_address[p]) for p in self.ids)

    def start(self, pid: str) -> None:
        self.children[pid].start()

    def start_all(self) -> None:
        for pid in self.ids:
            self.start(pid)

    def kill9(self, pid: str) -> None:
        self.children[pid].kill9()

    def stop(self, pid: str) -> None:
        self.children[pid].terminate(15.0)

    def pause(self, pid: str) -> None:
        self.children[pid].signal(signal.SIGSTOP)

    def resume(self, pid: str) -> None:
        self.children[pid].signal(signal.SIGCONT)

    def alive(self, pid: str) -> bool:
        return self.children[pid].alive()

    def pids(self) -> dict[str, Optional[int]]:
        """``controller-<id>`` -> process id of its last start (None before), as :class:`Links` names them."""
        return {f"controller-{p}": self.children[p].pid for p in self.ids}

    def stop_all(self) -> None:
        for pid in self.ids:
            try:
                self.stop(pid)
            except Exception:  # noqa: BLE001 - best effort; the stop's own error names the process
                self.children[pid].kill9()

    def status(self, pid: str) -> Optional[dict[str, Any]]:
        return http_json(self.http[pid]) if self.children[pid].alive() else None

    def leader(self, timeout: float = 30.0, skip: Iterable[str] = ()) -> str:
        """The one controller whose ``/status`` says ``isLeader`` (leader and ready)."""
        skipped = set(skip)

        def one() -> Optional[str]:
            found = [p for p in self.ids if p not in skipped and (st := self.status(p)) is not None
                     and st.get("isLeader")]
            return found[0] if len(found) == 1 else None
        return wait_until(one, timeout, "exactly one controller leader", interval=0.1)

    def log_tail(self, pid: str, n: int = 4000) -> str:
        return self.children[pid].log(n)


# ---- the cluster --------------------------------------------------------------------------------
class ControllerCluster:
    """``controllers`` controllers, a name server and ``brokers`` brokers ``n0..`` of ``broker-a``.

    ``with ControllerCluster(base, 3, 3) as c: c.start(); ...`` or ``try/finally: c.close()``;
    ``links``: peer links interposed (module rules)."""

    def __init__(self, base: Path, controllers: int = 3, brokers: int = 2, *,
                 controller_extra: Optional[Mapping[str, Any]] = None,
                 broker_extra: Optional[Mapping[str, Any]] = None, links: Optional[Links] = None) -> None:
        self.base = base
        base.mkdir(parents=True, exist_ok=True)
        self.links = links
        self.group = ControllerGroup(base, controllers, controller_extra, links)
        self.namesrv = NamesrvProc(base)
        self.broker_extra = dict(broker_extra or {})
        self.brokers: dict[str, BrokerProc] = {}
        for i in range(brokers):
            self.add_broker(f"n{i}")

    # -- building
    def add_broker(self, name: str, *, template: Optional[Path] = None, store_root: Optional[Path] = None,
                   overrides: Optional[Mapping[str, Any]] = None) -> BrokerProc:
        """A broker ``name`` of the set (not started): conf from ``template`` (default: the
        sample of the same index) with free ports, ``store_root`` (default ``<base>/broker-<name>``,
        an existing store is used as it is) and this cluster's addresses; ``overrides`` last."""
        idx = int(name[1:]) if name[1:].isdigit() else len(self.brokers)
        extra: dict[str, Any] = {}
        if template is None:
            sample = CONF_DIR / f"broker-a-{name}.conf"
            template = sample if sample.exists() else CONF_DIR / "broker-a-n0.conf"
            if not sample.exists():
                extra["brokerElectionPriority"] = idx + 1
        port, ha = free_ports(2)
        root = store_root or self.base / f"broker-{name}"
        namesrv = self.namesrv.address
        if self.links is not None:
            namesrv = _addr(self.links.link(f"broker-{name}", "namesrv", ("127.0.0.1", self.namesrv.port)))
            extra["brokerIP2"] = self.links.link("*", f"broker-{name}-ha", ("127.0.0.1", ha), same_port=True)[0]
        conf = write_conf(template, self.base / f"broker-a-{name}.conf", {
            "listenPort": port, "haListenPort": ha, "storePathRootDir": root,
            "storePathCommitLog": root / "commitlog", "controllerAddr": self.group.addresses,
            "namesrvAddr": namesrv, **FAST_BROKER, **extra, **self.broker_extra, **(overrides or {})})
        self.brokers[name] = BrokerProc(conf, port, name, self.base, log_name=f"broker-{name}", ha_port=ha,
                                        store_root=root, ready_timeout=60.0)
        return self.brokers[name]

    def start(self, timeout: float = 60.0, wait_master: bool = False) -> "ControllerCluster":
        """Controllers, name server, then every broker (at once); until each answers."""
        self.group.start_all()
        self.namesrv.start()
        for p in self.brokers.values():
            p.start(wait=False)
        for p in self.brokers.values():
            p.wait_ready(timeout)
        if wait_master:
            self.master(timeout)
        return self

    # -- looking
    def status(self, name: str) -> Optional[dict[str, Any]]:
        return self.brokers[name].status()

    def max_offset(self, name: str) -> Optional[int]:
        st = self.status(name)
        return st["commitLog"]["maxOffset"] if st is not None else None

    def ha(self, name: str) -> dict[str, Any]:
        st = self.status(name)
        return st["ha"] if st is not None else {}

    def master(self, timeout: float = 30.0, skip: Iterable[str] = ()) -> str:
        """The one broker (not in ``skip``) whose ``/status`` says master with brokerId 0."""
        skipped = set(skip)

        def one() -> Optional[str]:
            found = [n for n in self.brokers if n not in skipped and (st := self.status(n)) is not None
                     and st["isMaster"] and st["brokerId"] == 0]
            return found[0] if len(found) == 1 else None
        return wait_until(one, timeout, "exactly one Controller-mode master", interval=0.05)

    def slaves(self, master: str) -> list[str]:
        return [n for n in self.brokers if n != master]

    def pids(self) -> dict[str, Optional[int]]:
        """Every node's process id of its last start, named as :class:`Links` names them
        (``controller-<id>``, ``broker-<name>``, ``namesrv``)."""
        return {**self.group.pids(), **{f"broker-{n}": p.child.pid for n, p in self.brokers.items()},
                "namesrv": self.namesrv.child.pid}

    def wait_role(self, name: str, role: str = "SLAVE", timeout: float = 30.0) -> None:
        wait_until(lambda: self.ha(name).get("role") == role or None, timeout, f"{name} is {role}")

    def wait_in_sync(self, master: str, names: Iterable[str], timeout: float = 30.0) -> None:
        """Until every broker of ``names`` is in ``master``'s SyncStateSet."""
        ids = {n: self.ha(n).get("brokerControllerId") for n in names}
        wait_until(lambda: all(i is not None and i in self.ha(master).get("syncStateSet", []) for i in ids.values())
                   or None, timeout, f"{sorted(ids)} in {master}'s SyncStateSet")

    def route_master(self, topic: str, broker_name: str = "broker-a") -> Optional[str]:
        """The name server's brokerId-0 address of ``broker_name`` for ``topic``."""
        route = self.namesrv.route(topic)
        datas = route.get("brokerDatas", []) if route else []
        return next((d["brokerAddrs"].get("0") for d in datas if d.get("brokerName") == broker_name), None)

    def read_all(self, name: str, topic: str, queues: int = 4) -> list[str]:
        """Every message body (text) ``name`` serves on ``topic``'s queues, in queue order."""
        return read_queues(self.brokers[name].address, topic, {q: 0 for q in range(queues)})

    # -- acting
    def kill9(self, name: str) -> None:
        self.brokers[name].kill9()

    def stop(self, name: str, timeout: float = SHUTDOWN_BOUND_S) -> Optional[int]:
        return self.brokers[name].stop(timeout)

    def restart(self, name: str, wait: bool = True, timeout: float = 60.0) -> BrokerProc:
        """Start ``name`` again on its conf and store (after a kill9 or a stop)."""
        p = self.brokers[name]
        if p.alive():
            p.stop()
        return p.start(wait=wait, timeout=timeout)

    def close(self) -> None:
        """Everything this cluster started is ended (idempotent, never raises)."""
        for p in self.brokers.values():
            quietly(p.kill9)
        quietly(self.group.stop_all)
        quietly(self.namesrv.kill9)

    def __enter__(self) -> "ControllerCluster":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def read_queues(address: str, topic: str, cursor: dict[int, int], batch: int = 256) -> list[str]:
    """Bodies (text) the broker at ``address`` serves on ``topic`` from ``cursor`` (queue id ->
    next offset) to each queue's end; ``cursor`` is advanced to the ends."""
    bodies: list[str] = []
    with SyncBrokerClient(address, timeout=15.0) as c:
        for q in sorted(cursor):
            while True:
                got = c.pull(topic, q, cursor[q], batch)
                msgs = got.get("messages", [])
                if not msgs:
                    break
                bodies += [m["bodyText"] for m in msgs]
                cursor[q] = got["nextBeginOffset"]
    return bodies


class ContinuousProducer:
    """``writers`` closed-loop writers sending ``<prefix>-<n>`` bodies to ``topic`` through
    :class:`broker.api.client.MasterFollowingProducer` (follows NOT_MASTER, rotates over
    ``seeds``), on a thread of its own; every acknowledgement (``SEND_OK``) is recorded as
    ``(monotonic time, address of the broker that stored it, body)`` in :attr:`acks`; any other
    outcome counts in :attr:`failures` (it may still have been stored). :meth:`stop` within 30 s."""

    def __init__(self, seeds: list[str], topic: str, *, writers: int = 2, prefix: str = "o",
                 timeout: float = 2.0, name: str = "ours") -> None:
        self.name, self.topic, self.prefix, self.timeout = name, topic, prefix, timeout
        self.acks: list[tuple[float, str, str]] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run(seeds, writers)), name=name, daemon=True)
        self._thread.start()

    async def _run(self, seeds: list[str], writers: int) -> None:
        seq = itertools.count()
        async with MasterFollowingProducer(seeds, timeout=self.timeout) as prod:
            async def writer() -> None:
                while not self._stop.is_set():
                    body = f"{self.prefix}-{next(seq)}"
                    try:
                        r = await prod.send_once(self.topic, body)
                    except (BrokerClientError, asyncio.TimeoutError, OSError):
                        self.failures += 1
                        await asyncio.sleep(0.005)
                        continue
                    if r.get("status") == "SEND_OK":
                        self.acks.append((time.monotonic(), r["brokerAddress"], body))
                    else:
                        self.failures += 1
            await asyncio.gather(*(writer() for _ in range(writers)))

    def acked(self) -> list[str]:
        return [b for _, _, b in list(self.acks)]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
