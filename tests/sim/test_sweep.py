"""Seeded fault sweeps: CI-sized in the normal run, long ones behind ``-m soak``; determinism;
and mutants of the core that the checker must catch (so the sweep is able to fail)."""
from __future__ import annotations

import time
from typing import Iterator

import pytest

from dledger.core import AppendResponse
from dledger.core import replication as R
from dledger.core.raft import RaftCore
from tests.sim.runner import SimResult, run_seed


def _sweep(seeds: range, steps: int, **kw: object) -> list[SimResult]:
    out = []
    for s in seeds:
        out.append(run_seed(s, steps, 3 if s % 2 else 5, **kw))  # raises with seed + trace
    return out


def test_ci_sweep_50_seeds() -> None:
    t0 = time.perf_counter()
    res = _sweep(range(50), 2500)
    dt = time.perf_counter() - t0
    steps = sum(r.steps for r in res)
    print(f"\nsim sweep: {steps} steps in {dt:.2f}s = {steps / dt:,.0f} steps/s")
    assert sum(r.acked for r in res) > 1000
    assert max(r.max_term for r in res) >= 4          # faults really forced re-elections
    assert all(r.steps >= 2500 for r in res)           # every seed ran to the end (speed is printed, not asserted)


def test_wire_codec_sweep() -> None:
    """Every message round-trips through to_dict/from_dict (what the rpc layer does)."""
    _sweep(range(100, 106), 2000, wire=True)


def test_same_seed_same_trace() -> None:
    a = run_seed(7, 3000, 5)
    b = run_seed(7, 3000, 5)
    c = run_seed(8, 3000, 5)
    assert a.trace_hash == b.trace_hash and a.steps == b.steps and a.codes == b.codes
    assert c.trace_hash != a.trace_hash


@pytest.fixture
def forgetful_hard_state() -> Iterator[None]:
    """Mutant: the core never asks the driver to persist term and vote."""
    orig = RaftCore.ready

    def ready(self: RaftCore):  # type: ignore[no-untyped-def]
        rd = orig(self)
        rd.hard_state = None
        return rd

    RaftCore.ready = ready  # type: ignore[method-assign]
    yield
    RaftCore.ready = orig  # type: ignore[method-assign]


def test_checker_catches_unpersisted_votes(forgetful_hard_state: None) -> None:
    for s in range(60):
        try:
            run_seed(s, 4000, 3 if s % 2 else 5)
        except AssertionError as e:
            if "election safety" in str(e):
                return
    pytest.fail("mutant survived the sweep")


def test_failing_seed_reproduces_exactly(forgetful_hard_state: None) -> None:
    msgs = []
    for s in range(60):
        try:
            run_seed(s, 4000, 3 if s % 2 else 5)
        except AssertionError as e:
            msgs.append(str(e))
            for _ in range(2):
                with pytest.raises(AssertionError) as again:
                    run_seed(s, 4000, 3 if s % 2 else 5)
                assert str(again.value) == msgs[0]      # same seed, same steps, same trace tail
            assert f"seed={s}" in msgs[0] and "trace tail" in msgs[0]
            return
    pytest.fail("no failing seed found for the mutant")


@pytest.fixture
def eager_acks() -> Iterator[None]:
    """Mutant: followers acknowledge entries they have not flushed."""
    orig = R.send_ack

    def send_ack(r: RaftCore, force: bool = False) -> None:
        if r.leader_id is None or r.leader_id == r.id:
            return
        if r.ack_target > r.ack_sent or force:
            r.ack_sent = max(r.ack_sent, r.ack_target)
            r.send(AppendResponse(r.id, r.leader_id, r.term, True, match_index=r.ack_target))

    R.send_ack = send_ack
    yield
    R.send_ack = orig


def test_sweep_catches_acks_of_unflushed_entries(eager_acks: None) -> None:
    # a window of seeds known (deterministically) to contain a lost commit for this mutant
    for s in range(60, 70):
        try:
            run_seed(s, 4000, 3, fault_every=(2, 8))
        except AssertionError as e:
            if "leader completeness" in str(e) or "committed prefixes" in str(e):
                return
    pytest.fail("mutant survived the sweep")


@pytest.mark.soak
@pytest.mark.parametrize("n", [3, 5])
def test_soak_sweep(n: int) -> None:
    t0 = time.perf_counter()
    res = [run_seed(s, 30000, n) for s in range(1000, 1300)]
    dt = time.perf_counter() - t0
    print(f"\nsoak n={n}: {sum(r.steps for r in res) / dt:,.0f} steps/s")
