"""Response codes, vote results and roles, with DLedger 0.3.1.2's names and numeric values.

Rules
-----
- :class:`Code` mirrors ``DLedgerResponseCode`` value for value, so a status or an error printed
  by this library reads like DLedger's.  Nothing here is RocketMQ-specific.
- :class:`VoteResult` mirrors ``VoteResponse.RESULT``; it is carried in :class:`VoteResponse`
  for diagnostics only (the decision is the ``granted`` flag).
- :class:`Role` is the Raft role of a node.  ``PRE_CANDIDATE`` (etcd-raft's pre-vote phase) has
  no DLedger counterpart; :meth:`Role.dledger_name` maps it to ``CANDIDATE`` for status output.
"""
from __future__ import annotations

import enum


class Code(enum.IntEnum):
    """DLedgerResponseCode (DL@0.3.1.2), same numbers."""

    UNKNOWN = -1
    SUCCESS = 200
    TIMEOUT = 300
    METADATA_ERROR = 301
    NETWORK_ERROR = 302
    UNSUPPORTED = 303
    UNKNOWN_GROUP = 400
    UNKNOWN_MEMBER = 401
    UNEXPECTED_MEMBER = 402
    EXPIRED_TERM = 403
    NOT_LEADER = 404
    NOT_FOLLOWER = 405
    INCONSISTENT_STATE = 406
    INCONSISTENT_TERM = 407
    INCONSISTENT_INDEX = 408
    INCONSISTENT_LEADER = 409
    INDEX_OUT_OF_RANGE = 410
    UNEXPECTED_ARGUMENT = 411
    REPEATED_REQUEST = 412
    REPEATED_PUSH = 413
    DISK_ERROR = 414
    DISK_FULL = 415
    TERM_NOT_READY = 416
    FALL_BEHIND_TOO_MUCH = 417
    TAKE_LEADERSHIP_FAILED = 418
    INDEX_LESS_THAN_LOCAL_BEGIN = 419
    REQUEST_WITH_EMPTY_BODYS = 420
    PUSH_REQUEST_IS_FULL = 421
    INTERNAL_ERROR = 500
    TERM_CHANGED = 501
    WAIT_QUORUM_ACK_TIMEOUT = 502
    LEADER_PENDING_FULL = 503
    ILLEGAL_MEMBER_STATE = 504
    LEADER_NOT_READY = 505
    LEADER_TRANSFERRING = 506


class VoteResult(enum.IntEnum):
    """VoteResponse.RESULT (DL@0.3.1.2), in DLedger's declaration order."""

    UNKNOWN = 0
    ACCEPT = 1
    REJECT_UNKNOWN_LEADER = 2
    REJECT_UNEXPECTED_LEADER = 3
    REJECT_EXPIRED_VOTE_TERM = 4
    REJECT_ALREADY_VOTED = 5
    REJECT_ALREADY_HAS_LEADER = 6
    REJECT_TERM_NOT_READY = 7
    REJECT_TERM_SMALL_THAN_LEDGER = 8
    REJECT_EXPIRED_LEDGER_TERM = 9
    REJECT_SMALL_LEDGER_END_INDEX = 10
    REJECT_TAKING_LEADERSHIP = 11


class Role(enum.Enum):
    FOLLOWER = "FOLLOWER"
    PRE_CANDIDATE = "PRE_CANDIDATE"
    CANDIDATE = "CANDIDATE"
    LEADER = "LEADER"

    def dledger_name(self) -> str:
        """DLedger's MemberState.Role name (it has no pre-candidate)."""
        return "CANDIDATE" if self is Role.PRE_CANDIDATE else self.value
