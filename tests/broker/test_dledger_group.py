"""Three real ``mqbroker`` processes in DLedger mode (issue 5, "Must show").

Each test writes three conf files from ``conf/dledger/broker-n{0,1,2}.conf`` with free
127.0.0.1 ports and private store roots, starts the processes, and kills them all in
``finally``. The failover test is the Jepsen-style check of DESIGN §8: producers write
continuously through the HTTP API (following NOT_MASTER redirects), the leader is killed with
SIGKILL, a new leader takes the writes, the killed node restarts and catches up, and after a
clean shutdown every acknowledged message is read back from each node's files with the store
code, exactly once, at its acknowledged physical and queue offset; the committed DLedger data
and index bytes are identical on the three nodes.
"""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from broker.api.client import BrokerClientError, MasterFollowingProducer
from broker.store.consume_queue import ConsumeQueueStore
from broker.store.dledger_dispatch import BARRIER_TOPIC
from broker.store.message import decode_message
from dledger.store.file_store import DLedgerMmapFileStore
from dledger.store.state_files import CheckpointFile
from tools.procs import free_ports, write_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import REPO, wait_until

pytestmark = pytest.mark.multiprocess

CONF_DIR = REPO / "conf" / "dledger"
IDS = ("n0", "n1", "n2")
TOPIC = "TopicRaft"


class DLedgerGroup:
    """Three brokers of one DLedger group as real processes (conf files from conf/dledger)."""

    def __init__(self, tmp: Path, roots: dict[str, Path] | None = None, **extra: Any) -> None:
        ports = free_ports(6)
        self.http = {n: ports[i] for i, n in enumerate(IDS)}
        raft = {n: ports[3 + i] for i, n in enumerate(IDS)}
        self.roots = roots or {n: tmp / f"dledger-{n}" for n in IDS}
        peers = ";".join(f"{n}-127.0.0.1:{raft[n]}" for n in IDS)
        http_peers = ";".join(f"{n}-127.0.0.1:{self.http[n]}" for n in IDS)
        self.procs: dict[str, BrokerProc] = {}
        for n in IDS:
            overrides = {"listenPort": self.http[n], "dLegerPeers": peers, "dLegerPeersHttp": http_peers,
                         "storePathRootDir": self.roots[n], "storePathCommitLog": self.roots[n] / "commitlog",
                         "mappedFileSizeCommitLog": 1 << 20, "slaveSyncIntervalMs": 500, **extra}
            conf = write_conf(CONF_DIR / f"broker-{n}.conf", tmp / f"broker-{n}.conf", overrides)
            self.procs[n] = BrokerProc(conf, self.http[n], n, tmp)

    def address(self, n: str) -> str:
        return f"127.0.0.1:{self.http[n]}"

    @property
    def addresses(self) -> list[str]:
        return [self.address(n) for n in IDS]

    def start(self, *ids: str) -> None:
        for n in ids or IDS:
            self.procs[n].start(wait=False)
        for n in ids or IDS:
            self.procs[n].wait_ready(60)

    def status(self, n: str) -> dict[str, Any] | None:
        try:
            with self.procs[n].client(timeout=3.0) as c:
                return c.status()
        except BrokerClientError:
            return None

    def wait_master(self, timeout: float = 30.0, want: str | None = None, skip: tuple[str, ...] = ()) -> str:
        """The one live node that is master with brokerId 0 (``want``: wait until it is that one;
        ``skip``: nodes not to ask, e.g. a stopped one)."""
        def master() -> str | None:
            found = [n for n in IDS if n not in skip and self.procs[n].alive()
                     and (st := self.status(n)) is not None and st["isMaster"] and st["brokerId"] == 0]
            return found[0] if len(found) == 1 and want in (None, found[0]) else None
        return wait_until(master, timeout, f"exactly one DLedger master ({want or 'any'})", interval=0.05)

    def wait_in_sync(self, timeout: float = 60.0) -> int:
        """Every node has committed (and dispatched) the same last index; returns it."""
        def same() -> tuple[int] | None:
            ends = set()
            for n in IDS:
                st = self.status(n)
                if st is None or "dledger" not in st:
                    return None
                d = st["dledger"]
                if d["committedIndex"] != d["endIndex"] or st["dispatchBehindBytes"]:
                    return None
                ends.add(d["committedIndex"])
            return (ends.pop(),) if len(ends) == 1 else None  # a tuple: index 0 is an answer too
        return wait_until(same, timeout, "all three nodes committed and dispatched the same index", interval=0.1)[0]

    def stop(self) -> None:
        """SIGTERM to every node at once (clean shutdown), then wait for each exit code 0."""
        live = [p for p in self.procs.values() if p.proc is not None and p.alive()]
        for p in live:
            p.proc.terminate()  # type: ignore[union-attr]
        for p in live:
            code = p.wait_exit()  # within SHUTDOWN_BOUND_S, or ShutdownTooSlow with the stacks
            p.stop()  # closes the log
            assert code == 0, f"{p.name} did not shut down cleanly ({code}):\n{p.log()}"

    def kill_all(self) -> None:
        kill_all(self.procs.values())


# ---------------------------------------------------------------------------- reading the files
def committed_dledger(root: Path, self_id: str, data_file_size: int, first_offset: int = 0) -> tuple[bytes, bytes, list]:
    """(data bytes up to the committed position, index bytes up to the committed index,
    committed entries) of a cleanly stopped node, read with the DLedger store code."""
    committed = CheckpointFile(root / f"dledger-{self_id}").load_committed_index()
    assert committed is not None and committed >= 0, f"{self_id}: no committed index in its checkpoint"
    data_dir, index_dir = root / f"dledger-{self_id}" / "data", root / f"dledger-{self_id}" / "index"
    raw_data = b"".join(p.read_bytes() for p in sorted(data_dir.iterdir()) if p.name.isdigit())
    raw_index = b"".join(p.read_bytes() for p in sorted(index_dir.iterdir()) if p.name.isdigit())
    store = DLedgerMmapFileStore(root, self_id, data_file_size=data_file_size, first_data_file_offset=first_offset)
    store.startup()
    try:
        entries = [store.get(i) for i in range(store.ledger_begin_index, committed + 1)]
    finally:
        store.shutdown()
    last = entries[-1]
    base = min(int(p.name) for p in data_dir.iterdir() if p.name.isdigit())
    data = raw_data[: last.pos + last.size - base]
    return data, raw_index[: (committed + 1) * 32], entries


def check_acked_on_node(root: Path, self_id: str, acked: dict[str, dict[str, Any]], data_file_size: int,
                        first_offset: int = 0) -> tuple[bytes, bytes]:
    data, index, entries = committed_dledger(root, self_id, data_file_size, first_offset)
    seen: dict[str, list[tuple[int, int, int]]] = {}
    for e in entries:
        m = decode_message(e.body)
        assert m.commitlog_offset == e.pos + 48, f"{self_id}: entry {e.index} PHY_POS {m.commitlog_offset} != pos+48"
        if m.topic == BARRIER_TOPIC:
            continue
        attempt = m.properties.get("ATTEMPT")
        if attempt is not None:
            seen.setdefault(attempt, []).append((m.commitlog_offset, m.queue_id, m.queue_offset))
    cqs = ConsumeQueueStore(root, read_only=True)
    cqs.load()
    try:
        for attempt, ack in acked.items():
            where = seen.get(attempt, [])
            assert len(where) == 1, f"{self_id}: acknowledged {attempt} found {len(where)} times"
            assert where[0] == (ack["commitLogOffset"], ack["queueId"], ack["queueOffset"]), (self_id, attempt, where, ack)
            cq = cqs.find_consume_queue(TOPIC, ack["queueId"], create=False)
            unit = cq.get(ack["queueOffset"]) if cq is not None else None
            assert unit is not None and unit[0] == ack["commitLogOffset"], f"{self_id}: CQ unit of {attempt} is {unit}"
    finally:
        cqs.shutdown()
    return data, index


# ---------------------------------------------------------------------------- producing
class Producers:
    """``n`` concurrent writers; each attempt carries a unique ATTEMPT property (at-least-once)."""

    def __init__(self, seeds: list[str], n: int = 8) -> None:
        self.seeds, self.n = seeds, n
        self.acked: dict[str, dict[str, Any]] = {}
        self.ack_times: list[tuple[float, str]] = []  # (monotonic time, broker address)
        self.failures = 0
        self._stop = asyncio.Event()

    async def run(self) -> None:
        async with MasterFollowingProducer(self.seeds, timeout=3.0) as p:
            await asyncio.gather(*(self._worker(p, w) for w in range(self.n)))

    async def _worker(self, p: MasterFollowingProducer, w: int) -> None:
        i = 0
        while not self._stop.is_set():
            attempt = f"w{w}-{i}"
            i += 1
            try:
                r = await p.send_once(TOPIC, f"body-{attempt}-" + "x" * 200, properties={"ATTEMPT": attempt},
                                      queue_id=w % 4)
            except (BrokerClientError, asyncio.TimeoutError):
                self.failures += 1
                await asyncio.sleep(0.005)
                continue
            self.acked[attempt] = r
            self.ack_times.append((time.monotonic(), r["brokerAddress"]))

    def stop(self) -> None:
        self._stop.set()


def _mqadmin(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "broker.cli.mqadmin", *args], cwd=str(REPO),
                          capture_output=True, text=True, timeout=60)


# ---------------------------------------------------------------------------- tests
@pytest.mark.timeout(180)
def test_group_roles_redirects_metadata_and_transfer(tmp_path: Path) -> None:
    g = DLedgerGroup(tmp_path)
    try:
        g.start()
        leader = g.wait_master()
        followers = [n for n in IDS if n != leader]
        for n in followers:
            st = wait_until(lambda n=n: (s := g.status(n)) and s["masterAddress"] == g.address(leader) and s, 10,
                            f"{n} slave of {leader}")
            assert (st["brokerRole"], st["brokerId"], st["isMaster"]) == ("SLAVE", int(n[1:]) + 1, False)
            assert st["ha"]["mode"] == "dledger" and st["dledger"]["leaderId"] == leader
        st = g.status(leader)
        d = st["dledger"]
        assert (st["brokerRole"], d["role"], d["selfId"]) == ("SYNC_MASTER", "LEADER", leader)
        assert set(d["followers"]) == set(followers) and d["dividedCommitlogOffset"] in (-1, 0)
        # a follower refuses writes and names the leader's API address
        with g.procs[followers[0]].client() as c:
            with pytest.raises(BrokerClientError) as exc:
                c.send(TOPIC, "to a follower")
            assert exc.value.code == "NOT_MASTER" and exc.value.body["masterAddress"] == g.address(leader)
        # topic created on the leader reaches the followers (metadata sync from the leader)
        with g.procs[leader].client() as c:
            c.create_topic("TopicMeta", read_queue_nums=3, write_queue_nums=3)
            r = c.send("TopicMeta", "m0", queue_id=2)
        for n in followers:
            wait_until(lambda n=n: any(t["topicName"] == "TopicMeta" for t in g.procs[n].client().topics()["topics"]),
                       15, f"TopicMeta on {n}")
            m = wait_until(lambda n=n: g.procs[n].client().pull("TopicMeta", 2, 0, 8)["messages"], 15, f"pull on {n}")
            assert m[0]["commitLogOffset"] == r["commitLogOffset"]
        # mqadmin: status of the group, then leadership transfer asked of a follower
        out = _mqadmin("dledgerStatus", "-b", ",".join(g.addresses))
        assert out.returncode == 0 and "LEADER" in out.stdout and "FOLLOWER" in out.stdout, out
        target = followers[1]
        out = _mqadmin("transferLeader", "-b", g.address(followers[0]), "--to", target)
        assert out.returncode == 0, out.stderr
        g.wait_master(15, want=target)
        with g.procs[target].client() as c:
            r2 = c.send("TopicMeta", "after transfer", queue_id=2)
        assert r2["queueOffset"] == 1 and r2["commitLogOffset"] > r["commitLogOffset"]
        # preferred leader: the current leader hands over to it within a few seconds
        out = _mqadmin("setPreferredLeader", "-b", ",".join(g.addresses), "--id", leader, "--json")
        assert out.returncode == 0, out.stderr
        g.wait_master(20, want=leader)
        out = _mqadmin("transferLeader", "-b", g.address(leader), "--to", "n9")
        assert out.returncode == 1 and "BAD_REQUEST" in out.stderr
        g.stop()
    finally:
        g.kill_all()


@pytest.mark.timeout(300)
def test_kill9_leader_no_acknowledged_message_lost(tmp_path: Path) -> None:
    g = DLedgerGroup(tmp_path)
    report: dict[str, Any] = {}
    try:
        g.start()
        old = g.wait_master()
        with g.procs[old].client() as c:
            c.create_topic(TOPIC, read_queue_nums=4, write_queue_nums=4)

        async def scenario() -> Producers:
            prod = Producers(g.addresses, n=8)
            task = asyncio.ensure_future(prod.run())
            await asyncio.sleep(2.0)
            before = len(prod.acked)
            t_kill = time.monotonic()
            g.procs[old].kill9()
            # a new leader takes writes
            while not any(t > t_kill and a != g.address(old) for t, a in prod.ack_times):
                assert time.monotonic() - t_kill < 20, "no write acknowledged by a new leader within 20 s"
                await asyncio.sleep(0.01)
            first = min(t for t, a in prod.ack_times if t > t_kill and a != g.address(old))
            report["failover_s"] = first - t_kill
            await asyncio.sleep(1.5)
            await asyncio.to_thread(g.procs[old].start, False)  # restart the killed node
            await asyncio.sleep(2.0)
            prod.stop()
            await task
            report.update(acked=len(prod.acked), acked_before_kill=before, failed_attempts=prod.failures)
            return prod

        prod = asyncio.run(scenario())
        g.procs[old].wait_ready(60)
        assert report["acked_before_kill"] > 20 and report["acked"] > report["acked_before_kill"] + 20, report
        new = g.wait_master()
        assert new != old
        last = g.wait_in_sync(60)
        # every node serves every acknowledged message at its offsets through the API
        for n in IDS:
            with g.procs[n].client() as c:
                for ack in list(prod.acked.values())[:: max(1, len(prod.acked) // 50)]:
                    m = c.by_offset(ack["commitLogOffset"])
                    assert (m["queueId"], m["queueOffset"]) == (ack["queueId"], ack["queueOffset"])
        g.stop()
        files = {n: check_acked_on_node(g.roots[n], n, prod.acked, 1 << 20) for n in IDS}
        for n in IDS[1:]:
            assert files[n][0] == files["n0"][0], f"committed DLedger data of {n} differs from n0"
            assert files[n][1] == files["n0"][1], f"committed DLedger index of {n} differs from n0"
        assert len(files["n0"][1]) == (last + 1) * 32
        print("failover report:", json.dumps(report))
        assert report["failover_s"] < 5.0, report
    finally:
        g.kill_all()


@pytest.mark.timeout(240)
def test_upgraded_fixture_group_serves_old_messages_and_continues(tmp_path: Path, store_copy, fixture_root: Path,
                                                                     manifests) -> None:
    """Issue 6's must-show on Apache's own store: ``mqupgrade plan/apply`` with the fixture as the
    master and two brand-new nodes seeded from it; the group starts, every old message is
    readable on every node, new messages continue at 4,194,304 + 48."""
    from upgrade.apply import apply_plan
    from upgrade.plan import make_plan, parse_self_ids

    roots = {"n0": store_copy("rmq-classic"), "n1": tmp_path / "new-n1", "n2": tmp_path / "new-n2"}
    ids = parse_self_ids(",".join(f"{n}={roots[n]}" for n in IDS))
    plan = make_plan("g0", "n0-127.0.0.1:1;n1-127.0.0.1:2;n2-127.0.0.1:3", ids, conf_dir=tmp_path / "plan-conf")
    assert plan.ok, plan.refusals
    plan.save(tmp_path / "plan.json")
    apply_plan(tmp_path / "plan.json", echo=lambda _line: None)
    for n in ("n1", "n2"):  # seeded: the old region is byte-identical to the master's
        for f in (roots["n0"] / "commitlog").iterdir():
            assert (roots[n] / "commitlog" / f.name).read_bytes() == f.read_bytes(), (n, f.name)
    g = DLedgerGroup(tmp_path, roots=roots, maxHashSlotNum=10000, maxIndexNum=40000)  # the fixture's IndexFile
    rows = manifests("rmq-classic")
    try:
        g.start()
        leader = g.wait_master()
        for n in IDS:
            st = g.status(n)
            assert st["dledger"]["dividedCommitlogOffset"] == 4_194_304
            with g.procs[n].client() as c:
                got = {}
                for topic in ("TopicA", "TopicB"):
                    for q in range(4):
                        res = c.pull(topic, q, 0, 1024)
                        got.update({(topic, q, m["queueOffset"]): m for m in res["messages"]})
            for row in rows:
                m = got[(row["topic"], int(row["queueId"]), int(row["queueOffset"]))]
                assert m["commitLogOffset"] == int(row["commitLogOffset"]) and m["storeSize"] == int(row["storeSize"])
        with g.procs[leader].client() as c:
            r = c.send("TopicA", "after the upgrade", queue_id=1)
            first = c.by_offset(4_194_304 + 48)  # the first DLedger entry's message (a barrier or ours)
        assert r["queueOffset"] == 625
        # a fully committed (empty) DLedger log needs no barrier: the first message is ours
        assert r["commitLogOffset"] == 4_194_304 + 48 and first["topic"] != BARRIER_TOPIC
        g.wait_in_sync(30)
        for n in IDS:
            with g.procs[n].client() as c:
                m = wait_until(lambda c=c: c.pull("TopicA", 1, 625, 1)["messages"], 15, f"new message on {n}")
                assert m[0]["commitLogOffset"] == r["commitLogOffset"]
        g.stop()
    finally:
        g.kill_all()


@pytest.mark.timeout(240)
def test_paused_leader_comes_back_as_follower_and_acks_nothing_stale(tmp_path: Path) -> None:
    """SIGSTOP the leader (a partitioned, not dead, leader), let the others elect and take
    writes, SIGCONT it: it must step down to slave, and nothing it may have acknowledged in
    between may be missing from the committed log."""
    g = DLedgerGroup(tmp_path)
    try:
        g.start()
        old = g.wait_master()
        with g.procs[old].client() as c:
            c.create_topic(TOPIC, read_queue_nums=4, write_queue_nums=4)
        others = [n for n in IDS if n != old]

        async def scenario() -> dict[str, dict[str, Any]]:
            prod = Producers([g.address(n) for n in others], n=4)
            acked: dict[str, dict[str, Any]] = {}
            g.procs[old].pause()
            task = asyncio.ensure_future(prod.run())
            new = await asyncio.to_thread(g.wait_master, 20, None, (old,))
            await asyncio.sleep(1.0)
            g.procs[old].resume()
            # straight at the old leader, no redirects: an answer is either a refusal or a real ack
            async with MasterFollowingProducer([g.address(old)], timeout=5.0) as direct:
                for i in range(20):
                    attempt = f"direct-{i}"
                    try:
                        r = await direct.send_once(TOPIC, "to the old leader", properties={"ATTEMPT": attempt}, queue_id=0)
                    except (BrokerClientError, asyncio.TimeoutError):
                        continue
                    acked[attempt] = r
            await asyncio.sleep(1.0)
            prod.stop()
            await task
            assert new != old and len(prod.acked) > 20
            acked.update(prod.acked)
            return acked

        acked = asyncio.run(scenario())
        st = wait_until(lambda: (x := g.status(old)) and x["brokerRole"] == "SLAVE" and x, 15, "old leader is a slave")
        assert st["brokerId"] == int(old[1:]) + 1 and st["masterAddress"] != g.address(old)
        g.wait_in_sync(60)
        g.stop()
        files = {n: check_acked_on_node(g.roots[n], n, acked, 1 << 20) for n in IDS}
        assert files[others[0]] == files[old] == files[others[1]]
    finally:
        g.kill_all()
