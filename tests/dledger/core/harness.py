"""A tiny deterministic driver for RaftCores: the test-side half of the ``ready.py`` contract.

Rules
-----
- No I/O, no clock, no threads.  Each node's election timeouts come from its own
  ``random.Random(seed * 1000 + k)``, so the same script or test gives the same outputs.
- :meth:`Net.process` follows ``dledger/core/ready.py`` exactly: begin reset, truncate, append
  the Ready's entries, append the barrier, persist the hard state, queue the messages, then
  ``advance``.  With ``auto_flush`` (the default) the store is flushed right after and the core
  told with ``on_persisted``; without it, :meth:`Net.flush` does that step by hand.
- The network is one FIFO queue per receiver.  A message on a cut link (``partition``/``isolate``,
  cumulative) is dropped when it is delivered, and reported so; ``reconnect`` restores one
  node's links, ``heal`` every link.  ``crash`` stops a node (not ticked, not processed, messages
  to it dropped); ``restart`` builds a new core from its durable log and hard state.
- Node ids are ``"1".."N"`` as in etcd-raft's tests.  Proposals are driver first: the entry is
  written to the store (``MemLog``) right after a successful ``propose``.
- Every observable step can be recorded through ``on_ready`` / ``on_deliver`` callbacks; the
  interaction runner (``interaction.py``) turns them into text.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

from dledger.core import (AppendDecision, Code, Config, HardState, Message, RaftCore, Ready,
                          Role)
from tests.sim.memlog import MemLog

BASE_CONFIG: dict[str, object] = dict(election_ticks_min=10, election_ticks_max=20, heartbeat_ticks=2,
                   pre_vote=False, check_quorum=False)


def make_log(terms: Iterable[int] = (), tag: str = "") -> MemLog:
    """A flushed store whose entry ``i`` has term ``terms[i]`` (data ``f"{tag}{i}"``)."""
    log = MemLog()
    for i, t in enumerate(terms):
        log.append(i, t, f"{tag}{i}".encode())
    log.flush()
    return log


def make_core(nid: str = "1", n: int = 3, terms: Iterable[int] = (), term: int = 0,
              vote: Optional[str] = None, committed: int = -1, seed: int = 0,
              **cfg: object) -> tuple[RaftCore, MemLog]:
    """One core of an ``n``-member group ``"1".."n"``, over a store holding ``terms``."""
    kw = dict(BASE_CONFIG)
    kw.update(cfg)
    peers = tuple(str(k) for k in range(1, n + 1))
    log = make_log(terms)
    log.hard = HardState(term, vote)
    core = RaftCore(Config(nid, peers, **kw), log, random.Random(seed),  # type: ignore[arg-type]
                    log.hard, committed)
    return core, log


def apply_ready(core: RaftCore, log: MemLog, rd: Ready) -> None:
    """Steps 0-4 of the driver contract against an in-memory store (no flush)."""
    if rd.reset_begin is not None:
        log.reset(rd.reset_begin, [0] * rd.reset_begin)
    if rd.truncate_from is not None:
        log.truncate(rd.truncate_from)
    for e in rd.entries:
        log.append(e.index, e.term, e.data)
    if rd.append_barrier is not None:
        log.append(rd.append_barrier.first_index, rd.append_barrier.term, b"barrier")
    if rd.hard_state is not None:
        log.hard = rd.hard_state


def flush(core: RaftCore, log: MemLog) -> None:
    log.flush()
    end = log.ledger_end_index
    if end >= 0:
        core.on_persisted(end, log.terms[end])


def drain(core: RaftCore, log: MemLog, auto_flush: bool = True) -> list[Message]:
    """Process every Ready of a lone core; return the messages it sent."""
    out: list[Message] = []
    while core.has_ready():
        rd = core.ready()
        apply_ready(core, log, rd)
        out.extend(rd.messages)
        core.advance(rd)
        if auto_flush and log.durable < len(log.terms):
            flush(core, log)
    return out


@dataclass
class Node:
    id: str
    core: RaftCore
    log: MemLog
    readies: list[Ready] = field(default_factory=list)
    restarts: int = 0


class Net:
    """``n`` cores ``"1".."n"`` joined by per-receiver FIFO queues."""

    def __init__(self, n: int = 3, seed: int = 0, logs: Optional[dict[str, list[int]]] = None,
                 terms: Optional[dict[str, int]] = None, auto_flush: bool = True,
                 **cfg: object) -> None:
        kw = dict(BASE_CONFIG)
        kw.update(cfg)
        self.ids = [str(k) for k in range(1, n + 1)]
        self.seed = seed
        self.auto_flush = auto_flush
        self.down: set[str] = set()
        self.nodes: dict[str, Node] = {}
        self.queues: dict[str, list[Message]] = {i: [] for i in self.ids}
        self.cut: set[tuple[str, str]] = set()
        self.on_ready: Optional[Callable[[str, Ready], None]] = None
        self.on_deliver: Optional[Callable[[str, list[tuple[Message, str]]], None]] = None
        for k, i in enumerate(self.ids, start=1):
            log = make_log((logs or {}).get(i, ()))
            log.hard = HardState((terms or {}).get(i, 0), None)
            cfg_i = Config(i, tuple(self.ids), **kw)  # type: ignore[arg-type]
            core = RaftCore(cfg_i, log, random.Random(seed * 1000 + k), log.hard)
            self.nodes[i] = Node(i, core, log)

    def core(self, nid: str) -> RaftCore:
        return self.nodes[nid].core

    # ------------------------------------------------------------------ driving
    def process(self, nid: str) -> bool:
        """Handle every Ready of ``nid``.  True if there was one."""
        node = self.nodes[nid]
        core, log = node.core, node.log
        any_ready = False
        if nid in self.down:
            return False
        while core.has_ready():
            any_ready = True
            rd = core.ready()
            apply_ready(core, log, rd)
            for m in rd.messages:
                self.queues[m.dst].append(m)
            node.readies.append(rd)
            if self.on_ready is not None:
                self.on_ready(nid, rd)
            core.advance(rd)
            if self.auto_flush and log.durable < len(log.terms):
                flush(core, log)
        return any_ready

    def flush(self, nid: str) -> None:
        node = self.nodes[nid]
        flush(node.core, node.log)

    def deliver(self, nid: str) -> bool:
        """Step every message queued for ``nid`` (dropping those on cut links)."""
        msgs, self.queues[nid] = self.queues[nid], []
        if not msgs:
            return False
        seen: list[tuple[Message, str]] = []       # (message, "" or why it was dropped)
        for m in msgs:
            why = ("down" if nid in self.down
                   else "partition" if (m.src, m.dst) in self.cut else "")
            seen.append((m, why))
            if not why:
                self.nodes[nid].core.step(m)
        if self.on_deliver is not None:
            self.on_deliver(nid, seen)
        return True

    def stabilize(self, ids: Optional[Iterable[str]] = None, limit: int = 1000) -> None:
        only = list(ids) if ids else self.ids
        for _ in range(limit):
            busy = False
            for i in only:
                busy |= self.process(i)
            for i in only:
                busy |= self.deliver(i)
            if not busy:
                return
        raise AssertionError("the network did not quiesce")

    def tick(self, nid: str, n: int = 1) -> None:
        for _ in range(n if nid not in self.down else 0):
            self.nodes[nid].core.tick()

    def tick_all(self, n: int = 1) -> None:
        """``n`` rounds of: tick everyone, then stabilize."""
        for _ in range(n):
            for i in self.ids:
                self.tick(i)
            self.stabilize()

    def crash(self, nid: str) -> None:
        """``nid`` stops: its unflushed tail is lost, messages to it are dropped."""
        self.down.add(nid)
        self.nodes[nid].log.crash()

    def restart(self, nid: str) -> None:
        """A new core from ``nid``'s durable log and hard state: a follower again."""
        node = self.nodes[nid]
        self.down.discard(nid)
        k = self.ids.index(nid) + 1
        node.restarts += 1
        node.core = RaftCore(node.core.cfg, node.log,
                             random.Random(self.seed * 1000 + k + 100 * node.restarts),
                             node.log.hard)

    def campaign(self, nid: str) -> None:
        self.nodes[nid].core.campaign()

    def elect(self, nid: str) -> None:
        self.campaign(nid)
        self.stabilize()
        assert self.core(nid).role is Role.LEADER, self.core(nid).status()

    def propose(self, nid: str, data: bytes = b"x") -> AppendDecision:
        """Driver-first leader append of one entry (written to the store if accepted)."""
        node = self.nodes[nid]
        d = node.core.propose(1)
        if d.code is Code.SUCCESS:
            node.log.append(d.first_index, d.term, data)
        return d

    # ------------------------------------------------------------------ links
    def isolate(self, nid: str) -> None:
        self.partition([nid])

    def partition(self, group: Iterable[str]) -> None:
        g = set(group)
        for a in self.ids:
            for b in self.ids:
                if (a in g) != (b in g):
                    self.cut.add((a, b))

    def heal(self) -> None:
        self.cut.clear()

    def reconnect(self, nid: str) -> None:
        """Restore every link of ``nid`` (other cuts stay)."""
        self.cut = {(a, b) for a, b in self.cut if nid not in (a, b)}

    def drop_link(self, src: str, dst: str) -> None:
        self.cut.add((src, dst))

    # ------------------------------------------------------------------ queries
    def terms_of(self, nid: str) -> list[int]:
        return list(self.nodes[nid].log.terms)

    def sent(self, nid: str) -> list[Message]:
        """Every message ``nid`` has sent so far (from its processed Readies)."""
        return [m for rd in self.nodes[nid].readies for m in rd.messages]

    def clear_sent(self) -> None:
        for node in self.nodes.values():
            node.readies.clear()
