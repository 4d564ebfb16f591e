"""dledger.core: the pure, deterministic Raft state machine (see raft.py and ready.py).

Public API::

    RaftCore(config, log_view, rng, hard_state=HardState(), committed_index=-1)
      .step(msg) .tick() .propose(count) -> AppendDecision .on_persisted(index, term)
      .transfer_leadership(peer) -> Code .campaign()
      .has_ready() .ready() -> Ready .advance(ready) .status() -> Status
"""
from dledger.core.codes import Code, Role, VoteResult
from dledger.core.config import Config
from dledger.core.log import LogView
from dledger.core.messages import (AppendRequest, AppendResponse, Entry, Message, MessageError,
                                   TimeoutNow, VoteRequest, VoteResponse, from_dict)
from dledger.core.raft import RaftCore
from dledger.core.ready import (AppendDecision, Completion, HardState, PeerStatus, Ready,
                                RoleChange, Status)

__all__ = [
    "AppendDecision", "AppendRequest", "AppendResponse", "Code", "Completion", "Config", "Entry",
    "HardState", "LogView", "Message", "MessageError", "PeerStatus", "RaftCore", "Ready", "Role",
    "RoleChange", "Status", "TimeoutNow", "VoteRequest", "VoteResponse", "VoteResult",
    "from_dict",
]
