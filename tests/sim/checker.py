"""Safety invariants of the simulated cluster, checked incrementally after every step.

Invariants (etcd-raft's TLA+ names in brackets):
- election safety [MoreThanOneLeaderInv]: at most one leader per term, ever.
- log matching [LogMatchingInv]: same (index, term) on any two logs, at any time => identical
  prefix (compared through MemLog's chained prefix hashes, on every write).
- committed prefixes never conflict [LogInv]: across nodes and across time (a global committed
  chain; a node committing index i must hold the recorded prefix hash at i).
- leader completeness [LeaderCompletenessInv]: an entry first committed while its committer was
  in term t is in the log of every leader of a term > t -- checked when a leader is elected and
  when a commit happens while leaders of higher terms exist.
- durability [CommittedIsDurableInv]: a node's commit index <= its durable (flushed) log.
- acknowledged proposals: a SUCCESS completion names entries that are committed, with the data
  the client proposed.
- terms never decrease on a node, across restarts too.
Any violation raises :class:`InvariantViolation`; the cluster adds seed and trace tail.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from tests.sim.cluster import SimNode


class InvariantViolation(AssertionError):
    pass


class Checker:
    def __init__(self, context: "Callable[[], str] | None" = None) -> None:
        self.context = context
        self.leaders: dict[int, str] = {}
        self.by_pos: dict[tuple[int, int], int] = {}
        self.committed: list[int] = []          # prefix hash per committed index
        self.commit_terms: list[int] = []       # term of the first committer of that index
        self.max_term: dict[str, int] = {}
        self.acked = 0

    def fail(self, msg: str) -> None:
        raise InvariantViolation(msg + ("\n" + self.context() if self.context else ""))

    # ---- hooks called by the cluster
    def on_append(self, node: str, index: int, term: int, h: int) -> None:
        old = self.by_pos.setdefault((index, term), h)
        if old != h:
            self.fail(f"log matching: {node} has ({index},{term}) with a different prefix")

    def on_term(self, node: str, term: int) -> None:
        if term < self.max_term.get(node, -1):
            self.fail(f"{node}: term went back from {self.max_term[node]} to {term}")
        self.max_term[node] = term

    def on_leader(self, n: "SimNode", term: int) -> None:
        prev = self.leaders.setdefault(term, n.id)
        if prev != n.id:
            self.fail(f"election safety: {prev} and {n.id} both leaders of term {term}")
        i = len(self.commit_terms) - 1
        while i >= 0 and self.commit_terms[i] >= term:
            i -= 1
        self._has_prefix(n, i, f"leader completeness: new leader {n.id} (term {term})")

    def on_commit(self, n: "SimNode", old: int, new: int, term: int,
                  leaders: list["SimNode"]) -> None:
        log = n.log
        if new >= len(log.hashes):
            self.fail(f"{n.id} committed {new} beyond its log end {len(log.hashes) - 1}")
        for i in range(old + 1, new + 1):
            h = log.hashes[i]
            if i < len(self.committed):
                if self.committed[i] != h:
                    self.fail(f"committed prefixes conflict at index {i} on {n.id}")
            else:
                if i != len(self.committed):
                    self.fail(f"{n.id}: commit gap at {i}")
                self.committed.append(h)
                self.commit_terms.append(term)
        for ld in leaders:
            if ld.core is not None and ld.core.term > term:
                self._has_prefix(ld, new, f"leader completeness: leader {ld.id} "
                                          f"(term {ld.core.term}) after commit in term {term}")

    def on_durable_commit(self, n: "SimNode") -> None:
        assert n.core is not None
        if n.core.committed_index > n.log.durable - 1:
            self.fail(f"{n.id}: commit index {n.core.committed_index} passes durable log "
                      f"end {n.log.durable - 1}")

    def on_ack(self, n: "SimNode", first: int, last: int, term: int,
               datas: list[bytes]) -> None:
        self.acked += 1
        if last >= len(self.committed):
            self.fail(f"{n.id}: ack of {first}..{last} beyond the committed chain")
        for k, i in enumerate(range(first, last + 1)):
            if n.log.terms[i] != term or n.log.datas[i] != datas[k]:
                self.fail(f"{n.id}: acked entry {i} differs from the proposal")
        if n.log.hashes[last] != self.committed[last]:
            self.fail(f"{n.id}: acked entry {last} not the committed one")

    def _has_prefix(self, n: "SimNode", i: int, what: str) -> None:
        if i < 0:
            return
        if i >= len(n.log.hashes) or n.log.hashes[i] != self.committed[i]:
            self.fail(f"{what} lacks committed index {i}")
