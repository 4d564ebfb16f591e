"""Codec tests: golden vectors, both Apache fixture sets field by field, property tests."""
from __future__ import annotations

import hashlib
import struct
import zlib

import pytest
from hypothesis import given, settings, strategies as st

from broker.store import message as m
from broker.store import message_id as mid
from broker.store import message_properties as mp
from broker.store.errors import MessageFormatError
from broker.store.java_hash import java_string_hash
from tests.broker.store._store_manifest import (
    commitlog_bytes, parse_host, record_at, row_to_message,
)
from tests.support.rmqfixtures import plain_body

# Reference §1.10: the message inside the worked DLedger entry (PHYSICALOFFSET = 0x30).
# Bytes 48..173 of the reference hexdump, pasted verbatim.
GOLDEN_1_10 = bytes.fromhex(
    "0000007ddaa320a777d189820000000000000000000000000000000000000000"
    "00000030000000000000018bcfe568007f0000010000c3500000018bcfe5687b"
    "7f00000100002a9f0000000000000000000000000000000548656c6c6f09546f"
    "7069635465737400145441475301546167410257414954017472756502"
)


def golden_message() -> m.MessageExt:
    # §1.10 was computed with 5.x's trailing property separator; 4.9.8 (our default) drops it.
    return m.MessageExt(
        topic="TopicTest", body=b"Hello", properties={"TAGS": "TagA", "WAIT": "true"},
        properties_bytes=b"TAGS\x01TagA\x02WAIT\x01true\x02",
        born_timestamp=1700000000000, born_host=("127.0.0.1", 50000),
        store_timestamp=1700000000123, store_host=("127.0.0.1", 10911),
    )


def test_golden_reference_1_10_encode() -> None:
    enc = m.encode_message(golden_message(), queue_offset=0, physical_offset=0x30)
    assert bytes(enc) == GOLDEN_1_10
    assert len(enc) == 125 == m.encoded_length(golden_message())


def test_golden_reference_1_10_decode_and_msg_id() -> None:
    dec = m.decode_message(GOLDEN_1_10, check_crc=True)
    assert dec.topic == "TopicTest" and dec.body == b"Hello" and dec.body_crc == 0x77D18982
    assert dec.properties == {"TAGS": "TagA", "WAIT": "true"}
    assert dec.properties_bytes == b"TAGS\x01TagA\x02WAIT\x01true\x02"  # 5.x form kept verbatim
    assert dec.commitlog_offset == 0x30 and dec.store_size == 125
    assert dec.born_host == ("127.0.0.1", 50000) and dec.store_host == ("127.0.0.1", 10911)
    assert dec.msg_id == "7F00000100002A9F0000000000000030"
    assert mid.decode_message_id(dec.msg_id) == (("127.0.0.1", 10911), 0x30)
    req = m.check_message_and_return_size(GOLDEN_1_10, 0, True)
    assert req.success and req.msg_size == 125 and req.commitlog_offset == 0x30
    assert req.tags_code == java_string_hash("TagA") and req.store_timestamp == 1700000000123


def test_constants_match_java_ints() -> None:
    assert struct.pack(">i", m.MESSAGE_MAGIC_CODE) == bytes.fromhex("daa320a7")
    assert struct.pack(">i", m.MESSAGE_MAGIC_CODE_V2) == bytes.fromhex("daa320ab")
    assert struct.pack(">i", m.BLANK_MAGIC_CODE) == bytes.fromhex("cbd43194")
    assert m.blank_record(528986) == bytes.fromhex("0008125acbd43194")  # fixture README blank
    assert (m.PHY_POS_POSITION, m.QUEUE_OFFSET_POSITION, m.SYSFLAG_POSITION) == (28, 20, 36)


def test_ipv6_hosts_shift_store_timestamp_and_msg_id() -> None:
    msg = golden_message()
    msg.born_host = ("::1", 12345)
    msg.store_host = ("fd00::2", 10911)
    enc = m.encode_message(msg, 0, 777)
    assert len(enc) == 125 + 24
    sys_flag = struct.unpack_from(">i", enc, m.SYSFLAG_POSITION)[0]
    assert sys_flag == m.BORNHOST_V6_FLAG | m.STOREHOSTADDRESS_V6_FLAG
    assert struct.unpack_from(">q", enc, 68)[0] == 1700000000123
    dec = m.decode_message(enc)
    assert dec.born_host == ("::1", 12345) and dec.store_host == ("fd00::2", 10911)
    assert len(dec.msg_id) == 56
    assert mid.decode_message_id(dec.msg_id) == (("fd00::2", 10911), 777)


def test_long_topic_writes_v2_magic_with_short_length() -> None:
    msg = golden_message()
    msg.topic = "T" * 200
    enc = m.encode_message(msg, 0, 0)
    assert struct.unpack_from(">i", enc, 4)[0] == m.MESSAGE_MAGIC_CODE_V2
    assert len(enc) == 125 - 9 + 200 + 1
    assert m.decode_message(enc).topic == "T" * 200
    req = m.check_message_and_return_size(enc, 0, True)
    assert req.success and req.topic == "T" * 200
    msg.topic = "T" * 127
    assert struct.unpack_from(">i", m.encode_message(msg), 4)[0] == m.MESSAGE_MAGIC_CODE


def test_properties_codec_java_rules() -> None:
    assert mp.properties_to_string({"a": "1", "b": "2"}) == "a\x011\x02b\x012"
    assert mp.properties_to_string({"a": "1", "b": None}, trailing_separator=True) == "a\x011\x02"
    assert mp.string_to_properties("a\x011\x02b\x012\x02") == {"a": "1", "b": "2"}
    # Java drops pairs with an empty name or value; the raw bytes survive a round trip anyway.
    assert mp.string_to_properties("a\x01\x02\x01x\x02c\x013") == {"c": "3"}
    msg = golden_message()
    msg.properties_bytes = b"a\x01\x02TAGS\x01TagA\x02"
    dec = m.decode_message(m.encode_message(msg))
    assert dec.properties == {"TAGS": "TagA"} and dec.properties_bytes == b"a\x01\x02TAGS\x01TagA\x02"
    assert bytes(m.encode_message(dec)) == bytes(m.encode_message(msg))


def test_properties_size_limit() -> None:
    msg = golden_message()
    msg.properties_bytes = None
    msg.properties = {"k": "v" * 32766}  # "k" + 0x01 + 32766 = 32768 bytes
    with pytest.raises(m.PropertiesSizeExceeded):
        m.encode_message(msg)
    msg.properties = {"k": "v" * 32765}
    assert m.decode_message(m.encode_message(msg)).properties["k"] == "v" * 32765


def test_max_body_size_rejected_before_writing() -> None:
    msg = golden_message()
    msg.body = b"x" * 101
    with pytest.raises(MessageFormatError, match="maxMessageSize"):
        m.encode_batch([golden_message(), msg], max_body_size=100)


def test_tags_code_schedule_topic_uses_delivery_time() -> None:
    props = {"TAGS": "TagA", "DELAY": "2", "REAL_TOPIC": "T", "REAL_QID": "0"}
    assert m.tags_code_for("T", props, 1000) == java_string_hash("TagA")
    assert m.tags_code_for("SCHEDULE_TOPIC_XXXX", props, 1000) == 6000
    props["DELAY"] = "99"  # clamped to level 18 = 2h
    assert m.tags_code_for("SCHEDULE_TOPIC_XXXX", props, 1000) == 7_200_000 + 1000
    msg = golden_message()
    msg.topic, msg.properties, msg.properties_bytes = "SCHEDULE_TOPIC_XXXX", props, None
    assert m.check_message_and_return_size(m.encode_message(msg), 0).tags_code == 1700000000123 + 7_200_000


def test_check_reports_blank_bad_magic_crc_and_truncation() -> None:
    blank = m.blank_record(4096) + bytes(4088)
    req = m.check_message_and_return_size(blank, 0)
    assert req.success and req.msg_size == 0
    assert not m.check_message_and_return_size(bytes(200), 0).success
    flipped = bytearray(GOLDEN_1_10)
    flipped[90] ^= 0x01  # inside the body "Hello"
    assert not m.check_message_and_return_size(flipped, 0, check_crc=True).success
    assert m.check_message_and_return_size(flipped, 0, check_crc=False).success
    assert "CRC" in m.explain_invalid_record(flipped, 0)
    for cut in (0, 4, 8, 60, 100, 124):
        assert not m.check_message_and_return_size(GOLDEN_1_10[:cut], 0).success
    wrong_total = bytearray(GOLDEN_1_10) + bytes(10)
    struct.pack_into(">i", wrong_total, 0, 130)
    req = m.check_message_and_return_size(wrong_total, 0)
    assert not req.success and req.msg_size == 130
    with pytest.raises(MessageFormatError, match="offset 0"):
        m.decode_message(wrong_total)


def test_batch_encoder_matches_single_encoder_and_patches() -> None:
    msgs = [golden_message() for _ in range(3)]
    msgs[1].body = b""
    msgs[2].born_host = ("::1", 1)
    batch = m.encode_batch(msgs)
    assert batch.sizes == [len(m.encode_message(x, 0, 0)) for x in msgs]
    for i, x in enumerate(msgs):
        s = batch.starts[i]
        assert bytes(batch.data[s:s + batch.sizes[i]]) == bytes(m.encode_message(x, 0, 0))
    m.patch_offsets(batch.data, batch.starts[2], 7, 4242)
    dec = m.decode_message(batch.data, batch.starts[2])
    assert (dec.queue_offset, dec.commitlog_offset) == (7, 4242)
    m.patch_store_timestamp(batch.data, batch.starts[2], dec.sys_flag, 99)
    assert m.decode_message(batch.data, batch.starts[2]).store_timestamp == 99
    assert m.record_store_timestamp(batch.data, batch.starts[2]) == 99


# --- the Apache fixtures -------------------------------------------------------------------------
def test_every_manifest_message_decodes_identically(fixture_root, fixture_set, manifests) -> None:
    store = fixture_root / fixture_set.classic
    files = commitlog_bytes(store)
    rows = manifests(fixture_set.classic)
    assert rows
    for row in rows:
        data, pos = record_at(files, row["commitLogOffset"])
        req = m.check_message_and_return_size(data, pos, True)
        assert req.success and req.msg_size == row["storeSize"], row
        dec = m.decode_message(data, pos, check_crc=True)
        assert dec.topic == row["topic"] and dec.queue_id == row["queueId"]
        assert dec.commitlog_offset == row["commitLogOffset"] == req.commitlog_offset
        assert dec.queue_offset == row["queueOffset"] == req.consume_queue_offset
        assert dec.store_size == row["storeSize"]
        assert dec.born_timestamp == row["bornTimestamp"]
        assert dec.store_timestamp == row["storeTimestamp"] == req.store_timestamp
        assert dec.body_crc == row["bodyCRC"] == zlib.crc32(dec.body) & 0x7FFFFFFF
        assert len(dec.body) == row["bodyLen"]
        assert (dec.tags or "") == row["tags"] and (dec.keys or "") == row["keys"]
        assert req.keys == row["keys"]
        if fixture_set.name == "plain":
            assert dec.body == plain_body(row["id"])
            assert dec.properties == {"KEYS": row["keys"], "TAGS": row["tags"]}
        else:
            assert hashlib.sha1(dec.body).hexdigest() == row["bodySha1"]
            assert dec.sys_flag == row["sysFlag"] and dec.flag == row["flag"]
            assert dec.reconsume_times == row["reconsumeTimes"]
            assert dec.prepared_transaction_offset == row["preparedTransactionOffset"]
            assert dec.properties == row["properties"]
            assert mid.host_to_bytes(dec.born_host) == mid.host_to_bytes(parse_host(row["bornHost"]))
            assert mid.host_to_bytes(dec.store_host) == mid.host_to_bytes(parse_host(row["storeHost"]))
            assert dec.msg_id == row["msgId"] and req.uniq_key == row["uniqKey"]
            assert (dec.uniq_key or "") == row["uniqKey"]


def test_manifest_fields_reencode_to_apache_bytes(fixture_root, fixture_set, manifests) -> None:
    """Records rebuilt from manifest fields (variety: body from the store) are Apache's bytes."""
    files = commitlog_bytes(fixture_root / fixture_set.classic)
    for row in manifests(fixture_set.classic):
        data, pos = record_at(files, row["commitLogOffset"])
        body = None
        if fixture_set.name == "variety":
            body = m.decode_message(data, pos).body
        msg = row_to_message(row, body)
        assert bytes(m.encode_message(msg)) == data[pos:pos + row["storeSize"]], row


def test_variety_covers_the_edge_cases(fixture_root, manifests) -> None:
    rows = manifests("variety-classic")
    flags = {r["sysFlag"] for r in rows}
    assert {0x10, 0x20, 0x1, 0x2} <= {f & b for f in flags for b in (0x10, 0x20, 0x1, 0x2)}
    assert any(r["bodyLen"] == 0 for r in rows)
    assert any(r["topic"] == "SCHEDULE_TOPIC_XXXX" for r in rows)
    assert any(r["topic"].startswith("%RETRY%") for r in rows)
    assert {m.transaction_value(r["sysFlag"]) for r in rows} >= {0x4, 0x8, 0xC}
    assert any(not r["tags"].isascii() for r in rows)


# --- property tests ------------------------------------------------------------------------------
_text = st.text(st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)), min_size=1, max_size=12)
_hosts = st.one_of(
    st.tuples(st.ip_addresses(v=4).map(str), st.integers(0, 65535)),
    st.tuples(st.ip_addresses(v=6).map(str), st.integers(0, 65535)),
)


@st.composite
def messages(draw) -> m.MessageExt:
    return m.MessageExt(
        topic=draw(st.from_regex(r"[%|a-zA-Z0-9_-]{1,200}", fullmatch=True)),
        body=draw(st.binary(max_size=300)),
        queue_id=draw(st.integers(-2**31, 2**31 - 1)),
        flag=draw(st.integers(-2**31, 2**31 - 1)),
        properties=draw(st.dictionaries(_text, _text, max_size=5)),
        sys_flag=draw(st.integers(0, 0xFFFF)) & ~0x30,
        born_timestamp=draw(st.integers(0, 2**62)),
        born_host=draw(_hosts),
        store_timestamp=draw(st.integers(0, 2**62)),
        store_host=draw(_hosts),
        reconsume_times=draw(st.integers(0, 2**31 - 1)),
        prepared_transaction_offset=draw(st.integers(0, 2**62)),
        queue_offset=draw(st.integers(0, 2**62)),
        commitlog_offset=draw(st.integers(0, 2**62)),
    )


@settings(max_examples=150, deadline=None)
@given(messages())
def test_round_trip_property(msg: m.MessageExt) -> None:
    enc = m.encode_message(msg)
    dec = m.decode_message(enc, check_crc=True)
    for name in ("topic", "body", "queue_id", "flag", "properties", "born_timestamp",
                 "store_timestamp", "reconsume_times", "prepared_transaction_offset",
                 "queue_offset", "commitlog_offset"):
        assert getattr(dec, name) == getattr(msg, name), name
    assert mid.host_to_bytes(dec.born_host) == mid.host_to_bytes(msg.born_host)
    assert mid.host_to_bytes(dec.store_host) == mid.host_to_bytes(msg.store_host)
    assert dec.store_size == len(enc) and dec.body_crc == zlib.crc32(msg.body) & 0x7FFFFFFF
    assert bytes(m.encode_message(dec)) == bytes(enc)
    req = m.check_message_and_return_size(enc, 0, True)
    assert req.success and req.msg_size == len(enc) and req.topic == msg.topic


@settings(max_examples=100, deadline=None)
@given(messages(), st.data())
def test_corruption_never_passes_or_crashes(msg: m.MessageExt, data) -> None:
    enc = bytearray(m.encode_message(msg))
    cut = data.draw(st.integers(0, len(enc) - 1))
    assert not m.check_message_and_return_size(bytes(enc[:cut]), 0).success
    if msg.body:
        body_at = len(enc) - 2 - len(msg.encoded_properties()) - (len(msg.topic) + (1 if len(msg.topic) <= 127 else 2)) - len(msg.body)
        i = data.draw(st.integers(body_at, body_at + len(msg.body) - 1))
        enc[i] ^= 1 << data.draw(st.integers(0, 7))
        assert not m.check_message_and_return_size(enc, 0, True).success
        with pytest.raises(MessageFormatError):
            m.decode_message(enc, check_crc=True)


def test_message_constructor_keeps_the_dataclass_shape() -> None:
    """MessageExt.__init__ is written out (compiled): same order, defaults and keywords as the
    dataclass's, a new properties dict per message, dataclass __eq__/__repr__/replace."""
    import dataclasses
    names = ["topic", "body", "queue_id", "flag", "properties", "sys_flag", "born_timestamp", "born_host",
             "store_timestamp", "store_host", "reconsume_times", "prepared_transaction_offset", "queue_offset",
             "commitlog_offset", "body_crc", "store_size", "magic", "properties_bytes", "wait_store_msg_ok"]
    a, b = m.MessageExt("T"), m.MessageExt(topic="T")
    assert [f.name for f in dataclasses.fields(a)] == names and a == b
    assert [getattr(a, n) for n in names[1:]] == [
        b"", 0, 0, {}, 0, 0, ("127.0.0.1", 0), 0, ("127.0.0.1", 10911), 0, 0, 0, 0, 0, 0,
        m.MESSAGE_MAGIC_CODE, None, True]
    a.properties["k"] = "v"
    assert b.properties == {} and a != b and m.MessageExt("T").properties == {}
    values = ["U", b"x", 1, 2, {"a": "b"}, 3, 4, ("10.0.0.1", 5), 6, ("10.0.0.2", 7), 8, 9, 10, 11, 12, 13,
              m.MESSAGE_MAGIC_CODE_V2, b"a\x01b\x02", False]
    c = m.MessageExt(*values)
    assert c == m.MessageExt(**dict(zip(names, values))) and [getattr(c, n) for n in names] == values
    assert repr(c).startswith("MessageExt(topic='U', body=b'x', queue_id=1")
    assert dataclasses.replace(c, topic="V", properties_bytes=None).topic == "V"
    assert m.EncodedBatch(bytearray(b"ab"), [0], [2]) == m.EncodedBatch(data=bytearray(b"ab"), starts=[0], sizes=[2])
