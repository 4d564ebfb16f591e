"""Remoting codec: golden bytes (JSON and ROCKETMQ headers), split feeding, bad frames."""
from __future__ import annotations

import json
import struct

import pytest

from broker.remoting.codec import (FrameDecoder, FrameTooLargeError, RemotingCommand, RemotingCommandError,
                                   decode_frame, encode, stringify_fields)
from broker.remoting.codes import RequestCode, ResponseCode, SerializeType, request_name

pytestmark = pytest.mark.timeout(30)


def test_codes_match_rocketmq_4_9() -> None:
    assert (RequestCode.SEND_MESSAGE, RequestCode.PULL_MESSAGE, RequestCode.HEART_BEAT, RequestCode.SEND_MESSAGE_V2,
            RequestCode.SEND_BATCH_MESSAGE, RequestCode.REGISTER_BROKER, RequestCode.GET_ROUTEINFO_BY_TOPIC) == \
        (10, 11, 34, 310, 320, 103, 105)
    assert (ResponseCode.SYSTEM_ERROR, ResponseCode.REQUEST_CODE_NOT_SUPPORTED, ResponseCode.FLUSH_SLAVE_TIMEOUT,
            ResponseCode.SLAVE_NOT_AVAILABLE, ResponseCode.SERVICE_NOT_AVAILABLE, ResponseCode.NO_PERMISSION,
            ResponseCode.TOPIC_NOT_EXIST, ResponseCode.PULL_NOT_FOUND, ResponseCode.QUERY_NOT_FOUND) == \
        (1, 3, 12, 11, 14, 16, 17, 19, 22)
    assert request_name(36) == "CONSUMER_SEND_MSG_BACK"


def test_json_golden_bytes() -> None:
    cmd = RemotingCommand(code=34, opaque=7, ext_fields={"a": "b"}, body=b"xy", language="JAVA", version=401)
    header = b'{"code":34,"extFields":{"a":"b"},"flag":0,"language":"JAVA","opaque":7,' \
             b'"serializeTypeCurrentRPC":"JSON","version":401}'
    assert encode(cmd) == struct.pack(">ii", 4 + len(header) + 2, len(header)) + header + b"xy"


def test_rocketmq_binary_golden_bytes() -> None:
    cmd = RemotingCommand(code=105, opaque=258, flag=1, remark="ok", ext_fields={"topic": "T"}, language="JAVA",
                          version=401, serialize_type=SerializeType.ROCKETMQ)
    header = (struct.pack(">hbhii", 105, 0, 401, 258, 1) + struct.pack(">i", 2) + b"ok"
              + struct.pack(">i", 2 + 5 + 4 + 1) + struct.pack(">h", 5) + b"topic" + struct.pack(">i", 1) + b"T")
    frame = encode(cmd)
    assert frame == struct.pack(">ii", 4 + len(header), (1 << 24) | len(header)) + header
    back = decode_frame(frame[4:])
    assert (back.code, back.opaque, back.flag, back.remark, back.ext_fields, back.language, back.serialize_type) == \
        (105, 258, 1, "ok", {"topic": "T"}, "JAVA", SerializeType.ROCKETMQ)
    assert back.is_response and not back.is_oneway


def test_json_ext_fields_from_javascript_become_java_strings() -> None:
    # ali-ons puts numbers, booleans and nulls in extFields; Java sees their String forms
    header = json.dumps({"code": 310, "flag": 2, "opaque": 1, "language": "JAVA", "version": 121,
                         "extFields": {"e": 3, "k": False, "l": None, "g": 1.0}}).encode()
    cmd = decode_frame(struct.pack(">i", len(header)) + header)
    assert cmd.ext_fields == {"e": "3", "k": "false", "g": "1"} and cmd.is_oneway and cmd.body == b""
    assert stringify_fields({"x": True, "y": [1, 2]}) == {"x": "true", "y": "[1,2]"}


@pytest.mark.parametrize("stype", [SerializeType.JSON, SerializeType.ROCKETMQ])
def test_split_feeding_byte_by_byte(stype: int) -> None:
    cmds = [RemotingCommand.request(10 + i, {"k": f"v{i}", "ü": "ß"}, bytes([i]) * i, opaque=i, serialize_type=stype)
            for i in range(5)]
    stream = b"".join(encode(c) for c in cmds)
    dec = FrameDecoder()
    got = []
    for i in range(len(stream)):
        got += dec.feed_commands(stream[i:i + 1])
    assert [(c.code, c.opaque, c.ext_fields, c.body) for c in got] == \
        [(c.code, c.opaque, c.ext_fields, c.body) for c in cmds]
    assert dec.buffered == 0


def test_bad_frames() -> None:
    with pytest.raises(FrameTooLargeError):
        FrameDecoder(max_frame_length=1024).feed(struct.pack(">i", 1021) + b"x")
    FrameDecoder(max_frame_length=1024).feed(struct.pack(">i", 1020))  # exactly the limit (with prefix) is fine
    with pytest.raises(RemotingCommandError):
        FrameDecoder().feed(struct.pack(">i", 2) + b"ab")
    with pytest.raises(RemotingCommandError, match="bad header length"):
        decode_frame(struct.pack(">i", 100) + b"{}")
    with pytest.raises(RemotingCommandError, match="JSON"):
        decode_frame(struct.pack(">i", 3) + b"{{{")
    with pytest.raises(RemotingCommandError, match="serialize type"):
        decode_frame(struct.pack(">i", (7 << 24) | 0))
    with pytest.raises(RemotingCommandError):  # binary header with an ext length beyond the header
        h = struct.pack(">hbhii", 1, 0, 0, 0, 0) + struct.pack(">i", 0) + struct.pack(">i", 999)
        decode_frame(struct.pack(">i", (1 << 24) | len(h)) + h)


@pytest.mark.parametrize("header", [
    b'{"code":1e400}',                                       # infinity
    b'{"code":310,"opaque":99999999999999999999999}',        # beyond a Java int (orjson: a float)
    b'{"code":310,"opaque":2147483648}',                     # one past a Java int
    b'{"code":1,"remark":"\\ud800"}',                        # a lone surrogate
    b'{"code":1,"extFields":{"a":"\xff"}}',                  # not UTF-8
    b'{"code":NaN}',
    b'[1,2]',
    b'{"code":1,"extFields":' + b"[" * 2000 + b"]" * 2000 + b"}",  # nested past the parser's depth limit
])
def test_hostile_json_headers_are_refused_as_header_errors(header: bytes) -> None:
    """Every malformed header is a RemotingCommandError (the connection answers or closes), never
    another exception type and never a command with a wrapped or rounded opaque."""
    with pytest.raises(RemotingCommandError):
        decode_frame(struct.pack(">i", len(header)) + header)


def _binary_header(ext: bytes) -> bytes:
    h = struct.pack(">hbhii", 310, 0, 401, 7, 0) + struct.pack(">i", 0) + struct.pack(">i", len(ext)) + ext
    return struct.pack(">i", (1 << 24) | len(h)) + h


@pytest.mark.parametrize("ext, why", [
    (struct.pack(">h", -1) + struct.pack(">i", 0), "length -1"),                  # negative key length
    (struct.pack(">h", 1) + b"a" + struct.pack(">i", -5), "length -5"),           # negative value length
    (struct.pack(">h", 1) + b"a" + struct.pack(">i", 1 << 30) + b"x", "exceeds"),  # value beyond the header
    (struct.pack(">h", 1) + b"\xff" + struct.pack(">i", 1) + b"x", "UTF-8"),       # key not UTF-8
    (struct.pack(">h", 1) + b"a" + struct.pack(">i", 1) + b"\xfe", "UTF-8"),       # value not UTF-8
    (struct.pack(">h", 1) + b"a" + b"\x00\x00", "truncated"),                      # value length cut
    (b"\x00", "truncated"),                                                        # key length cut
])
def test_hostile_binary_ext_fields_are_refused_as_header_errors(ext: bytes, why: str) -> None:
    """The ROCKETMQ header's ext fields: a negative, oversized or cut length and a string that is
    not UTF-8 are RemotingCommandErrors naming the fault, whether compiled or from source."""
    with pytest.raises(RemotingCommandError, match=why):
        decode_frame(_binary_header(ext))
    good = struct.pack(">h", 1) + b"a" + struct.pack(">i", 2) + "\u00e9".encode()
    assert decode_frame(_binary_header(good)).ext_fields == {"a": "\u00e9"}


def test_pending_frame_length_announces_the_incomplete_frame() -> None:
    """The server reserves this against serverMaxPendingBytes before buffering a big frame's body."""
    dec = FrameDecoder()
    assert dec.pending_frame_length == 0
    dec.feed(struct.pack(">i", 1_000_000)[:2])
    assert dec.pending_frame_length == 0  # the length itself is not complete yet
    dec.feed(struct.pack(">i", 1_000_000)[2:] + b"abc")
    assert dec.pending_frame_length == 1_000_004
    whole = encode(RemotingCommand.request(10, {"k": "v"}))
    dec2 = FrameDecoder()
    assert len(dec2.feed(whole + whole[:6])) == 1
    assert dec2.pending_frame_length == len(whole)
    dec2.feed(whole[6:])
    assert dec2.pending_frame_length == 0 and dec2.buffered == 0


def test_command_constructor_keeps_the_dataclass_shape() -> None:
    """RemotingCommand.__init__ is written out (compiled): same order, defaults and keywords as
    the dataclass's, a new ext_fields dict per command, dataclass __eq__/__repr__/replace."""
    import dataclasses
    a, b = RemotingCommand(10), RemotingCommand(code=10)
    assert a == b and (a.opaque, a.flag, a.remark, a.ext_fields, a.body) == (0, 0, None, {}, b"")
    assert (a.language, a.version, a.serialize_type) == ("PYTHON", 401, SerializeType.JSON)
    a.ext_fields["k"] = "v"
    assert b.ext_fields == {} and a != b and RemotingCommand(10).ext_fields == {}
    c = RemotingCommand(11, 7, 1, "r", {"x": "y"}, b"body", "JAVA", 121, SerializeType.ROCKETMQ)
    assert c == RemotingCommand(code=11, opaque=7, flag=1, remark="r", ext_fields={"x": "y"}, body=b"body",
                                language="JAVA", version=121, serialize_type=SerializeType.ROCKETMQ)
    assert repr(c).startswith("RemotingCommand(code=11, opaque=7, flag=1, remark='r'")
    assert dataclasses.replace(c, opaque=8) == RemotingCommand(11, 8, 1, "r", {"x": "y"}, b"body", "JAVA", 121,
                                                               SerializeType.ROCKETMQ)
    assert [f.name for f in dataclasses.fields(c)] == ["code", "opaque", "flag", "remark", "ext_fields", "body",
                                                       "language", "version", "serialize_type"]
