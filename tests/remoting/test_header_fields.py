"""broker.remoting.header_fields: a request's custom header fields as 4.9.8 reads them (compiled
and, in CI's second pass, from source)."""
from __future__ import annotations

import pytest

from broker.remoting.codec import RemotingCommand
from broker.remoting.header_fields import HeaderError, field_bool, field_int, field_str
from broker.remoting.processors import common


def _cmd(**fields: str) -> RemotingCommand:
    return RemotingCommand(code=310, opaque=1, ext_fields=dict(fields))


def test_strings_numbers_and_booleans() -> None:
    cmd = _cmd(topic="T", queueId="3", empty="", batch=" TRUE ", unit="no")
    assert field_str(cmd, "topic") == "T" and field_str(cmd, "missing", "d") == "d"
    assert field_int(cmd, "queueId") == 3 and field_int(cmd, "empty", -1) == -1 and field_int(cmd, "x", 7) == 7
    assert field_bool(cmd, "batch") is True and field_bool(cmd, "unit") is False
    assert field_bool(cmd, "missing") is False and field_bool(cmd, "missing", True) is True


def test_missing_or_malformed_fields_name_the_field() -> None:
    cmd = _cmd(queueId="3x" + "9" * 60, empty="")
    with pytest.raises(HeaderError, match="the custom field <topic> is null"):
        field_str(cmd, "topic", required=True)
    with pytest.raises(HeaderError, match="the custom field <empty> is null"):
        field_int(cmd, "empty")
    with pytest.raises(HeaderError, match=r"<queueId> is not a number: '3x9{38}'$"):
        field_int(cmd, "queueId")


def test_the_processors_names_are_these() -> None:
    """``processors.common`` re-exports them: one HeaderError, whatever a processor imports."""
    assert common.HeaderError is HeaderError and common.field_int is field_int
    assert issubclass(HeaderError, ValueError)
