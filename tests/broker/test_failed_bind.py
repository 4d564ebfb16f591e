"""Issue 24.8 with a real ``mqbroker``: a start that cannot bind leaves the store as a clean stop does.

Rules: the DLedger member's port (its address in ``dLegerPeers``) is taken by another socket; the
broker exits non-zero with one line naming ``dLegerPeers`` and "address already in use", leaves no
``abort`` file (so the next start is a *normal* recovery) and no Traceback; once the port is free
the same conf starts on the same store.
"""
from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tools.procs import free_ports, write_conf
from tools.nodes import BrokerProc
from tools.procs import REPO

pytestmark = pytest.mark.multiprocess


def _broker(tmp: Path, name: str, http: int, raft: int) -> BrokerProc:
    root = tmp / "store"
    overrides = {"listenPort": http, "dLegerPeers": f"n0-127.0.0.1:{raft}", "dLegerPeersHttp": f"n0-127.0.0.1:{http}",
                 "storePathRootDir": root, "storePathCommitLog": root / "commitlog", "mappedFileSizeCommitLog": 1 << 20}
    conf = write_conf(REPO / "conf" / "dledger" / "broker-n0.conf", tmp / f"{name}.conf", overrides)
    return BrokerProc(conf, http, name, tmp)


@pytest.mark.timeout(120)
def test_a_broker_that_cannot_bind_its_dledger_port_leaves_no_abort_file(tmp_path: Path) -> None:
    http, raft = free_ports(2)
    first = _broker(tmp_path, "first", http, raft)
    first.start(timeout=60)
    first.stop()
    squatter = socket.socket()
    try:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", raft))
        squatter.listen()
        bad = _broker(tmp_path, "bad", http, raft)
        bad.start(wait=False)
        assert bad.proc is not None
        code = bad.proc.wait(60)
        log = bad.log_path.read_text()
        bad.stop()
    finally:
        squatter.close()
    assert code != 0, log
    assert "dLegerPeers" in log and "address already in use" in log, log
    assert "Traceback" not in log, log
    assert not (tmp_path / "store" / "abort").exists(), log
    again = _broker(tmp_path, "again", http, raft)
    again.start(timeout=60)
    try:
        assert "(normal recovery" in again.log_path.read_text()
    finally:
        again.stop()
