"""The whole journey on an embedded default: ``python -m tools.demo`` (``scripts/demo.sh``).

1. A classic master/slave pair (SYNC_MASTER + SLAVE, conf files generated from
   ``conf/classic``) takes ``--messages`` messages over 2 topics x 4 queues (tags, keys, batched
   through the HTTP API); the demo waits until the slave has caught up and stops both cleanly.
2. ``mqupgrade inspect`` of both stores, ``mqupgrade plan`` for a three-node DLedger group
   (master -> n0, slave -> n1, a brand-new directory -> n2 seeded from the master) and
   ``mqupgrade apply --yes``, each with its own output.
3. The three brokers start from the confs ``apply`` wrote; once a leader is elected the demo
   produces ``--dledger-messages`` through any node (following NOT_MASTER redirects), kills the
   leader with SIGKILL, measures the client-visible failover (kill -> first write acknowledged
   by another node), produces ``--after-failover-messages``, restarts the killed node, waits
   until all three have committed and dispatched the same index, and stops them cleanly.
4. ``mqupgrade validate`` (PySpark, local) over the three store roots: summary, JSON, PNG.
5. Every acknowledged message is read back from every node's files with the store code (old
   commitlog below ``divided_commitlog_offset``, DLedger data above it; header, topic, queue,
   queue offset, body, keys, tags, and the ConsumeQueue unit), then the summary.

Rules:
- Exit code 0 only when every acknowledged message is found on every node at its acknowledged
  offset and the validator passes; 1 with one line (no traceback) when a step cannot go on
  (a broker died, a timeout, a refused plan); 130 on Ctrl-C.
- Everything runs on 127.0.0.1 ports the kernel hands out, in a temporary directory (deleted at
  the end, kept when the run failed) or ``--workdir`` (always kept: logs, confs, plan, journal,
  report and picture). Every
  broker is a child process that :class:`tools.demo_procs.Procs` kills in ``finally``, also on
  Ctrl-C or SIGTERM: nothing is left running.
- One progress line per step, prefixed with the elapsed time; tool output is indented below it.
- Only acknowledged sends count (a failed attempt may still be stored: at-least-once, as with
  RocketMQ's producer); the check is that each acknowledgement is true, on every replica.

Theory of operation: :class:`Demo` runs the phases in order, keeping the acknowledgements
(:class:`Ack`) in memory; producing is asyncio (:class:`broker.api.client.MasterFollowingProducer`,
a few batches in flight); the ``mqupgrade`` subcommands run in this process through
:func:`upgrade.cli.main` and :func:`upgrade.validate.cli.main` (so a caller, e.g. a test, can
hand in a SparkSession); the read-back check (:func:`check_node`) maps each file read-only and decodes with the store's
own codecs (``broker.store.message``, ``dledger.entry``, ``ConsumeQueueStore``).
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import mmap
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from broker.api.client import BrokerClientError, MasterFollowingProducer, message_json
from broker.store.consume_queue import ConsumeQueueStore
from broker.store.message import decode_message
from dledger.entry import BODY_OFFSET, check_header, read_header
from tools.demo_procs import (
    REPO, DemoError, Procs, free_ports, kill_pids, port_with_offsets, read_conf_value, spark_jvms_of,
    wait_until, write_conf,
)
from tools.nodes import BrokerProc

TOPICS = ("DemoOrders", "DemoPayments")
QUEUES = 4
TAGS = ("TagA", "TagB", "TagC")
IDS = ("n0", "n1", "n2")
GROUP = "broker-a"


@dataclass(frozen=True)
class Ack:
    """One acknowledged message: where the broker said it is, and what it must hold."""

    phase: str
    seq: int
    topic: str
    queue_id: int
    queue_offset: int
    offset: int
    key: str
    tag: str
    body: str


@dataclass
class Phase:
    name: str
    wanted: int
    acked: int = 0
    seconds: float = 0.0
    first_ack_at: Optional[float] = None
    redirects: int = 0
    by_node: dict[str, int] = field(default_factory=dict)


def body_of(phase: str, seq: int, topic: str, queue_id: int, size: int) -> str:
    head = f"{phase} #{seq:06d} {topic}/{queue_id} "
    return head + "." * max(0, size - len(head))


class Demo:
    def __init__(self, args: argparse.Namespace, spark: Any = None) -> None:
        self.a = args
        self.spark = spark
        self.t0 = time.monotonic()
        self.procs = Procs()
        self.acks: list[Ack] = []
        self.phases: list[Phase] = []
        self.next_seq = 0
        self.work = Path(args.workdir).resolve() if args.workdir else Path(tempfile.mkdtemp(prefix="mqdemo-"))
        self.logs = self.work / "logs"
        self.roots = {"master": self.work / "master", "slave": self.work / "slave", "new": self.work / "new-node"}
        self.facts: dict[str, Any] = {}
        self.jvms_before: Optional[set[int]] = None  # set when this demo starts its own Spark
        self.finished = False

    # ---- output ---------------------------------------------------------------------------------
    def say(self, text: str) -> None:
        print(f"[{time.monotonic() - self.t0:6.1f}s] {text}", flush=True)

    @staticmethod
    def indent(text: str) -> None:
        for line in text.rstrip("\n").splitlines():
            print(f"    {line}")
        sys.stdout.flush()

    def tool(self, argv: list[str]) -> int:
        """Run one ``mqupgrade`` subcommand in this process; print its output indented."""
        from upgrade.cli import main as mqupgrade

        shown = ["mqupgrade"] + [a.replace(str(self.work), "$WORK") for a in argv]
        print(f"  $ {' '.join(shown)}", flush=True)
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            try:
                code = mqupgrade(argv)
            except SystemExit as exc:  # argparse
                code = int(exc.code or 0)
        self.indent(buf.getvalue())
        return code

    # ---- producing ------------------------------------------------------------------------------
    def produce(self, phase: Phase, seeds: list[str], names: dict[str, str]) -> Phase:
        """Send ``phase.wanted`` messages in batches (a few in flight); record every ack."""
        start_seq, self.next_seq = self.next_seq, self.next_seq + phase.wanted
        batches: list[tuple[str, int, list[int]]] = []
        buckets: dict[tuple[str, int], list[int]] = {}
        for i in range(phase.wanted):
            seq = start_seq + i
            buckets.setdefault((TOPICS[seq % 2], (seq // 2) % QUEUES), []).append(seq)
        for (topic, q), seqs in sorted(buckets.items()):
            batches += [(topic, q, seqs[k:k + self.a.batch]) for k in range(0, len(seqs), self.a.batch)]
        batches.sort(key=lambda b: b[2][0])

        async def run() -> None:
            todo = list(batches)
            async with MasterFollowingProducer(seeds, timeout=5.0, retry_for=self.a.retry_for) as prod:
                async def worker() -> None:
                    while todo:
                        topic, q, seqs = todo.pop(0)
                        msgs = [message_json(body_of(phase.name, s, topic, q, self.a.body_size), tags=TAGS[s % 3],
                                             keys=f"{phase.name}-{s:06d}") for s in seqs]
                        r = await prod.send_batch(topic, msgs, queue_id=q)
                        now = time.monotonic()
                        if phase.first_ack_at is None:
                            phase.first_ack_at = now
                        node = names.get(r["brokerAddress"], r["brokerAddress"])
                        phase.by_node[node] = phase.by_node.get(node, 0) + len(seqs)
                        for s, qo, off in zip(seqs, r["queueOffsets"], r["commitLogOffsets"]):
                            self.acks.append(Ack(phase.name, s, topic, q, int(qo), int(off), f"{phase.name}-{s:06d}",
                                                 TAGS[s % 3], body_of(phase.name, s, topic, q, self.a.body_size)))
                        phase.acked += len(seqs)

                try:
                    await asyncio.gather(*(worker() for _ in range(self.a.in_flight)))
                finally:
                    phase.redirects = prod.redirects

        t = time.monotonic()
        try:
            asyncio.run(run())
        except BrokerClientError as exc:
            raise DemoError(f"producing {phase.name} failed after {phase.acked} acknowledged messages: {exc}") from None
        phase.seconds = time.monotonic() - t
        self.phases.append(phase)
        return phase

    def rate(self, p: Phase) -> str:
        return (f"{p.acked} acknowledged in {p.seconds:.1f}s ({p.acked / max(p.seconds, 1e-6):.0f} msg/s)"
                + (f", {p.redirects} redirect(s)" if p.redirects else ""))

    # ---- 1. classic pair ------------------------------------------------------------------------
    def classic(self) -> None:
        size = self.a.file_size
        mport = port_with_offsets([1, 10, 11])  # listenPort, HA, and the ports plan gives the new node
        sport = port_with_offsets([1], avoid=[mport + d for d in (0, 1, 10, 11)])
        common = {"mappedFileSizeCommitLog": size, "flushDiskType": "ASYNC_FLUSH"}
        mconf = write_conf(REPO / "conf/classic/broker-a.conf", self.work / "classic/broker-a.conf", {
            "listenPort": mport, "haListenPort": mport + 1, "storePathRootDir": self.roots["master"],
            "storePathCommitLog": self.roots["master"] / "commitlog", **common}, header="generated by the demo")
        sconf = write_conf(REPO / "conf/classic/broker-a-s.conf", self.work / "classic/broker-a-s.conf", {
            "listenPort": sport, "haListenPort": sport + 1, "haMasterAddress": f"127.0.0.1:{mport + 1}",
            "storePathRootDir": self.roots["slave"], "storePathCommitLog": self.roots["slave"] / "commitlog",
            **common}, header="generated by the demo")
        self.confs = {"master": mconf, "slave": sconf}
        m = self.procs.broker("classic-master", mconf, mport, self.logs).start(wait=False)
        s = self.procs.broker("classic-slave", sconf, sport, self.logs).start(wait=False)
        self.procs.ready(m, s)
        wait_until(lambda: (m.status() or {}).get("ha", {}).get("connections"), 30, "the slave to connect to the master",
                   0.05, s.check)
        self.say(f"[1/5] classic pair up: master {m.address} (SYNC_MASTER), slave {s.address} (SLAVE), "
                 f"mappedFileSizeCommitLog={size}")
        with m.client() as c:
            for t in TOPICS:
                c.create_topic(t, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        p = self.produce(Phase("classic", self.a.messages), [m.address], {m.address: "master"})
        self.say(f"[1/5] produced to the master: {self.rate(p)}, {len(TOPICS)} topics x {QUEUES} queues, "
                 f"batches of {self.a.batch}")

        def caught_up() -> Optional[int]:
            ms, ss = m.status(), s.status()
            if not ms or not ss:
                return None
            end = ms["commitLog"]["maxOffset"]
            return end if ss["commitLog"]["maxOffset"] == end and not ss["dispatchBehindBytes"] else None
        end = wait_until(caught_up, 60, "the slave to catch up", 0.1, s.check)
        self.facts["classic_end"] = end
        bad = self.procs.stop_all([m, s])
        if bad:
            raise DemoError(f"{', '.join(bad)} did not shut down cleanly; see {self.logs}")
        self.say(f"[1/5] slave caught up at offset {end}; both stopped cleanly")

    # ---- 2. mqupgrade ---------------------------------------------------------------------------
    def upgrade(self) -> None:
        roots = [str(self.roots[k]) for k in ("master", "slave")]
        confs = sum((["--conf", str(self.confs[k])] for k in ("master", "slave")), [])
        self.say("[2/5] mqupgrade inspect: what each store holds, whether the slave agrees with the master")
        if self.tool(["inspect", *roots, *confs]) != 0:
            raise DemoError("mqupgrade inspect found a problem (see above)")
        self.raft_ports = free_ports(3)
        peers = ";".join(f"{n}-127.0.0.1:{p}" for n, p in zip(IDS, self.raft_ports))
        self_ids = ",".join(f"{n}={self.roots[k]}" for n, k in zip(IDS, ("master", "slave", "new")))
        plan_path = self.work / "upgrade/plan.json"
        self.say("[2/5] mqupgrade plan: master -> n0, slave -> n1, a new directory -> n2 (seeded from the master)")
        if self.tool(["plan", "--group", GROUP, "--peers", peers, "--self-ids", self_ids, *confs,
                      "--out", str(plan_path), "--conf-dir", str(self.work / "dledger-conf")]) != 0:
            raise DemoError("mqupgrade plan refused the upgrade (see above)")
        plan = json.loads(plan_path.read_text())
        self.facts["divided_planned"] = plan["divided_commitlog_offset"]
        self.dl_confs = {n["self_id"]: Path(n["conf_out"]) for n in plan["nodes"]}
        self.dl_roots = {n["self_id"]: Path(n["root"]) for n in plan["nodes"]}
        self.say("[2/5] mqupgrade apply --yes")
        t = time.monotonic()
        if self.tool(["apply", str(plan_path), "--yes", "--no-progress"]) != 0:
            raise DemoError("mqupgrade apply failed (see above)")
        self.facts["apply_s"] = time.monotonic() - t
        self.say(f"[2/5] upgrade applied in {self.facts['apply_s']:.1f}s; dividedCommitlogOffset will be "
                 f"{self.facts['divided_planned']}")

    # ---- 3. DLedger group -----------------------------------------------------------------------
    def dledger(self) -> None:
        nodes: dict[str, BrokerProc] = {}
        for n in IDS:
            port = int(read_conf_value(self.dl_confs[n], "httpListenPort") or read_conf_value(self.dl_confs[n], "listenPort")
                       or 0)
            nodes[n] = self.procs.broker(f"dledger-{n}", self.dl_confs[n], port, self.logs)
        self.nodes = nodes
        names = {p.address: n for n, p in nodes.items()}
        seeds = [p.address for p in nodes.values()]
        t = time.monotonic()
        for p in nodes.values():
            p.start(wait=False)
        self.procs.ready(*nodes.values())
        leader = self.wait_leader()
        self.say(f"[3/5] DLedger group up from the written confs: leader {leader} after {time.monotonic() - t:.1f}s "
                 f"({', '.join(f'{n}={p.address}' for n, p in nodes.items())})")
        st = {n: (p.status() or {}).get("dledger", {}) for n, p in nodes.items()}
        self.facts["divided_live"] = {n: s.get("dividedCommitlogOffset") for n, s in st.items()}
        ph = self.produce(Phase("dledger", self.a.dledger_messages), [seeds[(IDS.index(leader) + 1) % 3]] + seeds, names)
        self.say(f"[3/5] produced through a follower (NOT_MASTER redirects to the leader): {self.rate(ph)}")
        killed = self.wait_leader()
        t_kill = time.monotonic()
        nodes[killed].kill9()
        proc = nodes[killed].proc
        self.say(f"[3/5] kill -9 of the leader {killed} (pid {proc.pid if proc is not None else '?'})")
        live = [nodes[n].address for n in IDS if n != killed]
        ph = self.produce(Phase("after-failover", self.a.after_failover_messages), [nodes[killed].address] + live, names)
        failover = (ph.first_ack_at - t_kill) if ph.first_ack_at else None
        self.facts["failover_s"] = failover
        new_leader = self.wait_leader()
        self.facts["leaders"] = (killed, new_leader)
        self.say(f"[3/5] failover: first write acknowledged by {new_leader} {failover:.2f}s after the kill; "
                 f"{self.rate(ph)}" if failover is not None else "[3/5] no write acknowledged after the kill")
        t = time.monotonic()
        self.procs.ready(nodes[killed].start(wait=False))
        index = wait_until(self.in_sync, 120, "the restarted node to catch up", 0.1, self.check_group)
        self.facts["committed_index"] = index
        self.say(f"[3/5] {killed} restarted and caught up in {time.monotonic() - t:.1f}s: committed index {index} "
                 "on all three")
        bad = self.procs.stop_all(nodes.values())
        if bad:
            raise DemoError(f"{', '.join(bad)} did not shut down cleanly; see {self.logs}")
        self.say("[3/5] group stopped cleanly")

    def check_group(self) -> None:
        for p in self.nodes.values():
            if p.proc is not None and p.proc.returncode != -signal.SIGKILL:
                p.check()

    def wait_leader(self, timeout: float = 60.0) -> str:
        def one() -> Optional[str]:
            found = [n for n, p in self.nodes.items() if p.alive() and (s := p.status()) and s.get("isMaster")
                     and s.get("brokerId") == 0 and s.get("writable")]
            return found[0] if len(found) == 1 else None
        return wait_until(one, timeout, "exactly one DLedger leader acting as master", 0.05, self.check_group)

    def in_sync(self) -> Optional[int]:
        ends = set()
        for p in self.nodes.values():
            s = p.status()
            d = (s or {}).get("dledger")
            if not d or d["committedIndex"] != d["endIndex"] or s["dispatchBehindBytes"]:  # type: ignore[index]
                return None
            ends.add(d["committedIndex"])
        return ends.pop() if len(ends) == 1 else None

    # ---- 4. validator ---------------------------------------------------------------------------
    def validate(self) -> int:
        from upgrade.validate.cli import main as validate_main

        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # everything here is on loopback

        out = self.work / "validate"
        out.mkdir(parents=True, exist_ok=True)
        js, png = out / "report.json", out / "offsets.png"
        roots = [str(self.dl_roots[n]) for n in IDS]
        argv = [*roots, "--json", str(js), "--png", str(png), "--master", self.a.spark_master]
        if not sys.stderr.isatty():
            argv.append("--quiet")
        self.say(f"[4/5] mqupgrade validate (PySpark {self.a.spark_master}"
                 f"{', shared session' if self.spark is not None else ''}) over the three store roots")
        print(f"  $ mqupgrade validate {' '.join(a.replace(str(self.work), '$WORK') for a in argv)}", flush=True)
        if self.spark is None:
            self.jvms_before = spark_jvms_of(os.getpid())
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            code = validate_main(argv, spark=self.spark)
        self.indent(buf.getvalue())
        self.facts["validate_code"] = code
        self.facts["report"] = js if js.is_file() else None
        self.facts["png"] = png if png.is_file() else None
        self.say(f"[4/5] validator exit code {code}; JSON report {js}, picture {png}"
                 + ("" if self.a.workdir else " (in the temporary directory: pass --workdir to keep them)"))
        return code

    # ---- 5. read back ---------------------------------------------------------------------------
    def read_back(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        self.facts["first_dledger_pos"] = {}
        for n in IDS:
            divided = self.facts["divided_live"].get(n) or self.facts["divided_planned"]
            out[n] = check_node(self.dl_roots[n], n, self.acks, divided)
            self.facts["first_dledger_pos"][n] = first_dledger_pos(self.dl_roots[n], n)
        ok = sum(1 for v in out.values() if not v)
        self.say(f"[5/5] read back {len(self.acks)} acknowledged messages from each node's files: "
                 + ", ".join(f"{n} {'OK' if not v else f'{len(v)} PROBLEMS'}" for n, v in out.items())
                 + f" ({ok}/3 nodes hold every one at its acknowledged offset)")
        for n, problems in out.items():
            for line in problems[:5]:
                print(f"    {n}: {line}")
        return out

    def summary(self, problems: dict[str, list[str]], vcode: int) -> int:
        f = self.facts
        ok = not any(problems.values()) and vcode == 0
        lines = ["", "=== summary ==="]
        for p in self.phases:
            lines.append(f"messages {p.name:<15} {p.acked:>7} acknowledged of {p.wanted}"
                         f" ({', '.join(f'{k} {v}' for k, v in sorted(p.by_node.items()))})")
        lines.append(f"acknowledged total       {len(self.acks):>7}")
        lines.append(f"classic end offset       {f['classic_end']:>7}")
        lines.append(f"divided_commitlog_offset {f['divided_planned']:>7} (planned); live: "
                     + ", ".join(f"{n}={v}" for n, v in f["divided_live"].items()))
        lines.append("first DLedger entry      " + ", ".join(
            f"{n}={v} (first message at {v + 48})" if v is not None else f"{n}=none"
            for n, v in f["first_dledger_pos"].items()))
        if f.get("failover_s") is not None:
            lines.append(f"failover                 {f['failover_s']:.2f}s client-visible "
                         f"(kill -9 of {f['leaders'][0]} -> first ack by {f['leaders'][1]})")
        lines.append(f"committed index          {f['committed_index']} on n0, n1, n2")
        lines.append(f"read-back check          {'PASS' if not any(problems.values()) else 'FAIL'}")
        lines.append(f"validator                {'PASS' if vcode == 0 else f'FAIL (exit {vcode})'}")
        lines.append(f"total time               {time.monotonic() - self.t0:.1f}s")
        lines.append(f"result                   {'PASS' if ok else 'FAIL'}")
        print("\n".join(lines), flush=True)
        return 0 if ok else 2

    # ---- the journey ----------------------------------------------------------------------------
    def run(self) -> int:
        self.work.mkdir(parents=True, exist_ok=True)
        if any(self.roots[k].exists() for k in self.roots):
            raise DemoError(f"{self.work} already holds a demo run; pass an empty or new --workdir")
        self.say(f"work directory {self.work}; broker logs in {self.logs}")
        self.classic()
        self.upgrade()
        self.dledger()
        vcode = self.validate()
        problems = self.read_back()
        code = self.summary(problems, vcode)
        if code == 0 and self.a.to == "controller":  # the second journey: tools.demo_controller
            from tools.demo_controller import ControllerJourney

            code = ControllerJourney(self).run()
        self.finished = True
        return code

    def cleanup(self, keep: bool = False) -> None:
        """Kill what is still running; delete the temporary directory unless the run failed."""
        self.procs.kill_all()
        if not self.finished and self.jvms_before is not None:  # interrupted while our Spark started
            kill_pids(spark_jvms_of(os.getpid()) - self.jvms_before)
        if self.a.workdir:
            return
        if keep and self.work.is_dir():
            print(f"demo: the run failed; kept {self.work} (broker logs in {self.logs})", file=sys.stderr, flush=True)
        else:
            shutil.rmtree(self.work, ignore_errors=True)


# ---- read-back check ----------------------------------------------------------------------------
class _Files:
    """Read-only maps of the files named by their 20-digit start offset in some directories."""

    def __init__(self, dirs: list[Path]) -> None:
        self.files = sorted((int(f.name), f) for d in dirs if d.is_dir() for f in d.iterdir()
                            if f.name.isdigit() and f.stat().st_size > 0)
        self.maps: dict[Path, mmap.mmap] = {}

    def at(self, offset: int) -> tuple[Optional[mmap.mmap], int, Optional[Path]]:
        for start, path in reversed(self.files):
            if start <= offset:
                if path not in self.maps:
                    with open(path, "rb") as fh:
                        self.maps[path] = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
                return self.maps[path], offset - start, path
        return None, 0, None

    def close(self) -> None:
        for m in self.maps.values():
            m.close()


def check_node(root: Path, self_id: str, acks: Sequence[Ack], divided: int) -> list[str]:
    """Problems with ``acks`` on one stopped node (empty: each is where its acknowledgement says).

    Below ``divided`` the record is read from the old commitlog; above it from the DLedger data
    files, whose entry header (valid, body CRC, ``pos == offset - 48``) is checked first. The
    record must decode (with its CRC) to the acknowledged topic, queue, queue offset, physical
    offset, body, keys and tags, and the ConsumeQueue unit at the queue offset must point at it.
    """
    problems: list[str] = []
    old, new = _Files([root / "commitlog"]), _Files([root / f"dledger-{self_id}" / "data"])
    cqs = ConsumeQueueStore(root, read_only=True)
    cqs.load()
    try:
        for a in acks:
            where = f"{a.key} at {a.offset}"
            files = old if a.offset < divided else new
            buf, rel, path = files.at(a.offset)
            if buf is None:
                problems.append(f"{where}: no file holds this offset")
                continue
            try:
                if files is new:
                    if rel < BODY_OFFSET:
                        raise ValueError("no DLedger entry header before the record")
                    with memoryview(buf) as view:  # released here: the mmap is closed later
                        check_header(view, rel - BODY_OFFSET, verify_crc=True)
                        if read_header(view, rel - BODY_OFFSET).pos != a.offset - BODY_OFFSET:
                            raise ValueError("DLedger entry pos is not offset - 48")
                m = decode_message(buf, rel, check_crc=True)
            except ValueError as exc:  # MessageFormatError, EntryCorruptionError
                problems.append(f"{where} ({path}): {exc}")
                continue
            got = (m.topic, m.queue_id, m.queue_offset, m.commitlog_offset, m.body.decode(errors="replace"),
                   m.keys, m.tags)
            want = (a.topic, a.queue_id, a.queue_offset, a.offset, a.body, a.key, a.tag)
            if got != want:
                diff = [f"{k} {g!r} != {w!r}" for k, g, w in zip(("topic", "queue", "queueOffset", "offset", "body",
                                                                   "keys", "tags"), got, want) if g != w]
                problems.append(f"{where}: {'; '.join(diff)[:200]}")
                continue
            cq = cqs.find_consume_queue(a.topic, a.queue_id, create=False)
            unit = cq.get(a.queue_offset) if cq is not None else None
            if unit is None or unit[0] != a.offset:
                problems.append(f"{where}: ConsumeQueue {a.topic}/{a.queue_id} unit {a.queue_offset} is {unit}")
    finally:
        cqs.shutdown()
        old.close()
        new.close()
    return problems


def first_dledger_pos(root: Path, self_id: str) -> Optional[int]:
    """``pos`` of the first entry in the node's first DLedger data file (None if there is none)."""
    files = _Files([root / f"dledger-{self_id}" / "data"])
    try:
        if not files.files:
            return None
        buf, _rel, _path = files.at(files.files[0][0])
        if buf is None or len(buf) < BODY_OFFSET:
            return None
        with memoryview(buf) as view:  # released here: the mmap is closed below
            return int(read_header(view, 0).pos)
    finally:
        files.close()


# ---- command line -------------------------------------------------------------------------------
def _positive(text: str) -> int:
    try:
        v = int(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if v <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tools.demo", description=__doc__.split("\n")[0])
    p.add_argument("--messages", type=_positive, default=3000, help="classic phase (default %(default)s)")
    p.add_argument("--dledger-messages", type=_positive, default=2000, help="DLedger phase before the kill")
    p.add_argument("--after-failover-messages", type=_positive, default=1000, help="after the kill")
    p.add_argument("--workdir", help="keep everything here (default: a temporary directory, deleted)")
    p.add_argument("--file-size", type=_positive, default=256 << 10,
                   help="mappedFileSizeCommitLog, also the DLedger data file size (default %(default)s)")
    p.add_argument("--body-size", type=_positive, default=200, help="message body bytes (default %(default)s)")
    p.add_argument("--batch", type=_positive, default=50, help="messages per batch request (default %(default)s)")
    p.add_argument("--in-flight", type=_positive, default=4, help="batch requests in flight (default %(default)s)")
    p.add_argument("--retry-for", type=float, default=30.0, help="seconds a send keeps retrying (default %(default)s)")
    p.add_argument("--spark-master", default="local[2]", help="Spark master for the validator (default %(default)s)")
    p.add_argument("--to", choices=("dledger", "controller"), default="dledger",
                   help="controller: after the DLedger journey, migrate the group to Controller mode (tools.demo_controller)")
    return p


def main(argv: Optional[Sequence[str]] = None, spark: Any = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    demo = Demo(args, spark)
    code = 1
    try:
        code = demo.run()
        return code
    except DemoError as exc:
        print(f"demo: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        code = 130
        print("demo: interrupted; every broker it started is being killed", file=sys.stderr, flush=True)
        return 130
    finally:
        demo.cleanup(keep=code in (1, 2))


def _sigterm(_sig: int, _frame: Any) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":  # pragma: no cover
    signal.signal(signal.SIGTERM, _sigterm)
    code = main()
    kill_pids(spark_jvms_of(os.getpid()), grace=10.0)  # as a program, every Spark JVM here is ours
    sys.exit(code)
