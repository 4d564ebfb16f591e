"""The fault-suite topology for Controller mode (issue 27.5): three ``mqcontroller``, three
Controller-mode brokers of one broker set and a name server (tools/controller_cluster.py), under
a continuous load whose every acknowledgement is recorded.

One lean run, faults one after the other, each healed before the next: kill -9 of a slave (the
master shrinks its SyncStateSet and keeps acknowledging; the slave restarts and rejoins it);
SIGSTOP of the master past the controller's heartbeat timeout (another broker of the
SyncStateSet is elected; on SIGCONT the old master steps down and follows it); kill -9 of the
controller leader (the brokers keep serving, another controller leads). The load must make
progress after each fault, and at the end every acknowledged send is served exactly once by
every replica (0 lost, read back from all three).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import pytest

from tools.controller_cluster import ContinuousProducer, ControllerCluster
from tools.procs import wait_until

pytestmark = pytest.mark.multiprocess

TOPIC = "TopicCtlFaults"


def _progress(load: ContinuousProducer, what: str, timeout: float = 20.0) -> None:
    """Until the load has a new acknowledgement (invoked after this call)."""
    t0 = time.monotonic()
    wait_until(lambda: any(t > t0 for t, _, _ in load.acks[-50:]) or None, timeout,
               f"an acknowledged send after {what} (failed attempts so far: {load.failures})")


def _healed(c: ControllerCluster, timeout: float = 45.0) -> str:
    """The master, once every other broker follows it from its SyncStateSet."""
    master = c.master(timeout)
    for n in c.slaves(master):
        c.wait_role(n, "SLAVE", timeout)
    c.wait_in_sync(master, c.slaves(master), timeout)
    return master


def _holds(c: ControllerCluster, name: str, end: int) -> Callable[[], bool]:
    return lambda: (c.max_offset(name) or 0) >= end


def _serves(c: ControllerCluster, name: str, want: set[str]) -> Callable[[], bool]:
    return lambda: want <= set(c.read_all(name, TOPIC))


def _result(run_dir: Path, load: ContinuousProducer, windows: dict[str, tuple[float, float]],
            lost: set[str], dup: set[str]) -> dict[str, Any]:
    """The run as a row of the session's fault table (tests/faults/conftest.py): per nemesis, the
    acknowledgements in its window, those lost / duplicated on some replica, the longest time
    without an acknowledgement and the time from the fault to the first one."""
    per: dict[str, dict[str, Any]] = {}
    for name, (t0, t1) in windows.items():
        times = sorted(t for t, _, _ in load.acks if t0 <= t <= t1)
        bodies = {b for t, _, b in load.acks if t0 <= t <= t1}
        gaps = [b - a for a, b in zip([t0, *times], [*times, t1])]
        per[name] = {"acked": len(times), "lost": len(bodies & lost), "duplicated": len(bodies & dup),
                     "indeterminate": 0, "max_unavailable_s": round(max(gaps), 3),
                     "max_recovery_s": round(times[0] - t0, 3) if times else round(t1 - t0, 3)}
    return {"mode": "controller", "ok": not lost and not dup, "run_dir": str(run_dir), "per_nemesis": per,
            "acked": len(load.acks), "failed_attempts": load.failures}


@pytest.mark.timeout(240)
def test_controller_mode_faults_under_load_lose_no_acknowledged_send(tmp_path: Path, record_result: Any) -> None:
    windows: dict[str, tuple[float, float]] = {}  # nemesis -> (fault start, healed)
    # haMaxTimeSlaveNotCatchup 3 s: a dead slave leaves the SyncStateSet (and stops holding acks) quickly
    c = ControllerCluster(tmp_path, 3, 3, broker_extra={"haMaxTimeSlaveNotCatchup": 3000})
    load = None
    try:
        c.start(60)
        master = _healed(c)
        load = ContinuousProducer([b.address for b in c.brokers.values()], TOPIC, writers=2)
        _progress(load, "the start", 30)

        # 1. kill -9 of a slave
        victim = c.slaves(master)[0]
        t0 = time.monotonic()
        c.kill9(victim)
        _progress(load, f"kill -9 of the slave {victim}")
        c.restart(victim, wait=False)
        c.brokers[victim].wait_ready(60)
        master = _healed(c)
        windows["kill-follower"] = (t0, time.monotonic())

        # 2. SIGSTOP of the master past the heartbeat timeout, then SIGCONT
        epoch = c.ha(master)["masterEpoch"]
        t0 = time.monotonic()
        c.brokers[master].pause()
        try:
            new = c.master(30, skip=(master,))
        finally:
            c.brokers[master].resume()
        assert c.ha(new)["masterEpoch"] > epoch, "the new master serves a new epoch"
        _progress(load, f"the pause of the master {master} (new master {new})")
        assert _healed(c) == new, "the resumed old master must follow the new one"
        windows["pause-leader"] = (t0, time.monotonic())

        # 3. kill -9 of the controller leader
        leader = c.group.leader(30)
        term = (c.group.status(leader) or {})["term"]
        t0 = time.monotonic()
        c.group.kill9(leader)
        _progress(load, f"kill -9 of the controller leader {leader}")
        successor = c.group.leader(30, skip=(leader,))
        assert (c.group.status(successor) or {}).get("term", 0) > term, "another controller leads in a later term"
        c.group.start(leader)
        master = _healed(c)
        _progress(load, "the controller leader's restart")
        windows["kill-controller-leader"] = (t0, time.monotonic())

        load.stop()
        acked = load.acked()
        assert acked, "the load was acknowledged"
        end = c.max_offset(master)
        assert end is not None
        for n in c.slaves(master):
            wait_until(_holds(c, n, end), 30, f"{n} holds the master's log")
        want = set(acked)
        lost: set[str] = set()
        dup: set[str] = set()
        for n in c.brokers:
            try:
                wait_until(_serves(c, n, want), 15, f"{n} serves every acknowledged send")
            except TimeoutError:
                pass  # counted and asserted below, after the run is recorded
            counts: dict[str, int] = {}
            for b in c.read_all(n, TOPIC):
                counts[b] = counts.get(b, 0) + 1
            lost |= want - set(counts)
            dup |= {b for b in want if counts.get(b, 0) > 1}
        record_result(_result(tmp_path, load, windows, lost, dup))
        assert not lost and not dup, f"{len(lost)} acknowledged lost, duplicated: {sorted(dup)[:10]}"
        print(f"\nController-mode faults: {len(acked)} acknowledged, {load.failures} failed attempts, 0 lost on 3 replicas")
    finally:
        if load is not None:
            load.stop()
        c.close()
