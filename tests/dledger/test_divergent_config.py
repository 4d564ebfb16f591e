"""Issue 13.7 with real ``dledger server`` processes: configuration that used to diverge silently.

* Two members whose data file sizes differ used to elect a leader and replicate until the first
  file rolled, then one died. Now each refuses the other in the handshake, and both logs carry
  one line naming both values and the key to fix.
* A member started on a store of another group used to serve it under the new name. Now it
  exits non-zero with one ``dledger: error:`` line naming the identity file and the key.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from tools.nodes import DLedgerServerProc, quietly, stop_all
from tools.procs import free_ports

pytestmark = [pytest.mark.multiprocess]
SECRET = "divergent-config-secret-01"


def _server(root: Path, nid: str, peers: str, *extra: str, group: str = "g") -> DLedgerServerProc:
    return DLedgerServerProc(
        root / f"{nid}.log", group=group, self_id=nid, peers=peers, store=root,
        args=["--index-file-size", "64k", "--auth-token", SECRET, "--log-level", "WARNING", *extra]).start()


def _stop(procs: list[DLedgerServerProc]) -> None:
    """SIGTERM to all at once; as before, one still running after 15 s is killed and the test does
    not judge how they exit (its assertions are about the logs)."""
    quietly(lambda: stop_all([p.child for p in procs], bound=15))


def _wait_for(pred, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return pred()


def test_members_with_different_data_file_sizes_refuse_each_other(tmp_path: Path) -> None:
    p0, p1 = free_ports(2)
    peers = f"n0-127.0.0.1:{p0};n1-127.0.0.1:{p1}"
    procs = [_server(tmp_path, "n0", peers, "--data-file-size", "1m"),
             _server(tmp_path, "n1", peers, "--data-file-size", "2m")]
    logs = [tmp_path / "n0.log", tmp_path / "n1.log"]
    # both sides log both refusals (as acceptor, and as connector): wait for all four lines
    wanted = [("n0: refused connection from", "n0: handshake with peer n1 failed"),
              ("n1: refused connection from", "n1: handshake with peer n0 failed")]
    try:
        assert _wait_for(lambda: all(w in lg.read_text() for lg, ws in zip(logs, wanted) for w in ws), 20), \
            [lg.read_text()[-2000:] for lg in logs]
        for lg, (me, mine, other, theirs) in zip(logs, [("n0", 1048576, "n1", 2097152),
                                                          ("n1", 2097152, "n0", 1048576)]):
            text = lg.read_text()
            # the acceptor's refusal, and the refusal it received as a connector
            assert f"{me}: refused connection from" in text
            assert f"{other} has {theirs}, {me} has {mine}; set --data-file-size (mappedFileSizeForEntryData) " \
                   "to the same value on every member of group 'g'" in text
            assert f"{me}: handshake with peer {other} failed" in text
            assert "Traceback" not in text
        assert all(p.alive() for p in procs)  # refusing, not dying
    finally:
        _stop(procs)


def test_member_refuses_a_store_of_another_group(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    peers = f"n0-127.0.0.1:{port}"
    first = _server(tmp_path, "n0", peers, "--data-file-size", "1m")
    try:
        assert _wait_for(lambda: (tmp_path / "dledger-n0" / "identity").exists(), 20)
    finally:
        _stop([first])
    second = _server(tmp_path, "n0", peers, "--data-file-size", "1m", group="other")
    try:
        assert second.wait_exit(30) != 0
    finally:
        _stop([second])
    text = (tmp_path / "n0.log").read_text()
    lines = [ln for ln in text.splitlines() if ln.startswith("dledger: error:")]
    assert len(lines) == 1 and "Traceback" not in text, text
    assert f"{tmp_path / 'dledger-n0' / 'identity'} records group group=g but this member is configured with " \
           "other (--group (group)); set --group (group)=g" in lines[0]
