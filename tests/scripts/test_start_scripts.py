"""Issue 24.8: the start scripts check their own processes and fail fast with the broker's line.

Rules: ``scripts/dledger-start.sh`` / ``classic-start.sh`` run for real on conf dirs whose ports
are free ports (``RMQPY_DLEDGER_CONF`` / ``RMQPY_CLASSIC_CONF``, ``RMQPY_RUN`` in tmp):
- a group whose port is held by another group's broker (a real one-member DLedger master) and
  whose other ports are taken: the script exits non-zero within seconds (not after its timeout),
  naming the broker that exited and its "address already in use" line, and never reports the
  other group as its own;
- a free group starts (exit 0, a master) and the stop script stops all three;
- the classic pair with its slave's port taken fails the same way.
Every process a test starts is stopped in ``finally``.
"""
from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from tools.procs import free_ports, write_conf
from tools.broker_confs import dledger_group_confs
from tools.nodes import BrokerProc
from tools.procs import REPO

pytestmark = pytest.mark.multiprocess

TIMEOUT_S = 30  # the scripts' default; failing fast means far below it


def _dledger_confs(tmp: Path, group: str = "RaftNode00") -> tuple[Path, list[int]]:
    confs = dledger_group_confs(tmp, conf_dir=tmp / "conf", conf_name="broker-n{i}.conf", store_name="store-n{i}",
                                dLegerGroup=group)
    return tmp / "conf", [port for _, port in confs]


def _run(script: str, tmp: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    r = subprocess.run(["bash", str(REPO / "scripts" / script)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "RMQPY_RUN": str(tmp / "run"), **env})
    return r, time.monotonic() - t0


@pytest.fixture
def squat() -> Iterator[list[socket.socket]]:
    held: list[socket.socket] = []
    yield held
    for s in held:
        s.close()


def _hold(held: list[socket.socket], port: int) -> None:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen()
    held.append(s)


@pytest.mark.timeout(180)
def test_dledger_start_fails_fast_and_never_takes_another_group_for_its_own(tmp_path: Path, squat) -> None:
    conf, http = _dledger_confs(tmp_path)
    other_http, other_raft = free_ports(2)
    root = tmp_path / "other"
    other_conf = write_conf(REPO / "conf" / "dledger" / "broker-n0.conf", tmp_path / "other.conf",
                            {"listenPort": http[0], "brokerName": "OtherGroup", "dLegerGroup": "OtherGroup",
                             "dLegerPeers": f"n0-127.0.0.1:{other_raft}", "dLegerPeersHttp": f"n0-127.0.0.1:{http[0]}",
                             "storePathRootDir": root, "storePathCommitLog": root / "commitlog",
                             "mappedFileSizeCommitLog": 1 << 20})
    other = BrokerProc(other_conf, http[0], "other", tmp_path)
    try:
        other.start(timeout=60)
        _hold(squat, http[1])
        _hold(squat, http[2])
        r, took = _run("dledger-start.sh", tmp_path, RMQPY_DLEDGER_CONF=str(conf))
        assert r.returncode != 0, (r.stdout, r.stderr)
        assert took < TIMEOUT_S / 2, (took, r.stderr)
        assert "address already in use" in r.stderr and "dledger-n0" in r.stderr, r.stderr
        assert "OtherGroup" not in r.stdout, r.stdout
    finally:
        _run("dledger-stop.sh", tmp_path)
        other.stop()


@pytest.mark.timeout(180)
def test_dledger_start_reports_its_own_group_and_stop_ends_it(tmp_path: Path) -> None:
    conf, _http = _dledger_confs(tmp_path)
    try:
        r, _took = _run("dledger-start.sh", tmp_path, RMQPY_DLEDGER_CONF=str(conf), RMQPY_START_TIMEOUT="60")
        assert r.returncode == 0, (r.stdout, r.stderr)
        pids = [int((tmp_path / "run" / f"dledger-n{i}.pid").read_text()) for i in range(3)]
        assert all(Path(f"/proc/{p}").exists() for p in pids)
    finally:
        stop, _ = _run("dledger-stop.sh", tmp_path)
    assert stop.returncode == 0 and stop.stdout.count("stopped dledger-") == 3, (stop.stdout, stop.stderr)
    assert not any(Path(f"/proc/{p}/cmdline").exists() and b"mqbroker" in Path(f"/proc/{p}/cmdline").read_bytes()
                   for p in pids)


@pytest.mark.timeout(180)
def test_classic_start_fails_fast_with_the_brokers_line(tmp_path: Path, squat) -> None:
    master, slave, ha, slave_ha = free_ports(4)
    d = tmp_path / "conf"
    for name, port, own_ha in (("broker-a", master, ha), ("broker-a-s", slave, slave_ha)):
        root = tmp_path / name
        write_conf(REPO / "conf" / "classic" / f"{name}.conf", d / f"{name}.conf",
                   {"listenPort": port, "haListenPort": own_ha, "haMasterAddress": f"127.0.0.1:{ha}",
                    "storePathRootDir": root, "storePathCommitLog": root / "commitlog",
                    "mappedFileSizeCommitLog": 1 << 20})
    _hold(squat, slave)
    try:
        r, took = _run("classic-start.sh", tmp_path, RMQPY_CLASSIC_CONF=str(d))
        assert r.returncode != 0, (r.stdout, r.stderr)
        assert took < TIMEOUT_S / 2, (took, r.stderr)
        assert "broker-a-s" in r.stderr and "address already in use" in r.stderr, r.stderr
    finally:
        _run("classic-stop.sh", tmp_path)
