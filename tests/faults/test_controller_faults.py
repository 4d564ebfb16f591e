"""The fault-suite topology for Controller mode (issue 27.5): three ``mqcontroller``, three
Controller-mode brokers of one broker set and a name server (tools/controller_cluster.py), under
a continuous load whose every acknowledgement is recorded.

One lean run, faults one after the other, each healed before the next: kill -9 of a slave (the
master shrinks its SyncStateSet and keeps acknowledging; the slave restarts and rejoins it);
SIGSTOP of the master past the controller's heartbeat timeout (another broker of the
SyncStateSet is elected; on SIGCONT the old master steps down and follows it); a partition of
the master (below: it cannot be acknowledged by its slaves, allAckInSyncStateSet, so it stops
acknowledging; the controller elects another member of the SyncStateSet; on the heal the old
master steps down, truncates what it wrote alone and follows); kill -9 of the controller leader
(the brokers keep serving, another controller leads); a partition of the controller leader
(another controller leads in a later term, the brokers keep serving). The load must make
progress after each fault, and at the end every acknowledged send is served exactly once by
every replica (0 lost, read back from all three) and every replica serves the same messages
(the old master's unacknowledged tail is gone).

Partitions (Jepsen's "isolate a node", both directions of every link the node has with the
other nodes; the test's clients still reach every node): every peer link goes through the
fault proxy (tests/faults/harness/proxy.py) as tools/controller_cluster.py builds them
(``links``), and the proxy attributes each connection to the node that dialled it. Partition
of broker B cuts: B <-> every controller door (its heartbeats, its SyncStateSet and replica
queries: B's connections on the shared door links), every HA connection to B's HA port (B
advertises ``brokerIP2:haListenPort`` and the link listens there) and B's own HA connections to
the others, B -> the name server. Partition of controller C cuts: C <-> the other controllers
(DLedger, each direction on its own link) and every broker -> C's door. Not cut, named: a
broker's remoting door serves clients, other brokers (a slave asks the master for its HA
address, and syncs metadata) and the controllers' role pushes on one port, so these calls to B
still arrive (the controllers push only to brokers they see alive, so not to an isolated B; a
controller without a quorum elects nothing, so pushes nothing); the test reads every node's
HTTP ``/status`` directly.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import pytest

from tests.faults.harness.proxy import DIRECTIONS, Fault, ProxyHub
from tools.controller_cluster import ContinuousProducer, ControllerCluster
from tools.procs import wait_until

pytestmark = pytest.mark.multiprocess

TOPIC = "TopicCtlFaults"


class _HubLinks:
    """tools.controller_cluster.Links on a ProxyHub: link ``<src>-><dst>``; one that must keep
    its port listens on 127.0.0.2 (another loopback host)."""

    def __init__(self, hub: ProxyHub) -> None:
        self.hub = hub

    def link(self, src: str, dst: str, target: tuple[str, int], *, framed: bool = False,
             same_port: bool = False) -> tuple[str, int]:
        host = "127.0.0.2" if same_port else "127.0.0.1"
        return host, self.hub.add_link(f"{src}->{dst}", target, framed, listen_host=host,
                                       listen_port=target[1] if same_port else 0)


CUT = Fault(blackhole=True)


def _isolate_broker(hub: ProxyHub, name: str) -> list[str]:
    """Blackhole every link between broker ``name`` and the other nodes (module docstring)."""
    me, cut = f"broker-{name}", []
    for link in hub.links:
        src, _, dst = link.partition("->")
        if src == me or dst == f"{me}-ha":  # its own links, every connection to its HA port
            source, what = None, link
        elif src == "*":  # a shared link (a controller's door, another broker's HA port): its connections
            source, what = me, f"{link}@{me}"
        else:
            continue
        for d in DIRECTIONS:
            hub.set_fault(link, d, CUT, source=source)
        cut.append(what)
    return cut


def _isolate_controller(hub: ProxyHub, pid: str) -> list[str]:
    """Blackhole controller ``pid``'s DLedger links both ways and every broker's link to its door."""
    me = f"controller-{pid}"
    cut = [link for link in hub.links if me in link.split("->") or link.endswith(f"->{me}-door")]
    for link in cut:
        for d in DIRECTIONS:
            hub.set_fault(link, d, CUT)
    return cut


def _dropped(hub: ProxyHub, suffix: str, before: dict[str, dict[str, int]]) -> int:
    """Units the links ending in ``suffix`` dropped since ``before`` (hub.stats())."""
    return sum(st["dropped_units"] - before.get(n, {}).get("dropped_units", 0)
               for n, st in hub.stats().items() if n.endswith(suffix))


def _same_messages(c: ControllerCluster, master: str, name: str) -> Callable[[], bool]:
    return lambda: sorted(c.read_all(name, TOPIC)) == sorted(c.read_all(master, TOPIC))


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
    hub = ProxyHub(seed=27)
    c = ControllerCluster(tmp_path, 3, 3, broker_extra={"haMaxTimeSlaveNotCatchup": 3000}, links=_HubLinks(hub))
    hub.identify_diallers(c.pids)
    load = None
    try:
        t_start = time.monotonic()
        c.start(60)
        c.master(45)
        # the load starts before the SyncStateSet is whole (its acks are checked like the others); the
        # start-up stall that order once avoided (a slave's lost proposal repeated only after 20 s on an
        # empty log) is fixed and tested in tests/broker/ha/autoswitch/test_two_slaves_join.py (d12697f)
        load = ContinuousProducer([b.address for b in c.brokers.values()], TOPIC, writers=2)
        master = _healed(c)
        t_start = time.monotonic() - t_start
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

        # 3. partition of the master from every other node (module docstring), past the heartbeat timeout
        epoch = c.ha(new)["masterEpoch"]
        old, t0, before = new, time.monotonic(), hub.stats()
        cut = _isolate_broker(hub, old)
        try:
            new = c.master(30, skip=(old,))
            assert c.ha(new)["masterEpoch"] > epoch, f"the new master serves a new epoch (cut: {cut})"
            _progress(load, f"the partition of the master {old} (new master {new})")
        finally:
            hub.heal_all()
        # the cut was real: the slaves' HA streams to it, and its own calls to the controllers' doors
        # (links the others use unharmed: only its connections), lost bytes
        assert _dropped(hub, f"->broker-{old}-ha", before) > 0 and _dropped(hub, "-door", before) > 0, hub.stats()
        assert _healed(c) == new, "the healed old master must step down and follow the new one"
        windows["partition-leader"] = (t0, time.monotonic())

        # 4. kill -9 of the controller leader
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

        # 5. partition of the controller leader from the other controllers and the brokers
        leader = c.group.leader(30)
        term = (c.group.status(leader) or {})["term"]
        t0, before = time.monotonic(), hub.stats()
        cut = _isolate_controller(hub, leader)
        try:
            successor = c.group.leader(30, skip=(leader,))
            assert (c.group.status(successor) or {}).get("term", 0) > term, \
                f"another controller leads in a later term (cut: {cut})"
            _progress(load, f"the partition of the controller leader {leader}")
        finally:
            hub.heal_all()
        assert _dropped(hub, f"->controller-{leader}-door", before) > 0, "the brokers' calls to it were cut"
        c.group.leader(30)
        master = _healed(c)
        _progress(load, "the controller leader's heal")
        windows["partition-controller-leader"] = (t0, time.monotonic())

        t_end = time.monotonic()
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
        for n in c.slaves(master):  # the once isolated master kept nothing it wrote alone (truncated)
            wait_until(_same_messages(c, master, n), 15, f"{n} serves exactly the messages {master} serves")
        print(f"\nController-mode faults: {len(acked)} acknowledged, {load.failures} failed attempts, 0 lost on 3 replicas")
        print("windows (s): " + ", ".join(f"{k} {b - a:.1f}" for k, (a, b) in windows.items())
              + f"; start {t_start:.1f}, final checks {time.monotonic() - t_end:.1f}")
    finally:
        if load is not None:
            load.stop()
        c.close()
        hub.close()
