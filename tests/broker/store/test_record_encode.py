"""broker/store/_record_encode.c: the C record encoder of the put path agrees with the Python one.

Rules checked (the module's rules):
- for every message of both Apache fixture sets (decoded, then encoded again) and for generated
  batches (v1/v2 topics, ASCII and UTF-8 text, IPv4/IPv6 hosts, properties as a dict or as raw
  bytes, numbers at the edges of their fields), C either declines (None) or gives exactly the
  bytes, starts and sizes of ``message.encode_batch_py``; ``encode_batch`` always gives the
  Python answer, errors included;
- it declines what it must not answer: a None or non-str property, a lone surrogate, a body that
  is not bytes or is over the limit, numbers out of range, a host inet_pton refuses, fields over
  32767 bytes, an empty topic, anything but a non-empty list; it never raises for them;
- in source mode (``RMQPY_PURE_PYTHON=1``) it is never imported, and the Python encoder answers.
"""
from __future__ import annotations

import os
import random
from types import SimpleNamespace

import pytest
from hypothesis import given, settings, strategies as st

from broker import native
from broker.store import message as m
from broker.store.errors import MessageFormatError
from tests.broker.store._store_manifest import commitlog_bytes

PURE = os.environ.get(native.PURE_ENV) == "1"
enc = native.c_extension("broker.store._record_encode")
needs_c = pytest.mark.skipif(enc is None, reason="source mode: the C encoder is not used (checked below)")


def _agree(msgs: list[m.MessageExt], max_body: int | None = None) -> bool:
    """True when C answered (and agreed), False when it declined; fails when they differ."""
    py = m.encode_batch_py(msgs, max_body)
    c = enc.encode(msgs, -1 if max_body is None else max_body)
    via = m.encode_batch(msgs, max_body)
    assert (bytes(via.data), via.starts, via.sizes) == (bytes(py.data), py.starts, py.sizes)
    if c is None:
        return False
    assert type(c[0]) is bytearray
    assert (bytes(c[0]), c[1], c[2]) == (bytes(py.data), py.starts, py.sizes)
    return True


def test_source_mode_never_imports_it() -> None:
    if PURE:
        assert enc is None and m._c_encode is None
        with pytest.raises(ModuleNotFoundError):
            __import__("broker.store._record_encode")
    else:
        assert enc is not None and m._c_encode is enc.encode
        assert native.native_status()["modules"]["broker.store._record_encode"] == "compiled"


@needs_c
def test_every_fixture_message_encodes_the_same(fixture_root, fixture_set) -> None:
    answered = 0
    for store in (fixture_set.classic, fixture_set.mixed):
        for data in commitlog_bytes(fixture_root / store).values():
            pos, batch = 0, []
            while True:
                req = m.check_message_py(data, pos, False)
                if not req.success or req.msg_size == 0:
                    break
                msg = m.decode_message(data, pos)
                batch.append(msg)
                pos += req.msg_size
                if len(batch) == 7:
                    answered += _agree(batch)
                    batch = []
            if batch:
                answered += _agree(batch)
    assert answered > 100  # batches of 7: every one answered, variety's non-ASCII text included


RND_TOPICS = ["T", "BenchmarkTest", "x" * 127, "y" * 128, "ü-topic", "z" * 32767, "%RETRY%g"]
RND_HOSTS = [("127.0.0.1", 5), ("::1", 7), ("[fe80::1]", 70000), ("10.1.2.3", -1), ("0.0.0.0", 2**31 - 1)]


def _random_message(rnd: random.Random) -> m.MessageExt:
    msg = m.MessageExt(
        topic=rnd.choice(RND_TOPICS), body=rnd.randbytes(rnd.randrange(0, 600)), queue_id=rnd.randrange(-5, 2**31),
        flag=rnd.randrange(-2**31, 2**31), sys_flag=rnd.choice([0, 4, 8, 0xC, 0x10, 0x30, 0xFF, -1]),
        born_timestamp=rnd.randrange(-2**63, 2**63), born_host=rnd.choice(RND_HOSTS),
        store_timestamp=rnd.randrange(0, 2**41), store_host=rnd.choice(RND_HOSTS),
        reconsume_times=rnd.randrange(0, 20), prepared_transaction_offset=rnd.randrange(-2**63, 2**63))
    msg.properties = {rnd.choice(["UNIQ_KEY", "TAGS", "KEYS", "a", "ключ", ""]):
                      rnd.choice(["v", "", "x" * 50, "значение", "a b", "\x01"]) for _ in range(rnd.randrange(0, 5))}
    if rnd.random() < 0.2:
        msg.properties_bytes = rnd.randbytes(rnd.randrange(0, 60))
    return msg


@needs_c
def test_generated_batches_encode_the_same() -> None:
    rnd = random.Random(22)
    for _ in range(1500):
        assert _agree([_random_message(rnd) for _ in range(rnd.randrange(1, 6))])


@needs_c
@settings(max_examples=300, deadline=None)
@given(topic=st.text(min_size=1, max_size=200), body=st.binary(max_size=300),
       props=st.dictionaries(st.text(max_size=20), st.text(max_size=40), max_size=6),
       numbers=st.tuples(st.integers(-2**31, 2**31 - 1), st.integers(-2**31, 2**31 - 1), st.integers(-2**63, 2**63 - 1)))
def test_hypothesis_messages_encode_the_same(topic: str, body: bytes, props: dict[str, str],
                                             numbers: tuple[int, int, int]) -> None:
    msg = m.MessageExt(topic=topic, body=body, queue_id=numbers[0], flag=numbers[1], born_timestamp=numbers[2],
                       properties=props)
    try:
        m.encode_batch_py([msg])
    except (MessageFormatError, UnicodeEncodeError):  # Python's answer is an error: C must decline
        assert enc.encode([msg], -1) is None
        return
    _agree([msg])


def _plain() -> SimpleNamespace:
    """A message's fields on an object that takes any value (a compiled MessageExt checks types)."""
    msg = m.MessageExt(topic="T", body=b"body", properties={"UNIQ_KEY": "K", "TAGS": "t"})
    return SimpleNamespace(**{name: getattr(msg, name) for name in (
        "topic", "body", "queue_id", "flag", "properties", "properties_bytes", "sys_flag", "born_timestamp",
        "born_host", "store_timestamp", "store_host", "reconsume_times", "prepared_transaction_offset")})


@needs_c
@pytest.mark.parametrize("spoil", [
    lambda x: setattr(x, "properties", {"a": None}),
    lambda x: setattr(x, "properties", {"a": 1}),
    lambda x: setattr(x, "properties", {"k": "v\udc80"}),
    lambda x: setattr(x, "properties", {"k": "x" * 40_000}),
    lambda x: setattr(x, "properties_bytes", bytearray(b"a\x01b")),
    lambda x: setattr(x, "body", bytearray(b"x")),
    lambda x: setattr(x, "body", memoryview(b"x")),
    lambda x: setattr(x, "topic", ""),
    lambda x: setattr(x, "topic", "a\udc80"),
    lambda x: setattr(x, "topic", "t" * 32768),
    lambda x: setattr(x, "queue_id", 2**31),
    lambda x: setattr(x, "reconsume_times", -2**31 - 1),
    lambda x: setattr(x, "born_timestamp", 2**63),
    lambda x: setattr(x, "sys_flag", 2**31),
    lambda x: setattr(x, "born_host", ("not-an-ip", 1)),
    lambda x: setattr(x, "store_host", ("1.2.3.4", 2**31)),
    lambda x: setattr(x, "store_host", ("1.2.3.4\x00", 1)),
    lambda x: setattr(x, "born_host", ["1.2.3.4", 1]),
], ids=["none-value", "int-value", "surrogate", "long-props", "props-bytearray", "bytearray-body", "memoryview-body",
        "empty-topic", "surrogate-topic", "long-topic", "queue-id", "reconsume", "born-ts", "sys-flag", "bad-ip",
        "port", "nul-ip", "list-host"])
def test_it_declines_what_python_must_answer(spoil) -> None:
    msg = _plain()
    assert enc.encode([msg], -1) is not None
    spoil(msg)
    assert enc.encode([_plain(), msg], -1) is None
    try:  # the caller's answer is Python's, whatever it is
        py = m.encode_batch_py([msg])
    except Exception as exc:  # noqa: BLE001 - the same exception, whichever way
        with pytest.raises(type(exc)):
            m.encode_batch([msg])
    else:
        via = m.encode_batch([msg])
        assert bytes(via.data) == bytes(py.data)


@needs_c
def test_the_body_limit_and_the_argument_shapes() -> None:
    msg = m.MessageExt(topic="T", body=b"body", properties={"UNIQ_KEY": "K", "TAGS": "t"})
    assert enc.encode([msg], 3) is None and enc.encode([msg], 4) is not None
    with pytest.raises(MessageFormatError, match="maxMessageSize 3"):
        m.encode_batch([msg], 3)
    assert enc.encode([], -1) is None and enc.encode((msg,), -1) is None and enc.encode([msg]) is None
    assert enc.encode([msg], "4") is None and enc.encode([msg], 2**70) is None


@needs_c
def test_an_attribute_that_runs_python_cannot_pull_the_list_away() -> None:
    """A message whose attribute read runs Python code that empties the caller's list: C reads
    its own copy of the list, so it never reads freed or missing items."""
    msgs: list = []

    class Sly:
        topic, body, queue_id, flag, sys_flag = "T", b"x", 0, 0, 0
        born_timestamp = store_timestamp = prepared_transaction_offset = reconsume_times = 0
        born_host = store_host = ("127.0.0.1", 1)
        properties_bytes = None

        @property
        def properties(self) -> dict:
            msgs.clear()
            return {}

    msgs += [Sly(), _plain(), _plain()]
    got = enc.encode(msgs, -1)
    assert msgs == [] and got is not None and len(got[1]) == 3


@needs_c
def test_hosts_remembered_by_identity_never_answer_for_another_host() -> None:
    """C remembers the last few host tuples it read (a connection's born host is one object for
    all its messages); a new tuple, even one made where a freed one lived, is read afresh."""
    for i in range(300):
        msg = m.MessageExt(topic="T", body=b"x", born_host=(f"10.0.{i % 7}.{i % 250}", i),
                           store_host=("::1", 10911) if i % 3 else (f"10.9.9.{i % 200}", 1))
        assert _agree([msg])
