"""Client-visible failover after kill -9 of the master: Controller mode vs our DLedger group (issue 27.5).

Usage::

    python -m bench.controller_failover                       # 20 trials per mode, JSON rows on stdout
    python -m bench.controller_failover --trials 5 --modes controller --out /tmp/h9/failover.json

What it does, per mode, one after the other:

- ``controller``: three ``mqcontroller`` + three Controller-mode brokers of one broker set + our
  name server (:class:`tools.controller_cluster.ControllerCluster`); ``dledger``: three
  DLedger-mode brokers (``conf/dledger``) registering with our name server. Free 127.0.0.1 ports,
  a temp work dir, everything ended in ``finally``.
- Two producers send continuously to one topic (4 queues), each in a closed loop, each
  recording every acknowledgement (monotonic time, the broker that stored it, the body): ours
  (:class:`broker.api.client.MasterFollowingProducer`, two writers, HTTP, follows NOT_MASTER /
  rotates over the three addresses) and Apache's 4.9.8 Java ``DefaultMQProducer`` (one thread,
  routes from the name server; a tiny program compiled here with ``javac`` and run with
  ``bin/jrun``; ``pollNameServerInterval`` is ``--java-poll-ms``, Apache's default 30 s would add
  up to 30 s to its failover; ``sendMsgTimeout`` is ``--java-timeout-ms``, Apache's 3 s). Both run at once: each sees the same failovers.
- Per trial: wait until every broker is in sync (Controller mode: the master's SyncStateSet holds
  all three; DLedger: every follower committed the leader's index of that moment), kill -9 of the master, then
  *failover_s* per client = kill -> first acknowledged send stored by another broker (the Java
  side reads the store host from ``offsetMsgId``); *elected_s* = kill -> a broker's ``/status``
  says master. The killed broker is restarted and must rejoin (a slave again / a follower that
  caught up: *rejoined_s*) before the next trial. Acknowledged messages lost: every acknowledged
  body older than the read must be served by the new master (read from a per-queue cursor, all
  reads on masters that later replicated everything), and every acknowledgement once more after
  the producers stop; must be 0.

Rows (JSON, one a line; ``--out`` writes them all): ``kind=trial`` per trial (mode, trial,
killed, new_master, elected_s (polled over HTTP: a bound, not a precise time), failover_s per
client, rejoined_s, unserved_so_far: acknowledged and not yet served by the new master) and
``kind=summary`` per (mode, client): trials, failover p50 / p99 / max (nearest rank: with 20
trials p99 is the largest), acked, lost, failed attempts, load average before and after. Run,
not asserted. The machine is shared: every number carries the load it was measured under.

Measured 2026-11-28, 20 trials per mode, 2 shared cores, load average 9.7-13.9: failover p50 /
p99 (= max) in s: Controller mode ours 0.22 / 0.65, Java 3.01 / 3.21; DLedger ours 0.75 / 1.28,
Java 3.02 / 3.10; 0 acknowledged lost of 28,238 + 10,173 (Controller) and 13,188 + 4,101 (DLedger).
The Java producer's 3.0 s trials (15 of 20 and 16 of 20) equal its sendMsgTimeout: its one send in
flight when the master died waits out the timeout; its other trials took 0.43-1.31 s.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional, Protocol

from tools.controller_cluster import ContinuousProducer, ControllerCluster, read_queues
from tools.broker_confs import dledger_group_confs
from tools.nodes import BrokerProc, NamesrvProc, kill_all
from tools.procs import REPO, wait_until

APACHE = Path(os.environ.get("APACHE_ROCKETMQ", REPO.parent / "shared" / "apache-rocketmq-4.9.8"))
TOPIC = "FailoverBench"
QUEUES = 4
JAVA_SRC = r"""
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;

public class FailoverProducer {
    public static void main(String[] a) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer("FailoverBenchGroup");
        p.setNamesrvAddr(a[0]);
        p.setPollNameServerInterval(Integer.parseInt(a[2]));
        p.setSendMsgTimeout(Integer.parseInt(a[3]));
        p.start();
        java.io.PrintStream out = new java.io.PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), true);
        out.println("R " + System.nanoTime());
        for (long i = 0; ; i++) {
            String body = "j-" + i;
            try {
                SendResult r = p.send(new Message(a[1], body.getBytes("UTF-8")));
                out.println((r.getSendStatus() == SendStatus.SEND_OK ? "A " : "S ") + System.nanoTime() + " "
                            + r.getOffsetMsgId() + " " + body + " " + r.getSendStatus());
            } catch (Exception e) {
                out.println("E " + System.nanoTime() + " " + e.getClass().getSimpleName());
                Thread.sleep(5);
            }
        }
    }
}
"""


class Producer(Protocol):
    name: str
    acks: list[tuple[float, str, str]]  # (monotonic time, address of the broker that stored it, body)
    failures: int

    def stop(self) -> None: ...


class JavaProducer:
    """Apache 4.9.8's ``DefaultMQProducer`` in a JVM; its stdout lines are parsed on a thread."""

    name = "java"

    def __init__(self, work: Path, namesrv: str, poll_ms: int, timeout_ms: int = 3000) -> None:
        self.acks: list[tuple[float, str, str]] = []
        self.failures = 0
        self.other: dict[str, int] = {}
        classes = compile_java(work)
        env = dict(os.environ, EXTRA_CP=str(classes), JAVA_OPT=f"-Xms128m -Xmx256m -Duser.home={work / 'java-home'}")
        with open(work / "java.err", "wb") as err:
            self.proc = subprocess.Popen([str(APACHE / "bin" / "jrun"), "FailoverProducer", namesrv, TOPIC,
                                          str(poll_ms), str(timeout_ms)], stdout=subprocess.PIPE, stderr=err,
                                         env=env, start_new_session=True)
        self.ready = threading.Event()
        self._thread = threading.Thread(target=self._read, name="java", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            f = raw.decode(errors="replace").split()
            if not f:
                continue
            if f[0] == "R":
                self.ready.set()
            elif f[0] == "A" and len(f) >= 4:
                self.acks.append((int(f[1]) / 1e9, store_host(f[2]), f[3]))
            elif f[0] == "E":
                self.failures += 1
            elif f[0] == "S" and len(f) >= 5:
                self.other[f[4]] = self.other.get(f[4], 0) + 1

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        self._thread.join(10)


def store_host(offset_msg_id: str) -> str:
    """``ip:port`` of the broker that stored a message, from Apache's offsetMsgId (IPv4: 32 hex)."""
    try:
        b = bytes.fromhex(offset_msg_id)
        return f"{b[0]}.{b[1]}.{b[2]}.{b[3]}:{int.from_bytes(b[4:8], 'big')}"
    except (ValueError, IndexError):
        return "?"


def compile_java(work: Path) -> Path:
    out = work / "java-classes"
    out.mkdir(parents=True, exist_ok=True)
    src = out / "FailoverProducer.java"
    src.write_text(JAVA_SRC)
    cp = ":".join(str(p) for p in sorted((APACHE / "lib").glob("*.jar")))
    subprocess.run(["javac", "-nowarn", "-cp", cp, "-d", str(out), str(src)], check=True, capture_output=True,
                   timeout=120)
    return out


# ---- the two topologies -------------------------------------------------------------------------
class Topology(Protocol):
    mode: str
    namesrv: NamesrvProc
    names: list[str]

    def address(self, name: str) -> str: ...
    def master(self, timeout: float, skip: tuple[str, ...] = ()) -> str: ...
    def wait_in_sync(self, master: str, timeout: float) -> None: ...
    def kill9(self, name: str) -> None: ...
    def restart(self, name: str) -> None: ...
    def wait_rejoined(self, name: str, master: str, timeout: float) -> None: ...
    def close(self) -> None: ...


class ControllerTopology:
    mode = "controller"

    def __init__(self, work: Path) -> None:
        self.c = ControllerCluster(work, 3, 3)
        self.namesrv = self.c.namesrv
        self.names = list(self.c.brokers)
        try:
            self.c.start(90)
        except BaseException:
            self.c.close()
            raise

    def address(self, name: str) -> str:
        return self.c.brokers[name].address

    def master(self, timeout: float, skip: tuple[str, ...] = ()) -> str:
        return self.c.master(timeout, skip)

    def wait_in_sync(self, master: str, timeout: float) -> None:
        for n in self.c.slaves(master):
            self.c.wait_role(n, "SLAVE", timeout)
        self.c.wait_in_sync(master, self.c.slaves(master), timeout)

    def kill9(self, name: str) -> None:
        self.c.kill9(name)

    def restart(self, name: str) -> None:
        self.c.brokers[name].start(wait=False)

    def wait_rejoined(self, name: str, master: str, timeout: float) -> None:
        self.c.brokers[name].wait_ready(timeout)
        self.c.wait_role(name, "SLAVE", timeout)
        self.c.wait_in_sync(master, [name], timeout)

    def close(self) -> None:
        self.c.close()


class DLedgerTopology:
    mode = "dledger"

    def __init__(self, work: Path) -> None:
        self.namesrv = NamesrvProc(work)
        self.names = ["n0", "n1", "n2"]
        confs = dledger_group_confs(work, len(self.names), conf_name="dledger-n{i}.conf", store_name="dledger-n{i}",
                                    namesrvAddr=self.namesrv.address)
        self.brokers = {n: BrokerProc(conf, port, n, work, log_name=f"broker-{n}", store_root=work / f"dledger-{n}",
                                      ready_timeout=60.0) for n, (conf, port) in zip(self.names, confs)}
        try:
            self.namesrv.start()
            for p in self.brokers.values():
                p.start(wait=False)
            for p in self.brokers.values():
                p.wait_ready(90)
        except BaseException:
            self.close()
            raise

    def address(self, name: str) -> str:
        return self.brokers[name].address

    def master(self, timeout: float, skip: tuple[str, ...] = ()) -> str:
        def one() -> Optional[str]:
            found = [n for n in self.names if n not in skip and (st := self.brokers[n].status()) is not None
                     and st.get("isMaster")]
            return found[0] if len(found) == 1 else None
        return wait_until(one, timeout, "exactly one DLedger leader", interval=0.05)

    def _dl(self, name: str) -> dict[str, Any]:
        st = self.brokers[name].status()
        return (st or {}).get("dledger") or {}

    def wait_in_sync(self, master: str, timeout: float) -> None:
        for n in self.names:
            if n != master:
                self.wait_rejoined(n, master, timeout)

    def kill9(self, name: str) -> None:
        self.brokers[name].kill9()

    def restart(self, name: str) -> None:
        self.brokers[name].start(wait=False)

    def wait_rejoined(self, name: str, master: str, timeout: float) -> None:
        """``name`` is a follower whose committed index reached the leader's of when it answered."""
        self.brokers[name].wait_ready(timeout)
        wait_until(lambda: self._dl(name).get("role") == "FOLLOWER" or None, timeout, f"{name} a follower")
        goal = self._dl(master).get("committedIndex") or 0
        wait_until(lambda: (self._dl(name).get("committedIndex") or -1) >= goal or None, timeout,
                   f"{name} committed the leader's index {goal}")

    def close(self) -> None:
        kill_all([*self.brokers.values(), self.namesrv])


# ---- trials -------------------------------------------------------------------------------------
class Ledger:
    """What the masters served (cumulative) against what each producer had acknowledged."""

    def __init__(self) -> None:
        self.cursor = {q: 0 for q in range(QUEUES)}
        self.seen: set[str] = set()

    def lost(self, topo: Topology, master: str, producers: list[Producer]) -> dict[str, int]:
        """Acknowledged before this read and not served by ``master``: per producer."""
        t_read, deadline = time.monotonic(), time.monotonic() + 10.0
        while True:  # a new master may still be dispatching what it replicated: re-read for up to 10 s
            self.seen.update(read_queues(topo.address(master), TOPIC, self.cursor, 512))
            out = {p.name: sum(1 for t, _, b in list(p.acks) if t < t_read and b not in self.seen) for p in producers}
            if not any(out.values()) or time.monotonic() > deadline:
                return out
            time.sleep(0.2)


def first_ack(p: Producer, after: float, not_at: str, start: int = 0) -> Optional[float]:
    """Time of ``p``'s first acknowledgement after ``after`` stored by a broker other than ``not_at``."""
    times = [t for t, a, _ in p.acks[start:] if t > after and a != not_at]
    return min(times) if times else None


def pct(values: list[float], q: float) -> Optional[float]:
    """Nearest-rank percentile."""
    if not values:
        return None
    s = sorted(values)
    return round(s[max(0, math.ceil(q * len(s)) - 1)], 3)


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def run_mode(mode: str, work: Path, trials: int, java_poll_ms: int, java_timeout_ms: int, emit: Any) -> None:
    topo: Topology = ControllerTopology(work) if mode == "controller" else DLedgerTopology(work)
    producers: list[Producer] = []
    load0 = loadavg()
    try:
        master = topo.master(60)
        topo.wait_in_sync(master, 60)
        ours = ContinuousProducer([topo.address(n) for n in topo.names], TOPIC)
        producers.append(ours)
        wait_until(lambda: ours.acks or None, 30, "our producer's first acknowledgement")
        wait_until(lambda: topo.namesrv.route(TOPIC) or None, 30, f"the name server's route of {TOPIC}")
        java = JavaProducer(work, topo.namesrv.address, java_poll_ms, java_timeout_ms)
        producers.append(java)
        wait_until(lambda: java.acks or None, 90, "the Java producer's first acknowledgement",
                   check=lambda: _alive(java))
        ledger = Ledger()
        fails: dict[str, list[float]] = {p.name: [] for p in producers}
        lost_total = {p.name: 0 for p in producers}
        for trial in range(trials):
            master = topo.master(60)
            topo.wait_in_sync(master, 90)
            old = topo.address(master)
            since = {p.name: len(p.acks) for p in producers}
            wait_until(lambda: all(len(p.acks) > since[p.name] for p in producers) or None, 60,
                       "both producers acknowledged on the master")
            t_kill = time.monotonic()
            topo.kill9(master)
            new = topo.master(60, skip=(master,))
            elected = time.monotonic() - t_kill
            got = {p.name: wait_until(_first_ack_after(p, t_kill, old, max(0, len(p.acks) - 50)), 90,
                                      f"{p.name}: an acknowledgement from another broker") for p in producers}
            failover = {k: round(v - t_kill, 3) for k, v in got.items()}
            for k, v in failover.items():
                fails[k].append(v)
            lost = ledger.lost(topo, new, producers)
            t_restart = time.monotonic()
            topo.restart(master)
            topo.wait_rejoined(master, new, 90)
            emit({"kind": "trial", "mode": mode, "trial": trial, "killed": master, "new_master": new,
                  "elected_s": round(elected, 3), "failover_s": failover,
                  "rejoined_s": round(time.monotonic() - t_restart, 3), "unserved_so_far": lost, "load": loadavg()})
        for p in producers:
            p.stop()
        master = topo.master(60)
        final = ledger.lost(topo, master, producers)
        load1 = loadavg()
        for p in producers:
            lost_total[p.name] = final[p.name]
            v = fails[p.name]
            emit({"kind": "summary", "mode": mode, "client": p.name, "trials": len(v), "failover_p50_s": pct(v, 0.5),
                  "failover_p99_s": pct(v, 0.99), "failover_max_s": max(v) if v else None, "acked": len(p.acks),
                  "lost": lost_total[p.name], "failed_attempts": p.failures, "load_before": load0, "load_after": load1,
                  **({"java_poll_name_server_ms": java_poll_ms, "java_send_msg_timeout_ms": java_timeout_ms}
                     if p.name == "java" else {})})
    finally:
        for p in producers:
            try:
                p.stop()
            except Exception:  # noqa: BLE001 - cleanup must not mask the error
                pass
        topo.close()


def _first_ack_after(p: Producer, after: float, not_at: str, start: int) -> Any:
    return lambda: first_ack(p, after, not_at, start)


def _alive(java: JavaProducer) -> None:
    if java.proc.poll() is not None:
        raise RuntimeError(f"the Java producer exited with {java.proc.returncode}")


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.controller_failover", description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--modes", default="controller,dledger")
    ap.add_argument("--java-poll-ms", type=int, default=1000, help="the Java producer's pollNameServerInterval")
    ap.add_argument("--java-timeout-ms", type=int, default=3000,
                    help="the Java producer's sendMsgTimeout (Apache's default 3000): a send in flight when the master "
                    "dies may wait it out")
    ap.add_argument("--out", type=Path, help="also write every row to this JSON file")
    ap.add_argument("--keep", action="store_true", help="keep the work directories (logs, stores)")
    args = ap.parse_args(argv)
    if not (APACHE / "bin" / "jrun").exists():
        print(f"controller_failover: Apache RocketMQ not found at {APACHE} (set APACHE_ROCKETMQ)", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []

    def emit(row: dict[str, Any]) -> None:
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(rows, indent=1))
    for mode in args.modes.split(","):
        work = Path(tempfile.mkdtemp(prefix=f"ctlfailover-{mode}-"))
        try:
            run_mode(mode, work, args.trials, args.java_poll_ms, args.java_timeout_ms, emit)
        except Exception as exc:  # noqa: BLE001 - one mode's failure is a row; the next mode still runs
            emit({"kind": "error", "mode": mode, "error": f"{type(exc).__name__}: {exc}"[:2000], "work": str(work)})
            args.keep = True
        finally:
            if args.keep:
                print(f"# kept {work}", file=sys.stderr)
            else:
                shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
