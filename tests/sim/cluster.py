"""A seeded, deterministic in-process cluster of RaftCores for the simulation and scripted tests.

Rules
-----
- Everything random comes from one ``random.Random(seed)``; every event is appended to a trace
  whose SHA-256 is the run's fingerprint (same seed => same trace hash).
- Time is an integer; one tick is ``TICK`` units.  The network is a heap of (deliver_at, seq,
  message); a message is dropped on delivery if its link is cut or its receiver is down.  In
  scripted mode (``delay=(0, 0)``) delivery is FIFO.
- The driver logic per node follows ``dledger/core/ready.py`` exactly: truncate + append the
  Ready's entries (unsynced), append the barrier, persist the hard state, send, then advance.
  Flushes happen separately (``flush``) and are reported with ``on_persisted``.
- ``crash`` drops the core and the log's unsynced tail; ``restart`` builds a fresh core from the
  durable log and hard state.
- The :class:`Checker` runs after every processed Ready (and the durability check after every
  step); a violation is re-raised with the seed and the last trace events.
"""
from __future__ import annotations

import hashlib
import heapq
import random
from collections import deque
from dataclasses import replace
from typing import Callable, Iterable, Optional

from dledger.core import AppendDecision, Code, Config, Message, RaftCore, Role
from dledger.core.messages import from_dict
from tests.sim.checker import Checker, InvariantViolation
from tests.sim.memlog import MemLog

TICK = 100


class SimNode:
    def __init__(self, node_id: str, cfg: Config) -> None:
        self.id = node_id
        self.cfg = cfg
        self.log = MemLog()
        self.core: Optional[RaftCore] = None
        self.proposals: dict[tuple[int, int], list[bytes]] = {}   # (term, last) -> datas
        self.completions: list[tuple[int, int, int, Code]] = []
        self.transfer_results: list[tuple[str, Code]] = []
        self.incarnation = 0

    @property
    def alive(self) -> bool:
        return self.core is not None


class Cluster:
    def __init__(self, n: int = 3, seed: int = 0, *, delay: tuple[int, int] = (0, 0),
                 drop: float = 0.0, dup: float = 0.0, auto_flush: bool = True,
                 wire: bool = False, **cfg_kw: object) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.ids = [f"n{i}" for i in range(n)]
        self.nodes: dict[str, SimNode] = {}
        base = dict(election_ticks_min=10, election_ticks_max=20, heartbeat_ticks=2,
                    max_wait_ack_ticks=50, push_timeout_ticks=6, max_batch_entries=16,
                    max_batch_bytes=256, max_inflight=4)
        base.update(cfg_kw)
        for i in self.ids:
            cfg = Config(self_id=i, peers=tuple(self.ids), **base)  # type: ignore[arg-type]
            self.nodes[i] = SimNode(i, cfg)
        self.delay, self.drop_p, self.dup_p = delay, drop, dup
        self.auto_flush = auto_flush
        self.wire = wire                   # round-trip every message through to_dict/from_dict
        self.now = 0
        self.seq = 0
        self.net: list[tuple[int, int, Message]] = []
        self.cut: set[tuple[str, str]] = set()
        self.filters: list[Callable[[Message], bool]] = []   # True => drop
        self.checker = Checker(self.describe_failure)
        self.trace: deque[str] = deque(maxlen=60)
        self._hash = hashlib.sha256()
        self.steps = 0
        self.delivered = 0
        self.counter = 0
        self._commit_seen: dict[str, int] = {}
        for i in self.ids:
            self.restart(i)

    # ------------------------------------------------------------------ trace
    def note(self, ev: str) -> None:
        line = f"{self.now} {ev}"
        self.trace.append(line)
        self._hash.update(line.encode())
        self._hash.update(b"\n")

    @property
    def trace_hash(self) -> str:
        return self._hash.hexdigest()

    def describe_failure(self) -> str:
        return (f"seed={self.seed} steps={self.steps}\n--- trace tail ---\n"
                + "\n".join(self.trace))

    # ------------------------------------------------------------------ node lifecycle
    def crash(self, nid: str) -> None:
        n = self.nodes[nid]
        if n.core is None:
            return
        n.core = None
        n.log.crash()
        n.proposals.clear()
        self.note(f"crash {nid} durable={n.log.durable}")

    def wipe(self, nid: str) -> None:
        """The operator moved the node's store away (log and hard state) and restarts it."""
        self.crash(nid)
        n = self.nodes[nid]
        n.log = MemLog()
        self.checker.max_term.pop(nid, None)   # a new store: its term starts over
        self.note(f"wipe {nid}")
        self.restart(nid)

    def compact(self, nid: str, upto: int) -> None:
        """Retention on ``nid``: committed entries ``<= upto`` leave its log (live or not)."""
        n = self.nodes[nid]
        if n.core is not None:
            upto = min(upto, n.core.committed_index)
        n.log.compact(upto)
        self.note(f"compact {nid} to {upto}")

    def restart(self, nid: str) -> None:
        n = self.nodes[nid]
        if n.core is not None:
            return
        n.incarnation += 1
        n.core = RaftCore(n.cfg, n.log, random.Random(self.rng.getrandbits(32)), n.log.hard)
        self.checker.on_term(nid, n.core.term)
        self._commit_seen[nid] = -1
        self.note(f"restart {nid} term={n.core.term} end={n.log.ledger_end_index}")

    # ------------------------------------------------------------------ driver
    def process(self, nid: str) -> None:
        """Run the node's Ready loop until it has nothing more to say."""
        n = self.nodes[nid]
        while n.core is not None and n.core.has_ready():
            self._process_one(n)
        if n.core is not None:
            self.checker.on_durable_commit(n)

    def _process_one(self, n: SimNode) -> None:
        core = n.core
        assert core is not None
        rd = core.ready()
        log = n.log
        if rd.reset_begin is not None:
            log.reset(rd.reset_begin, self.checker.committed)
            self.note(f"reset-begin {n.id} at {rd.reset_begin}")
        if rd.truncate_from is not None:
            log.truncate(rd.truncate_from)
        for e in rd.entries:
            log.append(e.index, e.term, e.data)
            self.checker.on_append(n.id, e.index, e.term, log.hashes[-1])
        if rd.append_barrier is not None:
            b = rd.append_barrier
            log.append(b.first_index, b.term, b"barrier")
            self.checker.on_append(n.id, b.first_index, b.term, log.hashes[-1])
        if rd.hard_state is not None:
            log.hard = rd.hard_state
            self.checker.on_term(n.id, rd.hard_state.term)
        for m in rd.messages:
            self._send(m)
        if rd.role_change is not None:
            rc = rd.role_change
            self.note(f"role {n.id} {rc.role.value} t={rc.term} leader={rc.leader_id}")
            if rc.role is Role.LEADER:
                self.checker.on_leader(n, rc.term)
        if rd.committed_index is not None:
            old = self._commit_seen.get(n.id, -1)
            if rd.committed_index > old:
                leaders = [x for x in self.nodes.values()
                           if x.core is not None and x.core.role is Role.LEADER]
                self.checker.on_commit(n, old, rd.committed_index, core.term, leaders)
            self._commit_seen[n.id] = rd.committed_index
        for c in rd.completions:
            n.completions.append((c.first_index, c.last_index, c.term, c.code))
            datas = n.proposals.pop((c.term, c.last_index), None)
            if c.code is Code.SUCCESS and datas is not None:
                self.checker.on_ack(n, c.first_index, c.last_index, c.term, datas)
        if rd.transfer_result is not None:
            n.transfer_results.append(rd.transfer_result)
            self.note(f"transfer {n.id} -> {rd.transfer_result[0]} {rd.transfer_result[1].name}")
        core.advance(rd)
        if self.auto_flush and log.durable < len(log.terms):
            self.flush(n.id, process=False)

    def flush(self, nid: str, process: bool = True) -> None:
        n = self.nodes[nid]
        if n.core is None:
            return
        n.log.flush()
        end = n.log.ledger_end_index
        if end >= 0:
            n.core.on_persisted(end, n.log.terms[end])
        if process:
            self.process(nid)

    def _send(self, m: Message) -> None:
        if self.wire:
            m = from_dict(m.to_dict())
        if (m.src, m.dst) in self.cut or (self.drop_p and self.rng.random() < self.drop_p):
            return
        copies = 2 if self.dup_p and self.rng.random() < self.dup_p else 1
        for _ in range(copies):
            lo, hi = self.delay
            at = self.now + (self.rng.randint(lo, hi) if hi else 0)
            self.seq += 1
            heapq.heappush(self.net, (at, self.seq, m))

    def deliver_one(self) -> bool:
        """Deliver the next message in the network.  Returns False if there is none."""
        if not self.net:
            return False
        at, _, m = heapq.heappop(self.net)
        self.now = max(self.now, at)
        self.steps += 1
        dst = self.nodes.get(m.dst)
        if (dst is None or dst.core is None or (m.src, m.dst) in self.cut
                or any(f(m) for f in self.filters)):
            return True
        self.delivered += 1
        self.note(f"recv {m.dst}<-{m.src} {type(m).__name__} t={m.term}")
        dst.core.step(m)
        self.process(m.dst)
        return True

    # ------------------------------------------------------------------ scripted helpers
    def tick(self, nid: str, n: int = 1) -> None:
        for _ in range(n):
            node = self.nodes[nid]
            if node.core is None:
                return
            node.core.tick()
            self.steps += 1
            self.process(nid)

    def tick_all(self, n: int = 1, deliver: bool = True) -> None:
        for _ in range(n):
            self.now += TICK if self.delay[1] else 0
            for i in self.ids:
                self.tick(i)
            if deliver:
                self.stabilize()

    def stabilize(self, limit: int = 100000) -> None:
        for _ in range(limit):
            if not self.deliver_one():
                return
        raise AssertionError("network did not quiesce")

    def campaign(self, nid: str) -> None:
        core = self.nodes[nid].core
        assert core is not None
        core.campaign()
        self.process(nid)
        self.stabilize()

    def propose(self, nid: str, count: int = 1) -> AppendDecision:
        n = self.nodes[nid]
        assert n.core is not None
        d = n.core.propose(count)
        if d.code is Code.SUCCESS:
            datas = []
            for k in range(count):
                self.counter += 1
                data = f"{nid}/{self.counter}".encode()
                n.log.append(d.first_index + k, d.term, data)
                self.checker.on_append(nid, d.first_index + k, d.term, n.log.hashes[-1])
                datas.append(data)
            n.proposals[(d.term, d.last_index)] = datas
        self.note(f"propose {nid} x{count} -> {d.code.name} {d.first_index}")
        self.process(nid)
        return d

    def isolate(self, nid: str) -> None:
        for o in self.ids:
            if o != nid:
                self.cut.add((nid, o))
                self.cut.add((o, nid))
        self.note(f"isolate {nid}")

    def partition(self, group: Iterable[str]) -> None:
        g = set(group)
        for a in self.ids:
            for b in self.ids:
                if (a in g) != (b in g):
                    self.cut.add((a, b))
        self.note(f"partition {sorted(g)}")

    def heal(self) -> None:
        self.cut.clear()
        self.filters.clear()
        self.note("heal")

    # ------------------------------------------------------------------ queries
    def leaders(self) -> list[str]:
        return [i for i, n in self.nodes.items()
                if n.core is not None and n.core.role is Role.LEADER]

    def leader(self) -> Optional[str]:
        """The live leader with the highest term (stale leaders may linger)."""
        best = None
        for i in self.leaders():
            core = self.nodes[i].core
            assert core is not None
            if best is None or core.term > self.nodes[best].core.term:  # type: ignore[union-attr]
                best = i
        return best

    def core(self, nid: str) -> RaftCore:
        c = self.nodes[nid].core
        assert c is not None, f"{nid} is down"
        return c

    def elect(self, nid: str, attempts: int = 4) -> None:
        """Make ``nid`` campaign (repeatedly: a first pre-vote may only teach it the term)."""
        for _ in range(attempts):
            self.campaign(nid)
            if self.core(nid).role is Role.LEADER:
                return
        raise AssertionError(f"{nid} could not win an election\n" + self.describe_failure())

    def wait_new_leader(self, old: str, max_ticks: int = 200) -> str:
        """Tick until a leader other than ``old`` (e.g. an isolated old leader) exists."""
        for _ in range(max_ticks):
            ld = self.leader()
            if ld is not None and ld != old:
                return ld
            self.tick_all()
        raise AssertionError("no new leader elected\n" + self.describe_failure())

    def wait_leader(self, max_ticks: int = 200) -> str:
        for _ in range(max_ticks):
            ld = self.leader()
            if ld is not None and all(
                    n.core is None or n.core.leader_id == ld or (n.id, ld) in self.cut
                    for n in self.nodes.values()):
                return ld
            self.tick_all()
        raise AssertionError("no leader elected\n" + self.describe_failure())

    def with_config(self, nid: str, **kw: object) -> None:
        """Change a (crashed) node's config before restart."""
        n = self.nodes[nid]
        n.cfg = replace(n.cfg, **kw)  # type: ignore[arg-type]


__all__ = ["Cluster", "InvariantViolation", "SimNode", "TICK"]
