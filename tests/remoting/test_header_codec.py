"""broker/remoting/_header_codec.c: the C ROCKETMQ header codec agrees with the Python one.

Rules checked (the module's rules):
- decode: on headers written by the Python encoder (any fields, non-ASCII, empty strings, a
  V2 send header) C gives exactly the Python decode; on every truncation and on random
  corruptions, C either declines (None) or agrees, and where Python refuses the header
  (RemotingCommandError) C declines: the error and its message stay Python's;
- encode: for str fields C writes the Python encoder's bytes; it declines what Python treats
  specially (non-str values, out-of-range numbers, strings that cannot be UTF-8);
- in source mode (``RMQPY_PURE_PYTHON=1``) it is never imported.
"""
from __future__ import annotations

import os
import random

import pytest
from hypothesis import given, settings, strategies as st

from broker import native
from broker.remoting import codec
from broker.remoting.codec import RemotingCommand, RemotingCommandError
from broker.remoting.codes import LanguageCode, SerializeType

PURE = os.environ.get(native.PURE_ENV) == "1"
hc = native.c_extension("broker.remoting._header_codec")
needs_c = pytest.mark.skipif(hc is None, reason="source mode: the C codec is not used (checked below)")

V2_SEND = {"a": "please_rename_unique_group_name_4", "b": "BenchmarkTest", "c": "TBW102", "d": "4", "e": "2",
           "f": "0", "g": "1764300000000", "h": "0", "i": "KEYS\x01k1\x02WAIT\x01true\x02UNIQ_KEY\x01AB12",
           "j": "0", "k": "false", "m": "false", "n": "0"}


def _head(cmd: RemotingCommand) -> tuple:
    return (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag, cmd.remark, cmd.ext_fields,
            cmd.serialize_type)


def _decode_agrees(raw: bytes) -> bool:
    """True when C answered (equal to Python), False when it declined; fails when they differ."""
    c = hc.decode(raw)
    try:
        py = codec.decode_header_rocketmq_py(raw)
    except RemotingCommandError:
        assert c is None, raw
        with pytest.raises(RemotingCommandError):
            codec._decode_header_rocketmq(raw)
        return False
    assert _head(codec._decode_header_rocketmq(raw)) == _head(py)
    if c is None:
        return False
    code, lang, version, opaque, flag, remark, ext = c
    assert (code, codec._language_name(lang), version, opaque, flag, remark, ext) == _head(py)[:7]
    return True


def _cmd(rng: random.Random) -> RemotingCommand:
    alphabet = ["", "v", "中文", "ключ", "a b", "\x01\x02", str(rng.getrandbits(40))]
    fields = {rng.choice(["k", "topic", "é", "a", "b"]) + str(j): rng.choice(alphabet) for j in range(rng.randrange(14))}
    return RemotingCommand(code=rng.randrange(-32768, 32768), opaque=rng.randrange(-2**31, 2**31),
                           flag=rng.randrange(-2**31, 2**31), remark=rng.choice([None, "", "ok", "出错了"]),
                           ext_fields=fields, language=rng.choice(LanguageCode.NAMES + ("WHATEVER",)),
                           version=rng.randrange(-32768, 32768), serialize_type=SerializeType.ROCKETMQ)


def test_source_mode_never_imports_it() -> None:
    if PURE:
        assert hc is None and codec._c_decode is None and codec._c_encode is None
        with pytest.raises(ModuleNotFoundError):
            __import__("broker.remoting._header_codec")
    else:
        assert hc is not None and codec._c_decode is hc.decode and codec._c_encode is hc.encode


@needs_c
def test_v2_send_header_and_its_response_agree() -> None:
    req = RemotingCommand(code=310, opaque=7, flag=0, ext_fields=dict(V2_SEND), language="JAVA", version=401,
                          serialize_type=SerializeType.ROCKETMQ)
    raw = codec.encode_header_rocketmq_py(req)
    assert codec.encode_header_rocketmq(req) == raw
    assert _decode_agrees(raw)
    resp = RemotingCommand(code=0, opaque=7, flag=1, ext_fields={"msgId": "7F00000100002A9F00000000000A0B0C",
                                                                  "queueId": "2", "queueOffset": "1234"})
    assert hc.encode(0, 3, 401, 7, 1, None, resp.ext_fields) == codec.encode_header_rocketmq_py(resp)


@needs_c
def test_random_headers_agree_both_ways() -> None:
    rng = random.Random(26)
    answered = 0
    for _ in range(2000):
        cmd = _cmd(rng)
        raw = codec.encode_header_rocketmq_py(cmd)
        assert codec.encode_header_rocketmq(cmd) == raw
        assert hc.encode(cmd.code, codec._lang_code(cmd.language), cmd.version, cmd.opaque, cmd.flag, cmd.remark,
                         cmd.ext_fields) == raw
        answered += _decode_agrees(raw)
    assert answered == 2000  # well-formed UTF-8 headers: C answers every one


@needs_c
def test_truncations_and_corruptions_never_disagree() -> None:
    rng = random.Random(7)
    for _ in range(200):
        raw = codec.encode_header_rocketmq_py(_cmd(rng))
        for cut in range(len(raw)):
            _decode_agrees(raw[:cut])
        for _ in range(20):
            bad = bytearray(raw)
            for _ in range(rng.randrange(1, 4)):
                bad[rng.randrange(len(bad))] = rng.randrange(256)
            _decode_agrees(bytes(bad))


@needs_c
def test_what_python_refuses_c_declines() -> None:
    head = bytes(13)
    cases = [
        b"", head,  # truncated
        head + (5).to_bytes(4, "big") + b"ab",  # remark past the end
        head + (0xFFFFFFFF).to_bytes(4, "big") + bytes(8),  # negative remark length
        head + (2).to_bytes(4, "big") + b"\xff\xfe" + (0).to_bytes(4, "big"),  # remark not UTF-8
        head + bytes(4) + (0x80000000).to_bytes(4, "big"),  # negative extFields length
        head + bytes(4) + (9).to_bytes(4, "big") + b"\x00\x01k" + (1).to_bytes(4, "big") + b"\xff",  # value not UTF-8
        head + bytes(4) + (9).to_bytes(4, "big") + b"\x00\x01\xc3" + (1).to_bytes(4, "big") + b"v",  # key not UTF-8
        head + bytes(4) + (3).to_bytes(4, "big") + b"\x80\x00k",  # negative key length
    ]
    for raw in cases:
        with pytest.raises(RemotingCommandError):
            codec.decode_header_rocketmq_py(raw)
        assert hc.decode(raw) is None, raw
    with pytest.raises(TypeError):
        hc.decode("not bytes")


@needs_c
def test_encode_declines_what_python_handles_itself() -> None:
    ok = (10, 0, 401, 1, 0, None, {"k": "v"})
    assert hc.encode(*ok) is not None
    for i, bad in ((0, 40000), (1, 300), (2, -40000), (3, 2**31), (4, -2**31 - 1), (0, True), (0, "1")):
        args = list(ok)
        args[i] = bad
        assert hc.encode(*args) is None, (i, bad)
    assert hc.encode(10, 0, 401, 1, 0, None, {"k": 1}) is None
    assert hc.encode(10, 0, 401, 1, 0, None, {1: "v"}) is None
    assert hc.encode(10, 0, 401, 1, 0, "\udcff", {}) is None  # a lone surrogate is not UTF-8
    assert hc.encode(10, 0, 401, 1, 0, None, {"k": "\udcff"}) is None
    assert hc.encode(10, 0, 401, 1, 0, None, {"k" * 40000: "v"}) is None
    with pytest.raises(UnicodeEncodeError):  # what the caller then gets, as before
        codec.encode_header_rocketmq(RemotingCommand(code=10, ext_fields={"k": "\udcff"}))



@needs_c
@settings(max_examples=200, deadline=None)
@given(fields=st.dictionaries(st.text(min_size=0, max_size=8), st.text(max_size=30), max_size=14),
       remark=st.one_of(st.none(), st.text(max_size=20)))
def test_generated_headers_agree(fields: dict, remark) -> None:
    cmd = RemotingCommand(code=310, opaque=1, remark=remark, ext_fields=fields, serialize_type=SerializeType.ROCKETMQ)
    try:
        raw = codec.encode_header_rocketmq_py(cmd)
    except UnicodeEncodeError:  # surrogates: C declines, Python raises
        assert hc.encode(310, 3, cmd.version, 1, 0, remark, fields) is None
        return
    assert codec.encode_header_rocketmq(cmd) == raw
    _decode_agrees(raw)
