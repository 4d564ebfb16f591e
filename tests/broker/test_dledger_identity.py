"""Issue 13.7 with a real ``mqbroker``: a DLedger store is never served under another name.

A one-member DLedger broker starts on a fresh store (which records ``dledger-n0/identity``), is
stopped, and is restarted with another ``brokerName`` / ``dLegerGroup`` / ``mappedFileSizeCommitLog``:
each refused start exits non-zero with one line naming the identity file and the broker key to
fix, and the right configuration still starts on the untouched store.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tools.procs import free_ports, write_conf
from tools.nodes import BrokerProc
from tools.procs import REPO

pytestmark = pytest.mark.multiprocess


def _broker(tmp: Path, name: str, http: int, raft: int, **extra) -> BrokerProc:
    root = tmp / "store"
    overrides = {"listenPort": http, "dLegerPeers": f"n0-127.0.0.1:{raft}", "dLegerPeersHttp": f"n0-127.0.0.1:{http}",
                 "storePathRootDir": root, "storePathCommitLog": root / "commitlog",
                 "mappedFileSizeCommitLog": 1 << 20, **extra}
    conf = write_conf(REPO / "conf" / "dledger" / "broker-n0.conf", tmp / f"{name}.conf", overrides)
    return BrokerProc(conf, http, name, tmp)


@pytest.mark.timeout(120)
def test_broker_refuses_a_dledger_store_of_another_name_or_file_size(tmp_path: Path) -> None:
    http, raft = free_ports(2)
    first = _broker(tmp_path, "first", http, raft)
    first.start(timeout=60)
    first.stop()
    ident = tmp_path / "store" / "dledger-n0" / "identity"
    assert "brokerName=RaftNode00" in ident.read_text()
    for name, change, expect in [
        ("renamed", {"brokerName": "RaftNode01"}, "records broker name brokerName=RaftNode00 but this member is "
                                                  "configured with RaftNode01 (brokerName); set brokerName=RaftNode00"),
        ("regrouped", {"dLegerGroup": "RaftNode01"}, "records group group=RaftNode00 but this member is configured "
                                                     "with RaftNode01 (dLegerGroup); set dLegerGroup=RaftNode00"),
        ("resized", {"mappedFileSizeCommitLog": 2 << 20}, "(mappedFileSizeCommitLog); set mappedFileSizeCommitLog=1048576"),
    ]:
        bad = _broker(tmp_path, name, http, raft, **change)
        bad.start(wait=False)
        assert bad.proc is not None
        code = bad.proc.wait(60)
        log = bad.log_path.read_text()
        assert code != 0, log
        assert str(ident) in log and expect in log, log
        assert "Traceback" not in log, log
        bad.stop()
    again = _broker(tmp_path, "again", http, raft)
    again.start(timeout=60)
    again.stop()
