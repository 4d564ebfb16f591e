"""Issue 23.2 in the pure core: terms no honest group reaches are refused, whoever sends them."""
from __future__ import annotations

import random

import pytest

from dledger.core import AppendRequest, AppendResponse, Config, RaftCore, TimeoutNow, VoteRequest, VoteResponse
from dledger.core.codes import Role
from dledger.core.ready import HardState
from dledger.core.terms import MAX_TERM_JUMP, TERM_LIMIT, exhausted, refused
from tests.sim.memlog import MemLog

PEERS = ("n0", "n1", "n2")


def _core(term: int = 5, **cfg) -> RaftCore:  # type: ignore[no-untyped-def]
    return RaftCore(Config("n0", PEERS, **cfg), MemLog(), random.Random(1), HardState(term, None))


def _drain(core: RaftCore) -> list:
    out = []
    while core.has_ready():
        rd = core.ready()
        out.append(rd)
        core.advance(rd)
    return out


def test_bounds() -> None:
    assert refused(5, 6) is None and refused(5, 5 + MAX_TERM_JUMP) is None
    assert "2^32" in (refused(5, 6 + MAX_TERM_JUMP) or "")
    assert "2^62" in (refused(TERM_LIMIT - 2, TERM_LIMIT) or "")
    assert refused(0, 2**63 - 1) is not None
    assert not exhausted(TERM_LIMIT - 2) and exhausted(TERM_LIMIT - 1) and exhausted(2**63 - 1)


@pytest.mark.parametrize("make", [
    lambda t: VoteRequest("n1", "n0", t, 2**62, t, pre_vote=False, transfer=True),  # the vote
    lambda t: VoteRequest("n1", "n0", t, 2**62, t, pre_vote=True, transfer=False),
    lambda t: VoteResponse("n1", "n0", t, False),
    lambda t: AppendRequest("n1", "n0", t, -1, -1, -1, ()),
    lambda t: AppendResponse("n1", "n0", t, False),
    lambda t: TimeoutNow("n1", "n0", t),
], ids=["vote", "pre-vote", "vote-response", "append", "append-response", "timeout-now"])
@pytest.mark.parametrize("term", [2**63 - 1, TERM_LIMIT, 5 + MAX_TERM_JUMP + 1], ids=["max-long", "limit", "jump"])
def test_implausible_terms_change_nothing(make, term: int) -> None:  # type: ignore[no-untyped-def]
    core = _core()
    _drain(core)
    core.step(make(term))
    rds = _drain(core)
    assert core.term == 5 and core.vote is None and core.role is Role.FOLLOWER
    assert all(rd.hard_state is None for rd in rds) and not any(rd.messages for rd in rds)
    assert core.term_refusals == 1 and core.last_term_refusal is not None
    assert core.last_term_refusal[:3] == ("n1", type(make(term)).__name__, term)


def test_a_plausible_higher_term_still_wins() -> None:
    core = _core()
    core.step(AppendRequest("n1", "n0", 5 + MAX_TERM_JUMP, -1, -1, -1, ()))
    assert core.term == 5 + MAX_TERM_JUMP and core.leader_id == "n1" and core.term_refusals == 0


def test_refused_term_does_not_stop_the_group_from_electing() -> None:
    """A member hit by the forged vote still campaigns at term+1 and wins with honest votes."""
    core = _core(pre_vote=False)
    core.step(VoteRequest("n1", "n0", 2**63 - 1, 2**62, 2**63 - 1, pre_vote=False, transfer=True))
    for _ in range(50):
        core.tick()
        for rd in _drain(core):
            for m in rd.messages:
                if isinstance(m, VoteRequest):
                    core.step(VoteResponse(m.dst, "n0", m.term, True))
        if core.role is Role.LEADER:
            break
    assert core.role is Role.LEADER and core.term == 6


@pytest.mark.parametrize("term", [TERM_LIMIT - 1, 2**63 - 1])
def test_an_exhausted_member_never_campaigns(term: int) -> None:
    core = _core(term)
    for _ in range(200):
        core.tick()
        for rd in _drain(core):
            assert not rd.messages and (rd.hard_state is None or rd.hard_state.term == term)
    assert core.term == term and core.role is Role.FOLLOWER
