"""Randomised fault simulation over :class:`Cluster`: one seed => one reproducible history.

Theory of operation
-------------------
A discrete-event loop over two heaps: the cluster's network (messages with random delays, so
they are reordered; some dropped, some duplicated) and a schedule of node events -- each live
node ticks every ``TICK`` time units (with its own phase), flushes its log at random intervals
(so followers ack late and crashes lose unsynced tails), clients propose batches of 1-3
entries to a random node and follow its NOT_LEADER redirect once, and a fault event every few
ticks crashes or restarts a node, isolates one, splits the group in two, or heals.
Each processed event is one *step*; the checker runs after every step.  At the end the
faults stop (heal, restart all) and the run must converge: one leader, a fresh proposal
committed everywhere, every acknowledged entry on every node.
"""
from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field
from typing import Any

from dledger.core import Code
from tests.sim.checker import InvariantViolation
from tests.sim.cluster import TICK, Cluster


@dataclass
class SimResult:
    seed: int
    steps: int
    seconds: float
    trace_hash: str
    codes: dict[str, int] = field(default_factory=dict)
    acked: int = 0
    committed: int = 0
    max_term: int = 0

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds if self.seconds else 0.0


class SimFailure(AssertionError):
    """Liveness failure or core assertion, with seed and trace tail in the message."""


class Simulation:
    def __init__(self, seed: int, n: int = 3, *, drop: float = 0.05, dup: float = 0.03,
                 delay: tuple[int, int] = (3, 90), fault_every: tuple[int, int] = (4, 25),
                 propose_every: tuple[int, int] = (10, 80), faults: bool = True,
                 compact: bool = False, **cfg_kw: Any) -> None:
        self.c = Cluster(n, seed, delay=delay, drop=drop, dup=dup, auto_flush=False, **cfg_kw)
        self.rng = self.c.rng
        self.events: list[tuple[int, int, str, str]] = []
        self.seq = 0
        self.fault_every = fault_every
        self.propose_every = propose_every
        self.faults = faults
        self.compact = compact   # retention faults: committed prefixes leave logs (begin moves)
        self.codes: dict[str, int] = {}
        for i in self.c.ids:
            self._at(self.rng.randint(0, TICK - 1), "tick", i)
            self._at(self.rng.randint(0, 2 * TICK), "flush", i)
        self._at(self.rng.randint(*propose_every), "propose", "")
        if faults:
            self._at(TICK * self.rng.randint(*fault_every), "fault", "")

    def _at(self, t: int, kind: str, arg: str) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, arg))

    # ------------------------------------------------------------------ events
    def step(self) -> None:
        c = self.c
        if c.net and (not self.events or c.net[0][0] <= self.events[0][0]):
            c.deliver_one()
            return
        t, _, kind, arg = heapq.heappop(self.events)
        c.now = max(c.now, t)
        c.steps += 1
        getattr(self, "_ev_" + kind)(arg)

    def _ev_tick(self, nid: str) -> None:
        self._at(self.c.now + TICK, "tick", nid)
        self.c.tick(nid)

    def _ev_flush(self, nid: str) -> None:
        self._at(self.c.now + self.rng.randint(10, 2 * TICK), "flush", nid)
        self.c.flush(nid)

    def _ev_propose(self, _: str) -> None:
        c = self.c
        self._at(c.now + self.rng.randint(*self.propose_every), "propose", "")
        alive = [i for i in c.ids if c.nodes[i].alive]
        if not alive:
            return
        nid = self.rng.choice(alive)
        d = c.propose(nid, self.rng.randint(1, 3))
        if d.code is Code.NOT_LEADER and d.leader_id and c.nodes[d.leader_id].alive:
            d = c.propose(d.leader_id, self.rng.randint(1, 3))
        self.codes[d.code.name] = self.codes.get(d.code.name, 0) + 1

    def _ev_fault(self, _: str) -> None:
        c, rng = self.c, self.rng
        self._at(c.now + TICK * rng.randint(*self.fault_every), "fault", "")
        down = [i for i in c.ids if not c.nodes[i].alive]
        up = [i for i in c.ids if c.nodes[i].alive]
        if self.compact and up and rng.random() < 0.3:
            nid = rng.choice(up)
            log = c.nodes[nid].log
            upto = min(c.core(nid).committed_index, log.durable - 2) - rng.randint(0, 3)
            if upto >= log.begin:
                c.compact(nid, upto)
            return
        r = rng.random()
        if r < 0.25 and len(down) < len(c.ids) - 1:
            victim = rng.choice(up)
            if rng.random() < 0.5 and c.leader() is not None:
                victim = c.leader()  # type: ignore[assignment]
            c.crash(victim)
        elif r < 0.5 and down:
            nid = rng.choice(down)
            c.restart(nid)
            self._at(c.now + rng.randint(0, TICK - 1), "tick", nid)
        elif r < 0.62:
            c.heal()
            c.isolate(rng.choice(c.ids))
        elif r < 0.72:
            c.heal()
            ids = list(c.ids)
            rng.shuffle(ids)
            c.partition(ids[: rng.randint(1, len(ids) // 2)])
        else:
            c.heal()

    # ------------------------------------------------------------------ run
    def run(self, steps: int) -> SimResult:
        t0 = time.perf_counter()
        c = self.c
        try:
            while c.steps < steps:
                self.step()
            self.converge()
        except InvariantViolation:
            raise
        except AssertionError as e:
            raise SimFailure(f"{e}\n{c.describe_failure()}") from e
        dt = time.perf_counter() - t0
        terms = [n.core.term for n in c.nodes.values() if n.core is not None]
        return SimResult(c.seed, c.steps, dt, c.trace_hash, dict(self.codes), c.checker.acked,
                         len(c.checker.committed), max(terms))

    def converge(self, max_ticks: int = 300) -> None:
        """Stop faults, heal and restart everything; the group must make progress again."""
        c = self.c
        c.heal()
        c.drop_p = c.dup_p = 0.0
        self.faults = False
        self.events = [e for e in self.events if e[2] not in ("fault", "propose")]
        for i in c.ids:
            if not c.nodes[i].alive:
                c.restart(i)
                self._at(c.now + self.rng.randint(0, TICK - 1), "tick", i)
        deadline = c.now + max_ticks * TICK
        marker: tuple[str, int, int] | None = None      # (leader, index, term)
        while c.now < deadline:
            self.step()
            ld = c.leader()
            if ld is not None and (marker is None or marker[0] != ld):
                d = c.propose(ld, 1)
                if d.code is Code.SUCCESS:
                    marker = (ld, d.first_index, d.term)
            if marker is not None and all(
                    c.core(i).committed_index >= marker[1]
                    and c.nodes[i].log.terms[marker[1]] == marker[2] for i in c.ids):
                break
        else:
            raise AssertionError("cluster did not converge after faults stopped")
        committed = c.checker.committed
        for i in c.ids:
            log = c.nodes[i].log
            last = len(committed) - 1
            if last >= len(log.hashes) or log.hashes[last] != committed[last]:
                raise AssertionError(f"{i} lacks committed prefix after convergence")


def run_seed(seed: int, steps: int, n: int = 3, **kw: Any) -> SimResult:
    return Simulation(seed, n, **kw).run(steps)
