"""Listen-port limits, sans-I/O: the verdict of one connection's clock, the shared pending-bytes
budget, and the port guard's cap and sweep (fake connections, no sockets)."""
from __future__ import annotations

from broker.remoting.limits import IDLE, READ_TIMEOUT, ConnectionClock, ListenLimits, PendingBudget, PortGuard


def test_verdict_read_timeout_idle_busy_and_paused() -> None:
    lim = ListenLimits(idle_timeout_s=10, read_timeout_s=2)
    c = ConnectionClock(last_activity=100.0)
    assert lim.verdict(c, 105.0) is None
    assert lim.verdict(c, 110.5) == IDLE
    c.busy = 1  # a held pull is never idle
    assert lim.verdict(c, 200.0) is None
    c.partial_since = 101.0  # half a frame since 101
    assert lim.verdict(c, 102.5) is None and lim.verdict(c, 103.5) == READ_TIMEOUT
    c.reading_paused = True  # our own flow control: the peer is not slow
    assert lim.verdict(c, 103.5) is None
    assert ListenLimits(idle_timeout_s=0, read_timeout_s=0).verdict(c, 1e9) is None  # 0 disables


def test_budget_reserve_release() -> None:
    b = PendingBudget(100)
    assert b.reserve(60) and not b.reserve(50) and b.refused == 1
    b.release(60)
    assert b.reserve(100) and b.reserved == 100
    assert b.reserve(0)  # nothing to hold
    b.release(1000)
    assert b.reserved == 0


class _Conn:
    def __init__(self, name: str, clock: ConnectionClock) -> None:
        self.remote_addr, self.clock, self.closed_for = name, clock, None

    def guard_close(self, reason: str) -> None:
        self.closed_for = reason


def test_port_guard_cap_and_sweep() -> None:
    g = PortGuard("test", ListenLimits(idle_timeout_s=10, read_timeout_s=1, max_connections=2))
    a = _Conn("a", ConnectionClock(last_activity=0.0))
    b = _Conn("b", ConnectionClock(last_activity=0.0, partial_since=5.0))
    assert g.admit(a) and g.admit(b)
    assert not g.admit(_Conn("c", ConnectionClock()))  # over the cap
    assert g.stats.refused_by_cap == 1 and g.stats.open == 2
    assert g.sweep(now=7.0) == 1 and b.closed_for == READ_TIMEOUT and a.closed_for is None
    assert g.sweep(now=11.0) == 1 and a.closed_for == IDLE
    st = g.status()
    assert (st["open"], st["closedIdle"], st["closedReadTimeout"], st["refusedByCap"]) == (0, 1, 1, 1)


def test_refusal_lines_are_summarised_past_the_burst(caplog) -> None:  # type: ignore[no-untyped-def]
    import time

    from broker.remoting import limits

    g = PortGuard("flood", ListenLimits(max_connections=1))
    assert g.admit(_Conn("first", ConnectionClock()))
    with caplog.at_level("WARNING", logger="broker.remoting.limits"):
        for i in range(50):
            assert not g.admit(_Conn(f"peer{i}", ConnectionClock()))
        assert len(caplog.records) == limits.LOG_BURST
        g._log.flush(time.monotonic() + limits.LOG_WINDOW_S + 1)  # the sweep does this every tick
    assert "and 45 more" in caplog.records[-1].getMessage()
    assert g.stats.refused_by_cap == 50
