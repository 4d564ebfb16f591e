"""A broker whose DLedger member stopped itself is not a zombie (issue 13.1), with real processes.

Scenario: three ``mqbroker`` processes in one DLedger group (``preferredLeaderId=n0``); the store
root of the follower n2 is a size-limited tmpfs. Its filesystem is filled to the last byte
while producers keep writing through the leader: n2's next follower append fails with ENOSPC,
which is fatal for a DLedger member (``DLedgerServer._fatal``: "applying a Ready failed"). A
reader thread pulls and looks up by offset on n2 the whole time. Required:

- n2 exits with code 4 and one ``mqbroker:`` line naming the cause (disk full) and the fix
  (free space on storePathRootDir, restart);
- no read on n2 ever advised skipping data: no ``MESSAGE_WAS_REMOVING``, no pull whose
  ``nextBeginOffset`` jumps past messages it did not return, no 404 for an acknowledged offset
  (an error such as SERVICE_NOT_AVAILABLE, or a refused connection, is fine);
- n0/n1 keep serving: writes acknowledged after the fault, and every acknowledged message is
  read back from the leader; after the filler is removed n2 restarts and catches up.

Before the fix n2 stays up with ``/health`` ok and never exits (the first assertion fails).
Needs root (``mount -t tmpfs``); skipped otherwise, like the fault suite's disk-full nemesis.
"""
from __future__ import annotations

import errno
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from broker.api.client import BrokerClientError, SyncBrokerClient
from tools.procs import wait_until
from tests.broker.test_dledger_group import DLedgerGroup

pytestmark = pytest.mark.multiprocess

TOPIC = "TopicZombie"


def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


def _fill(path: Path) -> Path:
    """Fill the filesystem of ``path`` to the last byte with one filler file."""
    filler = path / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (1 << 20, 4096, 1):
            block = b"\0" * chunk
            while True:
                try:
                    if os.write(fd, block) < chunk:
                        break
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return filler


class Reader(threading.Thread):
    """Pulls queue 0 from offset 0 and looks up acknowledged offsets on one node, until stopped."""

    def __init__(self, address: str, acked: list[dict[str, Any]]) -> None:
        super().__init__(daemon=True)
        self.address, self.acked = address, acked
        self.bad: list[str] = []
        self.answers: dict[str, int] = {}
        self.halt = threading.Event()

    def _count(self, what: str) -> None:
        self.answers[what] = self.answers.get(what, 0) + 1

    def run(self) -> None:
        client = SyncBrokerClient(self.address, timeout=3.0)
        try:
            while not self.halt.is_set():
                try:
                    r = client.pull(TOPIC, 0, 0, 32)
                    self._count(r["status"])
                    if r["status"] == "MESSAGE_WAS_REMOVING":
                        self.bad.append(f"pull answered {r}")
                    elif r["status"] == "FOUND" and r["nextBeginOffset"] != len(r["messages"]):
                        self.bad.append(f"pull from 0 returned {len(r['messages'])} but nextBeginOffset "
                                        f"{r['nextBeginOffset']}")
                    mine = [a for a in list(self.acked) if a["queueId"] == 0]
                    if mine:
                        a = mine[len(mine) // 2]
                        m = client.by_offset(a["commitLogOffset"])
                        self._count("BY_OFFSET_FOUND")
                        if m.get("uniqKey") != a["uniqKey"]:
                            self.bad.append(f"by-offset {a['commitLogOffset']} returned another message")
                except BrokerClientError as exc:
                    self._count(f"{exc.status}:{exc.code}")
                    if exc.status == 404:
                        self.bad.append(f"an acknowledged read answered not found: {exc}")
                    if exc.code in ("", "UNKNOWN") or exc.status == 0:
                        time.sleep(0.02)  # refused connection: the process is going away
                time.sleep(0.005)
        finally:
            client.close()


def test_member_stopped_by_disk_full_exits_and_group_keeps_serving(tmp_path: Path) -> None:
    root2 = tmp_path / "dledger-n2"
    if not _mount_tmpfs(root2, "48m"):
        pytest.skip("needs root to mount a size-limited tmpfs (a real ENOSPC)")
    group = DLedgerGroup(tmp_path, preferredLeaderId="n0")
    acked: list[dict[str, Any]] = []
    filler: Path | None = None
    reader: Reader | None = None
    try:
        group.start()
        assert group.wait_master(60, want="n0") == "n0"
        with SyncBrokerClient(group.address("n0"), timeout=10.0) as c:
            c.create_topic(TOPIC, read_queue_nums=1, write_queue_nums=1)
        with SyncBrokerClient(group.address("n0"), timeout=10.0) as p:  # n0 stays leader (preferred)
            for i in range(50):
                acked.append(p.send(TOPIC, f"before-{i}", queue_id=0))
            group.wait_in_sync(60)
            reader = Reader(group.address("n2"), acked)
            reader.start()
            wait_until(lambda: reader.answers.get("FOUND", 0) > 0, 20, "n2 serving pulls")
            filler = _fill(root2)
            t_fault = time.monotonic()
            i = 0
            while group.procs["n2"].alive() and time.monotonic() - t_fault < 30:
                acked.append(p.send(TOPIC, f"during-{i}", queue_id=0))
                i += 1
            try:
                code = group.procs["n2"].proc.wait(20)  # type: ignore[union-attr]
            except subprocess.TimeoutExpired:
                with SyncBrokerClient(group.address("n2"), timeout=3.0) as c2:
                    health = c2.request("GET", "/health")
                pytest.fail(f"n2 still running 20 s after its DLedger member failed (zombie): /health {health}; "
                            f"skip-advising reads {reader.bad[:3]}; answers {reader.answers}")
            exit_s = time.monotonic() - t_fault
            for j in range(50):  # n0/n1 keep serving: a quorum of two
                acked.append(p.send(TOPIC, f"after-{j}", queue_id=0))
        reader.halt.set()
        reader.join(10)
        log = group.procs["n2"].log()
        lines = [ln for ln in log.splitlines() if ln.startswith("mqbroker:")]
        assert code == 4, f"n2 exit code {code} ({exit_s:.1f}s after the fault):\n{log[-3000:]}"
        assert len(lines) == 1, lines
        assert "stopped itself" in lines[0] and "disk full" in lines[0].lower() and "free space" in lines[0], lines
        assert not reader.bad, reader.bad[:5]
        with SyncBrokerClient(group.address("n0"), timeout=10.0) as c:
            got = c.pull(TOPIC, 0, 0, 10_000)
            seen = {m["uniqKey"] for m in got["messages"]}
            while got["status"] == "FOUND" and got["nextBeginOffset"] < got["maxOffset"]:
                got = c.pull(TOPIC, 0, got["nextBeginOffset"], 10_000)
                seen |= {m["uniqKey"] for m in got["messages"]}
        lost = [a["uniqKey"] for a in acked if a["uniqKey"] not in seen]
        assert not lost, f"{len(lost)} acknowledged messages lost on the leader"
        print(f"n2 exited {code} {exit_s:.2f}s after the disk filled; reader answers {reader.answers}; "
              f"{len(acked)} acked, none lost")
        # the cause cleared: it restarts (through recovery) and catches up with the group
        filler.unlink()
        filler = None
        group.procs["n2"].start(wait=True, timeout=60)
        group.wait_in_sync(60)
        with SyncBrokerClient(group.address("n2"), timeout=5.0) as c:
            assert c.request("GET", "/health")[0] == 200
    finally:
        if reader is not None:
            reader.halt.set()
        group.kill_all()
        if filler is not None:
            filler.unlink(missing_ok=True)
        subprocess.run(["umount", "-l", str(root2)], capture_output=True)
