"""Listen-port limits: idle and read timeouts, a connection cap, a budget for incomplete frames.

Rules (issue 12; RocketMQ ``NettyServerConfig`` + ``IdleStateHandler`` on the server side):
- **Idle**: a connection that has no request being processed and has completed no request (nor
  been answered) for ``serverChannelMaxIdleTimeSeconds`` (120 s) is closed, as RocketMQ's
  ``NettyConnectManageHandler`` does on ``ALL_IDLE``. A connection with a request in progress (a
  held pull) is never idle.
- **Read timeout**: a connection that has started a frame (remoting) or a request head (HTTP) and
  not finished it within ``serverReadTimeoutMillis`` (30 s) is closed (time while the server
  itself stopped reading it, for flow control, does not count): one byte, then silence, no
  longer holds a connection forever. (RocketMQ has no such timer; a frame of the 16 MiB maximum
  therefore needs more than ~0.5 MiB/s at the default.)
- **Cap**: at most ``serverMaxConnections`` (1024) open connections per port, both protocols
  counted; without ACL a connection beyond it is closed at once, before any byte is read.
- **Eviction** (ACL on, issue 23.6): a connection *proves* itself when a request on it passes
  the ACL (:data:`AUTHENTICATED_TRUST`; :data:`ADMIN_TRUST` for an ``admin: true`` account or a
  white address). On a full port a newcomer is admitted by evicting one connection that is not
  an admin's: from the source address holding the most such connections, the least proven,
  idle before busy, the longest idle first. So sockets that never authenticate (or a deny-all
  account's) cannot hold the cap: they only push out each other, and an admin always gets in and
  is never evicted. Only when every connection is an admin's is the newcomer refused.
- **Idle clock**: only a request the ACL accepted (every request without ACL) resets it; a
  refused request (no/unknown key, bad signature) does not, so a socket that keeps sending
  refused requests is closed as idle.
- **Pending bytes**: a frame announced larger than :data:`SMALL_FRAME` must reserve its whole
  announced length against one budget shared by every connection of the broker
  (``serverMaxPendingBytes``, 64 MiB) before its body is buffered; when the budget cannot hold it
  the connection is closed at once. The reservation is released when the frame completes or the
  connection closes. Smaller frames are not charged, so a small request keeps working while big
  ones wait; their memory is bounded by ``serverMaxConnections x SMALL_FRAME``.
- Every refusal/close is counted (:class:`ListenStats`) and logged as one line naming the peer
  and the reason; past :data:`LOG_BURST` lines per reason and port in :data:`LOG_WINDOW_S`
  seconds the lines are summarised ("... and N more"), so a flood cannot flood the log.

Theory of operation: :class:`ListenLimits` is the policy (pure: :meth:`ListenLimits.verdict`
decides from timestamps), :class:`PendingBudget` the shared byte account, :class:`PortGuard`
the asyncio driver of one listening port: it admits connections (cap), tracks them and runs one
sweep task that asks each connection's :class:`ConnectionClock` for a verdict. Remoting
connections (``broker.remoting.server``) and HTTP connections (``broker.remoting.http_guard``)
both implement :class:`Guarded`.
"""
from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Final, Optional, Protocol

from dledger.ratelog import RateLimitedLog

log = logging.getLogger("broker.remoting.limits")

#: Frames up to this size (length prefix included) are not charged to the pending-bytes budget.
SMALL_FRAME: Final = 64 * 1024
LOG_BURST: Final = 5
LOG_WINDOW_S: Final = 10.0

IDLE: Final = "idle"
READ_TIMEOUT: Final = "read-timeout"
EVICTED: Final = "evicted"

#: how far a connection proved itself (``ConnectionClock.trust``)
UNPROVEN_TRUST: Final = 0
AUTHENTICATED_TRUST: Final = 1
ADMIN_TRUST: Final = 2


@dataclass(frozen=True)
class ListenLimits:
    """The four limits of a listening port (seconds for times; 0 or less disables one)."""

    idle_timeout_s: float = 120.0
    read_timeout_s: float = 30.0
    max_connections: int = 1024
    max_pending_bytes: int = 64 * 1024 * 1024
    evict_unproven: bool = False  # the eviction rule (the broker turns it on with ACL)

    @classmethod
    def from_broker_config(cls, bc: Any) -> "ListenLimits":
        def get(name: str, default: Any) -> Any:
            value = getattr(bc, name, None)
            return default if value is None else value

        return cls(idle_timeout_s=float(get("server_channel_max_idle_time_seconds", 120)),
                   read_timeout_s=float(get("server_read_timeout_millis", 30_000)) / 1000.0,
                   max_connections=int(get("server_max_connections", 1024)),
                   max_pending_bytes=int(get("server_max_pending_bytes", 64 * 1024 * 1024)),
                   evict_unproven=bool(getattr(bc, "acl_enable", False)))

    @property
    def tick_s(self) -> float:
        """How often the sweep runs: a quarter of the shortest timeout, within [0.05, 1] s."""
        times = [t for t in (self.idle_timeout_s, self.read_timeout_s) if t > 0]
        return min(1.0, max(0.05, min(times) / 4)) if times else 1.0

    def verdict(self, clock: "ConnectionClock", now: float) -> Optional[str]:
        """``READ_TIMEOUT``, ``IDLE`` or None (keep) for one connection at ``now`` (monotonic)."""
        if (clock.partial_since is not None and not clock.reading_paused and self.read_timeout_s > 0
                and now - clock.partial_since > self.read_timeout_s):
            return READ_TIMEOUT
        if clock.busy == 0 and self.idle_timeout_s > 0 and now - clock.last_activity > self.idle_timeout_s:
            return IDLE
        return None


@dataclass
class ConnectionClock:
    """What the limits look at: when the connection last completed something, whether a frame or
    head is half received (since when), and how many requests are being processed."""

    last_activity: float = field(default_factory=time.monotonic)
    partial_since: Optional[float] = None
    busy: int = 0
    reading_paused: bool = False  # we stopped reading (flow control): the peer is not the slow one
    trust: int = UNPROVEN_TRUST

    def prove(self, level: int) -> None:
        """A request passed the ACL at ``level`` (a connection never loses what it proved)."""
        self.trust = max(self.trust, level)

    def set_reading_paused(self, paused: bool) -> None:
        """While the server does not read, the read timeout stands still; it restarts on resume."""
        self.reading_paused = paused
        if not paused and self.partial_since is not None:
            self.partial_since = time.monotonic()

    def touch(self) -> None:
        self.last_activity = time.monotonic()

    def partial(self, pending: bool, completed: bool) -> None:
        """After a read: ``pending`` bytes of an unfinished unit buffered; ``completed`` one finished
        (the idle clock is reset later, by :meth:`touch`, if the ACL accepts the request)."""
        now = time.monotonic()
        if completed:
            self.partial_since = now if pending else None
        elif pending and self.partial_since is None:
            self.partial_since = now
        elif not pending:
            self.partial_since = None


class Guarded(Protocol):
    clock: ConnectionClock
    remote_addr: str

    def guard_close(self, reason: str) -> None: ...


def source_address(remote_addr: str) -> str:
    """``ip:port`` -> ``ip`` (the peer's address, shared by all its connections)."""
    return remote_addr.rpartition(":")[0] or remote_addr


class PendingBudget:
    """Bytes reserved by incomplete big frames (and HTTP bodies) across the whole broker."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.reserved = 0
        self.refused = 0

    def reserve(self, n: int) -> bool:
        if n <= 0:
            return True
        if self.limit > 0 and self.reserved + n > self.limit:
            self.refused += 1
            return False
        self.reserved += n
        return True

    def release(self, n: int) -> None:
        self.reserved = max(0, self.reserved - max(0, n))


@dataclass
class ListenStats:
    open: int = 0
    accepted: int = 0
    refused_by_cap: int = 0
    closed_idle: int = 0
    closed_read_timeout: int = 0
    refused_by_budget: int = 0
    evicted: int = 0

    def as_json(self) -> dict[str, int]:
        return {"open": self.open, "accepted": self.accepted, "refusedByCap": self.refused_by_cap,
                "closedIdle": self.closed_idle, "closedReadTimeout": self.closed_read_timeout,
                "refusedByPendingBudget": self.refused_by_budget, "evictedForNewcomer": self.evicted}


class PortGuard:
    """Admission (cap), tracking and the timeout sweep of one listening port."""

    def __init__(self, name: str, limits: ListenLimits, budget: Optional[PendingBudget] = None) -> None:
        self.name = name
        self.limits = limits
        self.budget = budget if budget is not None else PendingBudget(limits.max_pending_bytes)
        self.stats = ListenStats()
        self.conns: set[Guarded] = set()
        self._log = RateLimitedLog(log, LOG_BURST, LOG_WINDOW_S, prefix=f"{name}: ")
        self._sweeper: Optional[asyncio.Task[None]] = None

    # ---- admission and tracking
    def admit(self, conn: Guarded) -> bool:
        """Track ``conn``; on a full port evict one connection (module rules) or, when none may
        go, return False (counted, logged)."""
        cap = self.limits.max_connections
        if cap > 0 and len(self.conns) >= cap and self.limits.evict_unproven:
            victim = self._victim()
            if victim is not None:
                self.forget(victim)
                self.stats.evicted += 1
                self._log.warning(EVICTED, "evicted connection from %s (not an admin's, idle %.1f s) for a newcomer from "
                               "%s: %d connections open (serverMaxConnections=%d)", victim.remote_addr,
                               time.monotonic() - victim.clock.last_activity, conn.remote_addr, len(self.conns) + 1,
                               cap)
                victim.guard_close(EVICTED)
        if cap > 0 and len(self.conns) >= cap:
            self.stats.refused_by_cap += 1
            self._log.warning("cap", "refused connection from %s: %d connections open (serverMaxConnections=%d)",
                           conn.remote_addr, len(self.conns), cap)
            return False
        self.conns.add(conn)
        self.stats.accepted += 1
        self.stats.open = len(self.conns)
        return True

    def _victim(self) -> Optional[Guarded]:
        """The connection a newcomer pushes out (module rules), or None when all are admins'."""
        per_addr: dict[str, int] = {}
        for c in self.conns:
            if c.clock.trust < ADMIN_TRUST:
                a = source_address(c.remote_addr)
                per_addr[a] = per_addr.get(a, 0) + 1
        if not per_addr:
            return None
        return min((c for c in self.conns if c.clock.trust < ADMIN_TRUST),
                   key=lambda c: (-per_addr[source_address(c.remote_addr)], c.clock.trust, c.clock.busy > 0,
                                  c.clock.last_activity))

    def replace(self, old: Guarded, new: Guarded) -> None:
        """The shared port handed ``old``'s transport to another protocol (HTTP)."""
        if old in self.conns:
            self.conns.discard(old)
            self.conns.add(new)

    def forget(self, conn: Guarded) -> None:
        self.conns.discard(conn)
        self.stats.open = len(self.conns)

    def refuse_budget(self, conn: Guarded, wanted: int, what: str = "a frame") -> None:
        self.stats.refused_by_budget += 1
        self._log.warning("budget", "refused %s of %d bytes from %s: it does not fit the %d pending bytes left "
                       "(serverMaxPendingBytes=%d)", what, wanted, conn.remote_addr,
                       max(0, self.budget.limit - self.budget.reserved), self.budget.limit)

    def read_timed_out(self, conn: Guarded, what: str) -> None:
        """Count, log and close a connection whose ``what`` did not arrive within the read timeout."""
        self.forget(conn)
        self.stats.closed_read_timeout += 1
        self._log.warning(READ_TIMEOUT, "closing connection from %s: %s not completed within %.0f ms "
                       "(serverReadTimeoutMillis)", conn.remote_addr, what, self.limits.read_timeout_s * 1000)
        conn.guard_close(READ_TIMEOUT)

    # ---- the sweep
    def start(self) -> None:
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_loop(), name=f"{self.name}-limits")

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            try:
                await self._sweeper
            except asyncio.CancelledError:
                pass
            self._sweeper = None

    def sweep(self, now: Optional[float] = None) -> int:
        """Close every connection whose limits ran out; returns how many."""
        now = time.monotonic() if now is None else now
        closed = 0
        for conn in list(self.conns):
            reason = self.limits.verdict(conn.clock, now)
            if reason is None:
                continue
            closed += 1
            if reason == READ_TIMEOUT:
                self.read_timed_out(conn, "a frame or request head")
                continue
            self.forget(conn)
            self.stats.closed_idle += 1
            self._log.warning(reason, "closing idle connection from %s: no request for %.0f s "
                           "(serverChannelMaxIdleTimeSeconds)", conn.remote_addr, self.limits.idle_timeout_s)
            conn.guard_close(reason)
        self._log.flush(time.monotonic())
        return closed

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self.limits.tick_s)
            try:
                self.sweep()
            except Exception:  # noqa: BLE001 - the sweep must keep running
                log.exception("%s: limits sweep failed", self.name)

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = self.stats.as_json()
        out["pendingBytes"] = self.budget.reserved
        return out
