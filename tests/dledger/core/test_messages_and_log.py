"""Message codec validation, response-code values and the core's term table."""
from __future__ import annotations

import random

import msgpack
import pytest

from dledger.core import (AppendRequest, AppendResponse, Code, Config, Entry, MessageError,
                          RaftCore, TimeoutNow, VoteRequest, VoteResponse, VoteResult, from_dict)
from dledger.core.log import TermRuns
from tests.sim.memlog import MemLog

SAMPLES = [
    VoteRequest("n0", "n1", 3, 10, 2, pre_vote=True, transfer=False),
    VoteResponse("n1", "n0", 3, True, pre_vote=True, result=VoteResult.ACCEPT),
    AppendRequest("n0", "n1", 3, 4, 2, 4, (Entry(5, 2, b"a"), Entry(6, 3, b"\x00" * 9))),
    AppendRequest("n0", "n1", 3, -1, -1, -1, ()),
    AppendResponse("n1", "n0", 3, False, reject_index=4, hint_index=2, hint_term=1,
                   last_index=7, code=Code.INCONSISTENT_STATE),
    TimeoutNow("n0", "n1", 3),
]


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip_through_msgpack(msg: object) -> None:
    wire = msgpack.packb(msg.to_dict(), use_bin_type=True)  # type: ignore[attr-defined]
    assert from_dict(msgpack.unpackb(wire, raw=False)) == msg


@pytest.mark.parametrize("mutate, err", [
    (lambda d: d.update(t="nope"), "unknown message kind"),
    (lambda d: d.update(term="3"), "'term' must be an int"),
    (lambda d: d.update(term=True), "'term' must be an int"),
    (lambda d: d.update(prev_index=-2), "below -1"),
    (lambda d: d.update(extra=1), "unknown fields"),
    (lambda d: d.pop("src"), "missing field 'src'"),
    (lambda d: d.update(entries=[[6, 2, b"a"]]), "expected 5"),
    (lambda d: d.update(entries=[[5, 2, "text"]]), "must be bytes"),
    (lambda d: d.update(entries=[[5, 2, b"a"], [6, 1, b"b"]]), "out of order"),
    (lambda d: d.update(entries=[[5, 9, b"a"]]), "out of order"),
    (lambda d: d.update(prev_term=-1), "both be -1"),
    (lambda d: d.update(entries=[[5, 2]]), r"\[index, term, data\]"),
])
def test_malformed_append_rejected(mutate, err: str) -> None:  # type: ignore[no-untyped-def]
    d = SAMPLES[2].to_dict()
    mutate(d)
    with pytest.raises(MessageError, match=err):
        from_dict(d)


def test_bad_enum_and_non_dict() -> None:
    d = SAMPLES[4].to_dict()
    d["code"] = 12345
    with pytest.raises(MessageError, match="unknown Code"):
        from_dict(d)
    with pytest.raises(MessageError):
        from_dict([1, 2])


def test_response_codes_are_dledgers() -> None:
    assert (Code.SUCCESS, Code.UNKNOWN, Code.NOT_LEADER, Code.INCONSISTENT_TERM,
            Code.INCONSISTENT_INDEX, Code.INCONSISTENT_LEADER, Code.TERM_NOT_READY,
            Code.WAIT_QUORUM_ACK_TIMEOUT, Code.LEADER_PENDING_FULL, Code.LEADER_NOT_READY,
            Code.LEADER_TRANSFERRING) == (200, -1, 404, 407, 408, 409, 416, 502, 503, 505, 506)


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="not among peers"):
        Config("x", ("n0", "n1"))
    with pytest.raises(ValueError, match="heartbeat"):
        Config("n0", ("n0",), heartbeat_ticks=10, election_ticks_min=10)
    with pytest.raises(ValueError, match="preferred"):
        Config("n0", ("n0",), preferred_leaders=("n9",))


@pytest.mark.parametrize("seed", range(20))
def test_term_runs_match_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    log = MemLog()
    term = 0
    for i in range(rng.randint(0, 300)):
        if rng.random() < 0.05:
            term += rng.randint(1, 3)
        log.append(i, term, b"x")
    runs = TermRuns.from_view(log)
    n = len(log.terms)
    assert runs.last == n - 1
    for i in range(-1, n + 2):
        expect = -1 if i == -1 else (log.terms[i] if 0 <= i < n else None)
        assert runs.term(i) == expect
    for _ in range(50):
        idx, t = rng.randint(-1, n + 2), rng.randint(-1, term + 1)
        brute = max([j for j in range(min(idx, n - 1) + 1) if log.terms[j] <= t], default=-1)
        assert runs.last_le(idx, t) == brute
    cut = rng.randint(0, n)
    runs.truncate(cut)
    assert runs.last == cut - 1 and all(runs.term(j) == log.terms[j] for j in range(cut))


def test_inputs_between_ready_and_advance_are_refused() -> None:
    core = RaftCore(Config("n0", ("n0",)), MemLog(), random.Random(1))
    rd = core.ready()
    with pytest.raises(RuntimeError):
        core.tick()
    core.advance(rd)
    core.tick()


# Issue 12: terms and indexes are Java longs; anything larger must never reach the core (a forged
# vote with term 2**64-1 used to be persisted and stop every member for good).
@pytest.mark.parametrize("kind, field", [
    (0, "term"), (0, "last_index"), (0, "last_term"), (1, "term"), (2, "term"), (2, "prev_index"),
    (2, "prev_term"), (2, "commit"), (4, "term"), (4, "match_index"), (4, "hint_term"), (5, "term"),
])
@pytest.mark.parametrize("value", [2**63, 2**64 - 1])
def test_values_beyond_a_java_long_are_refused_naming_field_and_value(kind: int, field: str, value: int) -> None:
    d = SAMPLES[kind].to_dict()
    d[field] = value
    with pytest.raises(MessageError, match=rf"'{field}'={value} is above {2**63 - 1}"):
        from_dict(d)


def test_largest_java_long_is_accepted_and_entry_ranges_are_checked() -> None:
    d = SAMPLES[0].to_dict()
    d["term"] = 2**63 - 1
    assert from_dict(d).term == 2**63 - 1
    d = SAMPLES[2].to_dict()
    d["entries"] = [[2**63, 2, b"a"]]
    with pytest.raises(MessageError, match="above"):
        from_dict(d)


@pytest.mark.parametrize("pre_vote", [True, False])
def test_a_member_at_the_largest_term_never_campaigns_past_it(pre_vote: bool) -> None:
    from dledger.core.ready import HardState

    max_long = 2**63 - 1
    core = RaftCore(Config("n0", ("n0", "n1", "n2"), pre_vote=pre_vote), MemLog(), random.Random(1),
                    HardState(max_long, None))
    for _ in range(200):  # many election timeouts
        core.tick()
        while core.has_ready():
            rd = core.ready()
            assert rd.hard_state is None or rd.hard_state.term <= max_long
            assert all(m.term <= max_long for m in rd.messages)
            core.advance(rd)
    assert core.term == max_long


# ---------------------------------------------------------------- issue 13.2: reject hint, begin requests
def test_begin_request_round_trips_and_is_validated() -> None:
    from dledger.core.messages import AppendRequest, Entry, MessageError, from_dict

    m = AppendRequest("n0", "n1", 3, 99, -1, 120, (Entry(100, 2, b"x"),), begin=True)
    assert from_dict(m.to_dict()) == m
    plain = AppendRequest("n0", "n1", 3, 5, 2, 4)
    assert "begin" not in plain.to_dict()  # older peers never see the field
    with pytest.raises(MessageError, match="begin request"):
        from_dict({**AppendRequest("n0", "n1", 3, 99, -1, 1, (), begin=True).to_dict()})
    with pytest.raises(MessageError, match="begin request"):
        from_dict(AppendRequest("n0", "n1", 3, 99, 2, 1, (Entry(100, 2, b"x"),), begin=True).to_dict())


def test_progress_resets_when_the_follower_log_is_shorter_than_match() -> None:
    from dledger.core.progress import PState, Progress

    pr = Progress(0)
    pr.acked(59)
    assert (pr.state, pr.match) == (PState.REPLICATE, 59)
    assert not pr.rejected(40, 41, 80)          # stale: at or below match, log not shorter
    assert pr.match == 59
    assert pr.rejected(59, 0, -1)               # the follower's store was moved away
    assert (pr.state, pr.match, pr.next, pr.hint_resets) == (PState.PROBE, -1, 0, 1)
    pr.acked(59)
    pr.become_probe()
    assert pr.rejected(59, 10, 9)               # PROBE too; resumes after what it still holds
    assert (pr.match, pr.next) == (-1, 10)
