"""broker.store.message_id: store host bytes and offset msgIds (MessageDecoder.createMessageId)."""
from __future__ import annotations

import pytest

from broker.store import message_id as mid
from broker.store.errors import MessageFormatError


def test_ipv4_and_ipv6_hosts_round_trip() -> None:
    assert mid.host_to_bytes(("127.0.0.1", 10911)) == bytes([127, 0, 0, 1]) + (10911).to_bytes(4, "big")
    assert mid.bytes_to_host(mid.host_to_bytes(("10.1.2.3", 9876))) == ("10.1.2.3", 9876)
    raw6 = mid.host_to_bytes(("[fd00:0::2]", 10911))
    assert len(raw6) == 20 and mid.bytes_to_host(raw6) == ("fd00::2", 10911)
    assert mid.is_ipv6(("fd00::2", 1)) and not mid.is_ipv6(("127.0.0.1", 1))
    with pytest.raises(MessageFormatError, match="bad host address"):
        mid.host_to_bytes(("not-an-ip", 1))


def test_message_id_is_apache_hex_and_decodes_back() -> None:
    # Reference §1.10: store host 127.0.0.1:10911, commitlog offset 0x30.
    assert mid.create_message_id(("127.0.0.1", 10911), 0x30) == "7F00000100002A9F0000000000000030"
    v6 = mid.create_message_id(("fd00::2", 10911), 777)
    assert len(v6) == 56 and mid.decode_message_id(v6) == (("fd00::2", 10911), 777)
    assert mid.decode_message_id("7F00000100002A9F0000000000000030") == (("127.0.0.1", 10911), 0x30)
    with pytest.raises(MessageFormatError, match="expected 32 or 56"):
        mid.decode_message_id("ABCD")
    with pytest.raises(MessageFormatError, match="is not hex"):
        mid.decode_message_id("Z" * 32)


def test_message_id_offset_is_the_java_long_in_hex() -> None:
    """The cached-host msgId writes the offset as struct's ">q" bytes would: two's complement
    for a negative, the whole range of a Java long, struct.error past it."""
    import struct

    host = ("127.0.0.1", 10911)
    for offset in (0, 1, 0x30, 2**32, 2**63 - 1, -1, -(2**63), -12345):
        expected = (mid.host_to_bytes(host) + struct.pack(">q", offset)).hex().upper()
        assert mid.create_message_id(host, offset) == expected, offset
    for offset in (2**63, -(2**63) - 1):
        with pytest.raises(struct.error):
            mid.create_message_id(host, offset)
    with pytest.raises(MessageFormatError, match="bad host address"):
        mid.create_message_id(("not-an-ip", 1), 0)
