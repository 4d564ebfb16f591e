"""Static configuration of one consensus core.  All durations are in ticks.

Rules
-----
- ``peers`` is the whole group, ``self_id`` included; membership is static (DLedger 0.3.1.2 has
  no membership change).  Messages from ids outside ``peers`` are dropped and counted.
- The driver chooses the tick length (the real server: ~10 ms, like DLedger's StateMaintainer).
  Every timeout below is a whole number of ticks, so the core never reads a clock.
- Election timeouts are drawn uniformly from ``[election_ticks_min, election_ticks_max)`` with the
  seeded ``random.Random`` given to the core, redrawn at every role change / timeout.
- ``check_quorum``: a leader that has not heard from a quorum for ``election_ticks_min`` ticks
  steps down (DLedger: "no quorum heartbeat for maxHeartBeatLeak*interval => CANDIDATE").  It is
  also what makes the voters' *leader lease* sound: a node that heard from a leader within the
  minimum election timeout ignores (pre-)votes, unless they carry ``transfer=True``.
- ``boot_lease`` (the server turns it on): the lease also covers a node's first
  ``election_ticks_min`` ticks, before it could have heard from a live leader (issue 24.6).
- ``pre_vote`` (default on) is the chosen defence against term inflation by a partitioned node.
  DLedger's alternative (same-term revote) is not implemented.
- ``leader_barrier``: a new leader asks the driver (``Ready.append_barrier``) to append one
  entry whose body the driver chooses, so earlier-term entries commit promptly (DESIGN §4.1).
- ``unsafe_commit_previous_terms`` exists only so the figure-8 test can show that the checker
  catches DLedger 0.3.1.2's commit rule.  Never enable it elsewhere.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Config:
    self_id: str
    peers: tuple[str, ...]
    election_ticks_min: int = 10
    election_ticks_max: int = 20
    heartbeat_ticks: int = 2
    pre_vote: bool = True
    check_quorum: bool = True
    boot_lease: bool = False          # ignore (pre-)votes for election_ticks_min after start (election.py)
    # replication / flow control
    max_inflight: int = 64            # batches in flight per follower (REPLICATE state)
    max_batch_bytes: int = 1 << 20    # payload bytes per AppendRequest (at least one entry)
    max_batch_entries: int = 1024     # entries per AppendRequest
    push_timeout_ticks: int = 10      # no ack for this long in REPLICATE => back to PROBE
    # proposals
    max_pending: int = 10000          # DLedger maxPendingRequestsNum
    max_wait_ack_ticks: int = 250     # DLedger maxWaitAckTimeMs (2500 ms at 10 ms ticks)
    leader_barrier: bool = False
    # leadership transfer / preferred leader
    preferred_leaders: tuple[str, ...] = ()
    preferred_check_ticks: int = 100  # DLedger checks every 1000 ms
    max_transfer_lag: int = 1000      # DLedger maxLeadershipTransferWaitIndex
    transfer_timeout_ticks: int = 0   # 0 => election_ticks_min
    # test only
    unsafe_commit_previous_terms: bool = False

    def __post_init__(self) -> None:
        if self.self_id not in self.peers:
            raise ValueError(f"self_id {self.self_id!r} is not among peers {self.peers!r}")
        if len(set(self.peers)) != len(self.peers):
            raise ValueError(f"duplicate peer ids in {self.peers!r}")
        if not 0 < self.heartbeat_ticks < self.election_ticks_min < self.election_ticks_max:
            raise ValueError("need 0 < heartbeat_ticks < election_ticks_min < election_ticks_max")
        for name in ("max_inflight", "max_batch_bytes", "max_batch_entries", "push_timeout_ticks",
                     "max_pending", "max_wait_ack_ticks", "preferred_check_ticks"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        unknown = set(self.preferred_leaders) - set(self.peers)
        if unknown:
            raise ValueError(f"preferred leaders {sorted(unknown)} are not peers")

    @property
    def quorum(self) -> int:
        return len(self.peers) // 2 + 1

    @property
    def transfer_ticks(self) -> int:
        return self.transfer_timeout_ticks or self.election_ticks_min
