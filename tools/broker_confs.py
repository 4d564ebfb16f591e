"""Broker ``.conf`` files for local processes: a classic master or slave, a one-member DLedger
broker, a DLedger group; from the samples under ``conf/`` with free 127.0.0.1 ports.

Used by the tests, ``bench/`` and the fault harness, with :class:`tools.nodes.BrokerProc` to run
what they describe.

Rules:
- A conf is a copy of a sample (``conf/classic/<name>.conf``, ``conf/dledger/broker-n<i>.conf``)
  with keys replaced in place or appended (:func:`tools.procs.write_conf`); RocketMQ key names;
  keyword arguments last, so a caller overrides any default here.
- Ports are free ports of :mod:`tools.procs` (a classic broker's ``listenPort`` and
  ``haListenPort = listenPort + 1`` are checked as a pair); stores live under the caller's
  directory, commitlog files of 1 MiB (small stores, quick tests).
- Each function returns ``(conf path, listenPort)`` (the HTTP API and remoting door share it).

Theory of operation: pure file writing, no process is started here.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

from tools.procs import REPO, free_ports, port_pair, write_conf

CONF_DIR = REPO / "conf" / "classic"
DLEDGER_CONF_DIR = REPO / "conf" / "dledger"


def classic_conf(template: str, out: Path, **overrides: Any) -> Path:
    """Copy ``conf/classic/<template>`` to ``out`` with keys replaced/added (RocketMQ key names)."""
    return write_conf(CONF_DIR / template, out, overrides)


def master_conf(tmp: Path, role: str = "SYNC_MASTER", **extra: Any) -> tuple[Path, int]:
    """``tmp/broker-a.conf``: a classic master (``role``) with its store under ``tmp/broker-a``."""
    port = port_pair()
    conf = classic_conf("broker-a.conf", tmp / "broker-a.conf", **{
        "brokerRole": role, "listenPort": port, "haListenPort": port + 1, "storePathRootDir": tmp / "broker-a",
        "storePathCommitLog": tmp / "broker-a" / "commitlog", "mappedFileSizeCommitLog": 1 << 20, **extra})
    return conf, port


def slave_conf(tmp: Path, master_port: int, **extra: Any) -> tuple[Path, int]:
    """``tmp/broker-a-s.conf``: the slave of the master on ``master_port`` (its HA port is +1)."""
    port = port_pair()
    conf = classic_conf("broker-a-s.conf", tmp / "broker-a-s.conf", **{
        "listenPort": port, "haListenPort": port + 1, "haMasterAddress": f"127.0.0.1:{master_port + 1}",
        "storePathRootDir": tmp / "broker-a-s", "storePathCommitLog": tmp / "broker-a-s" / "commitlog",
        "mappedFileSizeCommitLog": 1 << 20, **extra})
    return conf, port


def dledger_single_conf(tmp: Path, root: Path, group: str = "g0", self_id: str = "n0",
                        **extra: Any) -> tuple[Path, int]:
    """A one-member DLedger broker over ``root`` (the Apache fixtures' g0/n0, 1 MiB files)."""
    http, raft = free_ports(2)
    conf = write_conf(DLEDGER_CONF_DIR / "broker-n0.conf", tmp / f"{self_id}.conf", {
        "listenPort": http, "dLegerGroup": group, "dLegerSelfId": self_id, "dLegerPeers": f"{self_id}-127.0.0.1:{raft}",
        "dLegerPeersHttp": f"{self_id}-127.0.0.1:{http}", "storePathRootDir": root,
        "storePathCommitLog": root / "commitlog", "mappedFileSizeCommitLog": 1 << 20, "maxHashSlotNum": 10000,
        "maxIndexNum": 40000, **extra})
    return conf, http


def dledger_group_confs(tmp: Path, n: int = 3, *, conf_dir: Optional[Path] = None, conf_name: str = "n{i}.conf",
                        store_name: str = "n{i}", per_member: Callable[[int], dict[str, Any]] = lambda i: {},
                        **extra: Any) -> list[tuple[Path, int]]:
    """``n`` DLedger broker confs (``conf/dledger/broker-n<i>.conf``) on free ports, one group:
    ``(conf path, listenPort)`` per member; stores under ``tmp/<store_name>``, ``extra`` for all
    members, ``per_member(i)`` for one; confs in ``conf_dir`` (default ``tmp``)."""
    ports = free_ports(2 * n)
    http, raft = ports[:n], ports[n:]
    peers = ";".join(f"n{i}-127.0.0.1:{raft[i]}" for i in range(n))
    peers_http = ";".join(f"n{i}-127.0.0.1:{http[i]}" for i in range(n))
    out = []
    for i in range(n):
        root = tmp / store_name.format(i=i)
        conf = write_conf(DLEDGER_CONF_DIR / f"broker-n{i}.conf", (conf_dir or tmp) / conf_name.format(i=i), {
            "listenPort": http[i], "dLegerPeers": peers, "dLegerPeersHttp": peers_http, "storePathRootDir": root,
            "storePathCommitLog": root / "commitlog", "mappedFileSizeCommitLog": 1 << 20, **extra, **per_member(i)})
        out.append((conf, http[i]))
    return out
