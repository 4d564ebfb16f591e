"""Classic RocketMQ master/slave HA wire protocol, sans-I/O.

This module owns the bytes and the rules of one HA connection; it never touches a socket, a
file or a clock. Each side is a small state machine that is *fed* bytes and the current time
(milliseconds, any monotonic origin) and *returns* bytes to send and events. The asyncio
drivers (``service.py`` for the master, ``client.py`` for the slave) do the I/O.

Wire format (RocketMQ 4.9.x ``HAConnection`` / ``HAService.HAClient``, unchanged in 5.x's
``DefaultHAConnection`` / ``DefaultHAClient``; all integers big-endian):

- slave -> master: a stream of 8-byte longs ``>q``, each the slave's max commitlog offset
  ("report"). The first one is the *request offset*; every later one is an *ack*. The slave
  reports on connect, after appending data (if its offset grew), and whenever it has written
  nothing for ``haSendHeartbeatInterval``.
- master -> slave: frames ``[phyOffset:8 >q][size:4 >i]`` followed by ``size`` raw commitlog
  bytes. ``size <= haTransferBatchSize``, and a frame never crosses a commitlog file end (the
  driver fetches data with ``CommitLog.get_data``, which stops at the end of the written part of
  one file). ``size == 0`` is a heartbeat, sent after ``haSendHeartbeatInterval`` of silence,
  carrying the offset the master will transfer from next.

Rules the state machines enforce:

- First-request rule (master): a request for offset 0 starts the transfer at the start of the
  master's *last* commitlog file, ``max - max % mappedFileSizeCommitLog``, as RocketMQ does
  (a fresh slave does not copy history). Any other request offset is transferred from exactly.
- Continuity (slave): every frame's ``phyOffset`` must equal the slave's own max offset (only
  checked once the slave holds data, i.e. its offset is not 0, as in RocketMQ). A mismatch is an
  :class:`OffsetMismatch` carrying both offsets; the driver logs both and drops the connection.
- Housekeeping (both sides): ``haHousekeepingInterval`` without reading a byte from the peer
  yields :class:`ConnectionExpired`. (RocketMQ 4.9.x's slave measures from its last *write*,
  which never fires while it heartbeats; we measure reads on both sides, as 5.x's slave does.)
- Malformed input yields a :class:`ProtocolError` with a readable message and the machine goes
  dead (every later call returns nothing): on the master, a negative report, a report beyond the
  master's max offset, a report going backwards, or an ack beyond what was sent; on the slave, a
  negative offset or size, or a frame larger than ``max_frame_size`` (RocketMQ's slave read
  buffer is 4 MiB). The driver closes that one connection.
- Heartbeat/expiry comparisons are strict (``now - last > interval``), like RocketMQ's.
- Authenticated sessions (``haAuthToken``, after :mod:`broker.ha.handshake`): both machines take
  a :class:`~broker.ha.handshake.SessionMac`; every report then is ``offset:8 | tag:16`` and every
  frame ``header | body | tag:16`` (heartbeats included). A tag that does not verify is a
  :class:`ProtocolError`, so a forged or replayed ack is never counted and an injected frame is
  never appended. Without a ``mac`` the bytes are RocketMQ's, unchanged.

Theory of operation: :class:`MasterConnection` parses reports and decides what to send; the
driver asks :attr:`MasterConnection.transfer_from` for the next offset, reads committed bytes
there, and hands them to :meth:`MasterConnection.frames_for` which cuts them into frames and
advances the cursor. :class:`SlaveConnection` parses frames into :class:`DataFrame` events; the
driver appends each to the commitlog at exactly ``event.offset`` and then calls
:meth:`SlaveConnection.appended` with the commitlog's new max offset, which returns the report
to send. Both expose ``poll(now)`` (heartbeat bytes or an expiry event) and ``next_deadline()``
so a driver can sleep exactly until something is due.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final

from broker.ha.handshake import TAG_SIZE, SessionMac

REPORT_SIZE: Final = 8
TRANSFER_HEADER_SIZE: Final = 12
DEFAULT_MAX_FRAME_SIZE: Final = 4 * 1024 * 1024

_REPORT: Final = struct.Struct(">q")
_HEADER: Final = struct.Struct(">qi")


def encode_report(offset: int) -> bytes:
    """Slave -> master: the slave's max commitlog offset as one big-endian long."""
    return _REPORT.pack(offset)


def encode_frame_header(offset: int, size: int) -> bytes:
    """Master -> slave: ``[phyOffset:8][size:4]`` header of a data (or heartbeat) frame."""
    return _HEADER.pack(offset, size)


# --------------------------------------------------------------------------------------- events


@dataclass(frozen=True)
class Event:
    """Base class of everything the state machines report."""


@dataclass(frozen=True)
class SlaveReport(Event):
    """Master side: the slave reported ``offset`` (its max offset). ``first`` marks the request."""

    offset: int
    first: bool = False


@dataclass(frozen=True)
class TransferStarted(Event):
    """Master side: the first request fixed where the transfer starts."""

    request_offset: int
    transfer_from: int


@dataclass(frozen=True)
class DataFrame(Event):
    """Slave side: ``data`` must be appended to the commitlog at exactly ``offset``."""

    offset: int
    data: bytes


@dataclass(frozen=True)
class HeartbeatFrame(Event):
    """Slave side: an empty frame; ``offset`` is where the master will transfer from next."""

    offset: int


@dataclass(frozen=True)
class HAError(Event):
    """Base of the events after which the connection must be closed."""

    message: str


@dataclass(frozen=True)
class ProtocolError(HAError):
    """The peer sent bytes that cannot come from a correct RocketMQ peer."""


@dataclass(frozen=True)
class OffsetMismatch(HAError):
    """Slave side: a frame's ``master_offset`` differs from the slave's max offset."""

    master_offset: int = 0
    slave_offset: int = 0


@dataclass(frozen=True)
class ConnectionExpired(HAError):
    """Nothing was read from the peer for more than ``haHousekeepingInterval``."""

    idle_ms: float = 0.0


# ------------------------------------------------------------------------------- master side


class MasterConnection:
    """The master's half of one HA connection (RocketMQ ``HAConnection`` logic, no I/O)."""

    def __init__(
        self,
        *,
        now_ms: float,
        mapped_file_size: int,
        transfer_batch_size: int = 32 * 1024,
        heartbeat_interval_ms: float = 5000,
        housekeeping_interval_ms: float = 20000,
        mac: SessionMac | None = None,
    ) -> None:
        if mapped_file_size <= 0 or transfer_batch_size <= 0:
            raise ValueError("mapped_file_size and transfer_batch_size must be positive")
        self.mapped_file_size = mapped_file_size
        self.transfer_batch_size = transfer_batch_size
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.housekeeping_interval_ms = housekeeping_interval_ms
        self.slave_request_offset = -1  # first report; -1 until it arrives
        self.slave_ack_offset = -1  # last report
        self._next = -1  # nextTransferFromWhere
        self.last_read_ms = now_ms
        self.last_write_ms = now_ms
        self.error: HAError | None = None
        self.mac = mac
        self.record_size = REPORT_SIZE + (TAG_SIZE if mac is not None else 0)
        #: pieces :meth:`frames_for` returns per frame (header, body[, tag])
        self.pieces_per_frame = 3 if mac is not None else 2
        self._buf = bytearray()

    @property
    def transfer_from(self) -> int | None:
        """Offset of the next byte to send, or None before the slave's first report."""
        return self._next if self._next >= 0 else None

    def _fail(self, error: HAError) -> list[Event]:
        self.error = error
        self._buf.clear()
        return [error]

    def receive_data(self, data: bytes, now_ms: float, master_max_offset: int) -> list[Event]:
        """Feed bytes read from the slave. Returns at most one report (the newest) or an error."""
        if self.error is not None or not data:
            return []
        self.last_read_ms = now_ms
        self._buf += data
        rec = self.record_size
        whole = len(self._buf) - len(self._buf) % rec
        if whole == 0:
            return []
        events: list[Event] = []
        last: int | None = None
        chunk = bytes(self._buf[:whole])
        for pos in range(0, whole, rec):
            raw = chunk[pos : pos + REPORT_SIZE]
            if self.mac is not None and not self.mac.recv.verify(chunk[pos + REPORT_SIZE : pos + rec], raw):
                return events + self._fail(ProtocolError(
                    "report MAC does not verify (a forged, replayed or corrupted ack); not counted"))
            (value,) = _REPORT.unpack(raw)
            problem = self._check_report(value, master_max_offset)
            if problem is not None:
                return events + self._fail(ProtocolError(problem))
            if self.slave_request_offset < 0:
                self.slave_request_offset = value
                self._next = self._start_offset(value, master_max_offset)
                events.append(TransferStarted(value, self._next))
                events.append(SlaveReport(value, first=True))
            else:
                last = value
            self.slave_ack_offset = value
        del self._buf[:whole]
        if last is not None:
            events.append(SlaveReport(last))
        return events

    def _check_report(self, value: int, master_max_offset: int) -> str | None:
        if value < 0:
            return f"slave reported a negative offset {value}"
        if value > master_max_offset:
            return (
                f"slave reported offset {value} beyond the master's max offset {master_max_offset} "
                "(the slave is ahead of this master, or the bytes are not an HA report)"
            )
        if self.slave_request_offset >= 0:
            if value < self.slave_ack_offset:
                return f"slave report went backwards from {self.slave_ack_offset} to {value}"
            if value > max(self._next, self.slave_request_offset):
                return f"slave acknowledged offset {value} beyond what was sent ({self._next})"
        return None

    def _start_offset(self, request: int, master_max_offset: int) -> int:
        if request == 0:
            return max(0, master_max_offset - master_max_offset % self.mapped_file_size)
        return request

    def frames_for(self, data: bytes | memoryview, now_ms: float, max_bytes: int | None = None) -> list[bytes]:
        """Cut committed bytes starting at :attr:`transfer_from` into frames to send.

        ``data`` is what ``CommitLog.get_data(transfer_from)`` returned (it ends at a file end or
        at the written position). At most ``max_bytes`` (default: all) are framed, in chunks of
        ``transfer_batch_size``. Returns header and body pieces in order (copies, so the caller
        may release the mapped buffer); the cursor advances past them.
        """
        if self.error is not None or self._next < 0 or not len(data):
            return []
        view = memoryview(data)
        total = len(view) if max_bytes is None else min(len(view), max(max_bytes, 1))
        out: list[bytes] = []
        pos = 0
        mac = self.mac
        while pos < total:
            size = min(self.transfer_batch_size, total - pos)
            header = _HEADER.pack(self._next, size)
            body = bytes(view[pos : pos + size])
            out.append(header)
            out.append(body)
            if mac is not None:
                out.append(mac.send.tag(header, body))
            self._next += size
            pos += size
        self.last_write_ms = now_ms
        return out

    def check_expired(self, now_ms: float) -> ConnectionExpired | None:
        """Housekeeping alone (for a watchdog that must not wait on a blocked writer)."""
        if self.error is not None:
            return None
        idle = now_ms - self.last_read_ms
        if idle > self.housekeeping_interval_ms:
            self.error = ConnectionExpired(
                f"no report from the slave for {idle:.0f} ms (haHousekeepingInterval "
                f"{self.housekeeping_interval_ms:.0f} ms)",
                idle_ms=idle,
            )
            return self.error
        return None

    def poll(self, now_ms: float) -> bytes | HAError | None:
        """Heartbeat frame due now, an expiry event, or None."""
        if self.error is not None:
            return None
        expired = self.check_expired(now_ms)
        if expired is not None:
            return expired
        if self._next >= 0 and now_ms - self.last_write_ms > self.heartbeat_interval_ms:
            self.last_write_ms = now_ms
            header = _HEADER.pack(self._next, 0)
            return header + self.mac.send.tag(header) if self.mac is not None else header
        return None

    def next_deadline(self) -> float:
        """Time (ms) at which :meth:`poll` may next have something to do."""
        deadline = self.last_read_ms + self.housekeeping_interval_ms
        if self._next >= 0:
            deadline = min(deadline, self.last_write_ms + self.heartbeat_interval_ms)
        return deadline


# -------------------------------------------------------------------------------- slave side


class SlaveConnection:
    """The slave's half of one HA connection (RocketMQ ``HAClient`` logic, no I/O)."""

    def __init__(
        self,
        *,
        slave_max_offset: int,
        now_ms: float,
        heartbeat_interval_ms: float = 5000,
        housekeeping_interval_ms: float = 20000,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        mac: SessionMac | None = None,
    ) -> None:
        if slave_max_offset < 0:
            raise ValueError("slave_max_offset must be >= 0")
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.housekeeping_interval_ms = housekeeping_interval_ms
        self.max_frame_size = max_frame_size
        self.expected_offset = slave_max_offset  # where the next data frame must start
        self.reported_offset = slave_max_offset
        self.last_read_ms = now_ms
        self.last_write_ms = now_ms
        self.error: HAError | None = None
        self.mac = mac
        self._tag_size = TAG_SIZE if mac is not None else 0
        self._buf = bytearray()

    def _report(self, offset: int) -> bytes:
        raw = encode_report(offset)
        return raw + self.mac.send.tag(raw) if self.mac is not None else raw

    def initiate(self, now_ms: float) -> bytes:
        """The first report (the request offset), sent as soon as the connection is up."""
        self.last_write_ms = now_ms
        return self._report(self.reported_offset)

    def _fail(self, error: HAError) -> list[Event]:
        self.error = error
        self._buf.clear()
        return [error]

    def receive_data(self, data: bytes, now_ms: float) -> list[Event]:
        """Feed bytes from the master; returns frames in order (and at most one final error)."""
        if self.error is not None or not data:
            return []
        self.last_read_ms = now_ms
        buf = self._buf
        buf += data
        events: list[Event] = []
        error: HAError | None = None
        pos = 0
        end = len(buf)
        tag_size = self._tag_size
        with memoryview(buf) as view:
            while end - pos >= TRANSFER_HEADER_SIZE:
                offset, size = _HEADER.unpack_from(buf, pos)
                error = self._check_frame(offset, size)
                if error is not None or end - pos < TRANSFER_HEADER_SIZE + size + tag_size:
                    break
                start = pos + TRANSFER_HEADER_SIZE
                if self.mac is not None and not self.mac.recv.verify(
                    view[start + size : start + size + tag_size], view[pos:start], view[start : start + size]
                ):
                    error = ProtocolError(f"frame MAC at offset {offset} does not verify "
                                          "(forged, replayed or corrupted data); nothing appended")
                    break
                if size == 0:
                    events.append(HeartbeatFrame(offset))
                else:
                    events.append(DataFrame(offset, bytes(view[start : start + size])))
                    self.expected_offset = offset + size
                pos += TRANSFER_HEADER_SIZE + size + tag_size
        if error is not None:
            return events + self._fail(error)
        if pos:
            del buf[:pos]
        return events

    def _check_frame(self, offset: int, size: int) -> HAError | None:
        if offset < 0:
            return ProtocolError(f"master sent a frame with negative offset {offset}")
        if size < 0 or size > self.max_frame_size:
            return ProtocolError(
                f"master sent a frame of {size} bytes at offset {offset} (allowed 0..{self.max_frame_size})"
            )
        if self.expected_offset != 0 and offset != self.expected_offset:
            return OffsetMismatch(
                f"master pushed offset {offset} but the slave's max offset is {self.expected_offset} "
                f"(MASTER: {offset}, SLAVE: {self.expected_offset})",
                master_offset=offset,
                slave_offset=self.expected_offset,
            )
        return None

    def appended(self, slave_max_offset: int, now_ms: float) -> bytes | None:
        """After appending, tell the machine the commitlog's max offset; returns a report if it grew."""
        if self.error is not None:
            return None
        self.expected_offset = slave_max_offset
        if slave_max_offset > self.reported_offset:
            self.reported_offset = slave_max_offset
            self.last_write_ms = now_ms
            return self._report(slave_max_offset)
        return None

    def poll(self, now_ms: float) -> bytes | HAError | None:
        """Heartbeat report due now, an expiry event, or None."""
        if self.error is not None:
            return None
        idle = now_ms - self.last_read_ms
        if idle > self.housekeeping_interval_ms:
            self.error = ConnectionExpired(
                f"nothing from the master for {idle:.0f} ms (haHousekeepingInterval "
                f"{self.housekeeping_interval_ms:.0f} ms)",
                idle_ms=idle,
            )
            return self.error
        if now_ms - self.last_write_ms > self.heartbeat_interval_ms:
            self.last_write_ms = now_ms
            return self._report(self.reported_offset)
        return None

    def next_deadline(self) -> float:
        """Time (ms) at which :meth:`poll` may next have something to do."""
        return min(self.last_read_ms + self.housekeeping_interval_ms, self.last_write_ms + self.heartbeat_interval_ms)
