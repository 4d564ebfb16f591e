"""broker/store/_record_scan.c: the C parse of the reput thread agrees with the Python one.

Rules checked (the module's rules):
- on every record of both Apache fixture sets, and on generated records (v1/v2 magic, IPv4/IPv6
  hosts, any properties), the C parse either declines (None) or gives exactly the fields of
  ``message.check_message_py`` (check_crc False); what ``check_message_and_return_size`` answers
  is always the Python answer;
- it declines every record it must not answer: non-ASCII topic or properties, DELAY on the
  schedule topic, a blank, every truncation, and bytes whose sizes disagree; it never raises
  for bad bytes;
- in source mode (``RMQPY_PURE_PYTHON=1``) it is never imported, and the Python parse answers.
"""
from __future__ import annotations

import os
import random
import struct

import pytest
from hypothesis import given, settings, strategies as st

from broker import native
from broker.store import message as m
from broker.store.message_const import RMQ_SYS_SCHEDULE_TOPIC
from tests.broker.store._store_manifest import commitlog_bytes

PURE = os.environ.get(native.PURE_ENV) == "1"
scan = native.c_extension("broker.store._record_scan")
needs_c = pytest.mark.skipif(scan is None, reason="source mode: the C parse is not used (checked below)")


def _fields(req: m.DispatchRequest) -> tuple:
    return (req.topic, req.queue_id, req.commitlog_offset, req.msg_size, req.tags_code, req.store_timestamp,
            req.consume_queue_offset, req.keys, req.uniq_key, req.sys_flag, req.prepared_transaction_offset)


def _agree(buf, pos: int) -> bool:
    """True when C answered (and agreed), False when it declined; fails when they differ."""
    py = m.check_message_py(buf, pos, False)
    c = scan.parse(buf, pos)
    assert m.check_message_and_return_size(buf, pos, False) == py
    if c is None:
        return False
    assert py.success and py.msg_size > 0, (pos, py)
    assert c == _fields(py), (pos, c, py)
    return True


def test_source_mode_never_imports_it() -> None:
    if PURE:
        assert scan is None and m._c_parse is None
        with pytest.raises(ModuleNotFoundError):
            __import__("broker.store._record_scan")
    else:
        assert scan is not None and m._c_parse is scan.parse
        assert native.native_status()["modules"]["broker.store._record_scan"] == "compiled"


@needs_c
def test_every_fixture_record_agrees(fixture_root, fixture_set) -> None:
    answered = declined = 0
    for store in (fixture_set.classic, fixture_set.mixed):  # the mixed store's old region is classic files
        for data in commitlog_bytes(fixture_root / store).values():
            pos = 0
            while True:
                py = m.check_message_py(data, pos, False)
                if not py.success or py.msg_size == 0:
                    assert scan.parse(data, pos) is None
                    break
                if _agree(memoryview(data), pos):
                    answered += 1
                else:
                    declined += 1
                pos += py.msg_size
    assert answered > 1000
    if fixture_set.name == "variety":  # non-ASCII properties and DELAY on the schedule topic: Python's
        assert declined > 0
    else:
        assert declined == 0


def _record(topic: str, props: bytes, *, v6: bool = False, magic_v2: bool = False, body: bytes = b"x" * 40) -> bytes:
    msg = m.MessageExt(topic=topic, body=body, queue_id=3, properties={}, properties_bytes=props or None,
                       born_host=("::1", 1) if v6 else ("127.0.0.1", 1),
                       store_host=("::1", 2) if v6 else ("10.0.0.1", 2), store_timestamp=1_700_000_000_000,
                       queue_offset=77, commitlog_offset=123_456, prepared_transaction_offset=5)
    enc = bytes(m.encode_message(msg))
    if magic_v2 and len(topic) <= 127:  # re-frame a short topic with the v2 magic and a 2-byte length
        total = len(enc) + 1
        topic_at = len(enc) - 2 - len(props) - len(topic.encode()) - 1
        enc = (struct.pack(">i", total) + struct.pack(">i", m.MESSAGE_MAGIC_CODE_V2) + enc[8:topic_at]
               + struct.pack(">h", len(topic.encode())) + enc[topic_at + 1:])
    return enc


@needs_c
@pytest.mark.parametrize("topic,props,answered", [
    ("TopicA", b"", True),
    ("TopicA", b"KEYS\x01k1 k2\x02UNIQ_KEY\x01AB12\x02TAGS\x01tagA", True),
    ("TopicA", b"KEYS\x01a\x02KEYS\x01b\x02TAGS\x01t1\x02TAGS\x01t2\x02", True),  # last of a name wins
    ("TopicA", b"\x01x\x02KEYS\x01\x02TAGS\x02\x02UNIQ_KEY\x01u\x02=\x01", True),  # empty names/values dropped
    ("TopicA", b"TAGS\x01a\x01b\x02KEYS\x01k", True),  # split on the first \x01
    ("TopicA", b"DELAY\x013\x02TAGS\x01t", True),  # DELAY off the schedule topic: the tags code
    (RMQ_SYS_SCHEDULE_TOPIC, b"DELAY\x013\x02TAGS\x01t", False),  # a delivery time: Python's
    (RMQ_SYS_SCHEDULE_TOPIC, b"TAGS\x01t", True),
    ("TopicA", "TAGS\x01中文".encode(), False),  # UTF-16 hash: Python's
    ("TopicA", "KEYS\x01é".encode(), False),
    ("T" * 200, b"TAGS\x01t", True),  # v2 magic written for a long topic
])
def test_generated_records_agree(topic: str, props: bytes, answered: bool) -> None:
    for v6 in (False, True):
        enc = _record(topic, props, v6=v6)
        assert _agree(enc, 0) is answered
        padded = b"\0" * 13 + enc + b"\0" * 5  # at an offset inside a bigger buffer
        assert _agree(bytearray(padded), 13) is answered


@needs_c
def test_v2_magic_with_a_short_topic_agrees() -> None:
    enc = _record("TopicA", b"TAGS\x01t\x02KEYS\x01k", magic_v2=True)
    assert m.check_message_py(enc, 0, False).success
    assert _agree(enc, 0)


@needs_c
def test_the_schedule_topic_name_matches_the_constant() -> None:
    enc = _record(RMQ_SYS_SCHEDULE_TOPIC, b"DELAY\x012")
    assert scan.parse(enc, 0) is None
    other = _record(RMQ_SYS_SCHEDULE_TOPIC[:-1] + "Y", b"DELAY\x012")
    assert scan.parse(other, 0) is not None


@needs_c
def test_blank_truncation_and_bad_offsets_decline() -> None:
    enc = _record("TopicA", b"TAGS\x01t\x02KEYS\x01k")
    for cut in range(len(enc)):
        assert scan.parse(enc[:cut], 0) is None, cut
    blank = struct.pack(">ii", 1000, m.BLANK_MAGIC_CODE) + b"\0" * 992
    assert scan.parse(blank, 0) is None
    for offset in (-1, -(2**63), len(enc), len(enc) + 10, 2**62, 2**63 - 1):
        assert scan.parse(enc, offset) is None
    with pytest.raises(TypeError):
        scan.parse("not a buffer", 0)
    with pytest.raises(TypeError):
        scan.parse(enc)


@needs_c
def test_random_corruption_never_disagrees() -> None:
    rng = random.Random(22)
    base = _record("TopicA", b"KEYS\x01k1 k2\x02UNIQ_KEY\x01AB12\x02TAGS\x01tagA")
    for _ in range(3000):
        enc = bytearray(base)
        for _ in range(rng.randrange(1, 4)):
            i = rng.randrange(len(enc))
            enc[i] = rng.randrange(256)
        _agree(enc, 0)


_ascii = st.text(st.characters(min_codepoint=3, max_codepoint=127), min_size=1, max_size=12)


@needs_c
@settings(max_examples=200, deadline=None)
@given(topic=st.from_regex(r"[%|a-zA-Z0-9_-]{1,200}", fullmatch=True),
       props=st.dictionaries(st.one_of(st.sampled_from(["KEYS", "UNIQ_KEY", "TAGS", "DELAY"]), _ascii), _ascii,
                             max_size=5),
       v6=st.booleans(), body=st.binary(max_size=200))
def test_generated_ascii_records_are_answered_by_c(topic: str, props: dict, v6: bool, body: bytes) -> None:
    raw = "\x02".join(f"{k}\x01{v}" for k, v in props.items()).encode()
    enc = _record(topic, raw, v6=v6, body=body)
    assert _agree(enc, 0) or (topic == RMQ_SYS_SCHEDULE_TOPIC and "DELAY" in props)
