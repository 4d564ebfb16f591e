"""The checker on fabricated histories: a clean one passes, each planted anomaly is caught."""
from __future__ import annotations

import copy
from typing import Any

from tests.faults.harness.checker import check
from tests.faults.harness.history import History


def clean() -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """Two producers, three acked sends, one indeterminate (stored), one failed (not stored)."""
    h = History()
    log = []
    phys = 0
    for i, (proc, q) in enumerate([("p0", 0), ("p1", 1), ("p0", 0)]):
        key = f"k{i}"
        op = h.invoke(proc, key, q)
        qoff = sum(1 for m in log if m["queue"] == q)
        h.ok(op, phys, q, qoff, "n0")
        log.append({"key": key, "phys": phys, "queue": q, "qoff": qoff})
        phys += 100
    op = h.invoke("p1", "k-info", 1)
    h.info(op, "TIMEOUT")
    log.append({"key": "k-info", "phys": phys, "queue": 1, "qoff": 1})
    op = h.invoke("p1", "k-fail", 1)
    h.fail(op, "NOT_MASTER")
    h.read("c0", "n1", 0, 0, [[0, 0, "k0"], [1, 200, "k2"]])
    h.nemesis("kill-leader", "start")
    h.nemesis("kill-leader", "heal")
    op = h.invoke("p0", "k-late", 2)
    h.ok(op, phys + 100, 2, 0, "n1")
    log.append({"key": "k-late", "phys": phys + 100, "queue": 2, "qoff": 0})
    h.nemesis("kill-leader", "end")
    return h.events, {"n0": log, "n1": copy.deepcopy(log), "n2": copy.deepcopy(log)}


def test_clean_history_passes() -> None:
    events, replicas = clean()
    res = check(events, replicas, status_samples=[{"node": "n0", "term": 1, "role": "LEADER"},
                                                  {"node": "n1", "term": 2, "role": "LEADER"}])
    assert res.ok, res.report()
    s = res.summary()
    assert (s["acked"], s["failed"], s["indeterminate"], s["recovered"], s["reads"]) == (4, 1, 1, 1, 2)
    assert res.windows and res.windows[0]["nemesis"] == "kill-leader" and res.windows[0]["recovery_s"] is not None


def test_lost_ack_fails() -> None:
    events, replicas = clean()
    del replicas["n2"][1]  # k1 missing on one replica only
    res = check(events, replicas)
    assert not res.ok and res.counts["lost"] == 1 and "n2: acknowledged k1" in res.report()


def test_duplicate_fails() -> None:
    events, replicas = clean()
    replicas["n1"].append({"key": "k0", "phys": 900, "queue": 0, "qoff": 2})
    res = check(events, replicas)
    assert res.counts["duplicated"] == 1 and not res.ok


def test_misplaced_offset_fails() -> None:
    events, replicas = clean()
    replicas["n0"][2] = dict(replicas["n0"][2], phys=250)
    res = check(events, replicas, require_equal=False)
    assert res.counts["misplaced"] == 1


def test_foreign_message_fails() -> None:
    events, replicas = clean()
    for log in replicas.values():
        log.append({"key": "never-sent", "phys": 5000, "queue": 3, "qoff": 0})
    res = check(events, replicas)
    assert res.counts["phantom"] == 3 and not res.ok


def test_failed_send_that_took_effect_fails() -> None:
    events, replicas = clean()
    for log in replicas.values():
        log.append({"key": "k-fail", "phys": 5000, "queue": 1, "qoff": 2})
    assert check(events, replicas).counts["failed-present"] == 3


def test_reordering_fails() -> None:
    events, replicas = clean()
    for log in replicas.values():  # swap k0 and k2 (same queue): queue offsets out of log order
        a, b = log[0], log[2]
        a["qoff"], b["qoff"] = b["qoff"], a["qoff"]
    res = check(events, replicas)
    assert res.counts["queue-order"] >= 1 and res.counts["misplaced"] >= 1


def test_realtime_order_violation_fails() -> None:
    events, replicas = clean()
    # k2 was invoked after k0's ack, but claims a smaller physical offset than k0
    for e in events:
        if e["type"] == "ok" and e["op"] == 0:
            e["phys"] = 300
    for log in replicas.values():
        log[0]["phys"] = 300
    res = check(events, replicas, require_equal=False)
    assert res.counts["realtime"] >= 1


def test_dirty_read_fails() -> None:
    events, replicas = clean()
    events.append({"type": "read", "t": 9.0, "proc": "c0", "node": "n2", "queue": 1, "offset": 1,
                   "msgs": [[1, 300, "truncated-later"]]})
    assert check(events, replicas).counts["read"] == 1


def test_divergent_replicas_fail() -> None:
    events, replicas = clean()
    replicas["n2"] = replicas["n2"][:2]
    res = check(events, replicas)
    assert res.counts["prefix"] == 1 and res.counts["lost"] >= 1
    res = check(events, {"n0": replicas["n0"], "n1": replicas["n0"][:2]}, require_equal=False)
    assert res.counts["prefix"] == 0  # a lagging prefix is fine when equality is not required


def test_two_leaders_in_one_term_fail() -> None:
    events, replicas = clean()
    res = check(events, replicas, status_samples=[{"node": "n0", "term": 3, "role": "LEADER"}],
                log_leaders=[("n1", 3)])
    assert res.counts["leader"] == 1


def test_no_write_after_heal_fails() -> None:
    events, replicas = clean()
    events = [e for e in events if not (e["type"] == "ok" and e["op"] == 5)]
    res = check(events, {n: [m for m in log if m["key"] != "k-late"] for n, log in replicas.items()})
    assert res.counts["liveness"] == 1


def test_dirty_read_of_unacknowledged_message_is_only_counted_when_not_strict() -> None:
    events, replicas = clean()
    events.append({"type": "read", "t": 9.0, "proc": "c0", "node": "n2", "queue": 1, "offset": 1,
                   "msgs": [[1, 300, "k-fail"]]})  # read, then dropped (torn tail of an unacked write)
    assert check(events, replicas).counts["read"] == 1
    res = check(events, replicas, strict_reads=False)
    assert res.ok and res.counts["dirty-read"] == 1
    events.append({"type": "read", "t": 9.5, "proc": "c0", "node": "n2", "queue": 0, "offset": 0,
                   "msgs": [[0, 0, "k2"]]})  # contradicts the acknowledged k0 at q0/0: always an anomaly
    assert check(events, replicas, strict_reads=False).counts["read"] == 1
