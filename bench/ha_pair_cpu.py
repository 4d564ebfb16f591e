"""Classic HA pair, CPU per message of each side: a SYNC_MASTER store + HAService in this process,
a SLAVE store + HAClient in a child process, real TCP on 127.0.0.1 (issue 22, task H6).

Why: ``bench.java_producer`` measures the whole broker under a Java client, on a machine shared
with other sessions, so its throughput (and, through the batch sizes, its CPU per message) moves
with the load. This one keeps the batch shape fixed (``--producers`` coroutines each putting
``--batch`` messages and waiting for the slave's ack, as the put coalescer's merged puts do) and
reports CPU time, which the load changes far less than wall time:

- ``master_us_per_msg``: this process's user+system CPU per message (store append, dispatch,
  flush, HAService: the write loop, the ack path, the waiters);
- ``slave_us_per_msg``: the child's CPU per message (HAClient: read, check, append, report;
  its store's dispatch and flush);
- ``base_master_us_per_msg`` (``--baseline``): the same puts on an ASYNC_MASTER with no slave,
  so ``master - base`` is what replication costs the master;
- ``frames`` / ``msgs_per_frame``: how the master cut the stream.

Usage: ``python -m bench.ha_pair_cpu [--seconds 10] [--producers 3] [--batch 12] [--auth token|open]
[--role SYNC_MASTER|ASYNC_MASTER] [--switch-interval S] [--baseline] [--profile DIR]``

``--switch-interval 0.0005`` shows the GIL hand-off: a SYNC_MASTER put's ack wakes the loop
thread, which then waits for the GIL while the ReputMessageService thread dispatches (up to the
5 ms default switch interval); measured here 3.3-4.2k -> 4.6-5.9k msgs/s at the same CPU/msg. (``--profile``: py-spy both processes into DIR). Run, not asserted.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from broker.ha.client import HAClient
from broker.ha.service import HAService
from broker.ha.settings import HASettings
from broker.store.message import MessageExt
from broker.store.message_store import DefaultMessageStore, open_store

TOKEN = "bench-ha-secret-0123456789"
FILE_SIZE = 64 << 20


def _cpu_s(pid: int | None = None, system: bool = False) -> float:
    """User + system CPU seconds of this process (or ``pid``); ``system``: the system part only."""
    if pid is None:
        t = os.times()
        return t.system if system else t.user + t.system
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[12]) if system else int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def _switches(pid: int) -> int:
    """Context switches (voluntary + involuntary) of every thread of ``pid`` so far."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            for line in (task / "status").read_text().splitlines():
                if line.endswith("ctxt_switches:") or "ctxt_switches:" in line:
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


def _thread_names() -> dict[str, str]:
    return {str(t.native_id): t.name for t in threading.enumerate()}


def _threads_cpu(pid: int, names: dict[str, str]) -> dict[str, float]:
    """CPU seconds per thread name (``/proc/PID/task/*/stat``; ``names``: native id -> Python name)."""
    out: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        name = names.get(task.name, "other")
        fields = stat.rsplit(")", 1)[1].split()
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def _per_msg(before: dict[str, float], after: dict[str, float], n: int) -> dict[str, float]:
    rows = {k: round((v - before.get(k, 0.0)) * 1e6 / n, 1) for k, v in after.items()}
    return {k: v for k, v in sorted(rows.items(), key=lambda kv: -kv[1]) if v > 0}


def _settings(role: str, token: str | None) -> HASettings:
    return HASettings(ha_listen_port=0, broker_role=role, mapped_file_size_commit_log=FILE_SIZE,
                      ha_auth_token=token, broker_name="bench")


def _store(root: Path, role: str) -> DefaultMessageStore:
    return open_store(root, mapped_file_size_commit_log=FILE_SIZE, broker_role=role)


async def _slave_main(master: str, root: Path, token: str | None) -> None:
    store = _store(root, "SLAVE")
    client = HAClient(store.commitlog, master, _settings("SLAVE", token), on_append=lambda _o: store.wake_dispatch())
    await client.start()
    (root.parent / "slave-threads.json").write_text(json.dumps(_thread_names()))
    try:
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent closes stdin
    finally:
        await client.shutdown()
        store.shutdown()


def _msgs(n: int, body: bytes, seq: int) -> list[MessageExt]:
    now = int(time.time() * 1000)
    return [MessageExt(topic="BenchHaPair", body=body, queue_id=(seq + i) % 4,
                       properties={"KEYS": f"k{seq + i}", "UNIQ_KEY": f"U{seq + i:020d}"}, born_timestamp=now)
            for i in range(n)]


async def _drive(store: DefaultMessageStore, seconds: float, producers: int, batch: int, body: bytes) -> int:
    done = 0
    stop = time.monotonic() + seconds

    async def producer(p: int) -> None:
        nonlocal done
        seq = p << 32
        while time.monotonic() < stop:
            res = await store.put_messages_async(_msgs(batch, body, seq))
            assert res.status.name == "PUT_OK", res.status
            seq += batch
            done += batch

    await asyncio.gather(*(producer(p) for p in range(producers)))
    return done


def _spy(pid: int, out: Path, seconds: float, native: bool) -> subprocess.Popen[bytes]:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return subprocess.Popen([spy, "record", "-p", str(pid), "-d", str(int(seconds)), "-r", "97", "-f", "raw",
                             "-o", str(out), *(["--native", "--threads", "--idle"] if native else ["--nonblocking", "--threads"])],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    token = TOKEN if args.auth == "token" else None
    body = os.urandom(args.body)
    out: dict[str, Any] = {"benchmark": "ha_pair_cpu", "role": args.role, "auth": args.auth,
                           "switch_interval_s": sys.getswitchinterval(), "producers": args.producers,
                           "batch": args.batch, "body": args.body, "seconds": args.seconds}
    with tempfile.TemporaryDirectory(prefix="ha-pair-") as tmp:
        root = Path(tmp)
        if args.baseline:
            base = _store(root / "base", "ASYNC_MASTER")
            await _drive(base, 1.0, args.producers, args.batch, body)  # warm-up
            c0, t0 = _cpu_s(), _threads_cpu(os.getpid(), _thread_names())
            n = await _drive(base, args.seconds, args.producers, args.batch, body)
            base.reput.wait_dispatched() if base.reput is not None else None  # count the dispatch of these puts too
            out["base_master_us_per_msg"] = round((_cpu_s() - c0) * 1e6 / n, 1)
            out["base_master_threads_us_per_msg"] = _per_msg(t0, _threads_cpu(os.getpid(), _thread_names()), n)
            base.shutdown()
        master = _store(root / "master", args.role)
        service = HAService(master.commitlog, _settings(args.role, token), host="127.0.0.1")
        await service.start()
        child = subprocess.Popen([sys.executable, "-m", "bench.ha_pair_cpu", "--slave-of",
                                  f"127.0.0.1:{service.listen_port}", "--slave-dir", str(root / "slave"),
                                  "--auth", args.auth, "--switch-interval", str(args.switch_interval)],
                                 stdin=subprocess.PIPE, cwd=str(Path(__file__).parents[1]))
        try:
            deadline = time.monotonic() + 30
            while service.connection_count == 0:
                if time.monotonic() > deadline:
                    raise TimeoutError("slave did not connect")
                await asyncio.sleep(0.01)
            await _drive(master, 1.0, args.producers, args.batch, body)  # warm-up
            frames0 = sum(c.frames_sent for c in service.connections)
            spies = [_spy(pid, args.profile / f"{name}.txt", args.seconds, args.native)
                     for name, pid in (("master", os.getpid()), ("slave", child.pid))] if args.profile else []
            c0, s0, t0 = _cpu_s(), _cpu_s(child.pid), time.monotonic()
            names_m = _thread_names()
            names_s = json.loads((root / "slave-threads.json").read_text())
            t_m0, t_s0 = _threads_cpu(os.getpid(), names_m), _threads_cpu(child.pid, names_s)
            k0 = (_cpu_s(system=True), _cpu_s(child.pid, system=True), _switches(os.getpid()), _switches(child.pid))
            n = await _drive(master, args.seconds, args.producers, args.batch, body)
            c1, s1, wall = _cpu_s(), _cpu_s(child.pid), time.monotonic() - t0
            t_m1, t_s1 = _threads_cpu(os.getpid(), names_m), _threads_cpu(child.pid, names_s)
            k1 = (_cpu_s(system=True), _cpu_s(child.pid, system=True), _switches(os.getpid()), _switches(child.pid))
            frames = sum(c.frames_sent for c in service.connections) - frames0
            lag = master.commitlog.max_offset - service.push2slave_max_offset
            for spy in spies:
                spy.wait(60)
            out.update(messages=n, msgs_per_s=round(n / wall), master_us_per_msg=round((c1 - c0) * 1e6 / n, 1),
                       slave_us_per_msg=round((s1 - s0) * 1e6 / n, 1), frames=frames,
                       msgs_per_frame=round(n / max(frames, 1), 1), slave_lag_bytes_at_end=lag,
                       master_system_us_per_msg=round((k1[0] - k0[0]) * 1e6 / n, 1),
                       slave_system_us_per_msg=round((k1[1] - k0[1]) * 1e6 / n, 1),
                       master_switches_per_frame=round((k1[2] - k0[2]) / max(frames, 1), 1),
                       slave_switches_per_frame=round((k1[3] - k0[3]) / max(frames, 1), 1),
                       master_threads_us_per_msg=_per_msg(t_m0, t_m1, n), slave_threads_us_per_msg=_per_msg(t_s0, t_s1, n))
            if "base_master_us_per_msg" in out:
                out["ha_master_us_per_msg"] = round(out["master_us_per_msg"] - out["base_master_us_per_msg"], 1)
        finally:
            assert child.stdin is not None
            child.stdin.close()  # the slave's stop signal
            try:
                child.wait(30)
            finally:
                if child.poll() is None:  # a slave that did not stop is not left running
                    child.kill()
                    child.wait(10)
            await service.shutdown()
            master.shutdown()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ha_pair_cpu", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--producers", type=int, default=3)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--body", type=int, default=1024)
    ap.add_argument("--auth", choices=("token", "open"), default="token")
    ap.add_argument("--role", choices=("SYNC_MASTER", "ASYNC_MASTER"), default="SYNC_MASTER")
    ap.add_argument("--baseline", action="store_true", help="also the same puts on an ASYNC_MASTER without a slave")
    ap.add_argument("--profile", type=Path, help="py-spy master and slave into this folder")
    ap.add_argument("--native", action="store_true", help="with --profile: py-spy --native --threads --idle "
                    "(C frames too; the leaf tells a futex or epoll wait from work; pauses the processes)")
    ap.add_argument("--switch-interval", type=float, default=0.0, metavar="S",
                    help="sys.setswitchinterval(S) in both processes (0: Python's default, 5 ms)")
    ap.add_argument("--slave-of", help=argparse.SUPPRESS)
    ap.add_argument("--slave-dir", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.switch_interval > 0:
        sys.setswitchinterval(args.switch_interval)
    try:  # the broker's loop (broker/cli/mqbroker.py)
        import uvloop  # noqa: WPS433
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:  # pragma: no cover
        pass
    if args.slave_of:
        asyncio.run(_slave_main(args.slave_of, args.slave_dir, TOKEN if args.auth == "token" else None))
        return 0
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    print(json.dumps(asyncio.run(run(args))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
