"""DLedger entry and index-unit codecs, byte-compatible with OpenMessaging DLedger 0.3.1.2.

Rules
-----
* An encoded entry is a 48-byte big-endian header followed by the body::

      offset  field      struct  value
      0       magic      i       CURRENT_MAGIC = 1
      4       size       i       48 + len(body)
      8       index      q       0-based, contiguous
      16      term       q       leader term at append
      24      pos        q       absolute offset of the entry in the data file list (POS_OFFSET)
      32      channel    i       0 (reserved)
      36      chain_crc  i       0 (never computed)
      40      body_crc   i       CRC32 of the body, or 0
      44      body_size  i       len(body)                    (HEADER_SIZE = 44)
      48      body       ...                                  (BODY_OFFSET = 48)

* An index unit is 32 bytes ``>iqiqq``: magic, pos, size, index, term. The unit of entry *i*
  sits at byte ``i * 32`` of the index file list.
* ``body_crc`` (DESIGN §4.3): Apache writes 0. We write ``zlib.crc32(body)`` (the unsigned
  value's 4 bytes, i.e. the Java ``int`` with the same bits) when CRC is enabled, so a bit flip
  is detected instead of replicated; a reader verifies it only when it is non-zero (0 means
  "written by a peer that does not compute it", which is also the CRC of an empty body).
  ``crc=False`` writes 0 and gives byte identity with Apache's files.
* Integers are exposed exactly as the struct format reads them (Java semantics: ``body_crc``
  is a signed 32-bit value).

Theory of operation
-------------------
Everything here is a pure function over buffers. Encoders write into caller-supplied
``bytearray``/``memoryview`` with ``struct.pack_into`` so a batch of entries is built in one
allocation; decoders read with ``unpack_from`` and never copy a body unless a
:class:`DLedgerEntry` is asked for. :func:`iter_headers` and :func:`split_entries` walk a
buffer holding many concatenated encoded entries (the shape of a replication batch) and
validate each header before trusting its size, raising :class:`EntryCorruptionError` that
names the absolute position of the bad entry.
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from typing import Iterator, NamedTuple, Union

Buffer = Union[bytes, bytearray, memoryview]

HEADER = struct.Struct(">iiqqqiiii")
INDEX_UNIT = struct.Struct(">iqiqq")
_POS = struct.Struct(">q")
_INT = struct.Struct(">i")
_INDEX_TERM = struct.Struct(">iiqq")  # magic, (size: untouched), index, term

MAGIC_1 = 1
CURRENT_MAGIC = MAGIC_1
POS_OFFSET = 4 + 4 + 8 + 8  # 24
HEADER_SIZE = POS_OFFSET + 8 + 4 + 4 + 4  # 44 (DLedger's name; the body starts 4 bytes later)
BODY_OFFSET = HEADER_SIZE + 4  # 48
BODY_CRC_OFFSET = 40
INDEX_UNIT_SIZE = 32

assert HEADER.size == BODY_OFFSET and INDEX_UNIT.size == INDEX_UNIT_SIZE


class EntryCorruptionError(ValueError):
    """An encoded entry failed validation; ``pos`` is its absolute position when known."""

    def __init__(self, message: str, *, pos: int | None = None, path: str | None = None) -> None:
        where = []
        if path is not None:
            where.append(f"file {path}")
        if pos is not None:
            where.append(f"pos {pos}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)
        self.pos = pos
        self.path = path


class EntryHeader(NamedTuple):
    """The nine header fields, in file order (what ``HEADER.unpack_from`` returns)."""

    magic: int
    size: int
    index: int  # type: ignore[assignment]  # shadows tuple.index: DLedger's field name
    term: int
    pos: int
    channel: int
    chain_crc: int
    body_crc: int
    body_size: int


class IndexUnit(NamedTuple):
    """One 32-byte index unit, in file order."""

    magic: int
    pos: int
    size: int
    index: int  # type: ignore[assignment]  # shadows tuple.index: DLedger's field name
    term: int


def to_java_int(value: int) -> int:
    """Reinterpret an unsigned 32-bit value as Java's signed ``int`` (same bits)."""
    return value - 0x1_0000_0000 if value >= 0x8000_0000 else value


def body_crc32(body: Buffer) -> int:
    """The value stored in ``body_crc``: CRC32 of the body as a signed Java int."""
    return to_java_int(zlib.crc32(body))


@dataclass(slots=True, eq=False)
class DLedgerEntry:
    """A decoded entry. ``size`` is derived from the body when encoding.

    Equality follows ``DLedgerEntry.equals`` (used by follower truncation): size, magic,
    index, term, channel, pos and body; the CRC fields are ignored so an entry written by
    Apache (CRC 0) equals the same entry written here.
    """

    body: bytes = b""
    index: int = -1
    term: int = -1
    pos: int = -1
    magic: int = CURRENT_MAGIC
    channel: int = 0
    chain_crc: int = 0
    body_crc: int = 0
    size: int = field(default=0)

    @property
    def body_size(self) -> int:
        return len(self.body)

    def compute_size_in_bytes(self) -> int:
        """Set and return ``size`` = 48 + len(body), as DLedger does before encoding."""
        self.size = BODY_OFFSET + len(self.body)
        return self.size

    def encode(self, *, crc: bool = True) -> bytearray:
        """Encode into a fresh buffer (``body_crc`` computed when ``crc``, else 0)."""
        buf = bytearray(BODY_OFFSET + len(self.body))
        self.encode_into(buf, 0, crc=crc)
        return buf

    def encode_into(self, buf: bytearray | memoryview, offset: int = 0, *, crc: bool = True) -> int:
        """Encode at ``buf[offset:]``; returns the encoded size. Updates ``size``/``body_crc``."""
        size = self.compute_size_in_bytes()
        self.body_crc = body_crc32(self.body) if crc else 0
        HEADER.pack_into(buf, offset, self.magic, size, self.index, self.term, self.pos,
                         self.channel, self.chain_crc, self.body_crc, len(self.body))
        buf[offset + BODY_OFFSET:offset + size] = self.body
        return size

    @classmethod
    def decode(cls, buf: Buffer, offset: int = 0, *, verify_crc: bool = True,
               read_body: bool = True) -> "DLedgerEntry":
        """Decode one entry at ``buf[offset:]``; validates the header (see :func:`check_header`)."""
        h = check_header(buf, offset, verify_crc=verify_crc)
        body = bytes(memoryview(buf)[offset + BODY_OFFSET:offset + h.size]) if read_body else b""
        return cls(body=body, index=h.index, term=h.term, pos=h.pos, magic=h.magic,
                   channel=h.channel, chain_crc=h.chain_crc, body_crc=h.body_crc, size=h.size)

    def header(self) -> EntryHeader:
        return EntryHeader(self.magic, self.size or BODY_OFFSET + len(self.body), self.index,
                           self.term, self.pos, self.channel, self.chain_crc, self.body_crc,
                           len(self.body))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DLedgerEntry):
            return NotImplemented
        return (BODY_OFFSET + len(self.body) == BODY_OFFSET + len(other.body)
                and self.magic == other.magic and self.index == other.index
                and self.term == other.term and self.channel == other.channel
                and self.pos == other.pos and bytes(self.body) == bytes(other.body))

    __hash__ = None  # type: ignore[assignment]  # mutable, like the Java bean


# ---------------------------------------------------------------------------------------------
# Header access and patching (an encoded entry is often a slice of a bigger buffer)


def read_header(buf: Buffer, offset: int = 0) -> EntryHeader:
    """Unpack the 48-byte header without any validation."""
    return EntryHeader._make(HEADER.unpack_from(buf, offset))


def check_header(buf: Buffer, offset: int = 0, *, verify_crc: bool = True,
                 base_pos: int | None = None) -> EntryHeader:
    """Unpack and validate the entry at ``buf[offset:]``.

    Checks: the header fits; ``1 <= magic <= CURRENT_MAGIC``; ``size == 48 + body_size``; the
    whole entry fits in the buffer; the body CRC when non-zero and ``verify_crc``. Errors name
    the entry's position: ``base_pos + offset`` when ``base_pos`` is given, else the pos field.
    """
    if len(buf) - offset < BODY_OFFSET:
        raise EntryCorruptionError(f"truncated entry header: {len(buf) - offset} bytes < 48",
                                   pos=None if base_pos is None else base_pos + offset)
    h = EntryHeader._make(HEADER.unpack_from(buf, offset))
    where = h.pos if base_pos is None else base_pos + offset
    if not MAGIC_1 <= h.magic <= CURRENT_MAGIC:
        raise EntryCorruptionError(f"bad entry magic {h.magic}", pos=where)
    if h.body_size < 0 or h.size != BODY_OFFSET + h.body_size:
        raise EntryCorruptionError(f"entry size {h.size} != 48 + body size {h.body_size}", pos=where)
    if offset + h.size > len(buf):
        raise EntryCorruptionError(
            f"entry of {h.size} bytes overruns its buffer ({len(buf) - offset} bytes left)", pos=where)
    if verify_crc and h.body_crc != 0:
        actual = body_crc32(memoryview(buf)[offset + BODY_OFFSET:offset + h.size])
        if actual != h.body_crc:
            raise EntryCorruptionError(
                f"body CRC mismatch for index {h.index}: stored {h.body_crc}, computed {actual}",
                pos=where)
    return h


def set_index_term(buf: bytearray | memoryview, index: int, term: int,
                   magic: int = CURRENT_MAGIC, offset: int = 0) -> None:
    """Patch magic, index and term in place (``DLedgerEntryCoder.setIndexTerm``)."""
    _INT.pack_into(buf, offset, magic)
    struct.pack_into(">qq", buf, offset + 8, index, term)


def set_pos(buf: bytearray | memoryview, pos: int, offset: int = 0) -> None:
    """Patch the pos field in place (``DLedgerEntryCoder.setPos``)."""
    _POS.pack_into(buf, offset + POS_OFFSET, pos)


def get_pos(buf: Buffer, offset: int = 0) -> int:
    return _POS.unpack_from(buf, offset + POS_OFFSET)[0]


def set_body_crc(buf: bytearray | memoryview, offset: int = 0, *, crc: bool = True) -> int:
    """(Re)compute ``body_crc`` over the body currently in the buffer; writes 0 if not ``crc``."""
    size = _INT.unpack_from(buf, offset + 4)[0]
    value = body_crc32(memoryview(buf)[offset + BODY_OFFSET:offset + size]) if crc else 0
    _INT.pack_into(buf, offset + BODY_CRC_OFFSET, value)
    return value


# ---------------------------------------------------------------------------------------------
# Index units


def encode_index(pos: int, size: int, magic: int, index: int, term: int) -> bytes:
    """One 32-byte index unit (``DLedgerEntryCoder.encodeIndex`` argument order)."""
    return INDEX_UNIT.pack(magic, pos, size, index, term)


def encode_index_into(buf: bytearray | memoryview, offset: int, pos: int, size: int, magic: int,
                      index: int, term: int) -> None:
    INDEX_UNIT.pack_into(buf, offset, magic, pos, size, index, term)


def decode_index(buf: Buffer, offset: int = 0) -> IndexUnit:
    return IndexUnit._make(INDEX_UNIT.unpack_from(buf, offset))


# ---------------------------------------------------------------------------------------------
# Batches of concatenated entries


def iter_headers(buf: Buffer, *, verify_crc: bool = True,
                 base_pos: int | None = None) -> Iterator[tuple[int, EntryHeader]]:
    """Yield ``(offset, header)`` for each entry of a buffer of concatenated entries.

    The buffer must hold whole entries only; every header is validated (see
    :func:`check_header`) before its size is used to find the next one.
    """
    offset, end = 0, len(buf)
    while offset < end:
        h = check_header(buf, offset, verify_crc=verify_crc, base_pos=base_pos)
        yield offset, h
        offset += h.size


def split_entries(buf: Buffer, *, verify_crc: bool = True,
                  base_pos: int | None = None) -> list[memoryview]:
    """Cut a buffer of concatenated entries into one zero-copy memoryview per entry."""
    mv = memoryview(buf)
    return [mv[off:off + h.size] for off, h in iter_headers(mv, verify_crc=verify_crc,
                                                             base_pos=base_pos)]


def check_contiguous(headers: list[EntryHeader], first_index: int) -> None:
    """Entries of a batch must carry consecutive indexes and non-decreasing terms."""
    last_term = -1
    for i, h in enumerate(headers):
        if h.index != first_index + i:
            raise EntryCorruptionError(f"batch entry {i} has index {h.index}, expected {first_index + i}",
                                       pos=h.pos)
        if h.term < last_term:
            raise EntryCorruptionError(f"term went backwards at index {h.index}: {h.term} < {last_term}",
                                       pos=h.pos)
        last_term = h.term
