"""Admission on a DLedger port: a connection cap, an unauthenticated-connection cap, a byte budget.

Rules (issue 23.1; the same ideas as the broker's listen-port limits, not its code: dledger
knows nothing of RocketMQ)
-----
* **Before the handshake** a connection is *unauthenticated*: it may announce frames of at most
  ``handshake.HANDSHAKE_MAX_FRAME`` (4 KiB) and lives at most ``handshake_timeout_s`` (2 s). At most
  ``max_unauthenticated`` (64) such connections exist per port, and at most
  ``max_unauthenticated_per_host`` (8) from one remote address. When a new connection would
  exceed either, the **oldest** unauthenticated connection (of that address, resp. overall) is
  closed, not the new one: a flood only evicts itself, and an honest peer, whose handshake takes
  one round trip, gets in unless the flood opens that many connections within its round trip.
* **In total** at most ``max_connections`` (1024) accepted connections; beyond it an
  unauthenticated one is evicted as above, and if every connection is authenticated (only
  holders of the secret can be) the new one is closed before any byte is read.
* **Pending bytes**: a frame over ``framing.SMALL_FRAME`` (64 KiB) whose body is still arriving
  reserves its announced length in one budget shared by every connection of the member
  (``max_pending_bytes``, 128 MiB, twice the default frame limit); a frame that does not fit
  closes its connection (``framing.BudgetExceeded``). Only authenticated connections can announce
  such frames.
* Every refusal, eviction and budget refusal is counted (``PeerTransport.counters``) and logged
  through :class:`dledger.ratelog.RateLimitedLog` (5 lines per reason per 10 s, then a count).

Theory of operation
-------------------
:class:`Admission` is bookkeeping only: ``admit`` returns whether the new connection may stay and
which old ones the driver must close; ``authenticated``/``closed`` move or forget a connection.
Unauthenticated connections are kept in insertion-ordered dicts, so "oldest" is the first key.
:class:`PendingBudget` is the shared byte account the frame decoders reserve against.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable

MIB = 1024 * 1024


@dataclass(frozen=True)
class PortLimits:
    max_connections: int = 1024
    max_unauthenticated: int = 64
    max_unauthenticated_per_host: int = 8
    max_pending_bytes: int = 128 * MIB

    def __post_init__(self) -> None:
        for name in ("max_connections", "max_unauthenticated", "max_unauthenticated_per_host", "max_pending_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")


class PendingBudget:
    """Bytes reserved by unfinished large frames, shared by a port's connections."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.refusals = 0

    def reserve(self, n: int) -> bool:
        if self.used + n > self.limit:
            self.refusals += 1
            return False
        self.used += n
        return True

    def release(self, n: int) -> None:
        self.used = max(0, self.used - n)


class Admission:
    """Which accepted connections may stay (see the module rules)."""

    def __init__(self, limits: PortLimits) -> None:
        self.limits = limits
        self._pending: dict[Hashable, str] = {}  # unauthenticated conn -> remote host, oldest first
        self._by_host: dict[str, dict[Hashable, None]] = {}
        self._authenticated: set[Hashable] = set()

    @property
    def unauthenticated(self) -> int:
        return len(self._pending)

    @property
    def total(self) -> int:
        return len(self._pending) + len(self._authenticated)

    def admit(self, conn: Hashable, host: str) -> tuple[bool, list[Hashable]]:
        """``(stays, evicted)``: the driver closes every evicted connection, and ``conn`` unless it stays."""
        lim = self.limits
        evicted: list[Hashable] = []
        same_host = self._by_host.get(host, {})
        if len(same_host) >= lim.max_unauthenticated_per_host:
            evicted.append(next(iter(same_host)))
        elif len(self._pending) >= lim.max_unauthenticated or self.total >= lim.max_connections:
            if not self._pending:
                return False, []
            evicted.append(next(iter(self._pending)))
        for old in evicted:
            self.closed(old)
        self._pending[conn] = host
        self._by_host.setdefault(host, {})[conn] = None
        return True, evicted

    def authenticated(self, conn: Hashable) -> None:
        if self._forget_pending(conn):
            self._authenticated.add(conn)

    def closed(self, conn: Hashable) -> None:
        self._forget_pending(conn)
        self._authenticated.discard(conn)

    def _forget_pending(self, conn: Hashable) -> bool:
        host = self._pending.pop(conn, None)
        if host is None:
            return False
        peers = self._by_host.get(host)
        if peers is not None:
            peers.pop(conn, None)
            if not peers:
                del self._by_host[host]
        return True
