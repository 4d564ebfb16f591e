"""The second journey of ``python -m tools.demo --to controller``: the DLedger group into Controller mode.

It runs after the demo's DLedger journey (:mod:`tools.demo`, steps 1-5) passed, on the same three
stores, as steps C1-C5:

C1. The DLedger group is back in service from its confs: ``--after-failover-messages`` more
    (every ack recorded); a consumer group (``DemoConsumers``) pulls about two thirds of every
    queue from the leader, checks each message against its ack and commits its offsets; the
    demo waits until every member holds those offsets (SlaveSynchronize) and the group has
    committed and dispatched the same index, then stops it cleanly.
C2. ``mqupgrade inspect`` of the three stores, ``mqupgrade plan --to controller --controllers ...``
    and ``mqupgrade apply --yes``, each with its output. The operator's Controller-mode keys
    (the controllers' broker account, ``allAckInSyncStateSet=true``) are added to a copy of each
    node's DLedger conf, which ``plan`` takes as the node's ``--conf`` (it keeps every key).
C3. Three ``mqcontroller`` processes (confs generated from ``conf/controller/controller-n*.conf``,
    ACL on with its ``plain_acl.yml``) and the three brokers from the confs ``apply`` wrote; once a
    master is elected (its first epoch entry ``<1, classicFrom>``) every acknowledged message of
    both journeys is read as a consumer reads it (pull by queue offset) from every replica, and
    the consumer group resumes on the master exactly at the offsets it committed in DLedger mode.
C4. ``--dledger-messages`` more in Controller mode (stored at or above ``classicFrom``), kill -9 of
    the master, the client-visible failover (kill -> first write acknowledged by the new master),
    ``--after-failover-messages`` more, every ack served by the new master (0 lost); the killed
    node restarts and rejoins as a slave in the SyncStateSet and catches up; everything stops
    cleanly.
C5. ``mqupgrade validate`` (PySpark) over the three roots, then every acknowledged message read
    back from every replica's files with the store code (frozen regions via
    ``commitlogRegions.json``, the new classic files, the ConsumeQueue units), then the summary.

Rules: those of :mod:`tools.demo` (exit code 0 only when everything holds, 1 with one line when a
step cannot go on, 130 on Ctrl-C; free 127.0.0.1 ports; one progress line per step, tool output
indented). Brokers are registered with the demo's :class:`~tools.demo_procs.Procs`; the
controllers are ended by this journey's own ``finally``. The result is a :class:`ControllerResult`
in ``demo.facts["controller"]`` (what the test asserts).

Theory of operation: :class:`ControllerJourney` composes the demo through the narrow
:class:`DemoHost` Protocol (output, ``mqupgrade`` in process, producing, the DLedger group);
controller processes are :class:`tools.controller_cluster.Child`; the checks are
:mod:`tools.demo_readback`.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Protocol

from broker.api.client import BrokerClientError, SyncBrokerClient
from tools.controller_cluster import http_json
from tools.demo import IDS, Ack, Phase
from tools.demo_procs import REPO, DemoError, Procs, free_ports, read_conf_value, wait_until, write_conf
from tools.nodes import BrokerProc, Child, kill_all
from tools.demo_readback import (
    Resume, check_migrated_node, check_resume, check_served, classic_from_of, offsets_of, served,
)

GROUP = "DemoConsumers"
CONTROLLER_CONF = REPO / "conf" / "controller"
#: the controllers' broker account in conf/controller/plain_acl.yml (public sample secrets, loopback only)
BROKER_ACCOUNT = {"controllerAccessKey": "controller-broker", "controllerSecretKey": "sample-controller-broker-change-me"}
#: where each phase's records must lie in a migrated store
PHASE_KIND = {"classic": "classic", "dledger": "dledger", "after-failover": "dledger", "dledger-final": "dledger",
              "controller": "writable", "controller-after-failover": "writable"}


class DemoHost(Protocol):
    """What the journey uses of :class:`tools.demo.Demo`."""

    a: argparse.Namespace
    work: Path
    logs: Path
    procs: Procs
    acks: list[Ack]
    phases: list[Phase]
    facts: dict[str, Any]
    dl_confs: dict[str, Path]
    dl_roots: dict[str, Path]
    nodes: dict[str, BrokerProc]
    spark: Any
    t0: float

    def say(self, text: str) -> None: ...
    def tool(self, argv: list[str]) -> int: ...
    def produce(self, phase: Phase, seeds: list[str], names: dict[str, str]) -> Phase: ...
    def rate(self, p: Phase) -> str: ...
    def wait_leader(self, timeout: float = 60.0) -> str: ...
    def in_sync(self) -> Optional[int]: ...
    def check_group(self) -> None: ...


@dataclass
class ControllerResult:
    """What the ``--to controller`` journey found (``ok`` only when every check holds)."""

    acknowledged: int = 0
    classic_from: int = 0
    first_epoch: Optional[list[int]] = None
    served_problems: dict[str, list[str]] = field(default_factory=dict)
    unacknowledged_served: dict[str, int] = field(default_factory=dict)
    resumes: list[Resume] = field(default_factory=list)
    resume_problems: list[str] = field(default_factory=list)
    new_below_classic_from: int = 0
    failover_s: Optional[float] = None
    masters: tuple[str, str] = ("", "")
    lost_after_failover: list[str] = field(default_factory=list)
    rejoined_as_slave: bool = False
    validate_code: Optional[int] = None
    replica_problems: dict[str, list[str]] = field(default_factory=dict)
    by_region: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def resumed_exactly(self) -> bool:
        return bool(self.resumes) and not self.resume_problems

    @property
    def every_ack_on_every_replica(self) -> bool:
        return (len(self.replica_problems) == len(IDS) and not any(self.replica_problems.values())
                and not any(self.served_problems.values()))

    @property
    def ok(self) -> bool:
        return (self.every_ack_on_every_replica and self.resumed_exactly and self.failover_s is not None
                and not self.lost_after_failover and self.rejoined_as_slave and self.validate_code == 0
                and self.new_below_classic_from == 0 and self.first_epoch == [1, self.classic_from])


class Controllers:
    """Three ``mqcontroller`` processes, confs from ``conf/controller/`` with free ports."""

    def __init__(self, work: Path, logs: Path) -> None:
        ports = free_ports(9)
        ids = ("n0", "n1", "n2")
        raft = {n: ports[3 * i] for i, n in enumerate(ids)}
        self.door = {n: ports[3 * i + 1] for i, n in enumerate(ids)}
        self.http = {n: ports[3 * i + 2] for i, n in enumerate(ids)}
        peers = ";".join(f"{n}-127.0.0.1:{raft[n]}" for n in ids)
        doors = ";".join(f"{n}-127.0.0.1:{self.door[n]}" for n in ids)
        self.children: dict[str, Child] = {}
        for n in ids:
            conf = write_conf(CONTROLLER_CONF / f"controller-{n}.conf", work / "controllers" / f"controller-{n}.conf", {
                "controllerDLegerPeers": peers, "controllerRemotingPeers": doors, "listenPort": self.door[n],
                "controllerStorePath": work / "controllers" / n, "mappedFileSize": 4 << 20,
                "plainAclFile": CONTROLLER_CONF / "plain_acl.yml", "controllerHttpPort": self.http[n]},
                header="generated by the demo from conf/controller (ports, paths)")
            self.children[n] = Child(f"controller-{n}", ["controller", "-c", str(conf)], logs / f"controller-{n}.log")

    @property
    def addresses(self) -> str:
        return ";".join(f"127.0.0.1:{p}" for p in self.door.values())

    def start(self) -> None:
        for c in self.children.values():
            c.start()

    def check(self) -> None:
        for c in self.children.values():
            if c.proc is not None and c.proc.poll() is not None:
                raise DemoError(f"{c.name} exited with code {c.proc.returncode}; last log lines:\n{c.log(3000)}")

    def leader(self, timeout: float = 60.0) -> str:
        def one() -> Optional[str]:
            found = [n for n, c in self.children.items() if c.alive() and (http_json(self.http[n]) or {}).get("isLeader")]
            return found[0] if len(found) == 1 else None
        return wait_until(one, timeout, "exactly one controller leader", 0.1, self.check)

    def stop(self) -> list[str]:
        bad = []
        for c in self.children.values():
            try:
                if c.terminate(15.0) not in (0, None):
                    bad.append(c.name)
            except Exception:  # noqa: BLE001 - a stop past its bound: SIGKILLed, reported
                bad.append(c.name)
        return bad

    def kill_all(self) -> None:
        kill_all(self.children.values())


class ControllerJourney:
    """Steps C1-C5 (module docstring) over a demo whose DLedger journey passed."""

    def __init__(self, host: DemoHost) -> None:
        self.h = host
        self.r = ControllerResult()
        self.controllers: Optional[Controllers] = None
        self.brokers: dict[str, BrokerProc] = {}
        self.roots = dict(host.dl_roots)
        self.consumed: dict[tuple[str, int], list[str]] = {}

    # ---- C1. the DLedger group in service, consumers commit, clean stop -------------------------
    def dledger_in_service(self) -> None:
        h = self.h
        nodes = h.nodes
        for p in nodes.values():
            p.start(wait=False)
        h.procs.ready(*nodes.values())
        leader = h.wait_leader()
        h.say(f"[C1/5] DLedger group back in service: leader {leader}")
        names = {p.address: n for n, p in nodes.items()}
        seeds = [p.address for p in nodes.values()]
        ph = h.produce(Phase("dledger-final", h.a.after_failover_messages), seeds, names)
        h.say(f"[C1/5] produced in DLedger mode: {h.rate(ph)}")
        leader = h.wait_leader()
        address = nodes[leader].address
        committed: dict[tuple[str, int], int] = {}
        want: dict[tuple[str, int], dict[int, Ack]] = {}
        for a in h.acks:
            want.setdefault((a.topic, a.queue_id), {})[a.queue_offset] = a
        for (topic, q), queue in sorted(want.items()):
            upto = max(queue) * 2 // 3 + 1  # consume about two thirds, commit there
            msgs = served(address, topic, q, 0, limit=upto)
            keys = []
            for m in msgs:
                ack = queue.get(int(m["queueOffset"]))
                if ack is None or int(m["commitLogOffset"]) != ack.offset or m.get("bodyText") != ack.body:
                    raise DemoError(f"the DLedger leader served {topic}/{q}@{m['queueOffset']} unlike its ack")
                keys.append(ack.key)
            if len(msgs) != upto:
                raise DemoError(f"the DLedger leader served {len(msgs)} of the first {upto} messages of {topic}/{q}")
            with SyncBrokerClient(address, timeout=10.0) as c:
                c.commit_offset(GROUP, topic, q, upto)
            committed[(topic, q)] = upto
            self.consumed[(topic, q)] = keys
        self.r.resumes = [Resume(t, q, o) for (t, q), o in sorted(committed.items())]
        t = time.monotonic()
        wait_until(lambda: all(offsets_of(p.address, GROUP) == committed for p in nodes.values()), 60,
                   "every member to hold the committed consumer offsets (SlaveSynchronize)", 0.2, h.check_group)
        index = wait_until(h.in_sync, 60, "the group to commit and dispatch the same index", 0.1, h.check_group)
        h.say(f"[C1/5] consumer group {GROUP} consumed and committed {sum(committed.values())} messages over "
              f"{len(committed)} queues on {leader}; every member holds the offsets after {time.monotonic() - t:.1f}s; "
              f"committed index {index} on all three")
        bad = h.procs.stop_all(nodes.values())
        if bad:
            raise DemoError(f"{', '.join(bad)} did not shut down cleanly; see {h.logs}")
        h.say("[C1/5] DLedger group stopped cleanly")

    # ---- C2. mqupgrade inspect / plan --to controller / apply -----------------------------------
    def migrate(self) -> None:
        h = self.h
        self.controllers = Controllers(h.work, h.logs)
        roots = [str(self.roots[n]) for n in IDS]
        h.say("[C2/5] mqupgrade inspect: the three DLedger members (what each holds, committed index and end)")
        # no --conf: inspect reads each DLedger conf as a *_MASTER and asks for --master. Exit 2 is
        # expected: inspect lists a DLedger store as 'already upgraded' (for the DLedger target);
        # plan --to controller below is the gate, with its own refusal table.
        if h.tool(["inspect", *roots]) not in (0, 2):
            raise DemoError("mqupgrade inspect could not read the stores (see above)")
        prepared = []
        for n in IDS:  # the operator's Controller-mode keys, on a copy of each node's conf
            out = write_conf(h.dl_confs[n], h.work / "controller-prep" / f"broker-{n}.conf",
                             {**BROKER_ACCOUNT, "allAckInSyncStateSet": "true"},
                             header="the DLedger conf + the operator's Controller-mode keys (generated by the demo)")
            prepared += ["--conf", str(out)]
        plan_path = h.work / "upgrade-controller" / "plan.json"
        h.say("[C2/5] mqupgrade plan --to controller (three controllers; each node's conf + the controllers' account "
              "and allAckInSyncStateSet=true)")
        if h.tool(["plan", "--to", "controller", "--controllers", self.controllers.addresses, *prepared, *roots,
                   "--out", str(plan_path), "--conf-dir", str(h.work / "controller-conf")]) != 0:
            raise DemoError("mqupgrade plan --to controller refused (see above)")
        plan = json.loads(plan_path.read_text())
        self.confs = {n["self_id"]: Path(n["conf_out"]) for n in plan["nodes"]}
        by_root = {str(Path(n["root"])): n["self_id"] for n in plan["nodes"]}
        self.conf_of = {n: self.confs[by_root[str(self.roots[n])]] for n in IDS}
        h.say("[C2/5] mqupgrade apply --yes")
        t = time.monotonic()
        if h.tool(["apply", str(plan_path), "--yes", "--no-progress"]) != 0:
            raise DemoError("mqupgrade apply failed (see above)")
        self.r.classic_from = classic_from_of(self.roots[IDS[0]])
        others = {n: classic_from_of(self.roots[n]) for n in IDS}
        if len(set(others.values())) != 1:
            raise DemoError(f"the members' classicFrom differ: {others}")
        h.say(f"[C2/5] migration applied in {time.monotonic() - t:.1f}s; classicFrom {self.r.classic_from} on all three")

    # ---- C3. controllers + brokers, read back, consumers resume ---------------------------------
    def controller_mode(self) -> None:
        h, ctl = self.h, self.controllers
        assert ctl is not None
        t = time.monotonic()
        ctl.start()
        lead = ctl.leader()
        h.say(f"[C3/5] three controllers up ({ctl.addresses}), leader {lead} after {time.monotonic() - t:.1f}s")
        for n in IDS:
            conf = self.conf_of[n]
            port = int(read_conf_value(conf, "httpListenPort") or read_conf_value(conf, "listenPort") or 0)
            self.brokers[n] = h.procs.broker(f"controller-mode-{n}", conf, port, h.logs)
        t = time.monotonic()
        for p in self.brokers.values():
            p.start(wait=False)
        h.procs.ready(*self.brokers.values())
        master = self.wait_master()
        slaves = [n for n in IDS if n != master]
        self.wait_in_sync(master, slaves)
        ha = (self.brokers[master].status() or {}).get("ha", {})
        self.r.first_epoch = list(ha.get("epochs", [[None]])[0]) if ha.get("epochs") else None
        h.say(f"[C3/5] Controller mode up from the written confs: master {master} (epoch {ha.get('masterEpoch')}, "
              f"first epoch entry {self.r.first_epoch}), slaves {', '.join(slaves)} in the SyncStateSet after "
              f"{time.monotonic() - t:.1f}s")
        for n in IDS:
            problems, extras = check_served(self.brokers[n].address, h.acks, n)
            self.r.served_problems[n], self.r.unacknowledged_served[n] = problems, extras
        self.r.acknowledged = len(h.acks)
        h.say(f"[C3/5] consumer reads (pull by queue offset) of the {len(h.acks)} acknowledged messages of both "
              "journeys: " + ", ".join(f"{n} {'OK' if not v else f'{len(v)} PROBLEMS'}"
                                       for n, v in self.r.served_problems.items()))
        self.print_problems(self.r.served_problems)
        self.r.resume_problems = check_resume(self.brokers[master].address, GROUP, self.r.resumes, self.consumed,
                                              h.acks)
        exact = sum(1 for r in self.r.resumes if r.first_pulled == r.committed)
        h.say(f"[C3/5] consumer group {GROUP} resumed on {master}: {exact}/{len(self.r.resumes)} queues at exactly "
              f"the offset committed in DLedger mode, {sum(r.pulled for r in self.r.resumes)} messages left to "
              f"consume, none skipped or repeated" if not self.r.resume_problems else
              f"[C3/5] consumer group {GROUP} did NOT resume exactly: {len(self.r.resume_problems)} problem(s)")
        for line in self.r.resume_problems[:5]:
            print(f"    {line}")

    # ---- C4. produce, kill -9 of the master, failover, rejoin -----------------------------------
    def failover(self) -> None:
        h = self.h
        names = {p.address: n for n, p in self.brokers.items()}
        master = self.wait_master()
        seeds = [self.brokers[master].address] + [p.address for n, p in self.brokers.items() if n != master]
        ph = h.produce(Phase("controller", h.a.dledger_messages), seeds, names)
        new_acks = [a for a in h.acks if a.phase == "controller"]
        self.r.new_below_classic_from = sum(1 for a in new_acks if a.offset < self.r.classic_from)
        h.say(f"[C4/5] produced in Controller mode: {h.rate(ph)}; offsets {min(a.offset for a in new_acks)}.."
              f"{max(a.offset for a in new_acks)} (classicFrom {self.r.classic_from})")
        killed = self.wait_master()
        t_kill = time.monotonic()
        self.brokers[killed].kill9()
        proc = self.brokers[killed].proc
        h.say(f"[C4/5] kill -9 of the master {killed} (pid {proc.pid if proc is not None else '?'})")
        live = [p.address for n, p in self.brokers.items() if n != killed]
        ph = h.produce(Phase("controller-after-failover", h.a.after_failover_messages),
                       [self.brokers[killed].address] + live, names)
        self.r.failover_s = (ph.first_ack_at - t_kill) if ph.first_ack_at else None
        new = self.wait_master(skip=killed)
        self.r.masters = (killed, new)
        h.say(f"[C4/5] failover: first write acknowledged by {new} {self.r.failover_s:.2f}s after the kill; "
              f"{h.rate(ph)}" if self.r.failover_s is not None else "[C4/5] no write acknowledged after the kill")
        problems, _extras = check_served(self.brokers[new].address, h.acks, new)
        self.r.lost_after_failover = problems
        h.say(f"[C4/5] the new master {new} serves every one of the {len(h.acks)} acknowledged messages"
              if not problems else f"[C4/5] the new master {new}: {len(problems)} PROBLEM(S)")
        self.print_problems({new: problems})
        t = time.monotonic()
        h.procs.ready(self.brokers[killed].start(wait=False))
        wait_until(lambda: ((self.brokers[killed].status() or {}).get("ha") or {}).get("role") == "SLAVE" or None,
                   60, f"{killed} to rejoin as a slave", 0.1, self.check_brokers)
        self.wait_in_sync(new, [n for n in IDS if n != new])
        self.r.rejoined_as_slave = True
        h.say(f"[C4/5] {killed} restarted and rejoined as a slave of {new} in the SyncStateSet, caught up, after "
              f"{time.monotonic() - t:.1f}s")
        t = time.monotonic()  # a slave dispatches (serves) up to the confirm offset its master last sent
        wait_until(lambda: all(not check_served(self.brokers[n].address, h.acks, n)[0] for n in IDS), 60,
                   "every replica to serve every acknowledged message", 0.5, self.check_brokers)
        h.say(f"[C4/5] every replica serves all {len(h.acks)} acknowledged messages (the slaves' dispatch reached "
              f"the master's confirm offset after {time.monotonic() - t:.1f}s)")
        bad = h.procs.stop_all(self.brokers.values())
        ctl = self.controllers
        bad += ctl.stop() if ctl is not None else []
        if bad:
            raise DemoError(f"{', '.join(bad)} did not shut down cleanly; see {h.logs}")
        h.say("[C4/5] brokers and controllers stopped cleanly")

    def check_brokers(self) -> None:
        for p in self.brokers.values():
            if p.proc is not None and p.proc.returncode is None:
                p.check()
        if self.controllers is not None:
            self.controllers.check()

    def wait_master(self, timeout: float = 60.0, skip: str = "") -> str:
        def one() -> Optional[str]:
            found = [n for n, p in self.brokers.items() if n != skip and p.alive() and (s := p.status())
                     and s.get("isMaster") and s.get("brokerId") == 0 and s.get("writable")]
            return found[0] if len(found) == 1 else None
        return wait_until(one, timeout, "exactly one Controller-mode master", 0.05, self.check_brokers)

    def wait_in_sync(self, master: str, slaves: list[str], timeout: float = 60.0) -> None:
        """Until every slave is in the master's SyncStateSet and holds (and dispatched) its log."""
        def done() -> bool:
            ms = self.brokers[master].status() or {}
            end = (ms.get("commitLog") or {}).get("maxOffset")
            sss = (ms.get("ha") or {}).get("syncStateSet", [])
            for n in slaves:
                s = self.brokers[n].status() or {}
                ha = s.get("ha") or {}
                if (ha.get("role") != "SLAVE" or ha.get("brokerControllerId") not in sss
                        or (s.get("commitLog") or {}).get("maxOffset") != end):
                    return False
            return end is not None
        wait_until(done, timeout, f"{', '.join(slaves)} in {master}'s SyncStateSet and caught up", 0.1,
                   self.check_brokers)

    def print_problems(self, problems: dict[str, list[str]]) -> None:
        for n, lines in problems.items():
            for line in lines[:5]:
                print(f"    {n}: {line}")

    # ---- C5. validator, read back from the files, summary ---------------------------------------
    def validate(self) -> None:
        from upgrade.validate.cli import main as validate_main

        h = self.h
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        out = h.work / "validate-controller"
        out.mkdir(parents=True, exist_ok=True)
        argv = [*(str(self.roots[n]) for n in IDS), "--json", str(out / "report.json"), "--png",
                str(out / "offsets.png"), "--master", h.a.spark_master]
        if not sys.stderr.isatty():
            argv.append("--quiet")
        h.say(f"[C5/5] mqupgrade validate (PySpark {h.a.spark_master}) over the three migrated store roots")
        print(f"  $ mqupgrade validate {' '.join(a.replace(str(h.work), '$WORK') for a in argv)}", flush=True)
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            self.r.validate_code = validate_main(argv, spark=h.spark)
        for line in buf.getvalue().rstrip("\n").splitlines():
            print(f"    {line}")
        h.say(f"[C5/5] validator exit code {self.r.validate_code}; JSON report {out / 'report.json'}")

    def read_back(self) -> None:
        h = self.h
        for n in IDS:
            check = check_migrated_node(self.roots[n], h.acks, h.a.file_size, PHASE_KIND)
            self.r.replica_problems[n], self.r.by_region[n] = check.problems, check.by_region
        h.say(f"[C5/5] read back {len(h.acks)} acknowledged messages from each replica's files (frozen regions, new "
              "classic files, ConsumeQueue units): " + ", ".join(
                  f"{n} {'OK' if not v else f'{len(v)} PROBLEMS'}" for n, v in self.r.replica_problems.items()))
        self.print_problems(self.r.replica_problems)
        self.r.acknowledged = len(h.acks)

    def summary(self) -> int:
        r, h = self.r, self.h
        lines = ["", "=== summary: DLedger mode -> Controller mode ==="]
        for p in h.phases:
            if p.name in ("dledger-final", "controller", "controller-after-failover"):
                lines.append(f"messages {p.name:<26} {p.acked:>7} acknowledged of {p.wanted}"
                             f" ({', '.join(f'{k} {v}' for k, v in sorted(p.by_node.items()))})")
        lines.append(f"acknowledged total (both journeys) {r.acknowledged:>7}")
        lines.append(f"classicFrom                        {r.classic_from:>7} (first epoch entry {r.first_epoch})")
        lines.append("records per region                 " + "; ".join(
            f"{n}: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())) for n, c in r.by_region.items()))
        lines.append(f"consumer group {GROUP:<20}{'resumed exactly' if r.resumed_exactly else 'FAIL'} "
                     f"({len(r.resumes)} queues)")
        if r.failover_s is not None:
            lines.append(f"failover                           {r.failover_s:.2f}s client-visible (kill -9 of "
                         f"{r.masters[0]} -> first ack by {r.masters[1]})")
        lines.append(f"acknowledged lost                  {len(r.lost_after_failover) + r.new_below_classic_from}")
        lines.append(f"killed master rejoined as slave    {'yes' if r.rejoined_as_slave else 'NO'}")
        extras = sum(r.unacknowledged_served.values())
        lines.append(f"consumer reads on every replica    {'PASS' if not any(r.served_problems.values()) else 'FAIL'}"
                     + (f" ({extras} unacknowledged copies served: at-least-once)" if extras else ""))
        lines.append(f"read-back check                    {'PASS' if not any(r.replica_problems.values()) else 'FAIL'}")
        lines.append(f"validator                          {'PASS' if r.validate_code == 0 else f'FAIL (exit {r.validate_code})'}")
        lines.append(f"total time                         {time.monotonic() - h.t0:.1f}s")
        lines.append(f"result                             {'PASS' if r.ok else 'FAIL'}")
        print("\n".join(lines), flush=True)
        return 0 if r.ok else 2

    # ---- the journey ----------------------------------------------------------------------------
    def run(self) -> int:
        self.h.facts["controller"] = self.r
        try:
            self.dledger_in_service()
            self.migrate()
            self.controller_mode()
            self.failover()
            self.validate()
            self.read_back()
            return self.summary()
        except BrokerClientError as exc:
            raise DemoError(f"a broker refused a request: {exc}") from None
        finally:
            kill_all(self.brokers.values())
            if self.controllers is not None:
                self.controllers.kill_all()
