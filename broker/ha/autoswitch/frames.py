"""AutoSwitch HA frames (Apache RocketMQ 5.3.3 Controller mode), byte for byte; sans-I/O.

Every integer is big-endian (Java ``ByteBuffer``). ``state`` is the ordinal of
``org.apache.rocketmq.store.ha.HAConnectionState``: READY 0, HANDSHAKE 1, TRANSFER 2,
SUSPEND 3, SHUTDOWN 4. A frame names the state of its sender; a peer in another state drops
the connection (both of Apache's readers do).

Slave -> master (``AutoSwitchHAClient``):

- handshake, 16 bytes (``HANDSHAKE_HEADER_SIZE = 4 + 4 + 8``, ``sendHandshakeHeader``)::

      state=1:4 | isSyncFromLastFile:2 | isAsyncLearner:2 | slaveBrokerId:8

- ack, 12 bytes (``TRANSFER_HEADER_SIZE = 4 + 8``, ``reportSlaveOffset``)::

      state=2:4 | slaveMaxOffset:8

Master -> slave (``AutoSwitchHAConnection``):

- handshake, 20 + 12 n bytes (``HANDSHAKE_HEADER_SIZE = 4 + 4 + 8 + 4``,
  ``buildHandshakeBuffer``)::

      state=1:4 | bodySize=12n:4 | maxPhyOffset:8 | lastEpoch:4 | n x (epoch:4 | startOffset:8)

- transfer, 36 + bodySize bytes (``TRANSFER_HEADER_SIZE = HANDSHAKE_HEADER_SIZE + 8 + 8``,
  ``buildTransferHeaderBuffer``); bodySize 0 is a heartbeat::

      state=2:4 | bodySize:4 | offset:8 | epoch:4 | epochStartOffset:8 | confirmOffset:8 | data

Rules (bounds Apache only has implicitly, each a :class:`FrameError` here, naming the field):

- A master handshake has at most :data:`MAX_EPOCH_ENTRIES` (1000) entries: Apache's master
  builds it in a ``ByteBuffer.allocate(EPOCH_ENTRY_SIZE * 1000)`` and could not send more. Its
  bodySize must be a multiple of 12 (Apache's slave would skip a remainder silently).
- A transfer body is at most ``max_body_size`` (default 4 MiB - 36: Apache's slave reads into
  a 4 MiB buffer, so a larger frame could never complete there). So a hostile peer makes us
  buffer at most one bounded frame.
- A negative bodySize, offset (other than a heartbeat's -1: a master with an empty log sends
  ``nextTransferFromWhere = -1``), ack offset or slaveBrokerId is malformed; flags must be 0 or
  1 (Apache reads anything else as false); a state outside the five ordinals, or one the
  sending role never sends (READY, SUSPEND, SHUTDOWN), is malformed.
- Authenticated sessions (a shared ``haAuthToken``, after :mod:`broker.ha.handshake`): each
  frame is followed by its 16-byte tag ``SessionMac.send.tag(frame)``; a tag that does not
  verify is a :class:`FrameError`. Without a ``mac`` the bytes are Apache's.

Theory of operation: ``encode_*`` build bytes from the frame dataclasses; a decoder is fed
bytes (:meth:`_Decoder.feed`) and yields whole frames from :meth:`_Decoder.next_frame`
(``None``: need more bytes). After a :class:`FrameError` the decoder is dead (every later call
raises the same error): the connection must be closed.
"""
from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Optional, Sequence, Union

from broker.ha.autoswitch.epoch_file import EpochEntry
from broker.ha.handshake import TAG_SIZE, SessionMac


class HAConnectionState(enum.IntEnum):
    """``org.apache.rocketmq.store.ha.HAConnectionState``; the value is the Java ordinal."""

    READY = 0
    HANDSHAKE = 1
    TRANSFER = 2
    SUSPEND = 3
    SHUTDOWN = 4


SLAVE_HANDSHAKE_SIZE = 16  # AutoSwitchHAClient.HANDSHAKE_HEADER_SIZE
SLAVE_ACK_SIZE = 12  # AutoSwitchHAClient.TRANSFER_HEADER_SIZE
MASTER_HANDSHAKE_HEADER_SIZE = 20  # AutoSwitchHAConnection.HANDSHAKE_HEADER_SIZE
MASTER_TRANSFER_HEADER_SIZE = 36  # AutoSwitchHAConnection.TRANSFER_HEADER_SIZE
EPOCH_ENTRY_SIZE = 12  # AutoSwitchHAConnection.EPOCH_ENTRY_SIZE
MAX_EPOCH_ENTRIES = 1000  # AbstractWriteSocketService.handShakeBuffer capacity / 12
SLAVE_READ_BUFFER_SIZE = 4 * 1024 * 1024  # AutoSwitchHAClient.READ_MAX_BUFFER_SIZE
DEFAULT_MAX_BODY_SIZE = SLAVE_READ_BUFFER_SIZE - MASTER_TRANSFER_HEADER_SIZE

_SLAVE_HANDSHAKE = struct.Struct(">ihhq")
_SLAVE_ACK = struct.Struct(">iq")
_STATE = struct.Struct(">i")
_STATE_SIZE = struct.Struct(">ii")
_MASTER_HANDSHAKE = struct.Struct(">iiqi")
_ENTRY = struct.Struct(">iq")
_TRANSFER = struct.Struct(">iiqiqq")


class FrameError(ValueError):
    """The peer sent bytes that no correct AutoSwitch HA peer sends; close the connection."""


# ------------------------------------------------------------------------------------- frames


@dataclass(frozen=True, slots=True)
class SlaveHandshake:
    """Slave -> master, first frame of a connection."""

    slave_broker_id: int
    sync_from_last_file: bool = False
    async_learner: bool = False


@dataclass(frozen=True, slots=True)
class SlaveAck:
    """Slave -> master: the slave's max commitlog offset (the first one is the request)."""

    max_offset: int


@dataclass(frozen=True, slots=True)
class MasterHandshake:
    """Master -> slave: its max offset, last epoch (-1: none) and the whole epoch history."""

    max_offset: int
    epoch: int
    entries: tuple[EpochEntry, ...]


@dataclass(frozen=True, slots=True)
class TransferFrame:
    """Master -> slave: ``data`` belongs at ``offset``; empty ``data`` is a heartbeat."""

    offset: int
    epoch: int
    epoch_start_offset: int
    confirm_offset: int
    data: bytes = b""


SlaveFrame = Union[SlaveHandshake, SlaveAck]
MasterFrame = Union[MasterHandshake, TransferFrame]


# ----------------------------------------------------------------------------------- encoders


def _sealed(raw: bytes, mac: Optional[SessionMac]) -> bytes:
    return raw + mac.send.tag(raw) if mac is not None else raw


def encode_slave_handshake(frame: SlaveHandshake, mac: Optional[SessionMac] = None) -> bytes:
    return _sealed(_SLAVE_HANDSHAKE.pack(HAConnectionState.HANDSHAKE, int(frame.sync_from_last_file),
                                         int(frame.async_learner), frame.slave_broker_id), mac)


def encode_slave_ack(max_offset: int, mac: Optional[SessionMac] = None) -> bytes:
    return _sealed(_SLAVE_ACK.pack(HAConnectionState.TRANSFER, max_offset), mac)


def encode_master_handshake(frame: MasterHandshake, mac: Optional[SessionMac] = None) -> bytes:
    if len(frame.entries) > MAX_EPOCH_ENTRIES:
        raise ValueError(f"{len(frame.entries)} epoch entries: Apache's handshake holds at most "
                         f"{MAX_EPOCH_ENTRIES} (truncate the epoch file's prefix)")
    head = _MASTER_HANDSHAKE.pack(HAConnectionState.HANDSHAKE, EPOCH_ENTRY_SIZE * len(frame.entries),
                                  frame.max_offset, frame.epoch)
    body = b"".join(_ENTRY.pack(e.epoch, e.start_offset) for e in frame.entries)
    return _sealed(head + body, mac)


def encode_transfer_header(offset: int, body_size: int, epoch: int, epoch_start_offset: int,
                           confirm_offset: int) -> bytes:
    return _TRANSFER.pack(HAConnectionState.TRANSFER, body_size, offset, epoch, epoch_start_offset,
                          confirm_offset)


def encode_transfer(frame: TransferFrame, mac: Optional[SessionMac] = None) -> bytes:
    head = encode_transfer_header(frame.offset, len(frame.data), frame.epoch,
                                  frame.epoch_start_offset, frame.confirm_offset)
    return _sealed(head + frame.data, mac)


# ----------------------------------------------------------------------------------- decoders


def _state(value: int, sender: str, allowed: Sequence[HAConnectionState]) -> HAConnectionState:
    if not 0 <= value < len(HAConnectionState):
        raise FrameError(f"{sender} frame with state {value}: not an HAConnectionState ordinal (0..4)")
    state = HAConnectionState(value)
    if state not in allowed:
        raise FrameError(f"{sender} frame with state {state.name}: a {sender} only sends "
                         f"{' or '.join(s.name for s in allowed)}")
    return state


class _Decoder:
    """Shared buffering, MAC check and the dead-after-error rule."""

    _sender = ""

    def __init__(self, mac: Optional[SessionMac] = None) -> None:
        self._buf = bytearray()
        self._mac = mac
        self._tag = TAG_SIZE if mac is not None else 0
        self._error: Optional[FrameError] = None

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> None:
        if self._error is None:
            self._buf += data

    def _fail(self, message: str) -> FrameError:
        self._error = FrameError(message)
        self._buf.clear()
        return self._error

    def _take(self, size: int) -> Optional[bytes]:
        """The next ``size``-byte frame (its tag checked and dropped), None if not all here."""
        if len(self._buf) < size + self._tag:
            return None
        raw = bytes(self._buf[:size])
        if self._mac is not None and not self._mac.recv.verify(self._buf[size:size + self._tag], raw):
            raise self._fail(f"{self._sender} frame whose tag does not verify (forged, replayed or "
                             f"corrupted): dropping the connection")
        del self._buf[:size + self._tag]
        return raw


class SlaveFrameDecoder(_Decoder):
    """Master side: reads what ``AutoSwitchHAClient`` sends (``HAServerReader``)."""

    _sender = "slave"

    def next_frame(self) -> Optional[SlaveFrame]:
        if self._error is not None:
            raise self._error
        if len(self._buf) < _STATE.size:
            return None
        try:
            state = _state(_STATE.unpack_from(self._buf)[0], "slave",
                           (HAConnectionState.HANDSHAKE, HAConnectionState.TRANSFER))
        except FrameError as e:
            raise self._fail(str(e)) from None
        if state is HAConnectionState.HANDSHAKE:
            raw = self._take(SLAVE_HANDSHAKE_SIZE)
            if raw is None:
                return None
            _, sync_flag, learner_flag, broker_id = _SLAVE_HANDSHAKE.unpack(raw)
            for name, flag in (("isSyncFromLastFile", sync_flag), ("isAsyncLearner", learner_flag)):
                if flag not in (0, 1):
                    raise self._fail(f"slave handshake flag {name}={flag}: must be 0 or 1")
            if broker_id < 0:
                raise self._fail(f"slave handshake with slaveBrokerId {broker_id}: must not be negative")
            return SlaveHandshake(broker_id, sync_flag == 1, learner_flag == 1)
        raw = self._take(SLAVE_ACK_SIZE)
        if raw is None:
            return None
        offset = _SLAVE_ACK.unpack(raw)[1]
        if offset < 0:
            raise self._fail(f"slave ack with max offset {offset}: must not be negative")
        return SlaveAck(offset)


class MasterFrameDecoder(_Decoder):
    """Slave side: reads what ``AutoSwitchHAConnection`` sends (``HAClientReader``)."""

    _sender = "master"

    def __init__(self, mac: Optional[SessionMac] = None, *, max_body_size: int = DEFAULT_MAX_BODY_SIZE) -> None:
        super().__init__(mac)
        if max_body_size < 0:
            raise ValueError("max_body_size must not be negative")
        self.max_body_size = max_body_size

    def next_frame(self) -> Optional[MasterFrame]:
        if self._error is not None:
            raise self._error
        if len(self._buf) < _STATE_SIZE.size:
            return None
        value, body_size = _STATE_SIZE.unpack_from(self._buf)
        try:
            state = _state(value, "master", (HAConnectionState.HANDSHAKE, HAConnectionState.TRANSFER))
        except FrameError as e:
            raise self._fail(str(e)) from None
        if body_size < 0:
            raise self._fail(f"master {state.name} frame with bodySize {body_size}: must not be negative")
        if state is HAConnectionState.HANDSHAKE:
            return self._handshake(body_size)
        return self._transfer(body_size)

    def _handshake(self, body_size: int) -> Optional[MasterHandshake]:
        if body_size % EPOCH_ENTRY_SIZE:
            raise self._fail(f"master handshake with bodySize {body_size}: not a multiple of the "
                             f"{EPOCH_ENTRY_SIZE}-byte epoch entry")
        if body_size > EPOCH_ENTRY_SIZE * MAX_EPOCH_ENTRIES:
            raise self._fail(f"master handshake with {body_size // EPOCH_ENTRY_SIZE} epoch entries: "
                             f"at most {MAX_EPOCH_ENTRIES} fit Apache's handshake")
        raw = self._take(MASTER_HANDSHAKE_HEADER_SIZE + body_size)
        if raw is None:
            return None
        _, _, max_offset, epoch = _MASTER_HANDSHAKE.unpack_from(raw)
        entries = tuple(EpochEntry(*_ENTRY.unpack_from(raw, MASTER_HANDSHAKE_HEADER_SIZE + i))
                        for i in range(0, body_size, EPOCH_ENTRY_SIZE))
        for e in entries:
            if e.start_offset < 0:
                raise self._fail(f"master handshake epoch entry {e.epoch}-{e.start_offset}: negative start offset")
        if max_offset < 0:
            raise self._fail(f"master handshake with max offset {max_offset}: must not be negative")
        return MasterHandshake(max_offset, epoch, entries)

    def _transfer(self, body_size: int) -> Optional[TransferFrame]:
        if body_size > self.max_body_size:
            raise self._fail(f"master transfer frame with bodySize {body_size}: larger than the "
                             f"{self.max_body_size}-byte limit (Apache's slave reads into a 4 MiB buffer)")
        raw = self._take(MASTER_TRANSFER_HEADER_SIZE + body_size)
        if raw is None:
            return None
        _, _, offset, epoch, start, confirm = _TRANSFER.unpack_from(raw)
        if offset < (0 if body_size else -1):
            raise self._fail(f"master transfer frame at offset {offset} with {body_size} bytes: "
                             f"offsets are never negative (a heartbeat's -1 aside)")
        return TransferFrame(offset, epoch, start, confirm, raw[MASTER_TRANSFER_HEADER_SIZE:])
