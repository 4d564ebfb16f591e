"""Nemeses: bounded, self-healing faults applied to a running cluster while the workload runs.

Rules
-----
* A nemesis is an async function ``(ctx) -> dict`` registered in ``NEMESES`` under its name.
  It records ``start`` when the fault begins, ``heal`` when it is undone and ``end`` once the
  cluster has recovered (a write acknowledged after the heal, bounded by ``ctx.recover_s``), and
  returns details for the report (which node, what was found). Every fault is bounded by
  ``ctx.fault_s`` and undone in a ``finally`` so an exception never leaves a node stopped,
  paused, partitioned or on a full disk.
* Targets (leader, follower, halves, ...) come from ``ctx.rng`` (seeded) and the cluster's state
  at that moment; network nemeses act on the proxy links only.
* Storage nemeses tamper with files only while the node is stopped: torn writes zero the last
  bytes of the last data file's written region of a node whose tail is not acknowledged (an old
  leader cut off from the quorum), bit flips change one bit inside the committed region of a
  closed data file the recovery scan reads (the node must refuse to start, naming file and
  offset; the nemesis then restores the byte), a full disk fills the node's size-limited tmpfs.
* Blocking calls (process start/stop, status polling) run in worker threads so the workload's
  event loop keeps going.
"""
from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Optional


from .cluster import Cluster, DLedgerCluster
from .history import History
from .proxy import Fault
from .workload import Workload, wait_for


@dataclass
class Ctx:
    cluster: Cluster
    history: History
    workload: Workload
    rng: random.Random
    fault_s: float = 3.0
    recover_s: float = 30.0
    settle_s: float = 1.0
    tmpfs: Optional[str] = None  # node whose store root is on a size-limited tmpfs
    results: list[dict[str, Any]] = field(default_factory=list)


Nemesis = Callable[[Ctx], Awaitable[dict[str, Any]]]
NEMESES: dict[str, Nemesis] = {}
DLEDGER_ONLY = set()


def nemesis(name: str, dledger_only: bool = False) -> Callable[[Nemesis], Nemesis]:
    def deco(fn: Nemesis) -> Nemesis:
        NEMESES[name] = fn
        if dledger_only:
            DLEDGER_ONLY.add(name)
        return fn
    return deco


# ---------------------------------------------------------------------------- helpers
async def leader(ctx: Ctx, timeout: float = 30.0) -> str:
    n = await wait_for(ctx.cluster.leader, timeout)
    if not n:
        raise AssertionError(f"no single master within {timeout}s")
    return n


async def followers(ctx: Ctx) -> list[str]:
    ld = await leader(ctx)
    return [n for n in ctx.cluster.names if n != ld]


async def restart(ctx: Ctx, n: str, timeout: float = 60.0) -> None:
    await asyncio.to_thread(ctx.cluster.start, n, timeout=timeout)


async def recovered(ctx: Ctx, name: str, t_heal: float) -> None:
    """``end`` once a send invoked after the heal is acknowledged (bounded), then settle."""
    h = ctx.history
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ctx.recover_s
    ok_ops = set()
    while loop.time() < deadline:
        invoked = {e["op"] for e in h.events if e["type"] == "invoke" and e["t"] >= t_heal}
        ok_ops = {e["op"] for e in h.events if e["type"] == "ok"} & invoked
        if ok_ops:
            break
        await asyncio.sleep(0.05)
    if not ok_ops:
        h.note("not-recovered", nemesis=name, after_s=ctx.recover_s)
    await asyncio.sleep(ctx.settle_s)
    h.nemesis(name, "end")


def cut(ctx: Ctx, a: str, b: str, fault: Fault = Fault(blackhole=True), both: bool = True) -> None:
    for link in ctx.cluster.links_from_to(a, b):
        ctx.cluster.hub.set_fault(link, "fwd", fault)
        if both:
            ctx.cluster.hub.set_fault(link, "rev", fault)


async def network(ctx: Ctx, name: str, pairs: list[tuple[str, str]], fault: Fault,
                  raw: list[tuple[str, str]] = (), **detail: Any) -> dict[str, Any]:
    """Apply ``fault`` to the links between ``pairs`` (both directions for a blackhole) and to the
    raw ``(link, direction)`` list for ``fault_s``, heal everything, wait for recovery."""
    ctx.history.nemesis(name, "start", links=[f"{a}->{b}" for a, b in pairs] + [f"{l}:{d}" for l, d in raw], **detail)
    try:
        for a, b in pairs:
            cut(ctx, a, b, fault, both=fault.blackhole)
        for link, direction in raw:
            ctx.cluster.hub.set_fault(link, direction, fault)
        await asyncio.sleep(ctx.fault_s)
    finally:
        ctx.cluster.hub.heal_all()
        t = ctx.history.now()
        ctx.history.nemesis(name, "heal")
    await recovered(ctx, name, t)
    return {"links": [f"{a}->{b}" for a, b in pairs], **detail}


def both_ways(groups: list[list[str]]) -> list[tuple[str, str]]:
    """Every ordered pair of nodes in different groups."""
    out = []
    for i, g in enumerate(groups):
        for h in groups[:i] + groups[i + 1:]:
            out += [(a, b) for a in g for b in h]
    return out


# ---------------------------------------------------------------------------- processes
async def _kill_restart(ctx: Ctx, name: str, targets: list[str]) -> dict[str, Any]:
    ctx.history.nemesis(name, "start", nodes=targets)
    try:
        for n in targets:
            await asyncio.to_thread(ctx.cluster.kill9, n)
        await asyncio.sleep(ctx.fault_s)
    finally:
        for n in targets:
            if not ctx.cluster.alive(n):
                await restart(ctx, n)
        t = ctx.history.now()
        ctx.history.nemesis(name, "heal")
    await recovered(ctx, name, t)
    return {"nodes": targets}


@nemesis("kill-leader")
async def kill_leader(ctx: Ctx) -> dict[str, Any]:
    return await _kill_restart(ctx, "kill-leader", [await leader(ctx)])


@nemesis("kill-follower")
async def kill_follower(ctx: Ctx) -> dict[str, Any]:
    return await _kill_restart(ctx, "kill-follower", [ctx.rng.choice(await followers(ctx))])


@nemesis("kill-minority", dledger_only=True)
async def kill_minority(ctx: Ctx) -> dict[str, Any]:
    names = ctx.cluster.names
    return await _kill_restart(ctx, "kill-minority", ctx.rng.sample(names, (len(names) - 1) // 2))


@nemesis("kill-all")
async def kill_all(ctx: Ctx) -> dict[str, Any]:
    return await _kill_restart(ctx, "kill-all", list(ctx.cluster.names))


@nemesis("pause-leader")
async def pause_leader(ctx: Ctx) -> dict[str, Any]:
    """SIGSTOP the leader for ``fault_s`` (longer than the election timeout), then SIGCONT."""
    return await _pause(ctx, "pause-leader", await leader(ctx))


@nemesis("pause-follower")
async def pause_follower(ctx: Ctx) -> dict[str, Any]:
    return await _pause(ctx, "pause-follower", ctx.rng.choice(await followers(ctx)))


async def _pause(ctx: Ctx, name: str, n: str) -> dict[str, Any]:
    """SIGSTOP node ``n`` for ``fault_s``, then SIGCONT, and wait until the cluster has recovered."""
    ctx.history.nemesis(name, "start", node=n)
    try:
        ctx.cluster.pause(n)
        await asyncio.sleep(ctx.fault_s)
    finally:
        ctx.cluster.resume(n)
        t = ctx.history.now()
        ctx.history.nemesis(name, "heal")
    await recovered(ctx, name, t)
    return {"node": n}


# ---------------------------------------------------------------------------- network
@nemesis("partition-leader")
async def partition_leader(ctx: Ctx) -> dict[str, Any]:
    ld = await leader(ctx)
    rest = [n for n in ctx.cluster.names if n != ld]
    return await network(ctx, "partition-leader", both_ways([[ld], rest]), Fault(blackhole=True), isolated=ld)


@nemesis("partition-halves", dledger_only=True)
async def partition_halves(ctx: Ctx) -> dict[str, Any]:
    names = list(ctx.cluster.names)
    ctx.rng.shuffle(names)
    small, big = names[: len(names) // 2], names[len(names) // 2:]
    return await network(ctx, "partition-halves", both_ways([small, big]), Fault(blackhole=True), halves=[small, big])


@nemesis("partition-ring", dledger_only=True)
async def partition_ring(ctx: Ctx) -> dict[str, Any]:
    """Majorities ring on three nodes, made one-way: n_i hears only n_(i-1), so every node sees a
    different majority (itself + one peer) and no two nodes agree on who they hear."""
    names = list(ctx.cluster.names)
    ctx.rng.shuffle(names)
    keep = {(names[i], names[(i + 1) % len(names)]) for i in range(len(names))}
    pairs = [(a, b) for a in names for b in names if a != b and (a, b) not in keep]
    return await network(ctx, "partition-ring", pairs, Fault(blackhole=True), ring=names)


@nemesis("partition-bridge", dledger_only=True)
async def partition_bridge(ctx: Ctx) -> dict[str, Any]:
    """Two sides that cannot talk, joined by one bridge node that sees both."""
    names = list(ctx.cluster.names)
    ctx.rng.shuffle(names)
    bridge, a, b = names[0], names[1], names[2]
    return await network(ctx, "partition-bridge", [(a, b), (b, a)], Fault(blackhole=True), bridge=bridge)


@nemesis("oneway-loss")
async def oneway_loss(ctx: Ctx) -> dict[str, Any]:
    """Half the frames (DLedger) or connections (classic HA) from the leader to one follower are lost."""
    ld = await leader(ctx)
    f = ctx.rng.choice([n for n in ctx.cluster.names if n != ld])
    if isinstance(ctx.cluster, DLedgerCluster):
        return await network(ctx, "oneway-loss", [(ld, f)], Fault(loss=0.5), direction=f"{ld}->{f}")
    return await network(ctx, "oneway-loss", [], Fault(loss=0.5), raw=[("s->m", "rev")], direction="m->s")


@nemesis("oneway-cut")
async def oneway_cut(ctx: Ctx) -> dict[str, Any]:
    """Asymmetric partition: a follower's messages never reach the leader (it still hears it)."""
    ld = await leader(ctx)
    f = ctx.rng.choice([n for n in ctx.cluster.names if n != ld])
    if isinstance(ctx.cluster, DLedgerCluster):
        link = ctx.cluster.links_from_to(f, ld)[0]
        return await network(ctx, "oneway-cut", [], Fault(blackhole=True), raw=[(link, "fwd")], direction=f"{f}->{ld}")
    return await network(ctx, "oneway-cut", [], Fault(blackhole=True), raw=[("s->m", "fwd")], direction="s->m (acks)")


@nemesis("delay")
async def delay(ctx: Ctx) -> dict[str, Any]:
    names = ctx.cluster.names
    pairs = [(a, b) for a in names for b in names if a != b]
    return await network(ctx, "delay", pairs, Fault(delay_ms=120, jitter_ms=120))
