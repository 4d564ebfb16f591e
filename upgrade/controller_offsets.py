"""Consumer offsets and schedule progress agree across the members of a DLedger group migrated to
Controller mode (issue 27.3/27.5: consumers resume at their offsets, nothing skipped or repeated).

Rules:
- In DLedger mode consumers commit offsets to the leader; the followers copy
  ``config/consumerOffset.json`` and ``config/delayOffset.json`` from it every
  ``slaveSyncIntervalMs`` (10 s). The controller may elect any member, and a member whose copy
  is up to 10 s old would make consumers repeat messages (and the schedule deliver delayed
  messages twice). So ``mqupgrade plan --to controller`` reads every member's two files with
  the broker's own readers (:mod:`broker.metadata`: fastjson or strict JSON, the ``.bak``
  fallback); a file neither the broker nor we can read refuses the plan.
- The merged table: per (``topic@group``, queueId) the largest offset any member holds; per
  delay level the largest progress. In normal operation the leader's offsets are never below a
  follower's copy, so the merge is the leader's table. The one case where it is wrong: an offset
  reset backwards (``mqadmin resetOffsetByTime``, a consumer's ``updateConsumeOffset`` to an
  earlier offset) on the leader less than one sync interval before the group stopped: a
  follower's older, higher offset wins and the reset is undone (consumers skip what it meant to
  replay: reset again after the migration). Likewise offsets the leader deleted in that
  interval (a group or topic removed) come back. The plan warns when the member with the newest
  DataVersion (the leader's, as followers adopt the leader's version with its file) is below
  another member or lacks an entry another member holds, the signature of that case.
- One action per member and file whose table differs from the merge; members that agree get
  none. Its kind is ``align_offsets`` (apply writes the whole small file atomically, keeping the
  original as ``<file>.bak-<apply started_at>`` with its mode; ``mqupgrade rollback`` puts that
  original back byte for byte, or removes a file that was not there), its id says
  ``align_offsets`` / ``align_delay_offsets``, its params name the file and the SHA-256 of the bytes the plan read (``source_sha256``, None: no file): apply's first run
  refuses with "plan again" when a file changed since (:func:`check_sources`). Both apply and
  rollback journal it and resume after a kill like every other step.
- The written text is the member's own file with the merged table: its other keys kept, the
  DataVersion of the newest member, bumped once (counter + 1, the plan's time) when no member
  holds the merged table, so a slave in Controller mode sees the master's version differ and
  copies it. The broker's own ``<file>.bak`` is left as it is.
- The same holds for a master/slave group (the slave copies the master's files on the same
  timer): its ``record_end`` steps carry the aligned files' digests (:func:`sources`) and check
  them (:func:`changed`), as the DLedger plan's first run does.

Theory of operation: :func:`align_actions` loads each member's two managers, merges their
tables, and yields an :class:`Align` per member and file that differs, plus the warnings;
:mod:`upgrade.controller_plan` turns them into actions. O(size of the offset tables).
"""
from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any, Callable, Iterable, NamedTuple, Optional

from broker.metadata.config_manager import ConfigManager, MetadataError
from broker.metadata.consumer_offset import ConsumerOffsetManager
from broker.metadata.data_version import DataVersion
from broker.metadata.delay_offset import DelayOffsetManager

#: an offset table flattened to {(key, queue) or level: offset}
Flat = dict[Any, int]


class Align(NamedTuple):
    """One member's file to rewrite with the merged table."""

    label: str  # the action id's name: align_offsets | align_delay_offsets
    root: str
    path: str
    content: str
    source_sha256: Optional[str]  # of the bytes the plan read; None: the file was absent
    reason: str


class OffsetFile(NamedTuple):
    """How one metadata file is read, flattened and written back (the broker's manager does the JSON)."""

    name: str  # under <root>/config/
    label: str
    what: str  # "consumer offsets" / "schedule progress"
    make: Callable[[Path], ConfigManager]
    flat: Callable[[ConfigManager], Flat]
    set_flat: Callable[[ConfigManager, Flat], None]
    describe: Callable[[Any], str]  # a flat key for the operator


def _consumer_flat(m: ConfigManager) -> Flat:
    assert isinstance(m, ConsumerOffsetManager)
    return {(k, q): o for k, qs in m.offset_table.items() for q, o in qs.items()} | {
        (k, None): -1 for k, qs in m.offset_table.items() if not qs}  # a key without queues still counts


def _consumer_set(m: ConfigManager, flat: Flat) -> None:
    assert isinstance(m, ConsumerOffsetManager)
    table: dict[str, dict[int, int]] = {}
    for (k, q), o in sorted(flat.items(), key=lambda kv: (kv[0][0], -1 if kv[0][1] is None else kv[0][1])):
        qs = table.setdefault(k, {})
        if q is not None:
            qs[q] = o
    m.offset_table = table


def _delay_flat(m: ConfigManager) -> Flat:
    assert isinstance(m, DelayOffsetManager)
    return dict(m.offset_table)


def _delay_set(m: ConfigManager, flat: Flat) -> None:
    assert isinstance(m, DelayOffsetManager)
    m.offset_table = {int(level): o for level, o in sorted(flat.items())}


FILES: tuple[OffsetFile, ...] = (
    OffsetFile("consumerOffset.json", "align_offsets", "consumer offsets", ConsumerOffsetManager, _consumer_flat,
               _consumer_set, lambda k: f"{k[0]} queue {k[1]}" if k[1] is not None else k[0]),
    OffsetFile("delayOffset.json", "align_delay_offsets", "schedule progress", DelayOffsetManager, _delay_flat,
               _delay_set, lambda k: f"delay level {k}"),
)

RESET_CASE = ("the one case this is wrong: an offset reset backwards (or offsets deleted) on the leader within the "
              "last slaveSyncIntervalMs before the group stopped is undone, as a follower's older copy wins; reset "
              "again after the migration if you did that")


def file_sha256(path: Path) -> Optional[str]:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def _version_key(v: DataVersion) -> tuple[int, int, int]:
    return (v.state_version, v.counter, v.timestamp)


class _Read(NamedTuple):
    root: str
    name: str  # the member's name for the operator
    manager: ConfigManager
    flat: Flat
    sha: Optional[str]


def _read(spec: OffsetFile, roots: Iterable[tuple[str, str]], refusals: list[str]) -> list[_Read]:
    out: list[_Read] = []
    for root, name in roots:
        path = Path(root) / "config" / spec.name
        m = spec.make(path)
        try:
            m.load()
        except MetadataError as exc:
            refusals.append(f"{root} ({name}): {exc}: the broker would not start on it either; repair or move it "
                            "away, then plan again")
            continue
        out.append(_Read(root, name, m, spec.flat(m), file_sha256(path)))
    return out


def _merge(reads: list[_Read]) -> Flat:
    merged: Flat = {}
    for r in reads:
        for k, o in r.flat.items():
            if k not in merged or o > merged[k]:
                merged[k] = o
    held = {k[0] for k in merged if isinstance(k, tuple) and k[1] is not None}
    return {k: o for k, o in merged.items() if not (isinstance(k, tuple) and k[1] is None and k[0] in held)}


def _suspects(spec: OffsetFile, reads: list[_Read], merged: Flat) -> Optional[str]:
    versions = sorted({_version_key(r.manager.data_version) for r in reads})
    if len(versions) < 2:
        return None  # no member is known to be the newest
    newest = max(reads, key=lambda r: _version_key(r.manager.data_version))
    odd = [k for k, o in merged.items() if newest.flat.get(k, None) != o]
    if not odd:
        return None
    shown = ", ".join(f"{spec.describe(k)}: {newest.flat.get(k, 'none')} < {merged[k]}" for k in sorted(odd, key=str)[:5])
    more = f" and {len(odd) - 5} more" if len(odd) > 5 else ""
    return (f"{spec.name}: {newest.name} holds the newest version (the leader's) but is below another member at "
            f"{shown}{more}: normal operation never does that, an offset reset backwards or a deletion within the last "
            "sync interval does, and the merge undoes it; reset again after the migration if you did that")


def align_actions(members: list[tuple[str, str]], *, now_ms: Optional[int] = None
                  ) -> tuple[list[Align], list[str], list[str]]:
    """``members``: (store root, member name). Returns (aligns, refusals, warnings)."""
    aligns: list[Align] = []
    refusals: list[str] = []
    warnings: list[str] = []
    stamp = now_ms if now_ms is not None else int(time.time() * 1000)
    for spec in FILES:
        reads = _read(spec, members, refusals)
        if len(reads) != len(members):
            continue
        merged = _merge(reads)
        behind = [r for r in reads if r.flat != merged]
        if not behind:
            continue
        newest = max(reads, key=lambda r: _version_key(r.manager.data_version))
        version = DataVersion(newest.manager.data_version.timestamp, newest.manager.data_version.counter,
                              newest.manager.data_version.state_version)
        if all(r.flat != merged for r in reads):
            version.next_version(lambda: stamp)
        note = _suspects(spec, reads, merged)
        if note:
            warnings.append(note)
        for r in behind:
            spec.set_flat(r.manager, merged)
            r.manager.data_version = version
            lacks = sum(1 for k in merged if k not in r.flat)
            lower = sum(1 for k, o in merged.items() if k in r.flat and r.flat[k] < o)
            aligns.append(Align(
                spec.label, r.root, str(Path(r.root) / "config" / spec.name), r.manager.encode(), r.sha,
                f"{spec.name}: {r.name}'s {spec.what} differ from the group's ({lower} lower, {lacks} missing): "
                f"written as the largest any member holds per entry (the leader's offsets are never below a "
                f"follower's copy, which lags by up to slaveSyncIntervalMs); {RESET_CASE}. The original is kept "
                "for rollback"))
    return aligns, refusals, warnings


def sources(aligns: Iterable[Align]) -> dict[str, list[Optional[str]]]:
    """{path: [SHA-256 the plan read, SHA-256 of the planned text]}: what :func:`changed` compares with."""
    return {a.path: [a.source_sha256, hashlib.sha256(a.content.encode()).hexdigest()] for a in aligns}


def changed(srcs: dict[str, list[Optional[str]]], step: str) -> Optional[str]:
    """The first file holding neither the bytes the plan read nor the planned ones, said; None: none."""
    for path, (then, planned) in sorted(srcs.items()):
        if file_sha256(Path(path)) not in (then, planned):
            return (f"{path} changed since the plan was made ({step}: a broker ran on the store?); run mqupgrade "
                    "plan again")
    return None


def check_sources(actions: Iterable[tuple[str, dict[str, Any]]]) -> Optional[str]:
    """(action id, params) of the plan's aligns: the first file whose bytes changed since the plan, said."""
    for aid, p in actions:
        if "source_sha256" in p:
            said = changed({p["path"]: [p["source_sha256"], hashlib.sha256(p["content"].encode()).hexdigest()]}, aid)
            if said:
                return said
    return None
