"""AutoSwitch HA (Apache RocketMQ 5.3.3 Controller mode) connection state machines, sans-I/O.

No sockets, no clock, no files: each side is fed bytes, the time (ms, any monotonic origin) and
the facts of its store it needs, and returns :class:`Step` values -- the event it recognised,
its new state and the actions (:class:`Send`, :class:`AppendData`, ...) for the driver to carry
out in order. The frames are :mod:`broker.ha.autoswitch.frames`; the transitions are the
tables :data:`SLAVE_TRANSITIONS` and :data:`MASTER_TRANSITIONS` (a row lists the action kinds
that may follow, in order; an action whose condition does not hold is left out, e.g. no
:class:`AppendEpoch` when the frame's epoch is not new).

Slave (``AutoSwitchHAClient``): READY -connected-> HANDSHAKE (sends its handshake) -master's
handshake-> TRANSFER, after the truncation decision (:func:`decide_truncation`):

- local epoch cache empty: a new replica, nothing truncated; it requests from its max offset
  (0: the master picks, from its min offset or, ``isSyncFromLastFile``, its last file);
- else both histories are closed at their max offsets and ``find_consistent_point`` gives the
  offset T: the commitlog and the epoch cache are truncated to T and T is requested;
- no consistent point (-1): refuse, say why, close (Apache retries after 2 s; so does a driver).

In TRANSFER every frame must start at the slave's max offset (unless the slave is empty, as
Apache: ``slavePhyOffset != 0``), heartbeats included; a frame whose epoch differs from the last
one received appends ``<epoch, epochStartOffset>`` to the epoch cache (the cache refuses an
entry that does not grow, as Apache's ``appendEntry``); data is appended at ``offset``; the
confirm offset becomes ``min(confirmOffset, maxPhyOffset)``; the new max offset is acked when it
grew. Every ``haSendHeartbeatInterval`` without a write the last reported offset is acked again;
in HANDSHAKE the deadline comes every interval too (a driver sleeping until it is not woken when the
master's handshake moves the machine to TRANSFER; the first re-ack then waited for
``haHousekeepingInterval``, and on an empty log nothing else makes a slave ack).

Master (``AutoSwitchHAConnection``): HANDSHAKE -slave's handshake-> sends its handshake (max
offset, last epoch, all entries; again for every repeated slave handshake, as Apache) -first
ack-> TRANSFER. The first ack is the request: 0 means the min offset, or with
``isSyncFromLastFile`` the start of the last file (``max - max % mappedFileSizeCommitLog``);
anything else is transferred from exactly. Frames hold at most ``haTransferBatchSize`` bytes and
never cross the end of the epoch they start in, and carry that epoch. (Apache's master labels the
frame cut at an epoch's end with the *next* epoch: a new replica whose first frame is such a one
never learns the epoch of its first bytes, and a master then cannot serve them. Our slave repairs
that label from the master's handshake entries; our master does not produce it, and moves to the
next epoch as soon as the transfer reaches an epoch's end, so a heartbeat there carries it.)
A heartbeat (empty frame at the next offset) goes out after ``haSendHeartbeatInterval`` without
a write. Each ack yields :class:`SlaveAcked`, with the
caught-up time of Apache's ``maybeExpandInSyncStateSet`` rule, for
:class:`broker.ha.autoswitch.sync_state.SyncStateSet`.

Both sides: ``haHousekeepingInterval`` without reading a byte closes the connection (checked in
HANDSHAKE too: Apache's slave only checks it in TRANSFER); a malformed frame (:class:`FrameError`)
or a frame of the wrong state closes it. Named divergences: our slave acks right after the
handshake (Apache waits for the heartbeat interval, the same bytes later); our master refuses an
ack before the slave's handshake (no slave id), a slave handshake in TRANSFER (Apache's slave
never sends either), a first ack beyond our max offset (Apache would wait forever) and a later
ack beyond what was sent (a forged ack never counts for the SyncStateSet or a put).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional, Protocol, Sequence

from broker.ha.autoswitch.actions import (
    Act,
    Action,
    AppendData,
    AppendEpoch,
    Close,
    Send,
    SetConfirmOffset,
    SlaveAcked,
    StartTransfer,
    TruncateEpochs,
    TruncateLog,
)
from broker.ha.autoswitch.checkpoint_file import CheckpointFileError
from broker.ha.autoswitch.epoch_file import EpochEntry, EpochFileCache, find_consistent_point
from broker.ha.autoswitch.frames import (
    DEFAULT_MAX_BODY_SIZE,
    MAX_EPOCH_ENTRIES,
    FrameError,
    HAConnectionState,
    MasterFrameDecoder,
    MasterHandshake,
    SlaveAck,
    SlaveFrameDecoder,
    SlaveHandshake,
    TransferFrame,
    encode_master_handshake,
    encode_slave_ack,
    encode_slave_handshake,
    encode_transfer_header,
)
from broker.ha.handshake import SessionMac

__all__ = [
    "Act", "Action", "AppendData", "AppendEpoch", "Close", "Send", "SetConfirmOffset", "SlaveAcked",
    "StartTransfer", "TruncateEpochs", "TruncateLog", "Ev", "Step", "SLAVE_TRANSITIONS",
    "MASTER_TRANSITIONS", "TruncationDecision", "decide_truncation", "SlaveMachine", "MasterMachine",
    "EpochHistory",
]

S = HAConnectionState


class Ev(enum.Enum):
    CONNECTED = "connected"
    HANDSHAKE_NEW_REPLICA = "handshake_new_replica"
    HANDSHAKE_CONSISTENT = "handshake_consistent"
    HANDSHAKE_NO_CONSISTENT_POINT = "handshake_no_consistent_point"
    TRANSFER_FRAME = "transfer_frame"
    OFFSET_MISMATCH = "offset_mismatch"
    STATE_MISMATCH = "state_mismatch"
    SLAVE_HANDSHAKE = "slave_handshake"
    FIRST_ACK = "first_ack"
    ACK = "ack"
    HEARTBEAT_DUE = "heartbeat_due"
    MALFORMED = "malformed"
    EXPIRED = "expired"
    CLOSED = "closed"


Row = tuple[HAConnectionState, tuple[Act, ...]]
_CLOSE: tuple[Act, ...] = (Act.CLOSE,)

#: ``AutoSwitchHAClient``: (state, event) -> (next state, action kinds in order).
SLAVE_TRANSITIONS: dict[tuple[HAConnectionState, Ev], Row] = {
    (S.READY, Ev.CONNECTED): (S.HANDSHAKE, (Act.SEND,)),
    (S.HANDSHAKE, Ev.HANDSHAKE_NEW_REPLICA): (S.TRANSFER, (Act.SEND,)),
    (S.HANDSHAKE, Ev.HANDSHAKE_CONSISTENT): (S.TRANSFER, (Act.TRUNCATE_LOG, Act.TRUNCATE_EPOCHS, Act.SEND)),
    (S.HANDSHAKE, Ev.HANDSHAKE_NO_CONSISTENT_POINT): (S.READY, _CLOSE),
    (S.HANDSHAKE, Ev.STATE_MISMATCH): (S.READY, _CLOSE),
    (S.HANDSHAKE, Ev.MALFORMED): (S.READY, _CLOSE),
    (S.HANDSHAKE, Ev.EXPIRED): (S.READY, _CLOSE),
    (S.HANDSHAKE, Ev.CLOSED): (S.READY, ()),
    (S.TRANSFER, Ev.TRANSFER_FRAME): (S.TRANSFER, (Act.APPEND_EPOCH, Act.APPEND_DATA,
                                                   Act.SET_CONFIRM_OFFSET, Act.SEND)),
    (S.TRANSFER, Ev.OFFSET_MISMATCH): (S.READY, _CLOSE),
    (S.TRANSFER, Ev.STATE_MISMATCH): (S.READY, _CLOSE),
    (S.TRANSFER, Ev.HEARTBEAT_DUE): (S.TRANSFER, (Act.SEND,)),
    (S.TRANSFER, Ev.MALFORMED): (S.READY, _CLOSE),
    (S.TRANSFER, Ev.EXPIRED): (S.READY, _CLOSE),
    (S.TRANSFER, Ev.CLOSED): (S.READY, ()),
}

#: ``AutoSwitchHAConnection``: (state, event) -> (next state, action kinds in order).
MASTER_TRANSITIONS: dict[tuple[HAConnectionState, Ev], Row] = {
    (S.HANDSHAKE, Ev.SLAVE_HANDSHAKE): (S.HANDSHAKE, (Act.SEND,)),
    (S.HANDSHAKE, Ev.FIRST_ACK): (S.TRANSFER, (Act.SLAVE_ACKED, Act.START_TRANSFER)),
    (S.HANDSHAKE, Ev.STATE_MISMATCH): (S.SHUTDOWN, _CLOSE),
    (S.HANDSHAKE, Ev.MALFORMED): (S.SHUTDOWN, _CLOSE),
    (S.HANDSHAKE, Ev.EXPIRED): (S.SHUTDOWN, _CLOSE),
    (S.HANDSHAKE, Ev.CLOSED): (S.SHUTDOWN, ()),
    (S.TRANSFER, Ev.ACK): (S.TRANSFER, (Act.SLAVE_ACKED,)),
    (S.TRANSFER, Ev.HEARTBEAT_DUE): (S.TRANSFER, (Act.SEND,)),
    (S.TRANSFER, Ev.STATE_MISMATCH): (S.SHUTDOWN, _CLOSE),
    (S.TRANSFER, Ev.MALFORMED): (S.SHUTDOWN, _CLOSE),
    (S.TRANSFER, Ev.EXPIRED): (S.SHUTDOWN, _CLOSE),
    (S.TRANSFER, Ev.CLOSED): (S.SHUTDOWN, ()),
}


@dataclass(frozen=True)
class Step:
    event: Ev
    state: HAConnectionState
    actions: tuple[Action, ...]


class _Machine:
    _table: dict[tuple[HAConnectionState, Ev], Row]
    state: HAConnectionState

    def _step(self, event: Ev, *actions: Optional[Action]) -> Step:
        row = self._table.get((self.state, event))
        if row is None:
            raise RuntimeError(f"no transition for {event.name} in state {self.state.name}")
        nxt, allowed = row
        done = tuple(a for a in actions if a is not None)
        kinds = [a.kind for a in done]
        order = [allowed.index(k) if k in allowed else -1 for k in kinds]
        if -1 in order or order != sorted(order):
            raise AssertionError(f"{event.name} in {self.state.name}: actions {kinds} not in row {allowed}")
        self.state = nxt
        return Step(event, nxt, done)


# ------------------------------------------------------------------------------- truncation


@dataclass(frozen=True)
class TruncationDecision:
    """``AutoSwitchHAClient.doTruncate``: ``request_offset`` to ack first (-1 when refused)."""

    event: Ev
    request_offset: int
    reason: str = ""


def _closed(entries: Sequence[EpochEntry], end: int) -> list[EpochEntry]:
    cache = EpochFileCache()
    cache.init_cache_from_entries(entries)
    cache.set_last_epoch_entry_end_offset(end)
    return cache.get_all_entries()


def decide_truncation(local: Sequence[EpochEntry], local_max_offset: int,
                      master: Sequence[EpochEntry], master_max_offset: int) -> TruncationDecision:
    """Where a slave with epoch history ``local`` and log end ``local_max_offset`` resumes."""
    if not local:
        return TruncationDecision(Ev.HANDSHAKE_NEW_REPLICA, local_max_offset)
    try:
        theirs = _closed(master, master_max_offset)
    except CheckpointFileError as e:
        return TruncationDecision(Ev.HANDSHAKE_NO_CONSISTENT_POINT, -1,
                                  f"the master's epoch entries are not in order: {e}")
    point = find_consistent_point(_closed(local, local_max_offset), theirs)
    if point < 0:
        return TruncationDecision(
            Ev.HANDSHAKE_NO_CONSISTENT_POINT, -1,
            f"no consistent point between the master's epochs {_show(master)} (max offset "
            f"{master_max_offset}) and ours {_show(local)} (max offset {local_max_offset}): no epoch "
            f"with the same start offset on both; this replica's log cannot follow this master "
            f"(rebuild it from the master, or elect a replica that shares history)")
    return TruncationDecision(Ev.HANDSHAKE_CONSISTENT, point)


def _show(entries: Sequence[EpochEntry]) -> str:
    return "[" + ", ".join(f"{e.epoch}-{e.start_offset}" for e in entries) + "]"


# ------------------------------------------------------------------------------------ slave


class SlaveMachine(_Machine):
    """The slave's half (``AutoSwitchHAClient``); one object lives across reconnections."""

    _table = SLAVE_TRANSITIONS

    def __init__(self, slave_broker_id: int, *, sync_from_last_file: bool = False,
                 async_learner: bool = False, heartbeat_interval_ms: float = 5000,
                 housekeeping_interval_ms: float = 20000,
                 max_body_size: int = DEFAULT_MAX_BODY_SIZE) -> None:
        self.handshake = SlaveHandshake(slave_broker_id, sync_from_last_file, async_learner)
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.housekeeping_interval_ms = housekeeping_interval_ms
        self.max_body_size = max_body_size
        self.state = S.READY
        self.current_received_epoch = -1
        self.current_reported_offset = 0
        self.last_read_ms = 0.0
        self.last_write_ms = 0.0
        self.look_again_ms = 0.0  # in HANDSHAKE: when a driver asleep until next_deadline looks again
        self._mac: Optional[SessionMac] = None
        self._decoder = MasterFrameDecoder(max_body_size=max_body_size)
        self._master_entries: tuple[EpochEntry, ...] = ()

    def connected(self, now_ms: float, local_max_offset: int, mac: Optional[SessionMac] = None) -> Step:
        """A new connection to the master (``connectMaster``): send the handshake."""
        self._mac = mac
        self._decoder = MasterFrameDecoder(mac, max_body_size=self.max_body_size)
        self.current_received_epoch = -1
        self.current_reported_offset = local_max_offset
        self.last_read_ms = self.last_write_ms = now_ms
        self.look_again_ms = now_ms + self.heartbeat_interval_ms
        return self._step(Ev.CONNECTED, Send(encode_slave_handshake(self.handshake, mac)))

    def closed(self) -> Step:
        """The connection is gone (either side closed it)."""
        return self._step(Ev.CLOSED)

    def receive_data(self, data: bytes, now_ms: float) -> None:
        if data:
            self.last_read_ms = now_ms
            self._decoder.feed(data)

    def next_step(self, now_ms: float, local_max_offset: int,
                  local_epochs: Sequence[EpochEntry]) -> Optional[Step]:
        """The step for the next whole frame, None when more bytes are needed. Carry out its
        actions before asking again (the next frame is checked against the new max offset)."""
        if self.state not in (S.HANDSHAKE, S.TRANSFER):
            return None
        try:
            frame = self._decoder.next_frame()
        except FrameError as e:
            return self._step(Ev.MALFORMED, Close(str(e)))
        if frame is None:
            return None
        if isinstance(frame, MasterHandshake):
            if self.state is not S.HANDSHAKE:
                return self._step(Ev.STATE_MISMATCH, Close("the master sent a handshake during transfer"))
            return self._on_handshake(frame, now_ms, local_max_offset, local_epochs)
        if self.state is not S.TRANSFER:
            return self._step(Ev.STATE_MISMATCH, Close("the master sent a transfer frame before its handshake"))
        return self._on_transfer(frame, now_ms, local_max_offset)

    def _ack(self, offset: int, now_ms: float) -> Send:
        self.current_reported_offset = offset
        self.last_write_ms = now_ms
        return Send(encode_slave_ack(offset, self._mac))

    def _on_handshake(self, frame: MasterHandshake, now_ms: float, local_max_offset: int,
                      local_epochs: Sequence[EpochEntry]) -> Step:
        self._master_entries = frame.entries
        d = decide_truncation(local_epochs, local_max_offset, frame.entries, frame.max_offset)
        if d.event is Ev.HANDSHAKE_NO_CONSISTENT_POINT:
            return self._step(d.event, Close(d.reason))
        if d.event is Ev.HANDSHAKE_NEW_REPLICA:
            return self._step(d.event, self._ack(d.request_offset, now_ms))
        return self._step(d.event, TruncateLog(d.request_offset), TruncateEpochs(d.request_offset),
                          self._ack(d.request_offset, now_ms))

    def _on_transfer(self, frame: TransferFrame, now_ms: float, local_max_offset: int) -> Step:
        if local_max_offset != 0 and local_max_offset != frame.offset:
            return self._step(Ev.OFFSET_MISMATCH, Close(
                f"master pushed offset {frame.offset}, not the slave's max offset {local_max_offset}"))
        holder: Optional[AppendEpoch] = None
        epoch: Optional[AppendEpoch] = None
        if frame.epoch != self.current_received_epoch:
            self.current_received_epoch = frame.epoch
            epoch = AppendEpoch(EpochEntry(frame.epoch, frame.epoch_start_offset))
            if frame.data and frame.epoch_start_offset > frame.offset:
                # Apache's master labels the frame that ends an epoch with the next one: the
                # epoch its bytes belong to comes from the master's handshake
                own = self._master_epoch_at(frame.offset)
                if own is not None and own.epoch != frame.epoch:
                    holder = AppendEpoch(EpochEntry(own.epoch, own.start_offset))
        data: Optional[AppendData] = None
        new_max = local_max_offset
        if frame.data:
            data = AppendData(frame.offset, frame.data)
            new_max = frame.offset + len(frame.data)
        ack = self._ack(new_max, now_ms) if new_max > self.current_reported_offset else None
        return self._step(Ev.TRANSFER_FRAME, holder, epoch, data,
                          SetConfirmOffset(min(frame.confirm_offset, new_max)), ack)

    def _master_epoch_at(self, offset: int) -> Optional[EpochEntry]:
        """The master's epoch (from its handshake) that holds ``offset``."""
        found = None
        for e in self._master_entries:
            if e.start_offset <= offset:
                found = e
        return found

    def poll(self, now_ms: float) -> Optional[Step]:
        """Housekeeping (expiry) and the periodic re-ack; None when nothing is due."""
        if self.state in (S.HANDSHAKE, S.TRANSFER) and now_ms - self.last_read_ms > self.housekeeping_interval_ms:
            return self._step(Ev.EXPIRED, Close(
                f"nothing read from the master for {now_ms - self.last_read_ms:.0f} ms "
                f"(haHousekeepingInterval {self.housekeeping_interval_ms:.0f} ms)"))
        if self.state is S.TRANSFER and now_ms - self.last_write_ms > self.heartbeat_interval_ms:
            return self._step(Ev.HEARTBEAT_DUE, self._ack(self.current_reported_offset, now_ms))
        if self.state is S.HANDSHAKE and now_ms >= self.look_again_ms:
            self.look_again_ms = now_ms + self.heartbeat_interval_ms
        return None

    def next_deadline(self) -> Optional[float]:
        """When :meth:`poll` may next have something to do. In HANDSHAKE that is every
        ``haSendHeartbeatInterval`` too: the master's handshake moves the machine to TRANSFER,
        whose re-ack is due one interval after the handshake's ack, and a driver asleep until the
        deadline it read in HANDSHAKE is not woken by that (it would re-ack only after
        ``haHousekeepingInterval``: on an empty log, where nothing else makes the slave ack, its
        SyncStateSet proposal was not repeated for 20 s)."""
        if self.state is S.TRANSFER:
            return min(self.last_read_ms + self.housekeeping_interval_ms,
                       self.last_write_ms + self.heartbeat_interval_ms)
        if self.state is S.HANDSHAKE:
            return min(self.last_read_ms + self.housekeeping_interval_ms, self.look_again_ms)
        return None


# ----------------------------------------------------------------------------------- master


class EpochHistory(Protocol):
    """What the master reads of its :class:`EpochFileCache`."""

    def get_all_entries(self) -> list[EpochEntry]: ...
    def last_epoch(self) -> int: ...
    def get_entry(self, epoch: int) -> Optional[EpochEntry]: ...
    def first_entry(self) -> Optional[EpochEntry]: ...
    def next_entry(self, epoch: int) -> Optional[EpochEntry]: ...
    def find_epoch_entry_by_offset(self, offset: int) -> Optional[EpochEntry]: ...


class MasterMachine(_Machine):
    """The master's half of one connection (``AutoSwitchHAConnection``)."""

    _table = MASTER_TRANSITIONS

    def __init__(self, epochs: EpochHistory, *, now_ms: float, mapped_file_size: int,
                 transfer_batch_size: int = 32 * 1024, heartbeat_interval_ms: float = 5000,
                 housekeeping_interval_ms: float = 20000, mac: Optional[SessionMac] = None) -> None:
        if mapped_file_size <= 0 or transfer_batch_size <= 0:
            raise ValueError("mapped_file_size and transfer_batch_size must be positive")
        self.epochs = epochs
        self.mapped_file_size = mapped_file_size
        self.transfer_batch_size = transfer_batch_size
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.housekeeping_interval_ms = housekeeping_interval_ms
        self.state = S.HANDSHAKE
        self.slave: Optional[SlaveHandshake] = None
        self.slave_request_offset = -1
        self.slave_ack_offset = -1
        self.next_transfer_from = -1
        self.current_transfer_epoch = -1
        self.current_epoch_end = 0  # -1: the last (open) epoch
        self.last_master_max_offset = -1
        self.last_transfer_time_ms = 0.0
        self.last_read_ms = self.last_write_ms = now_ms
        self._mac = mac
        self._decoder = SlaveFrameDecoder(mac)

    @property
    def slave_id(self) -> int:
        return self.slave.slave_broker_id if self.slave is not None else -1

    @property
    def transfer_from(self) -> Optional[int]:
        """The offset of the next byte to send, None until :meth:`start_transfer` succeeded."""
        return self.next_transfer_from if self.current_transfer_epoch >= 0 else None

    def closed(self) -> Step:
        return self._step(Ev.CLOSED)

    def receive_data(self, data: bytes, now_ms: float) -> None:
        if data:
            self.last_read_ms = now_ms
            self._decoder.feed(data)

    def next_step(self, now_ms: float, master_max_offset: int) -> Optional[Step]:
        """The step for the next whole slave frame, None when more bytes are needed."""
        if self.state is S.SHUTDOWN:
            return None
        try:
            frame = self._decoder.next_frame()
        except FrameError as e:
            return self._step(Ev.MALFORMED, Close(str(e)))
        if frame is None:
            return None
        if isinstance(frame, SlaveHandshake):
            if self.state is not S.HANDSHAKE:
                return self._step(Ev.STATE_MISMATCH, Close("the slave sent a handshake during transfer"))
            self.slave = frame
            entries = self.epochs.get_all_entries()
            if len(entries) > MAX_EPOCH_ENTRIES:
                return self._step(Ev.MALFORMED, Close(
                    f"{len(entries)} epoch entries do not fit a handshake ({MAX_EPOCH_ENTRIES} at most)"))
            self.last_write_ms = now_ms
            return self._step(Ev.SLAVE_HANDSHAKE, Send(encode_master_handshake(
                MasterHandshake(master_max_offset, self.epochs.last_epoch(), tuple(entries)), self._mac)))
        return self._on_ack(frame, now_ms, master_max_offset)

    def _on_ack(self, frame: SlaveAck, now_ms: float, master_max_offset: int) -> Step:
        if self.slave is None:
            return self._step(Ev.STATE_MISMATCH, Close("the slave acked before its handshake"))
        first = self.slave_request_offset < 0
        if first and frame.max_offset > master_max_offset:
            return self._step(Ev.MALFORMED, Close(
                f"slave {self.slave_id} requests offset {frame.max_offset} beyond our max offset "
                f"{master_max_offset}: its log is longer than ours and it has no epoch history to "
                f"truncate by; rebuild it from this master"))
        if not first and frame.max_offset > max(self.next_transfer_from, self.slave_request_offset):
            return self._step(Ev.MALFORMED, Close(
                f"slave {self.slave_id} acked {frame.max_offset}, beyond what was sent "
                f"({max(self.next_transfer_from, self.slave_request_offset)})"))
        self.slave_ack_offset = frame.max_offset
        caught_up: Optional[float] = None
        if not self.slave.async_learner and frame.max_offset >= self.last_master_max_offset:
            caught_up = now_ms if master_max_offset == frame.max_offset else self.last_transfer_time_ms
        acked = SlaveAcked(self.slave.slave_broker_id, frame.max_offset, caught_up)
        if first:
            self.slave_request_offset = frame.max_offset
            return self._step(Ev.FIRST_ACK, acked, StartTransfer(frame.max_offset))
        return self._step(Ev.ACK, acked)

    def start_transfer(self, min_offset: int, max_offset: int) -> Optional[str]:
        """Fix where the transfer starts (``nextTransferFromWhere``); a reason when it cannot
        yet (empty log, no epoch for the offset): call again later, heartbeats go on."""
        if self.slave is None or self.slave_request_offset < 0:
            return "no request from the slave yet"
        if self.next_transfer_from < 0:
            if self.slave_request_offset == 0:
                if self.slave.sync_from_last_file:
                    self.next_transfer_from = max(0, max_offset - max_offset % self.mapped_file_size)
                else:
                    self.next_transfer_from = min_offset
            else:
                self.next_transfer_from = self.slave_request_offset
        if self.next_transfer_from < 0:
            return "the master's commitlog is empty"
        entry = self.epochs.find_epoch_entry_by_offset(self.next_transfer_from)
        if entry is None:
            return f"no epoch entry holds offset {self.next_transfer_from}"
        self._enter_epoch(entry)
        return None

    def _enter_epoch(self, entry: EpochEntry) -> None:
        self.current_transfer_epoch = entry.epoch
        self.current_epoch_end = -1 if entry.epoch == self.epochs.last_epoch() else entry.end_offset

    def _advance_epoch(self) -> None:
        """At the end of the current epoch, move to the next one (frames and heartbeats at its
        first offset carry it; Apache only moves when a frame would cross the end)."""
        while self.current_epoch_end != -1 and self.next_transfer_from >= self.current_epoch_end:
            nxt = self.epochs.next_entry(self.current_transfer_epoch)
            if nxt is None:
                return
            self._enter_epoch(nxt)

    def _header(self, offset: int, size: int, confirm_offset: int) -> Optional[bytes]:
        entry = self.epochs.get_entry(self.current_transfer_epoch)
        if entry is None and size == 0:
            entry = self.epochs.first_entry()
        if entry is None:
            return None
        return encode_transfer_header(offset, size, entry.epoch, entry.start_offset, confirm_offset)

    def _seal(self, header: bytes, body: bytes) -> list[bytes]:
        out = [header, body] if body else [header]
        if self._mac is not None:
            out.append(self._mac.send.tag(header, body))
        return out

    def next_frame(self, data: bytes | memoryview, *, now_ms: float, master_max_offset: int,
                   confirm_offset: int) -> tuple[list[bytes], int] | Close | None:
        """Cut the next frame from ``data`` (committed bytes at :attr:`transfer_from`): the
        pieces to write and how many bytes of ``data`` it holds; None if nothing can be sent
        yet (no data, no transfer, or the next epoch is not known yet)."""
        if self.state is not S.TRANSFER or self.transfer_from is None or not data:
            return None
        self._advance_epoch()
        size = min(len(data), self.transfer_batch_size)
        end = self.current_epoch_end
        nxt: Optional[EpochEntry] = None
        if end != -1 and self.next_transfer_from + size > end:
            nxt = self.epochs.next_entry(self.current_transfer_epoch)
            if nxt is None:
                return None
            size = end - self.next_transfer_from
        offset = self.next_transfer_from
        header = self._header(offset, size, confirm_offset)
        if header is None:
            return Close(f"no epoch entry {self.current_transfer_epoch} to label the frame at {offset}")
        if nxt is not None:  # after labelling: the cut frame belongs to the epoch it ends
            self._enter_epoch(nxt)
        self.next_transfer_from += size
        self.last_master_max_offset = master_max_offset
        self.last_transfer_time_ms = now_ms
        self.last_write_ms = now_ms
        return self._seal(header, bytes(data[:size])), size

    def poll(self, now_ms: float, confirm_offset: int) -> Optional[Step]:
        """Expiry, or a heartbeat when nothing was written for ``haSendHeartbeatInterval``."""
        if self.state is S.SHUTDOWN:
            return None
        if now_ms - self.last_read_ms > self.housekeeping_interval_ms:
            return self._step(Ev.EXPIRED, Close(
                f"nothing read from slave {self.slave_id} for {now_ms - self.last_read_ms:.0f} ms"))
        if self.state is S.TRANSFER and now_ms - self.last_write_ms > self.heartbeat_interval_ms:
            if self.transfer_from is not None:
                self._advance_epoch()
            header = self._header(self.next_transfer_from, 0, confirm_offset)
            if header is None:
                return self._step(Ev.MALFORMED, Close("the master has no epoch entry: not a master"))
            self.last_write_ms = now_ms
            return self._step(Ev.HEARTBEAT_DUE, Send(b"".join(self._seal(header, b""))))
        return None

    def next_deadline(self) -> Optional[float]:
        if self.state is S.SHUTDOWN:
            return None
        expiry = self.last_read_ms + self.housekeeping_interval_ms
        if self.state is S.TRANSFER:
            return min(expiry, self.last_write_ms + self.heartbeat_interval_ms)
        return expiry
