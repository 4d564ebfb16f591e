"""Stopping brokers in every state (issue 21): seeded rounds of SIGTERM at random moments.

Rules
-----
* A round puts the cluster in one state (leader, follower, candidate, mid-election,
  mid-catch-up, slave sync retrying, HA reconnecting, a long pull held, puts in flight, disk
  full), sends SIGTERM to its target(s) at a moment drawn from the seeded RNG, and records for
  every signalled broker its exit code and the seconds from the signal to its exit. Waiting is
  bounded by ``SHUTDOWN_BOUND_S`` (``wait_exit``: past it the broker's stacks go to its log and
  the round fails with ``ShutdownTooSlow``).
* The workload (producers and consumers, ``Workload``) runs through every round, so puts are in
  flight whenever a leader or master is signalled. Every node that is down at the end of a round
  is restarted; a broker that was stopped by SIGTERM must report ``normal`` recovery at that
  start (the ``started as`` line), a node killed with SIGKILL to make a state is exempt.
* Targets and timings come from ``rng`` only; a state that cannot be reached in its bounded
  wait (an isolated node that never became a candidate) is recorded as such, not skipped.
* Faults are undone in ``finally`` (links healed, paused nodes resumed, filler files removed).

Theory of operation: :func:`run_stop_rounds` drives ``rounds`` rounds over ``STATES[mode]`` in
a seeded order inside the workload's event loop (blocking calls in worker threads), as
``run_faults`` does for nemeses; the caller then stops the cluster cleanly and runs the checker.
"""
from __future__ import annotations

import asyncio
import re
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Optional

from broker.remoting.client import RemotingClient

from .cluster import DLedgerCluster
from .nemesis import Ctx, cut, followers, leader
from .nemesis_disk import fill
from .workload import wait_for

IDLE_TOPIC = "TopicIdle"  # never written: a pull on it is held until its suspend timeout
FLAG_SUSPEND = 0x2
STARTED_LINE = re.compile(r"started as .*\((normal|abnormal) recovery")
UNCLEAN_LINE = re.compile(r"stopped, not cleanly: .*")


@dataclass
class Stop:
    round: int
    state: str
    node: str
    code: int
    seconds: float
    role: Optional[str] = None  # what the node was when signalled (DLedger role or broker role)
    normal_recovery: Optional[bool] = None  # at its next start (SIGTERM-stopped nodes only)
    unclean: Optional[str] = None  # the broker's own "stopped, not cleanly: ..." line, if it logged one


class Stopper:
    """What a state function uses: signal, wait within the bound, restart, check recovery."""

    def __init__(self, ctx: Ctx, round_no: int, state: str) -> None:
        self.ctx, self.c, self.rng = ctx, ctx.cluster, ctx.rng
        self.round, self.state = round_no, state
        self.stops: list[Stop] = []
        self.killed: set[str] = set()
        self._signalled: dict[str, tuple[float, Optional[str], int]] = {}

    async def pause_random(self, lo: float, hi: float) -> None:
        await asyncio.sleep(lo + (hi - lo) * self.rng.random())

    def role_of(self, n: str) -> Optional[str]:
        st = self.c.status(n, timeout=1.0)
        if st is None:
            return None
        return (st.get("dledger") or {}).get("role") or st.get("brokerRole")

    def sigterm(self, n: str, role: Optional[str] = None) -> None:
        proc = self.c.procs[n].proc
        assert proc is not None and proc.poll() is None, f"{n} is not running"
        self._signalled[n] = (time.monotonic(), role, _log_size(self.c.procs[n].log_path))
        proc.send_signal(signal.SIGTERM)

    async def wait_stopped(self, n: str) -> Stop:
        t0, role, mark = self._signalled[n]
        code = await asyncio.to_thread(self.c.procs[n].wait_exit)  # bounded: ShutdownTooSlow past it
        stop = Stop(self.round, self.state, n, code, round(time.monotonic() - t0, 3), role)
        unclean = _search(self.c.procs[n].log_path, mark, UNCLEAN_LINE)
        stop.unclean = unclean.group(0) if unclean is not None else None
        self.c.procs[n].stop()  # closes its log
        self.stops.append(stop)
        return stop

    async def stop(self, n: str) -> Stop:
        role = await asyncio.to_thread(self.role_of, n)
        self.sigterm(n, role)
        return await self.wait_stopped(n)

    async def kill9(self, n: str) -> None:
        await asyncio.to_thread(self.c.kill9, n)
        self.killed.add(n)

    async def restart_down(self) -> None:
        """Start every node that is down; a SIGTERM-stopped one must recover normally."""
        down = [n for n in self.c.names if not self.c.alive(n)]
        marks = {n: _log_size(self.c.procs[n].log_path) for n in down}
        if down:
            await asyncio.to_thread(self.c.start, *down, timeout=60.0)
        for stop in self.stops:
            if stop.node in marks and stop.node not in self.killed:
                line = _search(self.c.procs[stop.node].log_path, marks[stop.node], STARTED_LINE)
                stop.normal_recovery = line is not None and line.group(1) == "normal"


def _log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _search(path: Path, offset: int, pattern: "re.Pattern[str]") -> Optional["re.Match[str]"]:
    with open(path, "rb") as fh:
        fh.seek(offset)
        return pattern.search(fh.read().decode(errors="replace"))


State = Callable[[Stopper], Awaitable[None]]


# ---------------------------------------------------------------------------- DLedger group
async def dl_leader(s: Stopper) -> None:
    """The leader, with the workload's puts in flight."""
    ld = await leader(s.ctx)
    await s.pause_random(0.0, 0.4)
    await s.stop(ld)


async def dl_follower(s: Stopper) -> None:
    f = s.rng.choice(await followers(s.ctx))
    await s.pause_random(0.0, 0.4)
    await s.stop(f)


async def dl_candidate(s: Stopper) -> None:
    """A follower cut off from both peers campaigns (PRE_CANDIDATE / CANDIDATE), then SIGTERM."""
    f = s.rng.choice(await followers(s.ctx))
    try:
        for p in s.c.names:
            if p != f:
                cut(s.ctx, f, p)
                cut(s.ctx, p, f)
        await wait_for(lambda: "CANDIDATE" in (s.role_of(f) or ""), 10.0)
        await s.pause_random(0.0, 0.5)
        await s.stop(f)
    finally:
        s.c.hub.heal_all()


async def dl_mid_election(s: Stopper) -> None:
    """SIGTERM the leader, then a follower while the group elects a new one."""
    ld = await leader(s.ctx)
    f = s.rng.choice([n for n in s.c.names if n != ld])
    s.sigterm(ld, "LEADER")
    await s.pause_random(0.0, 0.6)
    s.sigterm(f, await asyncio.to_thread(s.role_of, f))
    await s.wait_stopped(ld)
    await s.wait_stopped(f)


async def dl_mid_catch_up(s: Stopper) -> None:
    """A follower that missed entries (its inbound link cut while the workload wrote) is healed
    and signalled while the leader streams the missed entries to it."""
    ld = await leader(s.ctx)
    f = s.rng.choice([n for n in s.c.names if n != ld])
    try:
        cut(s.ctx, ld, f)
        await s.pause_random(1.0, 2.0)
    finally:
        s.c.hub.heal_all()
    await s.pause_random(0.0, 0.2)
    await s.stop(f)


async def dl_slave_sync_retrying(s: Stopper) -> None:
    """kill -9 of the leader: a follower's metadata sync fails against it; SIGTERM that follower."""
    ld = await leader(s.ctx)
    f = s.rng.choice([n for n in s.c.names if n != ld])
    await s.kill9(ld)
    await s.pause_random(0.05, 0.8)
    await s.stop(f)


async def long_pull(s: Stopper) -> None:
    """A pull held by long polling (an idle topic, suspend 20 s) on the master, then SIGTERM."""
    target = await leader(s.ctx)
    host, port = s.c.address(target).rsplit(":", 1)
    client = await RemotingClient.connect(host, int(port))
    try:
        pull = asyncio.ensure_future(client.request(11, {
            "consumerGroup": "GStopStates", "topic": IDLE_TOPIC, "queueId": 0, "queueOffset": 0, "maxMsgNums": 32,
            "sysFlag": FLAG_SUSPEND, "commitOffset": 0, "suspendTimeoutMillis": 20_000, "subscription": "*",
            "subVersion": 0}, timeout=30.0))
        await s.pause_random(0.2, 0.6)
        assert not pull.done(), f"the pull on {IDLE_TOPIC} was not held: {pull.result() if not pull.exception() else pull.exception()}"
        await s.stop(target)
        await asyncio.wait({pull}, timeout=5.0)
        assert pull.done(), "the held pull was neither answered nor cut when its broker exited"
        if not pull.cancelled():
            pull.exception()  # answered, or cut with the connection: either is fine (retrieved, not raised)
    finally:
        await client.close()


# ---------------------------------------------------------------------------- classic pair
async def cl_master(s: Stopper) -> None:
    await s.pause_random(0.0, 0.4)
    await s.stop("m")


async def cl_slave(s: Stopper) -> None:
    await s.pause_random(0.0, 0.4)
    await s.stop("s")


async def _ha_link_cut_then_stop(s: Stopper, node: str, lo: float, hi: float) -> None:
    try:
        cut(s.ctx, "s", "m")
        await s.pause_random(lo, hi)
        await s.stop(node)
    finally:
        s.c.hub.heal_all()


async def cl_ha_reconnecting(s: Stopper) -> None:
    """The slave's HA link is cut: its HAClient times out and reconnects; SIGTERM the slave."""
    await _ha_link_cut_then_stop(s, "s", 0.2, 2.0)


async def cl_slave_sync_retrying(s: Stopper) -> None:
    """The master is frozen (SIGSTOP): the slave's metadata sync and HA wait on it; SIGTERM the slave."""
    try:
        s.c.pause("m")
        await s.pause_random(0.2, 1.5)
        await s.stop("s")
    finally:
        s.c.resume("m")


async def cl_puts_waiting_for_slave(s: Stopper) -> None:
    """SYNC_MASTER puts in flight, waiting for a slave ack that cannot come (HA link cut)."""
    await _ha_link_cut_then_stop(s, "m", 0.0, 0.8)


async def cl_disk_full(s: Stopper) -> None:
    """The master's store filesystem (a size-limited tmpfs) is full, then SIGTERM."""
    if s.ctx.tmpfs != "m":
        raise AssertionError("disk-full needs the master's store on a tmpfs (mount not permitted here?)")
    filler = s.c.roots["m"] / "zz-filler"
    try:
        await asyncio.to_thread(fill, filler)
        await s.pause_random(0.2, 1.0)
        await s.stop("m")
    finally:
        filler.unlink(missing_ok=True)


# states in which a stop cannot be clean: the broker must say so (exit 5, "stopped, not cleanly:
# <why>"), and its next start is an abnormal recovery that keeps every acknowledged message
MAY_BE_UNCLEAN = {"disk full": "No space left on device"}

STATES: dict[str, dict[str, State]] = {
    "dledger": {"leader (puts in flight)": dl_leader, "follower": dl_follower, "candidate": dl_candidate,
                "mid-election": dl_mid_election, "mid-catch-up": dl_mid_catch_up,
                "slave sync retrying": dl_slave_sync_retrying, "long pull held": long_pull},
    "classic": {"master (puts in flight)": cl_master, "slave": cl_slave, "HA reconnecting": cl_ha_reconnecting,
                "slave sync retrying": cl_slave_sync_retrying, "puts waiting for the slave": cl_puts_waiting_for_slave,
                "long pull held": long_pull, "disk full": cl_disk_full},
}


async def run_stop_rounds(ctx: Ctx, mode: str, rounds: int) -> list[dict[str, Any]]:
    """``rounds`` rounds over the mode's states (each state in turn, order shuffled per cycle)."""
    names = list(STATES[mode])
    order: list[str] = []
    while len(order) < rounds:
        cycle = list(names)
        ctx.rng.shuffle(cycle)
        order += cycle
    out: list[dict[str, Any]] = []
    for i, state in enumerate(order[:rounds]):
        s = Stopper(ctx, i, state)
        ctx.history.nemesis(f"stop:{state}", "start", round=i)
        try:
            await STATES[mode][state](s)
        finally:
            await s.restart_down()
            ctx.history.nemesis(f"stop:{state}", "heal")
            ctx.history.nemesis(f"stop:{state}", "end")
        out += [asdict(x) for x in s.stops]
        if isinstance(ctx.cluster, DLedgerCluster):
            await leader(ctx)  # the next round starts from a group with a master
    return out
