"""Peer messages of the consensus core: small frozen dataclasses with a plain-dict codec.

Rules
-----
- Every message names its sender ``src``, its receiver ``dst`` and the sender's ``term``.  The
  core drops messages whose ``src`` is not a configured peer or whose ``dst`` is not itself.
- Log positions follow DLedger: the first index is 0, an empty log has end index -1 and end
  term -1, and ``(prev_index=-1, prev_term=-1)`` matches every log.
- Entries are opaque: ``Entry.data`` is whatever the driver's store returned from
  ``get_raw`` (in the real server a fully encoded DLedger entry, header included); the core only
  reads ``index``, ``term`` and ``len(data)``.
- ``to_dict()`` produces plain types only (str, int, bool, bytes, list, dict) so the rpc layer
  can msgpack it; :func:`from_dict` is the only way back and validates everything (types,
  ranges, entry contiguity).  A malformed peer message raises :class:`MessageError` before any
  state is touched.
- Ranges are DLedger's Java longs: terms ``0..MAX_LONG``, indexes ``-1..MAX_LONG`` (``MAX_LONG
  = 2**63-1``), at most :data:`MAX_ENTRIES` entries per append.  A term the store could not
  encode (``currterm``, entry headers) must never reach the core: one forged huge term would
  otherwise be persisted and stop every member for good.  The error names the field and value.

Theory of operation
-------------------
The wire form of a message is ``{"t": <kind>, field: value, ...}``; entries travel as
``[index, term, data]`` triples.  :data:`KINDS` maps each kind to its class; each class lists its
fields with a validator in ``_SCHEMA``, so decoding is a table walk rather than per-class code.

Pre-vote (etcd-raft's): a pre-candidate sends ``VoteRequest(pre_vote=True, term=current+1)``
without changing its own term; voters answer without changing theirs.  Only a pre-candidate
that wins a quorum of pre-votes increments its term and sends real votes, so a partitioned node
never inflates terms.  ``transfer=True`` marks the real vote of a leadership-transfer target
(sent after :class:`TimeoutNow`); it overrides the voters' leader lease.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Callable, ClassVar, Union

from dledger.core.codes import Code, VoteResult


MAX_LONG = 2**63 - 1  # Java's Long.MAX_VALUE: DLedger's terms and indexes are longs
MAX_TERM = MAX_LONG
MAX_INDEX = MAX_LONG
MAX_ENTRIES = 1 << 20  # per append; a frame is bounded by max_frame_size long before this


#: what a message becomes on the wire (msgpack): plain values, lists and string-keyed dicts
Wire = Union[None, bool, int, str, bytes, list["Wire"], dict[str, "Wire"]]


class MessageError(ValueError):
    """A peer message failed validation in :func:`from_dict`."""


@dataclass(frozen=True, slots=True)
class Entry:
    index: int
    term: int
    data: bytes

    def to_list(self) -> list[Wire]:
        return [self.index, self.term, self.data]


@dataclass(frozen=True, slots=True)
class VoteRequest:
    KIND: ClassVar[str] = "vote"
    src: str
    dst: str
    term: int
    last_index: int
    last_term: int
    pre_vote: bool = False
    transfer: bool = False

    def to_dict(self) -> dict[str, Wire]:
        return _to_dict(self)


@dataclass(frozen=True, slots=True)
class VoteResponse:
    KIND: ClassVar[str] = "vote_resp"
    src: str
    dst: str
    term: int
    granted: bool
    pre_vote: bool = False
    result: VoteResult = VoteResult.UNKNOWN

    def to_dict(self) -> dict[str, Wire]:
        return _to_dict(self)


@dataclass(frozen=True, slots=True)
class AppendRequest:
    """Push of entries (or a heartbeat when ``entries`` is empty).

    ``entries[i].index == prev_index + 1 + i``; ``commit`` is the leader's commit index.

    ``begin=True`` (DLedger's TRUNCATE to the leader's first entry): the receiver is behind the
    leader's begin index, so no ``prev_term`` exists to compare (``prev_term == -1``); it
    discards its log and makes ``entries`` (non-empty, starting at the leader's begin index
    ``prev_index + 1``) the start of its log.
    """

    KIND: ClassVar[str] = "append"
    src: str
    dst: str
    term: int
    prev_index: int
    prev_term: int
    commit: int
    entries: tuple[Entry, ...] = ()
    begin: bool = False

    def to_dict(self) -> dict[str, Wire]:
        return _to_dict(self)


@dataclass(frozen=True, slots=True)
class AppendResponse:
    """Answer to an :class:`AppendRequest`.

    success: ``match_index`` is the highest index the follower has *persisted* and knows to
    match the leader (never more than it has flushed).
    reject: ``reject_index`` is the request's ``prev_index``; ``(hint_index, hint_term)`` is the
    follower's last entry with index <= reject_index and term <= the request's ``prev_term``
    (etcd-raft's fast back-off); ``last_index`` is the follower's ledger end (Raft's reject
    hint: a ``last_index`` below the leader's ``match`` means the follower lost entries it had
    acknowledged -- its store was moved away -- and the leader resets its progress).
    """

    KIND: ClassVar[str] = "append_resp"
    src: str
    dst: str
    term: int
    success: bool
    match_index: int = -1
    reject_index: int = -1
    hint_index: int = -1
    hint_term: int = -1
    last_index: int = -1
    code: Code = Code.SUCCESS

    def to_dict(self) -> dict[str, Wire]:
        return _to_dict(self)


@dataclass(frozen=True, slots=True)
class TimeoutNow:
    """Leadership transfer: the receiver campaigns at once (DLedger's take-leadership)."""

    KIND: ClassVar[str] = "timeout_now"
    src: str
    dst: str
    term: int

    def to_dict(self) -> dict[str, Wire]:
        return _to_dict(self)


Message = Union[VoteRequest, VoteResponse, AppendRequest, AppendResponse, TimeoutNow]
KINDS: dict[str, type] = {
    c.KIND: c for c in (VoteRequest, VoteResponse, AppendRequest, AppendResponse, TimeoutNow)
}


# --------------------------------------------------------------------------- codec

_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _to_dict(msg: Message) -> dict[str, Wire]:
    cls = type(msg)
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(msg))
    out: dict[str, Wire] = {"t": msg.KIND}
    for name in names:
        v = getattr(msg, name)
        if name == "entries":
            v = [[e.index, e.term, e.data] for e in v]
        elif name == "begin":
            if not v:
                continue  # only begin requests carry it: older peers never see the field
        elif isinstance(v, (Code, VoteResult)):
            v = int(v)
        out[name] = v
    return out


def _int(lo: int, hi: int = MAX_LONG) -> Callable[[str, object], int]:
    def check(name: str, v: object) -> int:
        if type(v) is not int:
            raise MessageError(f"field {name!r} must be an int, got {type(v).__name__}")
        if v < lo:
            raise MessageError(f"field {name!r}={v} is below {lo}")
        if v > hi:
            raise MessageError(f"field {name!r}={v} is above {hi} (out of a Java long's range)")
        return v

    return check


def _str(name: str, v: object) -> str:
    if type(v) is not str or not v or len(v) > 256:
        raise MessageError(f"field {name!r} must be a non-empty str of <= 256 chars")
    return v


def _bool(name: str, v: object) -> bool:
    if type(v) is not bool:
        raise MessageError(f"field {name!r} must be a bool, got {type(v).__name__}")
    return v


def _enum(cls: type[Code] | type[VoteResult]) -> Callable[[str, object], object]:
    def check(name: str, v: object) -> object:
        if type(v) is not int:
            raise MessageError(f"field {name!r} must be an int code")
        try:
            return cls(v)
        except ValueError:
            raise MessageError(f"field {name!r}: unknown {cls.__name__} {v}") from None

    return check


def _entries(name: str, v: object) -> tuple[Entry, ...]:
    if not isinstance(v, (list, tuple)):
        raise MessageError(f"field {name!r} must be a list")
    if len(v) > MAX_ENTRIES:
        raise MessageError(f"field {name!r} has {len(v)} entries, more than {MAX_ENTRIES}")
    out: list[Entry] = []
    append = out.append
    for i, e in enumerate(v):
        if type(e) is list and len(e) == 3:  # the common case, checked inline (per entry)
            idx, term, data = e
            if (type(idx) is int and type(term) is int and 0 <= idx <= MAX_INDEX and 0 <= term <= MAX_TERM
                    and type(data) is bytes):
                append(Entry(idx, term, data))
                continue
        if not isinstance(e, (list, tuple)) or len(e) != 3:
            raise MessageError(f"entry #{i} must be [index, term, data]")
        idx, term, data = e
        _NON_NEGATIVE(f"entries[{i}].index", idx)
        _NON_NEGATIVE(f"entries[{i}].term", term)
        if type(data) is not bytes:
            raise MessageError(f"entries[{i}].data must be bytes, got {type(data).__name__}")
        append(Entry(idx, term, data))
    return tuple(out)


_TERM = _int(-1)
_NON_NEGATIVE = _int(0)
_INDEX = _int(-1)
_SCHEMA: dict[type, dict[str, Callable[[str, object], object]]] = {
    VoteRequest: {"src": _str, "dst": _str, "term": _int(0), "last_index": _INDEX,
                  "last_term": _TERM, "pre_vote": _bool, "transfer": _bool},
    VoteResponse: {"src": _str, "dst": _str, "term": _int(0), "granted": _bool,
                   "pre_vote": _bool, "result": _enum(VoteResult)},
    AppendRequest: {"src": _str, "dst": _str, "term": _int(0), "prev_index": _INDEX,
                    "prev_term": _TERM, "commit": _INDEX, "entries": _entries, "begin": _bool},
    AppendResponse: {"src": _str, "dst": _str, "term": _int(0), "success": _bool,
                     "match_index": _INDEX, "reject_index": _INDEX, "hint_index": _INDEX,
                     "hint_term": _TERM, "last_index": _INDEX, "code": _enum(Code)},
    TimeoutNow: {"src": _str, "dst": _str, "term": _int(0)},
}


def from_dict(d: object) -> Message:
    """Decode and validate a message produced by ``to_dict`` (e.g. after msgpack)."""
    if not isinstance(d, dict):
        raise MessageError(f"message must be a dict, got {type(d).__name__}")
    kind = d.get("t")
    cls = KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise MessageError(f"unknown message kind {kind!r}")
    schema = _SCHEMA[cls]
    extra = set(d) - set(schema) - {"t"}
    if extra:
        raise MessageError(f"{kind}: unknown fields {sorted(extra)}")
    kwargs: dict[str, object] = {}
    for name, check in schema.items():
        if name in d:
            kwargs[name] = check(name, d[name])
        elif name in ("src", "dst", "term"):
            raise MessageError(f"{kind}: missing field {name!r}")
    msg = cls(**kwargs)
    if isinstance(msg, AppendRequest):
        _check_append(msg)
    return msg


def _check_append(m: AppendRequest) -> None:
    if m.begin:
        if not m.entries or m.prev_term != -1:
            raise MessageError("append: a begin request needs entries and prev_term -1")
    elif (m.prev_index == -1) != (m.prev_term == -1):
        raise MessageError("append: prev_index and prev_term must both be -1 or both >= 0")
    if m.prev_term > m.term:
        raise MessageError("append: prev_term exceeds the leader's term")
    last_term = m.prev_term
    for i, e in enumerate(m.entries):
        if e.index != m.prev_index + 1 + i:
            raise MessageError(f"append: entry #{i} has index {e.index}, "
                               f"expected {m.prev_index + 1 + i}")
        if e.term < last_term or e.term > m.term:
            raise MessageError(f"append: entry #{i} term {e.term} out of order")
        last_term = e.term
