"""Read-back checks of the ``--to controller`` demo (:mod:`tools.demo_controller`): the migrated
stores' files, and what a consumer is served.

Rules:
- :func:`check_migrated_node` reads a STOPPED replica with the store's own code: below
  ``classicFrom`` through the frozen regions of ``commitlogRegions.json``
  (:func:`broker.store.commitlog_regions.open_regions`, read-only: the old classic region and the
  DLedger region, each record CRC-checked), at or above it from the classic files the broker
  wrote in Controller mode; every record must decode (with its CRC) to the acknowledged topic,
  queue, queue offset, physical offset, body, keys and tags, lie in the region its phase wrote
  (master/slave -> the old classic region, DLedger mode -> the DLedger region, Controller mode ->
  at or above ``classicFrom``), and the ConsumeQueue unit at its queue offset must point at it.
- :func:`served` and :func:`check_served` are a consumer's reads over the HTTP API of a running
  broker (pull by queue offset, as many batches as it takes): every acknowledged message is
  served exactly once at its queue offset with its physical offset and body. A served message
  no acknowledgement names is counted, not a problem (a send attempt that failed may still
  have been stored: at-least-once, as RocketMQ's producer).
- :func:`check_resume` is a consumer group resuming after the migration: the committed offset
  the broker answers is the one committed in DLedger mode, the first pull from it returns
  exactly that queue offset, and what was consumed before plus what is pulled now is every
  acknowledged message of the queue once (nothing skipped, nothing repeated).
- Nothing here imports :mod:`tools.demo` (its ``Ack`` is read through :class:`AckLike`), so the
  demo's modules form no import circle.

Theory of operation: plain functions over read-only maps and the synchronous HTTP client; each
returns a list of problems (empty: the check holds), one line per problem.
"""
from __future__ import annotations

import json
import mmap
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Protocol, Sequence

from broker.api.client import SyncBrokerClient
from broker.store.commitlog_regions import REGIONS_FILE, open_regions
from broker.store.consume_queue import ConsumeQueueStore
from broker.store.message import decode_message, parse_delay_levels

PULL_BATCH = 256


class AckLike(Protocol):
    """What an acknowledgement of :mod:`tools.demo` carries (its ``Ack``)."""

    @property
    def phase(self) -> str: ...
    @property
    def topic(self) -> str: ...
    @property
    def queue_id(self) -> int: ...
    @property
    def queue_offset(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> str: ...
    @property
    def tag(self) -> str: ...
    @property
    def body(self) -> str: ...


def classic_from_of(root: Path) -> int:
    """``classicFrom`` of a migrated store (its regions file)."""
    return int(json.loads((root / REGIONS_FILE).read_text())["classicFrom"])


# ---- the files of a stopped replica -------------------------------------------------------------
class _WritableFiles:
    """Read-only maps of the classic files at or above ``classicFrom`` (20-digit names)."""

    def __init__(self, directory: Path, classic_from: int) -> None:
        self.files = sorted((int(f.name), f) for f in directory.iterdir() if f.name.isdigit()
                            and int(f.name) >= classic_from and f.stat().st_size > 0) if directory.is_dir() else []
        self.maps: dict[Path, mmap.mmap] = {}

    def at(self, offset: int) -> tuple[Optional[mmap.mmap], int]:
        for start, path in reversed(self.files):
            if start <= offset:
                if path not in self.maps:
                    with open(path, "rb") as fh:
                        self.maps[path] = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
                return self.maps[path], offset - start
        return None, 0

    def close(self) -> None:
        for m in self.maps.values():
            m.close()


@dataclass
class NodeCheck:
    """One replica's read-back: problems (empty: all good) and how many records each region held."""

    problems: list[str] = field(default_factory=list)
    by_region: dict[str, int] = field(default_factory=dict)


def check_migrated_node(root: Path, acks: Sequence[AckLike], file_size: int,
                        phase_kind: dict[str, str]) -> NodeCheck:
    """Every ack on one stopped migrated replica (module rules); ``phase_kind``: phase -> region kind
    (``classic``, ``dledger`` or ``writable``) where that phase's records must be."""
    out = NodeCheck()
    regions = open_regions(root, root / "commitlog", file_size, parse_delay_levels())
    if regions is None:
        out.problems.append(f"{root}: no {REGIONS_FILE}: not a migrated store")
        return out
    writable = _WritableFiles(root / "commitlog", regions.classic_from)
    cqs = ConsumeQueueStore(root, read_only=True)
    cqs.load()
    try:
        for a in acks:
            where = f"{a.key} at {a.offset}"
            if a.offset < regions.classic_from:
                region = regions.route(a.offset)
                kind = region.kind if region is not None else "none"
                try:
                    view = regions.get_record(a.offset)
                    m = decode_message(view, 0, check_crc=True) if view is not None else None
                except ValueError as exc:  # MessageFormatError, a corrupt record
                    out.problems.append(f"{where} ({kind} region): {exc}")
                    continue
            else:
                kind = "writable"
                buf, rel = writable.at(a.offset)
                try:
                    m = decode_message(buf, rel, check_crc=True) if buf is not None else None
                except ValueError as exc:
                    out.problems.append(f"{where} (classic file at/after classicFrom): {exc}")
                    continue
            if m is None:
                out.problems.append(f"{where}: no {kind} region or file holds this offset")
                continue
            out.by_region[kind] = out.by_region.get(kind, 0) + 1
            if phase_kind.get(a.phase, kind) != kind:
                out.problems.append(f"{where}: in the {kind} region, but phase {a.phase} wrote the "
                                    f"{phase_kind[a.phase]} one")
            got = (m.topic, m.queue_id, m.queue_offset, m.commitlog_offset, m.body.decode(errors="replace"),
                   m.keys, m.tags)
            want = (a.topic, a.queue_id, a.queue_offset, a.offset, a.body, a.key, a.tag)
            if got != want:
                diff = [f"{k} {g!r} != {w!r}" for k, g, w in zip(("topic", "queue", "queueOffset", "offset", "body",
                                                                   "keys", "tags"), got, want) if g != w]
                out.problems.append(f"{where}: {'; '.join(diff)[:200]}")
                continue
            cq = cqs.find_consume_queue(a.topic, a.queue_id, create=False)
            unit = cq.get(a.queue_offset) if cq is not None else None
            if unit is None or unit[0] != a.offset:
                out.problems.append(f"{where}: ConsumeQueue {a.topic}/{a.queue_id} unit {a.queue_offset} is {unit}")
    finally:
        cqs.shutdown()
        writable.close()
        regions.close()
    return out


# ---- what a consumer is served ------------------------------------------------------------------
def served(address: str, topic: str, queue_id: int, start: int = 0,
           limit: Optional[int] = None) -> list[dict[str, Any]]:
    """The messages ``address`` serves on one queue from queue offset ``start`` (pulls until empty)."""
    out: list[dict[str, Any]] = []
    with SyncBrokerClient(address, timeout=15.0) as c:
        offset = start
        while limit is None or len(out) < limit:
            got = c.pull(topic, queue_id, offset, PULL_BATCH if limit is None else min(PULL_BATCH, limit - len(out)))
            msgs = got.get("messages", [])
            if not msgs:
                break
            out += msgs
            offset = int(got["nextBeginOffset"])
    return out


def by_queue(acks: Iterable[AckLike]) -> dict[tuple[str, int], dict[int, AckLike]]:
    """``{(topic, queue): {queue offset: ack}}``."""
    out: dict[tuple[str, int], dict[int, AckLike]] = defaultdict(dict)
    for a in acks:
        out[(a.topic, a.queue_id)][a.queue_offset] = a
    return out


def _mismatch(m: dict[str, Any], a: AckLike) -> Optional[str]:
    got = (int(m["queueOffset"]), int(m["commitLogOffset"]), m.get("bodyText"))
    want = (a.queue_offset, a.offset, a.body)
    return None if got == want else f"served {got[:2]} {str(got[2])[:40]!r}, acknowledged {want[:2]} {want[2][:40]!r}"


def check_served(address: str, acks: Sequence[AckLike], name: str) -> tuple[list[str], int]:
    """(problems, unacknowledged extras): every ack served by ``address`` once, at its queue offset."""
    problems: list[str] = []
    extras = 0
    for (topic, q), want in sorted(by_queue(acks).items()):
        seen: dict[int, int] = defaultdict(int)
        for m in served(address, topic, q):
            qo = int(m["queueOffset"])
            seen[qo] += 1
            a = want.get(qo)
            if a is None:
                extras += 1
            elif (bad := _mismatch(m, a)) is not None:
                problems.append(f"{name} {topic}/{q}@{qo}: {bad}")
        missing = sorted(set(want) - set(seen))
        twice = sorted(qo for qo, n in seen.items() if n > 1)
        if missing:
            problems.append(f"{name} {topic}/{q}: {len(missing)} acknowledged message(s) not served, first at "
                            f"queue offset {missing[0]}")
        if twice:
            problems.append(f"{name} {topic}/{q}: queue offset {twice[0]} served more than once")
    return problems, extras


@dataclass
class Resume:
    """One queue of the consumer group: committed in DLedger mode, answered and first pulled after."""

    topic: str
    queue_id: int
    committed: int
    answered: Optional[int] = None
    first_pulled: Optional[int] = None
    pulled: int = 0


def offsets_of(address: str, group: str) -> dict[tuple[str, int], int]:
    """The group's committed offsets as ``address`` answers them (``GET /consumer-offsets``)."""
    with SyncBrokerClient(address, timeout=10.0) as c:
        table = c.query_offsets(group=group).get("offsets", {})
    return {(key.partition("@")[0], int(q)): int(o) for key, per_queue in table.items() for q, o in per_queue.items()}


def check_resume(address: str, group: str, resumes: Sequence[Resume], consumed_before: dict[tuple[str, int], list[str]],
                 acks: Sequence[AckLike]) -> list[str]:
    """The consumer group resumes on ``address`` exactly where it committed (module rules)."""
    problems: list[str] = []
    answered = offsets_of(address, group)
    want = by_queue(acks)
    for r in resumes:
        where = f"{r.topic}/{r.queue_id}"
        r.answered = answered.get((r.topic, r.queue_id))
        if r.answered != r.committed:
            problems.append(f"{where}: the broker answers committed offset {r.answered}, the group committed "
                            f"{r.committed} in DLedger mode")
            continue
        msgs = served(address, r.topic, r.queue_id, r.committed)
        r.pulled = len(msgs)
        r.first_pulled = int(msgs[0]["queueOffset"]) if msgs else None
        queue = want[(r.topic, r.queue_id)]
        expected_first = min((qo for qo in queue if qo >= r.committed), default=None)
        if r.first_pulled != expected_first or r.first_pulled != r.committed:
            problems.append(f"{where}: the first pull from committed offset {r.committed} returned queue offset "
                            f"{r.first_pulled} (expected {r.committed})")
        keys_now = [queue[int(m["queueOffset"])].key for m in msgs if int(m["queueOffset"]) in queue]
        every = [queue[qo].key for qo in sorted(queue)]
        before = consumed_before.get((r.topic, r.queue_id), [])
        if before + keys_now != every:
            both = set(before) & set(keys_now)
            problems.append(f"{where}: consumed before ({len(before)}) + after ({len(keys_now)}) is not every "
                            f"acknowledged message once ({len(every)}; {len(both)} repeated)")
    return problems
