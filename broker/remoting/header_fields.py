"""A request's custom header fields, read as RocketMQ's ``decodeCommandCustomHeader`` reads them.

Rules:
- Every field is a string in ``ext_fields``. A missing required field is a :class:`HeaderError`
  "the custom field <name> is null"; a number that does not parse, "... is not a number" with
  the first 40 characters of what came. An empty number field counts as missing.
- A boolean is ``true`` in any case, surrounding blanks ignored; anything else is false.

Theory of operation: the processors answer a ``HeaderError`` with ``SYSTEM_ERROR`` and its text
(``broker.remoting.processors.common`` re-exports these names). Compiled with mypyc
(``broker.native``, issue 22): a send reads seven fields, and from the compiled send processor
each read is a C call instead of an interpreted one.
"""
from __future__ import annotations

from typing import Optional

from broker.remoting.codec import RemotingCommand


class HeaderError(ValueError):
    pass


def field_str(cmd: RemotingCommand, name: str, default: Optional[str] = None, *, required: bool = False) -> Optional[str]:
    v = cmd.ext_fields.get(name)
    if v is None:
        if required:
            raise HeaderError(f"the custom field <{name}> is null")
        return default
    return v


def field_int(cmd: RemotingCommand, name: str, default: Optional[int] = None) -> int:
    v = cmd.ext_fields.get(name)
    if v is None or v == "":
        if default is None:
            raise HeaderError(f"the custom field <{name}> is null")
        return default
    try:
        return int(v)
    except ValueError:
        raise HeaderError(f"the custom field <{name}> is not a number: {v[:40]!r}") from None


def field_bool(cmd: RemotingCommand, name: str, default: bool = False) -> bool:
    v = cmd.ext_fields.get(name)
    return default if v is None else v.strip().lower() == "true"
