"""Real processes: ``python -m dledger.cli server`` x3 on 127.0.0.1, kill -9, restart, no lost acks."""
from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import pytest

from dledger.config import DLedgerConfig
from dledger.rpc.client import DLedgerClient
from dledger.storelog import open_store
from tools.nodes import DLedgerServerProc, kill_all, stop_all
from tools.procs import free_ports

pytestmark = [pytest.mark.multiprocess]
REPO = Path(__file__).resolve().parents[2]
SECRET = "proc-group-secret-0123"  # members refuse to start without one (issue 12)


class ProcGroup:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.ids = ["n0", "n1", "n2"]
        self.peers = {i: ("127.0.0.1", p) for i, p in zip(self.ids, free_ports(3))}
        self.peers_s = ";".join(f"{i}-{h}:{p}" for i, (h, p) in self.peers.items())
        self.members: dict[str, DLedgerServerProc] = {}  # the started ones (a kill9 removes one)

    @property
    def procs(self) -> dict[str, subprocess.Popen[bytes]]:
        """The started members' processes, as the modules built on this group read them (pid, poll)."""
        return {nid: m.proc for nid, m in self.members.items() if m.proc is not None}

    def start(self, nid: str) -> None:
        self.members[nid] = DLedgerServerProc(
            self.root / f"{nid}.log", group="g", self_id=nid, peers=self.peers_s, store=self.root,
            args=["--data-file-size", "1m", "--index-file-size", "64k", "--auth-token", SECRET]).start()

    def kill9(self, nid: str) -> None:
        self.members.pop(nid).kill9()

    def terminate_all(self) -> dict[str, Optional[int]]:
        """SIGTERM to all at once, then each exit code within 15 s (past it: ShutdownTooSlow)."""
        try:
            return stop_all([m.child for m in self.members.values()], bound=15)
        finally:
            self.members.clear()

    def kill_all(self) -> None:
        kill_all(self.members.values())
        self.members.clear()

    def client(self, timeout: float = 5.0) -> DLedgerClient:
        return DLedgerClient(self.peers, "g", secret=SECRET, timeout=timeout)

    async def statuses(self) -> dict[str, dict]:
        c = self.client(1.0)
        out = {}
        try:
            for nid in self.members:
                try:
                    out[nid] = await c.status(nid)
                except Exception:
                    pass
        finally:
            await c.close()
        return out

    async def leader(self, timeout: float = 15.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            sts = await self.statuses()
            leaders = [n for n, s in sts.items() if s["role"] == "LEADER"]
            if len(leaders) == 1:
                return leaders[0]
            await asyncio.sleep(0.05)
        raise AssertionError(f"no leader; logs in {self.root}")

    async def caught_up(self, timeout: float = 20.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            sts = await self.statuses()
            if len(sts) == len(self.members):
                ends = {s["end_index"] for s in sts.values()}
                commits = {s["committed_index"] for s in sts.values()}
                if len(ends) == 1 and commits == ends:
                    return ends.pop()
            await asyncio.sleep(0.1)
        raise AssertionError(f"members did not converge: {await self.statuses()}")


@pytest.fixture
def procs(tmp_path):
    g = ProcGroup(tmp_path)
    yield g
    g.kill_all()


async def _appender(g: ProcGroup, acked: dict[int, bytes], stop: asyncio.Event, tag: str) -> int:
    """Append continuously; record every acknowledged (index -> body). Unknown outcomes are fine."""
    c = g.client(timeout=3.0)
    failures = 0
    i = 0
    try:
        while not stop.is_set():
            body = f"{tag}-{i}".encode()
            i += 1
            try:
                r = await c.append(body)
                acked[r.index] = body
            except Exception:
                failures += 1
                await asyncio.sleep(0.02)
    finally:
        await c.close()
    return failures


@pytest.mark.timeout(180)
async def test_group_survives_kill9_of_leader_and_follower_without_losing_acks(procs):
    g = procs
    for nid in g.ids:
        g.start(nid)
    leader = await g.leader()
    acked: dict[int, bytes] = {}
    stop = asyncio.Event()
    writers = [asyncio.create_task(_appender(g, acked, stop, f"w{k}")) for k in range(4)]
    try:
        await asyncio.sleep(1.0)
        n_before = len(acked)
        assert n_before > 10

        # 1. kill -9 the leader while writes are in flight: a new leader takes over
        g.kill9(leader)
        t_kill = time.monotonic()
        while len(acked) <= n_before + 5 and time.monotonic() - t_kill < 15:
            await asyncio.sleep(0.02)
        assert len(acked) > n_before + 5, "no appends acknowledged after the leader was killed"
        new_leader = await g.leader()
        assert new_leader != leader

        # 2. the old leader restarts and catches up (it may hold an uncommitted suffix)
        g.start(leader)
        await asyncio.sleep(1.0)

        # 3. kill -9 a follower; writes continue; it restarts and catches up
        follower = next(n for n in g.ids if n != new_leader and n in g.procs)
        g.kill9(follower)
        n_mid = len(acked)
        await asyncio.sleep(1.0)
        assert len(acked) > n_mid
        g.start(follower)
        await asyncio.sleep(1.0)
    finally:
        stop.set()
        await asyncio.gather(*writers)
    end = await g.caught_up()
    assert max(acked) <= end

    codes = g.terminate_all()
    assert codes == {n: 0 for n in g.ids}, codes  # clean shutdown on SIGTERM
    for nid in g.ids:
        assert b"Traceback" not in (g.root / f"{nid}.log").read_bytes()

    # Every member's store, read after shutdown: identical committed entries, every ack present.
    stores = [open_store(DLedgerConfig(group="g", self_id=n, peers=g.peers_s, store_base_dir=str(g.root),
                                       mapped_file_size_for_entry_data=1 << 20,
                                       mapped_file_size_for_entry_index=64 * 1024)) for n in g.ids]
    try:
        for s in stores:
            assert s.committed_index == end and s.ledger_end_index == end
        raws = [[bytes(v) for v in s.get_raw(0, end + 1)] for s in stores]
        assert raws[0] == raws[1] == raws[2]
        for index, body in acked.items():
            assert bytes(stores[0].get(index).body) == body, index
    finally:
        for s in stores:
            s.shutdown()


@pytest.mark.timeout(60)
async def test_cli_append_get_status_transfer(procs):
    g = procs
    for nid in g.ids:
        g.start(nid)
    leader = await g.leader()

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "dledger.cli", *args, "--group", "g", "--peers", g.peers_s,
                               "--auth-token", SECRET],
                              cwd=REPO, capture_output=True, text=True, timeout=30)

    r = await asyncio.to_thread(cli, "append", "--data", "hello")
    assert r.returncode == 0, r.stderr
    import json
    out = json.loads(r.stdout)
    r = await asyncio.to_thread(cli, "get", "--index", str(out["index"]))
    assert r.returncode == 0 and json.loads(r.stdout)["body"] == "hello"
    r = await asyncio.to_thread(cli, "append", "--data", "x", "--count", "50", "--batch", "10")
    assert r.returncode == 0 and json.loads(r.stdout)["appended"] == 50
    r = await asyncio.to_thread(cli, "status")
    lines = [json.loads(x) for x in r.stdout.splitlines()]
    assert r.returncode == 0 and sorted(x["role"] for x in lines) == ["FOLLOWER", "FOLLOWER", "LEADER"]
    target = next(n for n in g.ids if n != leader)
    r = await asyncio.to_thread(cli, "transfer", "--to", target)
    assert r.returncode == 0, r.stderr
    assert await g.leader() == target
    assert g.terminate_all() == {n: 0 for n in g.ids}


@pytest.mark.timeout(60)
def test_cli_user_errors_are_one_line_without_traceback(tmp_path):
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "dledger.cli", *args], cwd=REPO, capture_output=True,
                              text=True, timeout=30)

    port = free_ports(1)[0]
    cases = [
        (run("server", "--id", "n9", "--peers", f"n0-127.0.0.1:{port}", "--store", str(tmp_path)), 1, "not one of"),
        (run("server", "--id", "n0", "--peers", "garbage", "--store", str(tmp_path)), 2, "bad peer"),
        (run("append", "--peers", f"n0-127.0.0.1:{port}", "--data", "x", "--timeout", "1"), 1, "no leader reachable"),
        (run("status", "--peers", f"n0-127.0.0.1:{port}", "--timeout", "1"), 1, "no member reachable"),
        (run("transfer", "--peers", f"n0-127.0.0.1:{port}", "--to", "n7"), 1, "not one of"),
        (run("frobnicate"), 2, "invalid choice"),
    ]
    for r, code, text in cases:
        assert r.returncode == code, (r.returncode, r.stderr)
        assert text in r.stderr
        assert "Traceback" not in r.stderr
    # a currterm holding a term no Java long holds (what a forged vote used to persist): named, not used
    state = tmp_path / "bad" / "dledger-n0"
    state.mkdir(parents=True)
    (state / "currterm").write_text("voteLeader=n1\ncurrTerm=18446744073709551615\n")
    r = run("server", "--id", "n0", "--peers", f"n0-127.0.0.1:{port}", "--store", str(tmp_path / "bad"),
            "--allow-insecure")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"{state / 'currterm'}: currTerm=18446744073709551615 is outside" in r.stderr
    # a port already in use is a clear error too
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        r = run("server", "--id", "n0", "--peers", f"n0-127.0.0.1:{busy}", "--store", str(tmp_path),
                "--allow-insecure")
        assert r.returncode == 1 and "cannot listen" in r.stderr and "Traceback" not in r.stderr
