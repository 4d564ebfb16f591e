"""The master's SyncStateSet bookkeeping of Apache RocketMQ 5.3.3's ``AutoSwitchHAService``, pure.

No clock, no I/O, no locks: time, the master's max offset and the epoch facts are passed in;
the answers are values. The owner (one event loop) sends a changed set to the controller
(``ALTER_SYNC_STATE_SET``) and calls :meth:`SyncStateSet.set_sync_state_set` with the answer.

Rules (Apache's, the methods named after its own):

- Two sets: the *local* one (last agreed with the controller) and, while a change is on its
  way (``isSynchronizingSyncStateSet``), the *remote* one proposed. :meth:`get_sync_state_set` is
  their union while synchronizing (what confirm offsets and puts are computed over: a member
  being removed still counts, one being added already counts); :meth:`in_sync_replicas_nums` is
  ``max(|local|, |remote|)`` while synchronizing, else ``|local|``.
- Every proposal is built on the one on its way while synchronizing (the remote set), else on
  the local set (Apache builds each on the local set: see the divergences).
- :meth:`maybe_expand` (``maybeExpandInSyncStateSet``): a slave not in the local set joins the
  proposal when its ack reaches the confirm offset (:meth:`get_confirm_offset`) *and* the start
  offset of the master's current (last) epoch, i.e. it holds something of this leader's epoch.
  It is only called when the connection-level rule holds (not an async learner, ack >= the
  master's max offset at the last transfer: :class:`broker.ha.autoswitch.protocol.SlaveAcked`;
  on an empty log that is every ack: no transfer starts there, in Apache either, and the acks
  come from the heartbeats), so a slave outside the local set is proposed again on every such ack,
  as Apache does: a lost or refused alteration is repeated at the slave's next heartbeat.
- :meth:`maybe_shrink` (``maybeShrinkSyncStateSet``): a member whose last caught-up time is
  more than ``haMaxTimeSlaveNotCatchup`` old leaves, and so does a member (other than the master
  itself) with no caught-up time at all (never connected since this master started).
- A connection closing removes its slave from the proposal (``removeConnection``).
- :meth:`compute_confirm_offset` (``computeConfirmOffset``): the master's max offset, lowered to
  the ack of every connected member whose ack is > 0; if a member (not the master) has no
  connection, the stored confirm offset is kept (Apache issue 6662).
- :meth:`get_confirm_offset` (a master's ``CommitLog.getConfirmOffset``): the max offset when the
  local set is the master alone or ``allAckInSyncStateSet`` is off; else the stored value
  (computed the first time). It is recomputed on a member's ack and on a controller answer.
- Puts (``CommitLog.asyncPutMessage`` and ``GroupTransferService.doWaitTransfer``):
  :func:`need_ack_nums` refuses a put with ``IN_SYNC_REPLICAS_NOT_ENOUGH`` below
  ``minInSyncReplicas``, and asks for all of the SyncStateSet (``ALL_ACK_IN_SYNC_STATE_SET``,
  -1) when ``allAckInSyncStateSet``, else ``inSyncReplicas`` acks (the master counts as one);
  :func:`transfer_ok` says whether the acks so far satisfy it. A slave outside the set never
  counts for all-ack.

Named divergences: ``changeToMaster`` drops a last epoch that holds no byte on this replica
before appending the new one. Apache's ``appendEntry`` refuses an entry whose start offset does
not grow, so a master elected at the very offset where the previous epoch began keeps that
epoch's label and writes under it; a replica that wrote a tail in that epoch (the previous master)
then finds a consistent point past the fork and keeps its own bytes under the new master's: the
replicas silently diverge (found by tests/broker/ha/autoswitch/test_replication_properties.py).
Proposals are built on the one on its way, not on the local set: the ReplicasManager sends one
alteration at a time and then only the latest waiting proposal, stamped with the SyncStateSet epoch
of the answer, so a proposal built on the old local set undid the answer (two slaves joining at
once: {0,1} out, {0,2} waiting, the controller agreed to both in turn and slave 1 was out until its
next heartbeat; found by tests/broker/ha/autoswitch/test_two_slaves_join.py). Apache sends both at
once with the same epoch, so the second is fenced and repeated at the next ack (its window is
narrower, not closed: an ack read just after an answer builds on the set before it). The cost: while
an alteration the controller refuses (a proposed slave it finds not alive) is the one on its way,
every later proposal carries it and is refused too, until that slave is alive, lags out
(:meth:`maybe_shrink`) or disconnects. Connections are keyed by slave id (Apache keeps a list, so two connections of
one slave could count twice for a put). Apache's effective confirm offset can move back when the
controller's answer adds a member that acked the old max offset while the master kept writing
(the answer recomputes the minimum): kept as Apache does, since the lower value is the true
"all members hold it" point (a test shows the case).

:class:`ChangeToMaster` is ``changeToMaster`` as a plan of actions on the commitlog and the
epoch cache (the commitlog scan that finds the invalid tail is the store's).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import AbstractSet, Mapping, Optional, Sequence, Union

from broker.ha.autoswitch.epoch_file import EpochEntry

ALL_ACK_IN_SYNC_STATE_SET = -1  # MixAll.ALL_ACK_IN_SYNC_STATE_SET


class SyncStateSet:
    """``AutoSwitchHAService``'s syncStateSet, remoteSyncStateSet, caught-up table and confirm
    offset; ``acks`` holds the connected slaves' last acks (-1 before the first)."""

    def __init__(self, local_broker_id: Optional[int], *, ha_max_time_slave_not_catchup_ms: float = 15000,
                 all_ack_in_sync_state_set: bool = False) -> None:
        self.local_broker_id = local_broker_id
        self.ha_max_time_slave_not_catchup_ms = ha_max_time_slave_not_catchup_ms
        self.all_ack_in_sync_state_set = all_ack_in_sync_state_set
        self.local: set[int] = set()
        self.remote: set[int] = set()
        self.synchronizing = False
        self.caught_up_ms: dict[int, float] = {}
        self.acks: dict[int, int] = {}
        self.confirm_offset = -1

    # ------------------------------------------------------------------ the sets
    def get_local_sync_state_set(self) -> frozenset[int]:
        return frozenset(self.local)

    def get_sync_state_set(self) -> frozenset[int]:
        return frozenset(self.local | self.remote) if self.synchronizing else frozenset(self.local)

    def in_sync_replicas_nums(self) -> int:
        return max(len(self.local), len(self.remote)) if self.synchronizing else len(self.local)

    def _mark_synchronizing(self, proposal: AbstractSet[int]) -> None:
        self.synchronizing = True
        self.remote = set(proposal)

    def _proposal_base(self) -> set[int]:
        """What a new proposal is built on: the one on its way while synchronizing, else the local set."""
        return set(self.remote) if self.synchronizing else set(self.local)

    def set_sync_state_set(self, members: AbstractSet[int], max_phy_offset: int) -> None:
        """The controller's answer (or the set an election gave): it becomes the local set."""
        self.synchronizing = False
        self.local = set(members)
        self.confirm_offset = self.compute_confirm_offset(max_phy_offset)

    # ------------------------------------------------------------------ connections
    def connection_added(self, slave_id: int) -> None:
        self.acks.setdefault(slave_id, -1)

    def connection_removed(self, slave_id: int) -> Optional[frozenset[int]]:
        """``removeConnection``: the new proposal when the slave was a member, else None."""
        self.acks.pop(slave_id, None)
        proposal = self._proposal_base()
        if slave_id not in proposal:
            return None
        proposal.discard(slave_id)
        self._mark_synchronizing(proposal)
        return frozenset(proposal)

    def update_connection_last_caught_up_time(self, slave_id: int, now_ms: float) -> None:
        self.caught_up_ms[slave_id] = max(self.caught_up_ms.get(slave_id, 0.0), now_ms)

    def on_slave_ack(self, slave_id: int, offset: int, caught_up_ms: Optional[float], *,
                     max_phy_offset: int, leader_epoch: Optional[EpochEntry]) -> Optional[frozenset[int]]:
        """One ack read by a connection (``HAServerReader``): record it, maybe expand, update
        the confirm offset. Returns the new proposal when the set grew."""
        self.acks[slave_id] = offset
        proposal = None
        if caught_up_ms is not None:
            self.update_connection_last_caught_up_time(slave_id, caught_up_ms)
            proposal = self.maybe_expand(slave_id, offset, max_phy_offset=max_phy_offset,
                                         leader_epoch=leader_epoch)
        if slave_id in self.local:  # updateConfirmOffsetWhenSlaveAck
            self.confirm_offset = self.compute_confirm_offset(max_phy_offset)
        return proposal

    # ------------------------------------------------------------------ expand / shrink
    def maybe_expand(self, slave_id: int, slave_max_offset: int, *, max_phy_offset: int,
                     leader_epoch: Optional[EpochEntry]) -> Optional[frozenset[int]]:
        if slave_id in self.local or leader_epoch is None:
            return None
        if slave_max_offset < self.get_confirm_offset(max_phy_offset):
            return None
        if slave_max_offset < leader_epoch.start_offset:
            return None
        proposal = self._proposal_base() | {slave_id}
        self._mark_synchronizing(proposal)
        return frozenset(proposal)

    def maybe_shrink(self, now_ms: float) -> tuple[frozenset[int], bool]:
        """The set after dropping the slaves behind for too long, and whether it changed."""
        base = self._proposal_base()
        proposal = set(base)
        for slave_id, at in self.caught_up_ms.items():
            if slave_id in proposal and now_ms - at > self.ha_max_time_slave_not_catchup_ms:
                proposal.discard(slave_id)
        for slave_id in list(proposal):
            if slave_id != self.local_broker_id and slave_id not in self.caught_up_ms:
                proposal.discard(slave_id)
        changed = proposal != base
        if changed:
            self._mark_synchronizing(proposal)
        return frozenset(proposal), changed

    # ------------------------------------------------------------------ confirm offset
    def compute_confirm_offset(self, max_phy_offset: int) -> int:
        members = self.get_sync_state_set()
        for member in members:
            if member not in self.acks and self.local_broker_id is not None and member != self.local_broker_id:
                return self.get_confirm_offset_directly(max_phy_offset)
        confirm = max_phy_offset
        for slave_id, ack in self.acks.items():
            if slave_id in members and ack > 0:
                confirm = min(confirm, ack)
        return confirm

    def get_confirm_offset_directly(self, max_phy_offset: int) -> int:
        return max_phy_offset if len(self.local) == 1 else self.confirm_offset

    def get_confirm_offset(self, max_phy_offset: int) -> int:
        if len(self.local) == 1 or not self.all_ack_in_sync_state_set:
            return max_phy_offset
        if self.confirm_offset < 0:
            self.confirm_offset = self.compute_confirm_offset(max_phy_offset)
        return self.confirm_offset


# ---------------------------------------------------------------------------------- puts


@dataclass(frozen=True)
class AckPolicy:
    """``inSyncReplicas``, ``minInSyncReplicas``, ``allAckInSyncStateSet`` (MessageStoreConfig)."""

    in_sync_replicas: int = 1
    min_in_sync_replicas: int = 1
    all_ack_in_sync_state_set: bool = False


def need_ack_nums(policy: AckPolicy, in_sync_replicas_nums: int) -> Optional[int]:
    """What a SYNC put in Controller mode waits for; None: ``IN_SYNC_REPLICAS_NOT_ENOUGH``."""
    if in_sync_replicas_nums < policy.min_in_sync_replicas:
        return None
    return ALL_ACK_IN_SYNC_STATE_SET if policy.all_ack_in_sync_state_set else policy.in_sync_replicas


def transfer_ok(ack_nums: int, next_offset: int, *, sync_state_set: AbstractSet[int],
                acks: Mapping[int, int], push_to_slave_max_offset: int) -> bool:
    """``GroupTransferService.doWaitTransfer``'s test for one request ending at ``next_offset``."""
    if ack_nums != ALL_ACK_IN_SYNC_STATE_SET:
        if ack_nums <= 1:
            return push_to_slave_max_offset >= next_offset
        return 1 + sum(1 for ack in acks.values() if ack >= next_offset) >= ack_nums
    if len(sync_state_set) <= 1:
        return True
    got = 1 + sum(1 for slave_id, ack in acks.items() if slave_id in sync_state_set and ack >= next_offset)
    return got >= len(sync_state_set)


# ------------------------------------------------------------------------- changeToMaster


@dataclass(frozen=True)
class DestroyConnections:
    pass


@dataclass(frozen=True)
class StopHAClient:
    pass


@dataclass(frozen=True)
class TruncateInvalidMsg:
    """The store scans from its reput offset for the last whole message and truncates the
    dirty tail there (``truncateInvalidMsg``); -1 when dispatch was not behind (nothing cut)."""


@dataclass(frozen=True)
class UpdateConfirmOffset:
    """``setConfirmOffset(computeConfirmOffset())``."""


@dataclass(frozen=True)
class TruncateEpochSuffixByOffset:
    offset: int


@dataclass(frozen=True)
class TruncateEpochSuffixByEpoch:
    epoch: int


@dataclass(frozen=True)
class AppendEpochEntry:
    entry: EpochEntry


@dataclass(frozen=True)
class WaitDispatch:
    """Wait until the ConsumeQueues caught up with the commitlog."""


@dataclass(frozen=True)
class RecoverTopicQueueTable:
    pass


@dataclass(frozen=True)
class SetStateMachineVersion:
    epoch: int


PlanStep = Union[DestroyConnections, StopHAClient, TruncateInvalidMsg, UpdateConfirmOffset,
                 TruncateEpochSuffixByOffset, TruncateEpochSuffixByEpoch, AppendEpochEntry,
                 WaitDispatch, RecoverTopicQueueTable, SetStateMachineVersion]


@dataclass(frozen=True)
class Refused:
    reason: str


class ChangeToMaster:
    """``AutoSwitchHAService.changeToMaster(masterEpoch)`` in two halves around the store's scan."""

    def __init__(self, master_epoch: int) -> None:
        self.master_epoch = master_epoch

    def begin(self, last_epoch: int) -> Union[Refused, list[PlanStep]]:
        if self.master_epoch < last_epoch:
            return Refused(f"newMasterEpoch {self.master_epoch} < lastEpoch {last_epoch}")
        return [DestroyConnections(), StopHAClient(), TruncateInvalidMsg()]

    def finish(self, entries: Sequence[EpochEntry], *, truncate_offset: int,
               max_phy_offset: int) -> list[PlanStep]:
        """After the scan cut the log at ``truncate_offset`` (-1: not cut) and left it ending at
        ``max_phy_offset``; ``entries`` is the epoch cache before this step."""
        steps: list[PlanStep] = [UpdateConfirmOffset()]
        left = list(entries)
        if truncate_offset >= 0:
            steps.append(TruncateEpochSuffixByOffset(truncate_offset))
            left = [e for e in left if e.start_offset < truncate_offset]
        steps += _drop_unwritten_tail(left, self.master_epoch, max_phy_offset)
        steps += [AppendEpochEntry(EpochEntry(self.master_epoch, max_phy_offset)), WaitDispatch(),
                  RecoverTopicQueueTable(), SetStateMachineVersion(self.master_epoch)]
        return steps


def _drop_unwritten_tail(left: list[EpochEntry], master_epoch: int, max_phy_offset: int) -> list[PlanStep]:
    """Apache truncates the epochs >= the new one; we also drop a last epoch that holds no byte
    here (start >= max offset), which ``appendEntry`` would otherwise keep in place of the new one."""
    if left and left[-1].epoch >= master_epoch:
        left = [e for e in left if e.epoch < master_epoch]
        cut = master_epoch
    else:
        cut = None
    if left and left[-1].start_offset >= max_phy_offset:
        cut = left[-1].epoch
    return [TruncateEpochSuffixByEpoch(cut)] if cut is not None else []


def change_to_master_when_last_role_is_master(master_epoch: int, entries: Sequence[EpochEntry],
                                              max_phy_offset: int) -> Union[Refused, list[PlanStep]]:
    """``changeToMasterWhenLastRoleIsMaster``: no truncation, just the new epoch."""
    last = entries[-1].epoch if entries else -1
    if master_epoch < last:
        return Refused(f"newMasterEpoch {master_epoch} < lastEpoch {last}")
    steps = _drop_unwritten_tail(list(entries), master_epoch, max_phy_offset)
    return steps + [AppendEpochEntry(EpochEntry(master_epoch, max_phy_offset)),
                    SetStateMachineVersion(master_epoch)]


def change_to_slave_allowed(new_master_epoch: int, last_epoch: int) -> Optional[Refused]:
    """``changeToSlave``: a slave never follows an older epoch than its last one."""
    if new_master_epoch < last_epoch:
        return Refused(f"newMasterEpoch {new_master_epoch} < lastEpoch {last_epoch}")
    return None
