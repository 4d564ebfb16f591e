"""Terms no honest group reaches (issue 23.2): a ceiling and a largest jump, checked in the core.

Rules
-----
* An honest group's term grows by one per election round. Even at one round per millisecond a
  group needs 50 days to count :data:`MAX_TERM_JUMP` (2^32) terms and 146 million years to count
  to :data:`TERM_LIMIT` (2^62). So a message whose term is more than ``MAX_TERM_JUMP`` ahead of
  ours, or at/above ``TERM_LIMIT``, comes from a forger (who may hold the secret: a compromised
  or buggy member) or from damaged state, never from an honest member: the core drops it before
  the term rules run -- no step down, no persisted term, no vote -- and counts it
  (``RaftCore.term_refusals``, ``last_term_refusal``); the driver logs it, rate-limited
  (``dledger.term_guard``). Lower and equal terms are untouched (Raft's own rules apply).
* A member never campaigns into ``TERM_LIMIT`` or beyond: at ``term + 1 >= TERM_LIMIT`` it is
  *exhausted* (only a store written before this rule, or by hand, can be there) and reports it;
  the recovery is offline (``dledger reset-term``, on every member while all are stopped).
* Why in the core and not at the RPC boundary: every term-bearing message of every type (votes,
  pre-votes, responses, appends, TimeoutNow) passes :meth:`RaftCore.step`, which alone knows the
  local term at that instant; the check stays deterministic, covered by the simulation, and
  cannot be bypassed by a future transport.

Theory of operation
-------------------
Two pure functions on integers; ``raft.py`` calls :func:`refused` for higher terms and
``election.py`` :func:`exhausted` before a campaign.
"""
from __future__ import annotations

from typing import Optional

TERM_LIMIT = 1 << 62
MAX_TERM_JUMP = 1 << 32


def refused(local: int, remote: int) -> Optional[str]:
    """Why ``remote`` (a higher term than ``local``) is refused, or None if it is plausible."""
    if remote >= TERM_LIMIT:
        return f"term {remote} is at or above the limit 2^62 no honest group reaches"
    if remote - local > MAX_TERM_JUMP:
        return f"term {remote} is {remote - local} ahead of this member's {local} (more than 2^32)"
    return None


def exhausted(term: int) -> bool:
    """True when a member at ``term`` may not campaign any more (``term + 1 >= TERM_LIMIT``)."""
    return term + 1 >= TERM_LIMIT
