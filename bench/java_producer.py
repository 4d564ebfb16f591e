"""Apache's own benchmark producer against our brokers and Apache's, same machine, same run (issue 22.1).

Usage::

    python -m bench.java_producer --quick                 # ours only: DLedger x3 and SYNC_MASTER + SLAVE, 20 s, 32 threads
    python -m bench.java_producer --apache                # ours, then Apache 4.9.8 with the same conf values
    python -m bench.java_producer --apache --threads 32,64 --seconds 65 --out bench-java.json

What it does, per implementation (``ours`` then ``apache``) and mode (``dledger``: a three-broker
DLedger group; ``classic``: a SYNC_MASTER + SLAVE pair), one after the other:

- starts Apache's name server (both implementations register with it, so the client sees the
  same name server) and the brokers on free 127.0.0.1 ports with the same conf values:
  ASYNC_FLUSH, 64 MiB commitlog files, autoCreateTopicEnable, 4 queues per topic (ours from
  ``conf/dledger`` and ``conf/classic``; Apache's from the keys of its README);
- waits until the group has a master, creates one topic per row with Apache's ``mqadmin updateTopic``;
- runs ``../shared/apache-rocketmq-4.9.8/bin/bench-producer`` (``example.benchmark.Producer``,
  1 KiB bodies, ``-w THREADS``) for ``--seconds`` and parses its 10-second lines;
- stops everything (a broker must exit within ``SHUTDOWN_BOUND_S``).

One JSON row per (impl, mode, threads), keys: ``impl, mode, threads, msgs_per_s`` (messages
stored during the run, from ``mqadmin topicStatus`` offsets, per second of wall time), ``tool_tps``
(mean of the tool's steady lines), ``avg_rt_ms``, ``max_rt_ms``, ``failed_sends`` (the tool's
send + response failures), ``cpu_us_per_msg`` (utime + stime of every broker process, /proc;
``cpu_us_per_msg_by_broker`` splits it per broker: master and slave, or each DLedger member, and
``cpu_us_per_msg_by_thread`` (ours) per thread of each broker, named by ``py-spy dump``; ours,
classic: ``ha_frames`` and ``msgs_per_ha_frame``, from the master's ``/status``),
``leader_changes`` (elections won during the run, counted in the brokers' logs; 0 for a classic
pair by construction). Run, not asserted: targets live in the issue, not in tests.

``--quick`` is a smoke run: 20 s is mostly the JVMs' warm-up (the tool prints a line every 10 s,
so ``tool_tps`` has one or two lines); compare implementations with the default 65 s rows.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Optional

from tools.nodes import Child
from tools.procs import REPO, free_ports, wait_until, write_conf

APACHE = Path(os.environ.get("APACHE_ROCKETMQ", REPO.parent / "shared" / "apache-rocketmq-4.9.8"))
IDS = ("n0", "n1", "n2")
FILE_SIZE = 64 << 20
COMMON = {"brokerIP1": "127.0.0.1", "mappedFileSizeCommitLog": FILE_SIZE, "autoCreateTopicEnable": "true",
          "flushDiskType": "ASYNC_FLUSH", "defaultTopicQueueNums": 4}
# an election won: ours logs "n1: role LEADER term 3"; Apache's DLedger "[n1] [ChangeRoleToLeader] from term: 2"
LEADER_LINES = {"ours": re.compile(r"role LEADER term \d+"), "apache": re.compile(r"ChangeRoleToLeader")}


class Proc:
    """One child process (:class:`tools.nodes.Child`, in a session of its own) with its log file;
    ``pid`` is the process that does the work."""

    def __init__(self, name: str, cmd: list[str], log: Path, env: Optional[dict[str, str]] = None,
                 logs: tuple[Path, ...] = ()) -> None:
        self.name, self.log = name, log
        self.logs = logs or (log,)  # files in which its leader elections are logged
        self.child = Child(name, cmd[1:], log, env=env, program=cmd[:1], new_session=True).start()

    @property
    def p(self) -> "subprocess.Popen[bytes]":
        assert self.child.proc is not None
        return self.child.proc

    def alive(self) -> bool:
        return self.child.alive()

    def cpu_s(self) -> float:
        try:
            f = Path(f"/proc/{self.p.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    def threads_cpu_s(self, names: dict[str, str]) -> dict[str, float]:
        """CPU seconds per thread, by the Python names in ``names`` (native id -> name), else "other"."""
        out: dict[str, float] = {}
        try:
            tasks = list(Path(f"/proc/{self.p.pid}/task").iterdir())
        except OSError:
            return out
        for task in tasks:
            try:
                f = (task / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            name = names.get(task.name, "other")
            out[name] = out.get(name, 0.0) + (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
        return out

    def thread_names(self) -> dict[str, str]:
        """Native thread id -> Python thread name, from ``py-spy dump`` ({} without py-spy)."""
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        try:
            text = subprocess.run([spy, "dump", "--pid", str(self.p.pid)], capture_output=True, text=True,
                                  timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            return {}
        return dict(re.findall(r'^Thread (\d+) \(\w+\): "([^"]*)"', text, re.M))

    def stop(self) -> int:
        """SIGTERM and the exit code within SHUTDOWN_BOUND_S (past it: stacks, SIGKILL, ShutdownTooSlow)."""
        code = self.child.terminate()
        assert code is not None
        return code

    def elections(self, pattern: "re.Pattern[str]") -> int:
        n = 0
        for path in self.logs:
            for f in ([path] if path.is_file() else sorted(path.rglob("*.log")) if path.is_dir() else []):
                n += len(pattern.findall(f.read_text(errors="replace")))
        return n


def _java(tool: str, *args: str, heap: str = "-Xms128m -Xmx256m", timeout: float = 60.0,
          home: Optional[Path] = None) -> str:
    env = dict(os.environ, JAVA_OPT=f"{heap} -Duser.home={home or tempfile.gettempdir()}")
    r = subprocess.run([str(APACHE / "bin" / tool), *args], capture_output=True, text=True, env=env, timeout=timeout)
    return r.stdout + r.stderr


class Setup:
    """A name server plus one group (impl x mode) on free ports under ``work``."""

    def __init__(self, impl: str, mode: str, work: Path, forward: bool = True) -> None:
        self.impl, self.mode, self.work = impl, mode, work
        self.forward = forward  # ours, DLedger: forwardSendsToLeader
        self.cluster = f"B{impl[0].upper()}{mode[0].upper()}"
        self.brokers: list[Proc] = []
        ns_port = free_ports(1)[0]
        self.ns = f"127.0.0.1:{ns_port}"
        (work / "namesrv.conf").write_text(f"listenPort={ns_port}\n")
        self.namesrv = Proc("namesrv", [str(APACHE / "bin" / "mqnamesrv"), "-c", str(work / "namesrv.conf")],
                            work / "namesrv.log", {"JAVA_OPT": f"-Xms256m -Xmx256m -Duser.home={work / 'ns-home'}"})

    # ------------------------------------------------------------------ brokers
    def start(self) -> None:
        wait_until(lambda: "mqnamesrv" if self._ns_up() else None, 60, "the name server")
        for name, conf in self._confs():
            self.brokers.append(self._broker(name, conf))

    def _ns_up(self) -> bool:
        import socket

        host, port = self.ns.split(":")
        try:
            with socket.create_connection((host, int(port)), 0.5):
                return True
        except OSError:
            return False

    def _confs(self) -> list[tuple[str, Path]]:
        common = dict(COMMON, namesrvAddr=self.ns, brokerClusterName=self.cluster)
        out = []
        if self.mode == "dledger":
            ports = free_ports(6)
            peers = ";".join(f"{n}-127.0.0.1:{ports[3 + i]}" for i, n in enumerate(IDS))
            for i, n in enumerate(IDS):
                kv = dict(common, listenPort=ports[i], storePathRootDir=self.work / n,
                          storePathCommitLog=self.work / n / "commitlog", dLegerPeers=peers, dLegerSelfId=n,
                          enableDLegerCommitLog="true", dLegerGroup=f"{self.cluster}g", brokerName=f"{self.cluster}g")
                if self.impl == "ours":
                    if not self.forward:
                        kv["forwardSendsToLeader"] = "false"
                    kv["dLegerPeersHttp"] = ";".join(f"{m}-127.0.0.1:{ports[j]}" for j, m in enumerate(IDS))
                    out.append((n, write_conf(REPO / "conf" / "dledger" / f"broker-{n}.conf", self.work / f"{n}.conf", kv)))
                else:
                    kv["sendMessageThreadPoolNums"] = 16
                    out.append((n, _plain_conf(self.work / f"{n}.conf", kv)))
            return out
        m, s = free_ports(2)
        ha = free_ports(2)
        roles = (("m", m, ha[0], "SYNC_MASTER", 0, "broker-a.conf"), ("s", s, ha[1], "SLAVE", 1, "broker-a-s.conf"))
        for name, port, ha_port, role, bid, template in roles:
            kv = dict(common, listenPort=port, haListenPort=ha_port, brokerRole=role, brokerId=bid,
                      brokerName=f"{self.cluster}p", storePathRootDir=self.work / name,
                      storePathCommitLog=self.work / name / "commitlog")
            if role == "SLAVE":
                kv["haMasterAddress"] = f"127.0.0.1:{ha[0]}"
            if self.impl == "ours":
                out.append((name, write_conf(REPO / "conf" / "classic" / template, self.work / f"{name}.conf", kv)))
            else:
                kv.pop("haMasterAddress", None)  # Apache's slave learns the master's HA address from the name server
                kv["sendMessageThreadPoolNums"] = 16
                out.append((name, _plain_conf(self.work / f"{name}.conf", kv)))
        return out

    def _broker(self, name: str, conf: Path) -> Proc:
        log = self.work / f"{name}.log"
        if self.impl == "ours":
            return Proc(name, [sys.executable, "-m", "broker.cli.mqbroker", "-c", str(conf)], log)
        home = self.work / f"{name}-home"
        return Proc(name, [str(APACHE / "bin" / "mqbroker"), "-c", str(conf)], log,
                    {"JAVA_OPT": f"-Xms1g -Xmx1g -XX:MaxDirectMemorySize=1g -Duser.home={home}"},
                    logs=(log, home / "logs"))

    def wait_master(self, timeout: float = 120.0) -> None:
        def master() -> Optional[str]:
            for b in self.brokers:
                if not b.alive():
                    raise RuntimeError(f"{self.impl} {b.name} exited with {b.p.returncode}: {b.log.read_text()[-3000:]}")
            out = _java("mqadmin", "clusterList", "-n", self.ns, home=self.work / "admin-home")
            want = 1 if self.mode == "dledger" else 2
            rows = [ln for ln in out.splitlines() if ln.startswith(self.cluster)]
            return out if any(re.search(r"\s0\s+127\.0\.0\.1", ln) for ln in rows) and len(rows) >= want else None
        wait_until(master, timeout, f"{self.impl} {self.mode}: a master in clusterList", interval=2.0)

    def create_topic(self, topic: str) -> None:
        out = _java("mqadmin", "updateTopic", "-n", self.ns, "-c", self.cluster, "-t", topic, "-r", "4", "-w", "4",
                    home=self.work / "admin-home")
        if "success" not in out.lower():
            raise RuntimeError(f"updateTopic {topic} on {self.impl} {self.mode}: {out[-2000:]}")

    def stored(self, topic: str) -> int:
        out = _java("mqadmin", "topicStatus", "-n", self.ns, "-t", topic, home=self.work / "admin-home")
        return sum(int(f[3]) for f in (ln.split() for ln in out.splitlines())
                   if len(f) >= 4 and f[1].isdigit() and f[3].isdigit())

    def cpu_s(self) -> float:
        return sum(b.cpu_s() for b in self.brokers)

    def ha_frames(self) -> Optional[int]:
        """Ours, classic: HA frames the master has sent so far (its ``/status``), else None."""
        if self.impl != "ours" or self.mode != "classic":
            return None
        port = _conf_value(self.work / "m.conf", "listenPort")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=10) as r:
                slaves = json.loads(r.read())["ha"]["slaves"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return sum(int(sl.get("frames_sent", 0)) for sl in slaves)

    def elections(self) -> int:
        return sum(b.elections(LEADER_LINES[self.impl]) for b in self.brokers)

    def stop(self) -> list[str]:
        problems = []
        for b in self.brokers:
            try:
                code = b.stop()
                if code != 0 and self.impl == "ours":
                    problems.append(f"{b.name} exited {code}")
            except AssertionError as exc:
                problems.append(str(exc)[:300])
        self.namesrv.stop()
        return problems


def _plain_conf(path: Path, kv: dict[str, Any]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in kv.items()))
    return path


def _profilers(setup: Setup, topic: str, seconds: float, out: Optional[Path],
               native: bool = False) -> list[subprocess.Popen[bytes]]:
    """``py-spy record`` on each of our brokers for the run (``--profile DIR``): one collapsed-stack
    file per broker, named after the row (``bench/profile_top.py`` sums it). ``native``
    (``--profile-native``): also the C frames (uvloop, the mypyc-compiled modules), which
    otherwise count as their caller's self time; py-spy then pauses the broker per sample."""
    if out is None or setup.impl != "ours":
        return []
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    out.mkdir(parents=True, exist_ok=True)
    procs = []
    for b in setup.brokers:
        stem = out / f"{setup.mode}-{topic}-{b.name}"
        procs.append(subprocess.Popen([spy, "record", "-p", str(b.p.pid), "-d", str(int(seconds)), "-r", "97",
                                       "-f", "raw", "-o", f"{stem}.txt",
                                       *(["--native", "--threads"] if native else ["--nonblocking"])],
                                      stdout=subprocess.DEVNULL, stderr=open(f"{stem}.spy.log", "wb")))
    return procs


class Transfers(threading.Thread):
    """``--transfer-every S`` (ours, DLedger): hand the leadership to the next member every S
    seconds while the producer runs (``mqadmin transferLeader``), so the row shows what a leader
    change with every member alive costs a Java producer whose route is stale (issue 22.4)."""

    def __init__(self, setup: Setup, every: float) -> None:
        super().__init__(name="transfers", daemon=True)
        self.setup, self.every = setup, every
        self.done = 0
        self.stop_event = threading.Event()

    def run(self) -> None:
        api = [f"127.0.0.1:{_conf_value(self.setup.work / f'{n}.conf', 'listenPort')}" for n in IDS]
        i = 0
        while not self.stop_event.wait(self.every):
            i += 1
            r = subprocess.run([sys.executable, "-m", "broker.cli.mqadmin", "transferLeader", "-b", api[i % 3],
                                "--to", IDS[i % 3]], capture_output=True, text=True, cwd=str(REPO), timeout=30)
            self.done += r.returncode == 0 and "transferred" in r.stdout


def _conf_value(path: Path, key: str) -> str:
    for line in path.read_text().splitlines():
        if line.startswith(key + "="):
            return line.split("=", 1)[1].strip()
    raise KeyError(f"{key} not in {path}")


def run_producer(setup: Setup, topic: str, threads: int, seconds: float,
                 profile: Optional[Path] = None, transfer_every: float = 0.0,
                 native: bool = False) -> dict[str, Any]:
    out_path = setup.work / f"producer-{topic}.out"
    env = dict(os.environ, JAVA_OPT=f"-Xms1g -Xmx1g -Duser.home={setup.work / 'producer-home'}")
    o0, c0, e0, t0 = setup.stored(topic), setup.cpu_s(), setup.elections(), time.monotonic()
    each0 = [b.cpu_s() for b in setup.brokers]
    frames0 = setup.ha_frames()
    names = [b.thread_names() if setup.impl == "ours" else {} for b in setup.brokers]
    threads0 = [b.threads_cpu_s(n) for b, n in zip(setup.brokers, names)]
    spies = _profilers(setup, topic, seconds, profile, native)
    transfers = Transfers(setup, transfer_every) if transfer_every > 0 and setup.impl == "ours" \
        and setup.mode == "dledger" else None
    if transfers is not None:
        transfers.start()
    with open(out_path, "wb") as fh:
        p = subprocess.Popen([str(APACHE / "bin" / "bench-producer"), "-n", setup.ns, "-t", topic, "-w", str(threads),
                              "-s", "1024"], stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            p.wait(seconds)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        finally:
            if p.poll() is None:  # the run was interrupted (SIGTERM, Ctrl-C): its producer goes with it
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)
    if transfers is not None:
        transfers.stop_event.set()
        transfers.join(60)
    wall, c1, e1 = time.monotonic() - t0, setup.cpu_s(), setup.elections()
    each = {b.name: round(b.cpu_s() - c, 2) for b, c in zip(setup.brokers, each0)}
    by_thread = {b.name: {k: v - t0.get(k, 0.0) for k, v in b.threads_cpu_s(n).items()}
                 for b, n, t0 in zip(setup.brokers, names, threads0) if n}
    for spy in spies:
        try:
            spy.wait(30)
        except subprocess.TimeoutExpired:
            spy.kill()
    o1 = setup.stored(topic)
    msgs = o1 - o0
    frames1 = setup.ha_frames()
    frames = frames1 - frames0 if frames0 is not None and frames1 is not None else None
    tool = parse_producer(out_path.read_text(errors="replace"))
    return {"impl": setup.impl, "mode": setup.mode, "threads": threads, "msgs_per_s": round(msgs / wall),
            "tool_tps": tool["tps"], "avg_rt_ms": tool["avg_rt_ms"], "max_rt_ms": tool["max_rt_ms"],
            "failed_sends": tool["failed"], "cpu_us_per_msg": round((c1 - c0) * 1e6 / msgs, 1) if msgs else None,
            "leader_changes": e1 - e0 if setup.mode == "dledger" else 0, "messages": msgs, "seconds": round(wall, 1),
            "cpu_us_per_msg_by_broker": {k: round(v * 1e6 / msgs, 1) if msgs else None for k, v in each.items()},
            "cpu_us_per_msg_by_thread": {b: _per_msg(t, msgs) for b, t in by_thread.items()},
            **({"ha_frames": frames, "msgs_per_ha_frame": round(msgs / frames, 1) if frames else None}
               if frames is not None else {}),
            **({"transfers": transfers.done} if transfers is not None else {})}


def _per_msg(cpu_s: dict[str, float], msgs: int) -> dict[str, float]:
    """CPU seconds by thread -> microseconds per message, largest first."""
    rows = sorted(cpu_s.items(), key=lambda kv: -kv[1])
    return {k: round(v * 1e6 / msgs, 1) for k, v in rows if msgs and v > 0}


def parse_producer(text: str) -> dict[str, Any]:
    """``Current Time: ... | Send TPS: 4863 | Max RT(ms): 212 | Average RT(ms): 6.5 | Send Failed: 0 | Response Failed: 0``."""
    lines = [ln for ln in text.splitlines() if "Send TPS" in ln]

    def num(pat: str, ln: str) -> Optional[float]:
        m = re.search(pat, ln)
        return float(m.group(1)) if m and m.group(1) != "NaN" else None

    tps = [v for ln in lines if (v := num(r"Send TPS: (\d+)", ln)) is not None]
    rts = [v for ln in lines if (v := num(r"Average RT\(ms\):\s*([\d.]+|NaN)", ln)) is not None]
    steady = tps[1:] or tps
    last = lines[-1] if lines else ""
    failed = int((num(r"Send Failed: (\d+)", last) or 0) + (num(r"Response Failed: (\d+)", last) or 0))
    return {"tps": round(sum(steady) / len(steady)) if steady else None,
            "avg_rt_ms": round(sum(rts[1:] or rts) / len(rts[1:] or rts), 2) if rts else None,
            "max_rt_ms": num(r"Max RT\(ms\): (\d+)", last), "failed": failed, "lines": len(lines)}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.java_producer", description=__doc__.split("\n\n")[0])
    ap.add_argument("--apache", action="store_true", help="also run Apache RocketMQ 4.9.8 (after ours)")
    ap.add_argument("--quick", action="store_true", help="20 s rows at 32 threads")
    ap.add_argument("--threads", default="32,64")
    ap.add_argument("--seconds", type=float, default=65.0)
    ap.add_argument("--modes", default="dledger,classic")
    ap.add_argument("--out", help="also write the rows to this JSON file")
    ap.add_argument("--keep", action="store_true", help="keep the work directories (logs, stores)")
    ap.add_argument("--transfer-every", type=float, default=0.0, metavar="S",
                    help="ours, DLedger: transfer the leadership every S seconds during each row (the row's "
                    "'transfers'; leader_changes then counts them)")
    ap.add_argument("--no-forward", action="store_true",
                    help="ours, DLedger: forwardSendsToLeader=false (followers refuse sends, as before issue 22.4)")
    ap.add_argument("--profile", type=Path, help="py-spy each of our brokers during each row into this folder "
                    "(collapsed stacks; adds the sampler's own CPU to the row)")
    ap.add_argument("--profile-native", action="store_true",
                    help="with --profile: py-spy --native --threads (C frames too: uvloop, compiled modules)")
    args = ap.parse_args(argv)
    threads = [32] if args.quick else [int(t) for t in args.threads.split(",")]
    seconds = 20.0 if args.quick else args.seconds
    if not (APACHE / "bin" / "bench-producer").exists():
        print(f"java_producer: Apache RocketMQ not found at {APACHE} (set APACHE_ROCKETMQ)", file=sys.stderr)
        return 2
    subprocess.run([str(APACHE / "install-deps.sh")], check=False)
    rows: list[dict[str, Any]] = []
    for impl in (["ours", "apache"] if args.apache else ["ours"]):
        for mode in args.modes.split(","):
            work = Path(tempfile.mkdtemp(prefix=f"javabench-{impl}-{mode}-"))
            setup = Setup(impl, mode, work, forward=not args.no_forward)
            try:
                setup.start()
                setup.wait_master()
                for th in threads:
                    topic = f"Bench{impl.capitalize()}{mode.capitalize()}{th}"
                    setup.create_topic(topic)
                    row = run_producer(setup, topic, th, seconds, args.profile, args.transfer_every,
                                       args.profile_native)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
            finally:
                problems = setup.stop()
                if problems:
                    print(json.dumps({"impl": impl, "mode": mode, "shutdown_problems": problems}), flush=True)
                if not args.keep:
                    shutil.rmtree(work, ignore_errors=True)
                else:
                    print(f"# kept {work}", file=sys.stderr)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


def _sigterm(_sig: int, _frame: Any) -> None:
    """A SIGTERM (``kill``, ``timeout``) unwinds through ``main``'s ``finally``: the brokers, the name
    server and the Java producer of the row stop with the run instead of outliving it."""
    raise SystemExit(128 + signal.SIGTERM)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _sigterm)
    sys.exit(main())
