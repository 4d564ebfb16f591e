"""3-node DLedger replication benchmark: append throughput/latency and failover time, as JSON.

Rules
-----
* Real processes on 127.0.0.1: three ``python -m dledger.cli server`` members (fresh store
  directories under a temp dir, removed afterwards) and load-generating client processes.
* Throughput scenarios: body size 128 B and 1 KiB x server batch push on/off
  (``--no-batch-push`` = one entry per push, DLedger's default) x client batching
  (``client_batch`` bodies per request). Each scenario runs ``--seconds`` after a short warm-up
  with ``--clients`` concurrent synchronous clients (each waits for its ack before the next
  append), spread over ``--procs`` client processes. Reported: appends/s, latency p50/p99/p999
  (per request, ms), errors. Durability policy: group fsync on every member; an append is acked
  after a quorum has fsynced it. Each row also carries what the leader saw during the measured
  window (``leader``: requests, store write batches = proposals, requests per batch, group
  commits and their mean duration), the CPU seconds each member used (``server_cpu_s``, Linux)
  and the load average before and after (``loadavg``): the machine is shared, so read rates
  next to the load.
* ``--extra-clients N,M`` (default 128,256; empty = off) adds 1 KiB single-body rows with N, M clients:
  with one body per request, a closed loop of C clients cannot exceed C / latency, so this row
  shows the throughput when the group, not the client count, is the limit.
* Failover: a single synchronous client appends continuously; the leader gets SIGKILL; the
  time from the kill to the first acknowledged append is measured; the killed member is
  restarted and allowed to catch up before the next trial.
* Members authenticate (issue 12): a fresh random ``--auth-token`` for the run, so every frame
  carries its HMAC tag as in production; ``--insecure`` runs ``--allow-insecure`` instead
  (loopback, untagged frames) to measure what the tags cost. The secret reaches the spawned
  client processes through ``DLEDGER_BENCH_SECRET`` in their environment.
* ``--quick`` runs a few seconds in total; the default run stays under ~90 s.
* Every child process is killed on exit, even on errors.

Theory of operation
-------------------
The coordinator (this process) starts members, waits for a leader via ``status``, then starts
the client processes with ``multiprocessing`` (spawn); each client process runs one asyncio
loop with N coroutine clients sharing one :class:`DLedgerClient` connection (requests are
pipelined, one write per loop iteration) and sends back its latency samples.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dledger.rpc import framing as fr  # noqa: E402
from dledger.rpc.client import DLedgerClient  # noqa: E402
from tools.nodes import Child, kill_all, stop_all  # noqa: E402
from tools.procs import ShutdownTooSlow, free_ports  # noqa: E402


def _secret() -> Optional[str]:
    """The run's shared secret (None with ``--insecure``); set by ``main`` in the environment so
    spawned client processes see it too."""
    return os.environ.get("DLEDGER_BENCH_SECRET") or None


def _auth_args() -> list[str]:
    secret = _secret()
    return ["--auth-token", secret] if secret else ["--allow-insecure"]


class Cluster:
    def __init__(self, root: Path, extra: list[str], data_file_size: str = "256m") -> None:
        self.root = root
        self.ids = ["n0", "n1", "n2"]
        ports = free_ports(3)
        self.peers = {i: ("127.0.0.1", p) for i, p in zip(self.ids, ports)}
        self.peers_s = fr.format_peers(self.peers)
        self.extra = extra
        self.data_file_size = data_file_size
        self.procs: dict[str, Child] = {}

    def start(self, nid: str) -> None:
        argv = ["dledger.cli", "server", "--group", "bench", "--id", nid, "--peers", self.peers_s,
                "--store", str(self.root / nid), "--data-file-size", self.data_file_size, "--log-level", "WARNING",
                *_auth_args(), *self.extra]
        self.procs[nid] = Child(nid, argv, self.root / f"{nid}.log").start()

    def start_all(self) -> None:
        for nid in self.ids:
            self.start(nid)

    def kill(self, nid: str) -> None:
        p = self.procs.pop(nid, None)
        if p is not None:
            p.kill9()

    def stop_all(self) -> None:
        """SIGTERM to all, each gone within 10 s; one that is not is killed and named on stderr."""
        try:
            stop_all(self.procs.values(), bound=10.0)
        except ShutdownTooSlow as exc:
            print(f"warning: {exc}", file=sys.stderr)
        finally:
            kill_all(self.procs.values())
            self.procs.clear()

    def log_tails(self, lines: int = 15) -> str:
        out = []
        for nid in self.ids:
            path = self.root / f"{nid}.log"
            text = path.read_text(errors="replace").splitlines()[-lines:] if path.exists() else ["(no log)"]
            state = "running" if nid in self.procs and self.procs[nid].alive() else "not running"
            out.append(f"--- {nid} ({state})\n" + "\n".join(text))
        return "\n".join(out)

    async def leader(self, timeout: float = 20.0, exclude: Optional[str] = None) -> str:
        client = DLedgerClient(self.peers, "bench", secret=_secret(), timeout=1.0)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                for nid in self.ids:
                    if nid == exclude or nid not in self.procs:
                        continue
                    try:
                        st = await client.status(nid)
                    except Exception:
                        continue
                    if st["role"] == "LEADER":
                        return nid
                await asyncio.sleep(0.05)
        finally:
            await client.close()
        raise RuntimeError("no leader elected")

    async def wait_caught_up(self, timeout: float = 30.0) -> None:
        client = DLedgerClient(self.peers, "bench", secret=_secret(), timeout=1.0)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                try:
                    sts = [await client.status(n) for n in self.ids]
                    if len({s["committed_index"] for s in sts}) == 1 and len({s["end_index"] for s in sts}) == 1:
                        return
                except Exception:
                    pass
                await asyncio.sleep(0.1)
        finally:
            await client.close()
        raise RuntimeError(f"members did not catch up within {timeout} s; member logs:\n{self.log_tails()}")


# ------------------------------------------------------------------ client processes


def _client_proc(peers: dict, n_clients: int, size: int, batch: int, warmup: float, seconds: float, q) -> None:
    async def run() -> dict:
        client = DLedgerClient(peers, "bench", secret=_secret(), timeout=10.0)
        body = b"x" * size
        lat: list[float] = []
        errors: dict[str, int] = {}
        done = 0
        start = time.perf_counter()
        t_measure = start + warmup
        t_end = t_measure + seconds

        async def one() -> None:
            nonlocal done
            bodies = [body] * batch
            while True:
                t0 = time.perf_counter()
                if t0 >= t_end:
                    return
                try:
                    await client.append_batch(bodies)
                except Exception as exc:  # counted, the run goes on
                    key = type(exc).__name__ + ":" + str(getattr(exc, "code", ""))
                    errors[key] = errors.get(key, 0) + 1
                    await asyncio.sleep(0.01)
                    continue
                t1 = time.perf_counter()
                if t0 >= t_measure and t1 <= t_end:
                    lat.append(t1 - t0)
                    done += batch

        await asyncio.gather(*(one() for _ in range(n_clients)))
        await client.close()
        return {"lat": lat, "appends": done, "errors": errors}

    from dledger.cli import use_uvloop

    use_uvloop()  # same loop as the servers (DESIGN §6); DLEDGER_NO_UVLOOP=1 opts out
    q.put(asyncio.run(run()))


def _cpu_seconds(pid: int) -> Optional[float]:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


async def _leader_counters(cluster: "Cluster", leader: str) -> dict:
    client = DLedgerClient(cluster.peers, "bench", secret=_secret(), timeout=2.0)
    try:
        return (await client.status(leader))["counters"]
    finally:
        await client.close()


def measured_load(cluster: "Cluster", clients: int, procs: int, size: int, batch: int, warmup: float,
                  seconds: float) -> dict:
    """``run_load`` plus the leader's counters, members' CPU and load average around it."""
    leader = asyncio.run(cluster.leader())
    before = asyncio.run(_leader_counters(cluster, leader))
    cpu0 = {n: _cpu_seconds(p.pid or 0) for n, p in cluster.procs.items()}
    load0 = os.getloadavg()
    res = run_load(cluster.peers, clients, procs, size, batch, warmup, seconds)
    load1 = os.getloadavg()
    cpu1 = {n: _cpu_seconds(p.pid or 0) for n, p in cluster.procs.items()}
    after = asyncio.run(_leader_counters(cluster, leader))
    d = {k: after.get(k, 0) - before.get(k, 0) for k in ("append_requests", "append_batches", "appends", "flushes",
                                                          "flush_seconds")}
    res["leader"] = {
        "id": leader, "requests": d["append_requests"], "store_write_batches": d["append_batches"],
        "requests_per_batch": round(d["append_requests"] / d["append_batches"], 1) if d["append_batches"] else None,
        "group_commits": d["flushes"],
        "flush_ms_mean": round(d["flush_seconds"] / d["flushes"] * 1000, 3) if d["flushes"] else None,
    }
    res["server_cpu_s"] = {("leader" if n == leader else n): round(cpu1[n] - cpu0[n], 2)
                           for n in cpu0 if cpu0[n] is not None and cpu1.get(n) is not None}
    res["loadavg"] = [round(load0[0], 2), round(load1[0], 2)]
    return res


def run_load(peers: dict, clients: int, procs: int, size: int, batch: int, warmup: float, seconds: float) -> dict:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    per = [clients // procs + (1 if i < clients % procs else 0) for i in range(procs)]
    ps = [ctx.Process(target=_client_proc, args=(peers, n, size, batch, warmup, seconds, q), daemon=True) for n in per if n]
    for p in ps:
        p.start()
    results = []
    try:
        for _ in ps:
            results.append(q.get(timeout=warmup + seconds + 60))
    finally:
        for p in ps:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    lat = sorted(x for r in results for x in r["lat"])
    appends = sum(r["appends"] for r in results)
    errors: dict[str, int] = {}
    for r in results:
        for k, v in r["errors"].items():
            errors[k] = errors.get(k, 0) + v

    def pct(p: float) -> Optional[float]:
        return round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1000, 3) if lat else None

    return {
        "appends_per_s": round(appends / seconds, 1),
        "requests": len(lat),
        "latency_ms": {"p50": pct(0.50), "p99": pct(0.99), "p999": pct(0.999),
                       "mean": round(statistics.fmean(lat) * 1000, 3) if lat else None},
        "errors": errors,
    }


# ------------------------------------------------------------------ failover


async def failover_trial(cluster: Cluster) -> dict:
    leader = await cluster.leader()
    client = DLedgerClient(cluster.peers, "bench", secret=_secret(), timeout=0.5)
    try:
        for _ in range(20):  # warm: the client knows the leader and the path is hot
            await client.append(b"f" * 128)
        t_kill = time.perf_counter()
        cluster.kill(leader)
        attempts = 0
        while True:
            attempts += 1
            try:
                await client.append(b"f" * 128)
                break
            except Exception:
                if time.perf_counter() - t_kill > 30:
                    raise RuntimeError(f"no append acknowledged within 30 s of the kill of {leader}; "
                                       f"member logs:\n{cluster.log_tails()}")
        t_ack = time.perf_counter()
    finally:
        await client.close()
    new_leader = await cluster.leader(exclude=leader)
    cluster.start(leader)
    await cluster.wait_caught_up()
    return {"killed": leader, "new_leader": new_leader, "seconds": round(t_ack - t_kill, 3), "attempts": attempts}


# ------------------------------------------------------------------ main


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a few seconds in total")
    ap.add_argument("--seconds", type=float, default=None, help="measured seconds per scenario")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--procs", type=int, default=2, help="client processes")
    ap.add_argument("--trials", type=int, default=None, help="failover trials")
    ap.add_argument("--sizes", default="128,1024")
    ap.add_argument("--client-batch", type=int, default=16, help="bodies per request in the client-batching scenario")
    ap.add_argument("--extra-clients", default="128,256",
                    help="also run 1 KiB single-body with these many clients, comma-separated ('': off; not with --quick)")
    ap.add_argument("--no-failover", action="store_true")
    ap.add_argument("--insecure", action="store_true",
                    help="members run --allow-insecure (no secret, untagged frames) instead of a random --auth-token")
    ap.add_argument("--output", default=None, help="also write the JSON here")
    args = ap.parse_args(argv)
    os.environ["DLEDGER_BENCH_SECRET"] = "" if args.insecure else os.urandom(24).hex()
    seconds = args.seconds or (2.0 if args.quick else 6.0)
    warmup = 0.5 if args.quick else 1.0
    trials = args.trials or (2 if args.quick else 5)
    sizes = [int(s) for s in args.sizes.split(",")]

    scenarios = []
    for push in (["batch"] if args.quick else ["batch", "single"]):
        for size in sizes:
            scenarios.append({"size": size, "push": push, "client_batch": 1, "clients": args.clients})
        if push == "batch":
            scenarios.append({"size": 1024, "push": push, "client_batch": args.client_batch, "clients": args.clients})
            for n in ([int(x) for x in args.extra_clients.split(",") if x.strip()] if not args.quick else []):
                scenarios.append({"size": 1024, "push": push, "client_batch": 1, "clients": n})

    out: dict[str, Any] = {
        "benchmark": "dledger_replication", "nodes": 3, "host_cpus": os.cpu_count(),
        "clients": args.clients, "client_procs": args.procs, "seconds_per_scenario": seconds,
        "durability": "group fsync (fdatasync) on every member; ack after quorum fsync",
        "auth": "none (--allow-insecure)" if args.insecure else "shared secret; every frame HMAC-SHA256 tagged",
        "throughput": [], "failover": None,
    }
    root = Path(tempfile.mkdtemp(prefix="dledger-bench-"))
    try:
        for push in dict.fromkeys(s["push"] for s in scenarios):
            extra = [] if push == "batch" else ["--no-batch-push"]
            cluster = Cluster(root / f"push-{push}", extra)
            cluster.root.mkdir(parents=True)
            cluster.start_all()
            try:
                asyncio.run(cluster.leader())
                for sc in (s for s in scenarios if s["push"] == push):
                    res = measured_load(cluster, sc["clients"], args.procs, sc["size"], sc["client_batch"], warmup,
                                        seconds)
                    row = {**sc, **res}
                    out["throughput"].append(row)
                    print(json.dumps(row), file=sys.stderr)
                if not args.no_failover and push == "batch":
                    trials_out = []
                    for _ in range(trials):
                        t = asyncio.run(failover_trial(cluster))
                        trials_out.append(t)
                        print(json.dumps(t), file=sys.stderr)
                    secs = sorted(t["seconds"] for t in trials_out)
                    out["failover"] = {"trials": trials_out, "p50_s": secs[len(secs) // 2], "max_s": secs[-1]}
            finally:
                cluster.stop_all()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    text = json.dumps(out, indent=2)
    print(text)
    if args.output:
        Path(args.output).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
