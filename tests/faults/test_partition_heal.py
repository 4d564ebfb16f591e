"""Issue 24.5: a partition heals in seconds, even when the old connections stay silent.

Three real ``mqbroker`` processes in DLedger mode, every peer link behind the fault proxy. A
producer appends at a steady rate to the leader. The proxy then blackholes every link of one
follower (or only what a follower says to the leader: a deaf leader) with ``keep_dead``: the
connections that lost bytes are **not** closed at the heal, they stay silent, as a TCP
connection whose retransmission timer has backed off does. Only a member that notices a silent
peer and redials recovers. After the heal, catch-up is timed (polled every 20 ms, bounded) and
printed; the leader and its term must not change, and the group keeps taking writes during
every partition.

Before the fix (no silent-peer detection, dials of up to 2 x 2 s, backoff to 1 s) the cut
follower never caught up within 30 s on these dead connections. The test fails past
:data:`CATCH_UP_BOUND_S` (10 s), which only the old behaviour reaches; issue 24.5's target of
2 s is a measurement, printed (0.1-0.5 s, also under a CPU hog), not asserted: a timing target
in a test fails on a busy machine (it did: a 2 s bound and a "half the rate was acked" check
both failed in a hog run) without saying anything about the code.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Optional

import pytest

from broker.api.client import BrokerClientError, SyncBrokerClient
from tests.faults.harness.cluster import DLEDGER_IDS, DLedgerCluster, TOPIC
from tests.faults.harness.proxy import Fault

pytestmark = pytest.mark.multiprocess

CATCH_UP_BOUND_S = 10.0
PARTITION_S = 4.0
RATE_PER_S = 100          # steady appends during the whole test
BODY = b"x" * 1024
DEAD = Fault(blackhole=True, keep_dead=True)


class SteadyProducer:
    """Appends one 1 KiB message every 1/RATE_PER_S s to the current leader (thread)."""

    def __init__(self, cluster: DLedgerCluster) -> None:
        self.cluster = cluster
        self.leader: Optional[str] = None
        self.acked = 0
        self.failed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="steady-producer", daemon=True)

    def start(self, leader: str) -> None:
        self.leader = leader
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        period = 1.0 / RATE_PER_S
        next_at = time.monotonic()
        client = SyncBrokerClient(self.cluster.address(self.leader), timeout=3.0)  # type: ignore[arg-type]
        try:
            while not self._stop.is_set():
                try:
                    client.send(TOPIC, BODY)
                    self.acked += 1
                except (BrokerClientError, OSError):
                    self.failed += 1
                next_at += period
                self._stop.wait(max(0.0, next_at - time.monotonic()))
        finally:
            client.close()


def dledger_status(cluster: DLedgerCluster, n: str) -> dict[str, Any]:
    st = cluster.status(n, timeout=1.0) or {}
    return st.get("dledger") or {}


def wait_leader(cluster: DLedgerCluster, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        n = cluster.leader()
        if n is not None:
            return n
        time.sleep(0.05)
    raise AssertionError(f"no single master within {timeout}s")


def cut(cluster: DLedgerCluster, links: list[str]) -> None:
    for link in links:
        for direction in ("fwd", "rev"):
            cluster.hub.set_fault(link, direction, DEAD)


def time_until(pred: Any, t0: float, bound_s: float = 30.0, every_s: float = 0.02) -> Optional[float]:
    """Seconds from ``t0`` until ``pred()`` holds (polled), None if not within ``bound_s``."""
    while time.monotonic() - t0 < bound_s:
        if pred():
            return time.monotonic() - t0
        time.sleep(every_s)
    return None


@pytest.fixture
def cluster(tmp_path: Path):
    c = DLedgerCluster(tmp_path, seed=2405, file_size=1 << 20)
    try:
        c.start()
        yield c
    finally:
        c.close()


def run_partitions(cluster: DLedgerCluster, links_of: Any, caught_up: Any, rounds: int) -> list[float]:
    ld = wait_leader(cluster)
    term = dledger_status(cluster, ld)["term"]
    producer = SteadyProducer(cluster)
    producer.start(ld)
    times: list[float] = []
    try:
        time.sleep(1.0)
        for r in range(rounds):
            f = [n for n in DLEDGER_IDS if n != ld][r % 2]
            acked_at_cut = producer.acked
            cut(cluster, links_of(ld, f))
            time.sleep(PARTITION_S)
            assert producer.acked > acked_at_cut, f"no write was acknowledged during partition {r}"
            target = dledger_status(cluster, ld)["committedIndex"]
            early = caught_up(ld, f, target)  # a cut follower cannot be there yet
            cluster.hub.heal_all()
            t_heal = time.monotonic()
            took = time_until(lambda f=f, target=target: caught_up(ld, f, target), t_heal)
            print(f"round {r}: follower {f} caught up to index {target} in "
                  f"{'>30' if took is None else f'{took:.2f}'} s after the heal "
                  f"(there before the heal: {early}); proxy {cluster.hub.stats()}")
            assert took is not None, f"{f} did not catch up within 30 s of the heal; logs in {cluster.run_dir}"
            times.append(took)
            time.sleep(0.5)
    finally:
        producer.stop()
    st = dledger_status(cluster, ld)
    print(f"catch-up seconds: {[round(t, 2) for t in times]}; acked {producer.acked}, failed {producer.failed}")
    assert st.get("role") == "LEADER" and st.get("term") == term, f"leader {ld} term {term} -> {st}"
    return times


def test_cut_follower_catches_up_within_2s_of_the_heal_on_silent_connections(cluster: DLedgerCluster) -> None:
    def links_of(ld: str, f: str) -> list[str]:
        return [f"{a}->{b}" for a in DLEDGER_IDS for b in DLEDGER_IDS if a != b and f in (a, b)]

    def caught_up(ld: str, f: str, target: int) -> bool:
        return dledger_status(cluster, f).get("committedIndex", -1) >= target

    times = run_partitions(cluster, links_of, caught_up, rounds=3)
    assert max(times) < CATCH_UP_BOUND_S, times


def test_deaf_leader_hears_its_follower_within_2s_of_the_heal(cluster: DLedgerCluster) -> None:
    """Only what the follower says to the leader is cut: the leader goes on sending into a
    connection that still accepts bytes and hears nothing back (the "deaf" leader of 24.5)."""
    def links_of(ld: str, f: str) -> list[str]:
        return [f"{f}->{ld}"]

    def caught_up(ld: str, f: str, target: int) -> bool:
        fs = (dledger_status(cluster, ld).get("followers") or {}).get(f) or {}
        return (fs.get("matchIndex") or -1) >= target

    times = run_partitions(cluster, links_of, caught_up, rounds=2)
    assert max(times) < CATCH_UP_BOUND_S, times
