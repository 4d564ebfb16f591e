"""Outcomes of a put: RocketMQ's PutMessageStatus / AppendMessageResult / PutMessageResult.

Rules:
- Status names are RocketMQ's, so the HTTP API and logs speak the same language as a Java
  broker (``CREATE_MAPPED_FILE_FAILED`` is spelled correctly; RocketMQ's own enum says
  ``CREATE_MAPEDFILE_FAILED``).
- An AppendMessageResult describes bytes that are in the commitlog (visible to readers); the
  PutMessageResult adds what the flush and replication policies made of them. A put that is
  not PUT_OK may still be in the commitlog (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT,
  SLAVE_NOT_AVAILABLE): the client must treat it as "maybe stored", as with RocketMQ.
- A put that stored nothing is :class:`PutRefused` (its status and why) all the way to the doors;
  each door has exactly one table from a status to its own answer (the HTTP API:
  ``broker.api.errors.PUT_STATUS_HTTP``; remoting: ``processors.send.PUT_STATUS_REMOTING``).
- Compiled with mypyc (``broker.native``, issue 22 H10): the results are native classes, built
  per put and per request slice (``put_coalescer._slice``) without an interpreted ``__init__``;
  their fields are checked against their declared types at run time.
- msgIds are computed lazily (RocketMQ uses a Supplier): formatting hex for every message of a
  100k-message batch would cost more than writing it.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final, Sequence

from broker.store.message_id import HostAddr, create_message_id


class PutMessageStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"

    @property
    def stored(self) -> bool:
        """True if the bytes are in the commitlog (even if the durability wait failed)."""
        # by name: a str hashes from its cache, an Enum member through Enum.__hash__ (Python code;
        # 1.5% of the classic master's loop thread when this was a set of members, issue 22 H10)
        return self._name_ in _STORED


class PutRefused(Exception):
    """A put that stored nothing: its :class:`PutMessageStatus` (never a stored one) and why."""

    def __init__(self, status: PutMessageStatus, detail: str) -> None:
        super().__init__(f"{status.value}: {detail}")
        self.status = status
        self.detail = detail

    @property
    def code(self) -> str:
        """The status name (what a log or a retry loop reports)."""
        return self.status.value


_STORED: Final = frozenset({
    PutMessageStatus.PUT_OK.name, PutMessageStatus.FLUSH_DISK_TIMEOUT.name,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT.name, PutMessageStatus.SLAVE_NOT_AVAILABLE.name,
})


@dataclass(slots=True, init=False)
class AppendMessageResult:
    """Where a put (one message or a batch) landed. ``__init__`` is written out (the dataclass's
    fields, defaults and order): compiled, it is a native call, not the interpreted one
    ``dataclasses`` makes (this class and :class:`PutMessageResult` are built per put)."""

    wrote_offset: int  # physical offset of the first message
    wrote_bytes: int  # bytes of the messages (blank fillers excluded)
    store_timestamp: int
    logics_offset: int  # queue offset of the first message
    msg_num: int
    physical_offsets: Sequence[int]  # one per message
    queue_offsets: Sequence[int]  # one per message
    store_hosts: Sequence[HostAddr]  # one per message (for msgIds)
    end_offset: int  # physical offset just after the last message (flush/HA target)
    sizes: Sequence[int]  # each record's size (both commitlogs): a merged put is sliced without re-encoding

    def __init__(self, wrote_offset: int, wrote_bytes: int, store_timestamp: int, logics_offset: int,
                 msg_num: int = 1, physical_offsets: Sequence[int] = (), queue_offsets: Sequence[int] = (),
                 store_hosts: Sequence[HostAddr] = (), end_offset: int = 0, sizes: Sequence[int] = ()) -> None:
        self.wrote_offset = wrote_offset
        self.wrote_bytes = wrote_bytes
        self.store_timestamp = store_timestamp
        self.logics_offset = logics_offset
        self.msg_num = msg_num
        self.physical_offsets = physical_offsets
        self.queue_offsets = queue_offsets
        self.store_hosts = store_hosts
        self.end_offset = end_offset
        self.sizes = sizes

    @property
    def msg_ids(self) -> list[str]:
        return [create_message_id(h, o) for h, o in zip(self.store_hosts, self.physical_offsets)]

    @property
    def msg_id(self) -> str:
        """RocketMQ's form: one id, or the ids of a batch joined by commas."""
        return ",".join(self.msg_ids)


@dataclass(slots=True, init=False)
class PutMessageResult:
    status: PutMessageStatus
    append_result: AppendMessageResult | None
    error: str  # why, for the non-stored statuses
    extra: dict[str, object]

    def __init__(self, status: PutMessageStatus, append_result: AppendMessageResult | None = None, error: str = "",
                 extra: dict[str, object] | None = None) -> None:
        self.status = status
        self.append_result = append_result
        self.error = error
        self.extra = {} if extra is None else extra

    @property
    def ok(self) -> bool:
        return self.status is PutMessageStatus.PUT_OK
