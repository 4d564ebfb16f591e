"""The driver's side of implausible terms (issue 23.2): log refusals, report an exhausted term.

Rules
-----
* The consensus core drops a message whose term no honest group reaches
  (:mod:`dledger.core.terms`) and counts it; :meth:`TermGuard.step` wraps ``core.step`` and logs
  each refusal with the sender, message type, term and reason, at most 5 lines per 10 s
  (:mod:`dledger.ratelog`), so a sender holding the secret cannot flood the log either.
* A member whose term is *exhausted* (``term + 1 >= 2^62``: only a store written before the
  limit existed, or edited by hand, gets there) can never campaign. :attr:`TermGuard.exhausted`
  holds one sentence saying so and how to recover (``dledger reset-term``, README Security), logged
  once; :meth:`cannot_elect` returns it while this member also knows no leader -- the state in
  which its group cannot elect (what a hosting broker's ``/health`` reports).
* Plain attributes only: a broker polls them from its own thread without hopping loops.

Theory of operation
-------------------
A thin wrapper around the core: compare ``core.term_refusals`` before and after each step,
re-check exhaustion after each step (a refused message never changes the term, but an accepted
one up to 2^62-1 may exhaust it).
"""
from __future__ import annotations

import logging
from typing import Any, Optional

from .core.raft import RaftCore
from .core.terms import TERM_LIMIT, exhausted
from .ratelog import RateLimitedLog

log = logging.getLogger("dledger.terms")

RECOVERY = ("stop every member of the group, then on each run `dledger reset-term --store <storeBaseDir> "
            "--id <selfId> --peers <peers>` to read its last log term, and again with the same `--term N --yes` "
            "(N above every member's last log term) on every member, then start them (README, Security)")


class TermGuard:
    def __init__(self, core: RaftCore, self_id: str) -> None:
        self.core = core
        self.self_id = self_id
        self.rlog = RateLimitedLog(log)
        self.exhausted: Optional[str] = None
        self._check()

    def step(self, msg: Any) -> None:
        before = self.core.term_refusals
        self.core.step(msg)
        if self.core.term_refusals != before and self.core.last_term_refusal is not None:
            src, kind, term, why = self.core.last_term_refusal
            self.rlog.warning("term-refused", "%s: refused a %s from peer %s with term %d: %s (this member stays "
                              "at term %d)", self.self_id, kind, src, term, why, self.core.term)
        self._check()

    def _check(self) -> None:
        if self.exhausted is None and exhausted(self.core.term):
            self.exhausted = (f"term exhausted: member {self.self_id} is at term {self.core.term}, at the limit "
                              f"{TERM_LIMIT} (2^62) no honest group reaches, so it can never start an election; "
                              f"to recover, {RECOVERY}")
            log.error("%s", self.exhausted)

    def cannot_elect(self) -> Optional[str]:
        """The exhaustion sentence while this member knows no leader (its group cannot elect)."""
        if self.exhausted is None or self.core.leader_id is not None:
            return None
        return self.exhausted

    def status(self) -> dict[str, Any]:
        return {"limit": TERM_LIMIT, "refused": self.core.term_refusals, "exhausted": self.exhausted is not None,
                "cannot_elect": self.cannot_elect()}
