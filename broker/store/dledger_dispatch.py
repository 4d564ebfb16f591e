"""Reading a DLedger commitlog's bytes: the record parser and the barrier message.

Rules (reference §4.4, ``DLedgerCommitLog.checkMessageAndReturnSize``; DESIGN §4.1):
- One parser serves both address spaces of an upgraded store, deciding by content as Apache
  does: if the *second* int at the position is a classic magic (message v1/v2 or the classic
  blank ``0xCBD43194``), the bytes are an old-commitlog record and are parsed classically
  (``buffer_size`` stays -1). Otherwise, if the first int is ``-1`` (``0xFFFFFFFF``), it is the
  DLedger file-end blank ``[0xFFFFFFFF][remaining]``: size 0, the scanner rolls to the next
  file. Otherwise it is a DLedger entry ``[48-byte header][message]``: the message at +48 is
  parsed classically and ``buffer_size = msg_size + 48`` is what the scanner advances by.
  (A DLedger header's second int is the positive entry size, so it never collides with the
  negative classic magics.)
- Beyond Apache, the entry header must agree with its message: magic 1 and
  ``size == msg_size + 48``; a disagreement is a parse failure, never a silent skip.
- Entry boundaries are known even when a body is not a message: :func:`dledger_entry_frame_size`
  recognises an entry *frame* written by DLedger itself (magic 1, ``size == 48 + body_size``,
  index and term >= 0, the pos field equal to the entry's own physical offset, the body CRC
  when non-zero) and returns its size, so dispatch can report such an entry (an outsider's
  200 zero bytes, a crafted record) and go on with the next one. The frame is DLedger's, the
  body is whatever was appended: only the frame is trusted.
- The barrier (DESIGN §4.1) is an ordinary, valid commitlog message on the reserved topic
  ``RMQ_SYS_DLEDGER_BARRIER``, queue 0, empty body, queue offset 0; a new DLedger leader
  appends one so its earlier-term tail commits under the current-term rule. Every reader,
  Apache's included, sees an ordinary message; ConsumeQueueStore never dispatches it.

Theory of operation: pure functions over buffers (bytes, mmap views), no I/O; the classic
``check_message_and_return_size`` does the heavy lifting, this module only routes.
"""
from __future__ import annotations

import struct
from typing import Sequence

from broker.store.dispatch import DispatchRequest
from broker.store.message import (
    BLANK_MAGIC_CODE, DEFAULT_DELAY_LEVELS, MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2,
    MessageExt, check_message_and_return_size, encode_message,
)
from broker.store.message_id import HostAddr

DLEDGER_BODY_OFFSET = 48  # dledger.entry.BODY_OFFSET
DLEDGER_BLANK_MAGIC_CODE = -1  # dledger.store.mmap_file_list.BLANK_MAGIC_CODE
DLEDGER_ENTRY_MAGIC = 1
BARRIER_TOPIC = "RMQ_SYS_DLEDGER_BARRIER"  # broker.store.consume_queue.BARRIER_TOPIC

_CLASSIC_SECOND_INTS = frozenset({BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2})
_II = struct.Struct(">ii")
_BLANK = DispatchRequest("", 0, 0, 0, 0, 0, 0, success=True)


def _failed(size: int) -> DispatchRequest:
    return DispatchRequest("", 0, 0, size, 0, 0, 0, success=False)


def check_dledger_message_and_return_size(buf, offset: int = 0, check_crc: bool = False,
                                          delay_levels: Sequence[int] = DEFAULT_DELAY_LEVELS) -> DispatchRequest:
    """Describe the record at ``offset`` of a DLedger commitlog buffer (module rules)."""
    if offset + 8 > len(buf):
        return _failed(-1)
    first, second = _II.unpack_from(buf, offset)
    if second in _CLASSIC_SECOND_INTS:
        return check_message_and_return_size(buf, offset, check_crc, delay_levels)
    if first == DLEDGER_BLANK_MAGIC_CODE:
        return _BLANK
    if first != DLEDGER_ENTRY_MAGIC:
        return _failed(-1)
    req = check_message_and_return_size(buf, offset + DLEDGER_BODY_OFFSET, check_crc, delay_levels)
    if req.success and req.msg_size > 0:
        if second != req.msg_size + DLEDGER_BODY_OFFSET:
            return _failed(-1)
        req.buffer_size = req.msg_size + DLEDGER_BODY_OFFSET
    elif req.success:  # a classic blank inside an entry body is not a record
        return _failed(-1)
    elif req.msg_size > 0:
        req.buffer_size = req.msg_size + DLEDGER_BODY_OFFSET
    return req


_FRAME = struct.Struct(">iiqqqiiii")  # dledger.entry.HEADER


def dledger_entry_frame_size(buf, pos: int, offset: int) -> int:
    """Size of the DLedger entry frame at ``buf[pos:]`` whose physical offset is ``offset``,
    or -1 if the bytes are not such a frame (module rules). Never raises for bad bytes."""
    if pos < 0 or len(buf) - pos < DLEDGER_BODY_OFFSET:
        return -1
    magic, size, index, term, entry_pos, _channel, _chain, body_crc, body_size = _FRAME.unpack_from(buf, pos)
    if (magic != DLEDGER_ENTRY_MAGIC or body_size < 0 or size != DLEDGER_BODY_OFFSET + body_size
            or pos + size > len(buf) or index < 0 or term < 0 or entry_pos != offset):
        return -1
    if body_crc != 0:
        from dledger.entry import body_crc32

        if body_crc32(memoryview(buf)[pos + DLEDGER_BODY_OFFSET:pos + size]) != body_crc:
            return -1
    return size


def explain_dledger_record(buf, offset: int = 0) -> str:
    """One line on why the bytes at ``offset`` are not a valid DLedger entry or old record."""
    from broker.store.message import explain_invalid_record

    if offset + 8 > len(buf):
        return f"only {len(buf) - offset} bytes left, need a record header"
    first, second = _II.unpack_from(buf, offset)
    if second in _CLASSIC_SECOND_INTS:
        return "old commitlog record: " + explain_invalid_record(buf, offset)
    if first != DLEDGER_ENTRY_MAGIC:
        return f"DLedger entry magic {first} is neither 1 nor the blank -1"
    inner = check_message_and_return_size(buf, offset + DLEDGER_BODY_OFFSET, False)
    if inner.success and inner.msg_size > 0 and second != inner.msg_size + DLEDGER_BODY_OFFSET:
        return f"DLedger entry size {second} != message size {inner.msg_size} + 48"
    return "DLedger entry body: " + explain_invalid_record(buf, offset + DLEDGER_BODY_OFFSET)


def barrier_message(store_host: HostAddr, now_ms: int) -> MessageExt:
    """The barrier as a MessageExt (DESIGN §4.1): empty body, topic RMQ_SYS_DLEDGER_BARRIER, queue 0."""
    return MessageExt(topic=BARRIER_TOPIC, body=b"", queue_id=0, born_timestamp=now_ms,
                      born_host=store_host, store_timestamp=now_ms, store_host=store_host)


def barrier_message_body(store_host: HostAddr, now_ms: int) -> bytes:
    """The encoded barrier message: the body of the no-op entry a new leader appends.

    QUEUEOFFSET is 0 and PHYSICALOFFSET 0 here; the DLedgerCommitLog's append hook writes
    ``entry.pos + 48`` into it like into any other message.
    """
    return bytes(encode_message(barrier_message(store_host, now_ms), 0, 0))


def is_barrier(req: DispatchRequest) -> bool:
    return req.topic == BARRIER_TOPIC
