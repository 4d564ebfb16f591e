"""What the role code sees of a Raft member: two narrow Protocols that :class:`RaftCore` satisfies.

Rules
-----
- ``election.py`` and ``replication.py`` are functions over the member they are part of. They
  take an :class:`ElectionState` or a :class:`ReplicationState`, never the ``RaftCore`` class,
  so neither imports ``raft.py`` and ``raft.py`` alone imports them (issue 26: no import circle
  of more than two modules; ``tests/test_import_graph.py``).
- Each Protocol lists exactly what its role module reads and writes: a read-only ``@property``
  for what it only reads, a plain attribute for what it assigns, a method for each role change
  or output it asks for. A new field the role code needs is added here first, so the surface
  stays visible and small.
- This module imports neither ``raft`` nor the role modules: only the core's value types
  (config, log, messages, codes, progress). It holds no code that runs.

Theory of operation
-------------------
``RaftCore`` matches both Protocols structurally (mypy checks it at every call that passes
``self`` to a role function); nothing is wrapped or copied, so a role function costs what it
cost when it took the ``RaftCore`` itself: the core stays on the hot path with no extra object
or allocation per message. :class:`MemberState` is what both sides share: identity, term,
configuration, the log view and the outbox (``send``).
"""
from __future__ import annotations

from typing import Optional, Protocol

from dledger.core.codes import Role
from dledger.core.config import Config
from dledger.core.log import RaftLog
from dledger.core.messages import Message
from dledger.core.progress import Progress


class MemberState(Protocol):
    """Read by both role modules: who we are, our term, configuration, log; and the outbox."""

    @property
    def id(self) -> str: ...

    @property
    def others(self) -> tuple[str, ...]: ...

    @property
    def cfg(self) -> Config: ...

    @property
    def log(self) -> RaftLog: ...

    @property
    def term(self) -> int: ...

    @property
    def leader_id(self) -> Optional[str]: ...

    def send(self, m: Message) -> None:
        """Queue ``m`` for the next ``Ready``."""


class ElectionState(MemberState, Protocol):
    """What ``election.py`` reads and writes: votes, the election timer, role changes."""

    vote: Optional[str]          # a granted real vote (persisted through the hard state)
    election_elapsed: int        # reset when a real vote is granted

    @property
    def role(self) -> Role: ...

    @property
    def now(self) -> int: ...    # ticks since start (boot lease)

    @property
    def votes(self) -> dict[str, bool]: ...  # this round's answers (filled in place)

    def become_follower(self, term: int, leader: Optional[str]) -> None: ...

    def become_pre_candidate(self) -> None: ...

    def become_candidate(self) -> None: ...

    def become_leader(self) -> None: ...


class ReplicationState(MemberState, Protocol):
    """What ``replication.py`` reads and writes: leader progress and pipeline, follower acks."""

    # leader
    timeout_now_sent: bool
    need_commit_push: bool

    @property
    def prs(self) -> dict[str, Progress]: ...

    @property
    def sendable_last(self) -> int: ...

    @property
    def transferee(self) -> Optional[str]: ...

    def complete_pending(self) -> None:
        """Emit completions for every pending proposal the commit index now covers."""

    # follower
    ack_target: int
    ack_sent: int
    commit_target: int
    begin_resets: int
