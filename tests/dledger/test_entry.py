"""DLedger entry / index unit codec: golden vectors (reference §1.10), CRC rules, batches."""
from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dledger import entry as E
from dledger.entry import DLedgerEntry, EntryCorruptionError

# Reference §1.10: the 125-byte message "Hello" on TopicTest inside entry index 0, term 1, pos 0.
GOLDEN_ENTRY_HEX = """
00 00 00 01 00 00 00 ad 00 00 00 00 00 00 00 00
00 00 00 00 00 00 00 01 00 00 00 00 00 00 00 00
00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 7d
00 00 00 7d da a3 20 a7 77 d1 89 82 00 00 00 00
00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00
00 00 00 30 00 00 00 00 00 00 01 8b cf e5 68 00
7f 00 00 01 00 00 c3 50 00 00 01 8b cf e5 68 7b
7f 00 00 01 00 00 2a 9f 00 00 00 00 00 00 00 00
00 00 00 00 00 00 00 05 48 65 6c 6c 6f 09 54 6f
70 69 63 54 65 73 74 00 14 54 41 47 53 01 54 61
67 41 02 57 41 49 54 01 74 72 75 65 02
"""
GOLDEN_ENTRY = bytes.fromhex(GOLDEN_ENTRY_HEX.replace("\n", " "))
GOLDEN_MESSAGE = GOLDEN_ENTRY[48:]
GOLDEN_INDEX_UNIT = bytes.fromhex(
    "00000001" "0000000000000000" "000000ad" "0000000000000000" "0000000000000001")


def test_constants() -> None:
    assert (E.POS_OFFSET, E.HEADER_SIZE, E.BODY_OFFSET, E.CURRENT_MAGIC) == (24, 44, 48, 1)
    assert E.HEADER.format == ">iiqqqiiii" and E.HEADER.size == 48
    assert E.INDEX_UNIT.format == ">iqiqq" and E.INDEX_UNIT.size == 32


def test_golden_entry_crc_off_is_apache_identical() -> None:
    assert len(GOLDEN_ENTRY) == 173 and len(GOLDEN_MESSAGE) == 125
    e = DLedgerEntry(body=GOLDEN_MESSAGE, index=0, term=1, pos=0)
    assert bytes(e.encode(crc=False)) == GOLDEN_ENTRY
    assert e.size == 173 and e.body_crc == 0


def test_golden_entry_crc_on_differs_only_in_body_crc() -> None:
    e = DLedgerEntry(body=GOLDEN_MESSAGE, index=0, term=1, pos=0)
    enc = bytes(e.encode(crc=True))
    assert enc[:40] == GOLDEN_ENTRY[:40] and enc[44:] == GOLDEN_ENTRY[44:]
    assert enc[40:44] == zlib.crc32(GOLDEN_MESSAGE).to_bytes(4, "big")
    assert e.body_crc == struct.unpack(">i", enc[40:44])[0]


def test_golden_decode() -> None:
    e = DLedgerEntry.decode(GOLDEN_ENTRY)
    assert (e.magic, e.size, e.index, e.term, e.pos, e.body_size) == (1, 173, 0, 1, 0, 125)
    assert e.body == GOLDEN_MESSAGE
    # the message's PHYSICALOFFSET (body offset 28) is pos + 48
    assert struct.unpack_from(">q", e.body, 28)[0] == e.pos + 48


def test_golden_index_unit() -> None:
    assert E.encode_index(pos=0, size=173, magic=1, index=0, term=1) == GOLDEN_INDEX_UNIT
    u = E.decode_index(GOLDEN_INDEX_UNIT)
    assert u == E.IndexUnit(magic=1, pos=0, size=173, index=0, term=1)
    buf = bytearray(64)
    E.encode_index_into(buf, 32, 0, 173, 1, 0, 1)
    assert bytes(buf[32:]) == GOLDEN_INDEX_UNIT and bytes(buf[:32]) == bytes(32)


def test_patch_helpers() -> None:
    buf = bytearray(GOLDEN_ENTRY)
    E.set_index_term(buf, 7, 9)
    E.set_pos(buf, 4_194_304)
    h = E.read_header(buf)
    assert (h.magic, h.size, h.index, h.term, h.pos) == (1, 173, 7, 9, 4_194_304)
    assert E.get_pos(buf) == 4_194_304
    assert buf[48:] == GOLDEN_MESSAGE  # body untouched
    # patch inside a bigger buffer at an offset
    big = bytearray(10) + bytearray(GOLDEN_ENTRY)
    E.set_pos(big, 99, offset=10)
    assert E.get_pos(big, 10) == 99 and big[:10] == bytes(10)


def test_crc_verified_when_nonzero() -> None:
    enc = DLedgerEntry(body=b"hello world", index=3, term=2, pos=1000).encode(crc=True)
    assert DLedgerEntry.decode(enc).body == b"hello world"
    enc[48] ^= 0x01  # flip one body bit
    with pytest.raises(EntryCorruptionError, match=r"CRC mismatch.*pos 1000"):
        DLedgerEntry.decode(enc)
    # explicitly not verified -> decodes
    assert DLedgerEntry.decode(enc, verify_crc=False).body[0] == ord("h") ^ 1


def test_crc_zero_means_unchecked() -> None:
    enc = DLedgerEntry(body=b"hello", index=0, term=0, pos=0).encode(crc=False)
    enc[48] ^= 0xFF
    assert DLedgerEntry.decode(enc).body[0] == ord("h") ^ 0xFF


def test_set_body_crc_after_hook_patch() -> None:
    enc = DLedgerEntry(body=bytes(40), index=0, term=0, pos=5).encode(crc=True)
    struct.pack_into(">q", enc, 48 + 28, 53)  # hook patches the body
    with pytest.raises(EntryCorruptionError):
        DLedgerEntry.decode(enc)
    E.set_body_crc(enc)
    assert struct.unpack_from(">q", DLedgerEntry.decode(enc).body, 28)[0] == 53
    assert E.set_body_crc(enc, crc=False) == 0 and enc[40:44] == bytes(4)


@pytest.mark.parametrize("mutate, msg", [
    (lambda b: struct.pack_into(">i", b, 0, 2), "bad entry magic 2"),
    (lambda b: struct.pack_into(">i", b, 0, -1), "bad entry magic -1"),
    (lambda b: struct.pack_into(">i", b, 4, 50), "entry size 50 != 48"),
    (lambda b: struct.pack_into(">i", b, 44, 1), "entry size"),
])
def test_bad_headers_rejected(mutate, msg) -> None:
    enc = DLedgerEntry(body=b"abc", index=0, term=0, pos=77).encode(crc=False)
    mutate(enc)
    with pytest.raises(EntryCorruptionError, match=msg):
        DLedgerEntry.decode(enc)


def test_truncated_entry_rejected() -> None:
    enc = DLedgerEntry(body=b"abcdef", index=0, term=0, pos=0).encode()
    with pytest.raises(EntryCorruptionError, match="overruns"):
        E.check_header(enc[:-1])
    with pytest.raises(EntryCorruptionError, match="truncated entry header"):
        E.check_header(enc[:47], base_pos=500)


def test_equality_ignores_crc() -> None:
    a = DLedgerEntry(body=b"x", index=1, term=1, pos=48)
    b = DLedgerEntry.decode(DLedgerEntry(body=b"x", index=1, term=1, pos=48).encode(crc=True))
    assert a == b and b.body_crc != 0
    assert a != DLedgerEntry(body=b"y", index=1, term=1, pos=48)
    assert a != DLedgerEntry(body=b"x", index=1, term=2, pos=48)
    assert a != DLedgerEntry(body=b"x", index=1, term=1, pos=49)


def _batch(bodies: list[bytes], first_index: int = 0, term: int = 1, pos0: int = 0,
           crc: bool = True) -> bytes:
    out = bytearray()
    pos = pos0
    for i, body in enumerate(bodies):
        out += DLedgerEntry(body=body, index=first_index + i, term=term, pos=pos).encode(crc=crc)
        pos += 48 + len(body)
    return bytes(out)


def test_split_and_iterate_batch() -> None:
    bodies = [b"", b"a", b"bb" * 100, bytes(range(256))]
    raw = _batch(bodies, first_index=10, pos0=4096)
    views = E.split_entries(raw)
    assert [bytes(v[48:]) for v in views] == bodies
    headers = [h for _, h in E.iter_headers(raw)]
    assert [h.index for h in headers] == [10, 11, 12, 13]
    assert headers[1].pos == 4096 + 48
    E.check_contiguous(headers, 10)
    with pytest.raises(EntryCorruptionError, match="expected 11"):
        E.check_contiguous(headers, 11)


def test_batch_corruption_names_position() -> None:
    raw = bytearray(_batch([b"aaaa", b"bbbb", b"cccc"], pos0=1000))
    raw[52 * 2 + 50] ^= 0x10  # third entry's body
    with pytest.raises(EntryCorruptionError, match=r"pos 1104"):
        E.split_entries(raw)
    with pytest.raises(EntryCorruptionError, match=r"pos 2104"):
        E.split_entries(raw, base_pos=2000)
    # a trailing partial entry is an error, never silently dropped
    with pytest.raises(EntryCorruptionError):
        E.split_entries(_batch([b"aaaa", b"bbbb"])[:-2])


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=2048), index=st.integers(0, 2**63 - 1),
       term=st.integers(0, 2**63 - 1), pos=st.integers(0, 2**63 - 1), crc=st.booleans())
def test_roundtrip_property(body: bytes, index: int, term: int, pos: int, crc: bool) -> None:
    e = DLedgerEntry(body=body, index=index, term=term, pos=pos)
    enc = e.encode(crc=crc)
    assert len(enc) == 48 + len(body)
    d = DLedgerEntry.decode(enc)
    assert d == e and d.body == body and d.size == len(enc)
    assert d.body_crc == (E.to_java_int(zlib.crc32(body)) if crc else 0)
    u = E.decode_index(E.encode_index(pos, len(enc), 1, index, term))
    assert (u.pos, u.size, u.index, u.term) == (pos, len(enc), index, term)


@settings(max_examples=100, deadline=None)
@given(body=st.binary(min_size=1, max_size=512), bit=st.integers(0, 8 * 512 - 1))
def test_any_single_bit_flip_in_body_detected(body: bytes, bit: int) -> None:
    enc = DLedgerEntry(body=body, index=0, term=0, pos=0).encode(crc=True)
    if E.read_header(enc).body_crc == 0:  # crc32 of this body happens to be 0: unchecked by design
        return
    bit %= 8 * len(body)
    enc[48 + bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(EntryCorruptionError):
        DLedgerEntry.decode(enc)
