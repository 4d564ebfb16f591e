"""The small parts the sans-I/O ``ReplicasManager`` is composed of: its pending calls, its timers
and the gate that turns ``NOTIFY_BROKER_ROLE_CHANGED`` (1008) pushes into replica-info queries.

Rules of :class:`RefreshGate` (issue 27: a 1008 push is a wake-up, never an order):

- A push carries no authority (anyone who reaches the broker's port can send one), so the manager
  never reads its header or body; a push only asks for ``CONTROLLER_GET_REPLICA_INFO`` now, and
  only the controller's answer changes the role.
- At most one ``CONTROLLER_GET_REPLICA_INFO`` is in flight. A push that finds one in flight is
  kept as a single follow-up, sent once that one is done (its answer may predate the change the
  push announces); a push that finds a follow-up already waiting, or a manager not RUNNING (the
  register / elect sequence is already asking the controller), costs nothing and is counted in
  :attr:`RefreshGate.dropped`. So a flood of pushes costs at most one controller call at a time.

Theory of operation: the manager asks :meth:`RefreshGate.on_hint` on each push and
:meth:`RefreshGate.follow_up` after each event, passing whether a query is in flight; each says
whether to send one now.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional

from broker.ha.autoswitch.replicas_messages import RequestHeader
from controller.bodies import SyncStateSet

__all__ = ["Pending", "RefreshGate", "Timer"]


@dataclass
class Pending:
    """A controller call awaiting its outcome (keyed by request id in the manager)."""

    code: int
    header: RequestHeader
    body: Optional[SyncStateSet]
    address: str
    redirects: int = 0
    hops: int = 0
    sent_ms: int = 0


class Timer(enum.Enum):
    RETRY = "retry startBasicService"
    HEARTBEAT = "heartbeat"
    CONTROLLER_METADATA = "sync controller metadata"
    REPLICA_INFO = "sync broker metadata"
    CHECK_SYNC_STATE_SET = "check SyncStateSet"


class RefreshGate:
    """Turns 1008 pushes into at most one replica-info query at a time (see the module rules)."""

    def __init__(self) -> None:
        self.hints = 0  # pushes seen
        self.coalesced = 0  # pushes kept as the one follow-up
        self.dropped = 0  # pushes that cost nothing
        self.waiting = False

    def on_hint(self, running: bool, in_flight: bool) -> bool:
        """A push arrived: True when a query is to be sent now."""
        self.hints += 1
        if not running or self.waiting:
            self.dropped += 1
            return False
        if in_flight:
            self.waiting, self.coalesced = True, self.coalesced + 1
            return False
        return True

    def follow_up(self, running: bool, in_flight: bool) -> bool:
        """After an event: True when the waiting follow-up is to be sent now."""
        if not self.waiting or in_flight:
            return False
        self.waiting = False
        return running

    def reset(self) -> None:
        self.waiting = False
