"""Issue 23.1 bookkeeping: who is evicted or refused on a DLedger port, and the rate-limited log."""
from __future__ import annotations

import logging

import pytest

from dledger.ratelog import RateLimitedLog
from dledger.rpc.admission import Admission, PendingBudget, PortLimits


def test_a_flood_from_one_address_evicts_its_own_oldest() -> None:
    adm = Admission(PortLimits(max_connections=100, max_unauthenticated=10, max_unauthenticated_per_host=3))
    assert adm.admit("peer", "10.0.0.2") == (True, [])
    evicted = [adm.admit(f"f{i}", "10.0.0.9")[1] for i in range(6)]
    assert evicted == [[], [], [], ["f0"], ["f1"], ["f2"]]  # the peer's address is untouched
    assert adm.unauthenticated == 4


def test_the_oldest_unauthenticated_gives_way_and_authenticated_ones_are_never_evicted() -> None:
    adm = Admission(PortLimits(max_connections=4, max_unauthenticated=2, max_unauthenticated_per_host=2))
    adm.admit("a", "h1")
    adm.authenticated("a")
    adm.admit("b", "h2")
    adm.admit("c", "h3")
    assert adm.admit("d", "h4") == (True, ["b"])  # 2 unauthenticated at most
    adm.authenticated("c")
    adm.authenticated("d")
    assert adm.admit("e", "h5") == (True, [])
    assert adm.admit("f", "h6") == (True, ["e"])  # the total cap evicts an unauthenticated one
    adm.authenticated("f")
    assert adm.admit("g", "h7") == (False, [])  # four authenticated: the newcomer is refused
    adm.closed("a")
    assert adm.admit("g", "h7") == (True, []) and adm.total == 4


def test_budget_and_limits() -> None:
    b = PendingBudget(100)
    assert b.reserve(60) and not b.reserve(41) and b.refusals == 1
    b.release(60)
    assert b.reserve(100)
    with pytest.raises(ValueError):
        PortLimits(max_pending_bytes=0)


def test_rate_limited_log_summarises(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    rl = RateLimitedLog(logging.getLogger("t.ratelog"), burst=2, window_s=10, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, "t.ratelog"):
        logged = [rl.warning("k", "line %d", i) for i in range(5)]
        now[0] = 11.0
        rl.warning("k", "later")
    assert logged == [True, True, False, False, False]
    assert [r.getMessage() for r in caplog.records] == [
        "line 0", "line 1", "later (and 3 more like it in the last 10 s)"]
