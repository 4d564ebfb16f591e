"""The second divide of a store migrated to Controller mode, and the epoch file (driver side).

Rules (issue 27's shared spec; the rows go to the named checks of ``checks``):
- ``divide`` (check 3, "the divides"), for a store with ``commitlogRegions.json``: every rule of
  the spec the file breaks (``regions.Regions.problems``); the classic region ends where its last
  file ends (the old ``dividedCommitlogOffset``) and no old file reaches past it; the DLedger
  region starts at its first data file (retention, which deletes whole frozen files oldest first,
  may move that up once no classic file is left) and ends at the end of an entry (the layout
  walks up to it: ``mqupgrade`` writes the group's committed end, so a member's own checkpoint may
  lag behind it - a note - but never lie ahead of it: that region would hide committed entries); no
  commitlog file lies in the gap ``[last region end, classicFrom)``; the writable classic
  region's first file starts exactly at ``classicFrom`` (or above it once retention has deleted
  every frozen file) and every file there has the file's ``mappedFileSizeCommitLog``.
- Queue offsets continue across every divide: ``checks`` merges the queue-offset runs of the
  old, DLedger and writable regions in offset order; :func:`region_of` words where a run sits.
  ConsumeQueue units are routed by region in ``cq`` (a unit into the gap is a violation there).
- ``epochs`` (check 7, shown for a migrated store or a store with an epoch file): the file reads
  (its ``.bak`` fallback is a note); epochs strictly grow and start offsets never fall (the
  broker's loader rule); on a migrated store the first start offset is at or above
  ``classicFrom``; every start offset is at or below the max offset and is a message boundary of
  the writable classic region (a record start some classic range reported, or the max offset
  itself). A store without the file: nothing to check, and the node's numbers say so. A store
  still in DLedger mode has no writable classic region: its epoch file is only read and ordered.

Theory of operation: pure functions over the layout, the per-node numbers ``checks`` already
computed and the record starts the executors reported (``epoch_starts``); the findings go
through the narrow :class:`Sink` protocol (``checks.Findings``), so this module imports no check
machinery.
"""
from __future__ import annotations

import os
from typing import Iterable, Protocol

from broker.ha.autoswitch.epoch_file import EPOCH_FILE_NAME
from upgrade.validate.layout import FileRef, StoreLayout


class Sink(Protocol):
    def add(self, check: str, node: str, file: str | None, offset: int | None, message: str,
            file_offset: int | None = None, queue: str | None = None, space: str = "physical") -> None: ...


def region_of(lay: StoreLayout, offset: int) -> str:
    """The region of ``lay`` that holds ``offset``, in words (for findings)."""
    rg = lay.regions
    if rg is not None:  # a migrated store: as its regions file says
        if offset >= rg.classic_from:
            return "writable classic region"
        if offset >= rg.last_end:
            return "gap below classicFrom"
        for r in reversed(rg.regions):
            if r.start <= offset:
                return "DLedger region" if r.kind == "dledger" else f"{r.kind} region"
        return "retention (below the first region)"
    div = lay.divided_offset
    if div is not None and offset >= div:
        return "DLedger region"
    return "classic region" if div is not None else "commitlog"


def _file_of(files: Iterable[FileRef], offset: int) -> tuple[str | None, int | None]:
    for f in files:
        if f.start <= offset < f.end:
            return f.name, offset - f.start
    return None, None


def check_regions(sink: Sink, lay: StoreLayout, info: dict) -> None:
    """The ``divide`` rows of a migrated store (see the module rules); fills ``info``."""
    rg = lay.regions
    if rg is None:
        return
    node, name = lay.node, os.path.basename(rg.file)
    info["regions"] = {"file": rg.file, "classic_from": rg.classic_from, "gap": [rg.last_end, rg.classic_from],
                       "regions": [{"kind": r.kind, "start": r.start, "end": r.end} for r in rg.regions]}
    for problem in rg.problems:
        sink.add("divide", node, name, None, f"{name}: {problem}")
    for r in rg.of_kind("classic"):
        if lay.old and lay.old[-1].end != r.end and lay.old[-1].start < r.end:
            sink.add("divide", node, lay.old[-1].name, lay.old[-1].end,
                     f"the classic region of {name} ends at {r.end} but its last file {lay.old[-1].name} ends at "
                     f"{lay.old[-1].end}", lay.old[-1].size)
    dl = lay.dledger
    for r in rg.of_kind("dledger"):
        if dl is None:
            continue
        # retention deletes whole frozen files oldest first: DLedger files may start above the
        # region only once no classic file is left below them
        if dl.data and (dl.data[0].start < r.start or dl.data[0].start > r.start and lay.old):
            sink.add("divide", node, dl.data[0].name, dl.data[0].start,
                     f"the DLedger region of {name} starts at {r.start} but its first data file starts at "
                     f"{dl.data[0].start}", 0)
        if not dl.region_end_entry:
            fname, fo = _file_of(dl.data, r.end)
            sink.add("divide", node, fname, r.end,
                     f"the DLedger region of {name} ends at {r.end}, which is not the end of a DLedger entry in its "
                     f"index", fo)
        elif dl.own_checkpoint is not None:
            ci, cp = dl.own_checkpoint
            if cp > r.end and ci >= 0:  # the region hides entries this member's checkpoint calls committed
                fname, fo = _file_of(dl.data, r.end)
                sink.add("divide", node, fname, r.end,
                         f"the DLedger region of {name} ends at {r.end} but this member's DLedger checkpoint "
                         f"(committedIndex {ci}) says the committed entries end at {cp}", fo)
            else:
                info["regions"]["own_checkpoint"] = {"committed_index": ci, "committed_pos": cp,
                                                     "note": "behind the region's end (a follower's checkpoint "
                                                             "lags; the group's committed end counts)"}
    classic_end = max((r.end for r in rg.of_kind("classic")), default=None)
    div = lay.divided_offset
    for f in lay.old:  # a file past the classic region that the divide check (``checks``) does not name
        if classic_end is not None and (f.end <= classic_end or (div is not None and f.start < div)):
            continue
        at = f.start if classic_end is None else max(f.start, classic_end)
        where = (f"lies in the gap [{rg.last_end}, {rg.classic_from}) below classicFrom, which holds nothing"
                 if at >= rg.last_end else f"reaches into the {region_of(lay, at)} at {at}, outside every classic region")
        sink.add("divide", node, f.name, at, f"commitlog file {f.name} {where}", at - f.start)
    if lay.new:
        first = lay.new[0]
        frozen_left = bool(lay.old) or bool(dl is not None and dl.data)  # else retention took them all
        if first.start < rg.classic_from or first.start > rg.classic_from and frozen_left:
            sink.add("divide", node, first.name, first.start,
                     f"the writable classic region starts with {first.name}, not at classicFrom {rg.classic_from}", 0)
        for f in lay.new:
            if f.size != rg.file_size:
                sink.add("divide", node, f.name, f.start,
                         f"writable classic file {f.name} has {f.size} bytes; {name} says mappedFileSizeCommitLog "
                         f"is {rg.file_size}", 0)


def writable_files(lay: StoreLayout) -> tuple[FileRef, ...] | None:
    """The writable classic region's files: a migrated store's new files, a classic store's
    files; None for a store in DLedger mode (it has none)."""
    if lay.migrated:
        return lay.new
    return lay.old if lay.dledger is None and not lay.frozen else None


def check_epochs(sink: Sink, lay: StoreLayout, info: dict, record_starts: set[int], max_offset: int | None) -> None:
    """The ``epochs`` rows of one node (see the module rules); fills ``info["epochs"]``."""
    ep, node = lay.epochs, lay.node
    if ep is None:
        if lay.migrated:
            info["epochs"] = {"file": None, "note": f"no {EPOCH_FILE_NAME}: nothing to check (the first master the "
                                                    f"controller elects writes it)"}
        return
    entries = list(ep.entries)
    mine: dict = {"file": ep.file, "source": ep.source, "entries": [list(e) for e in entries[:20]],
                  "entry_count": len(entries)}
    info["epochs"] = mine
    if ep.source == "error":
        sink.add("epochs", node, EPOCH_FILE_NAME, None, f"the epoch file cannot be read: {ep.error}")
        return
    if ep.source == "bak":
        mine["note"] = f"the main {EPOCH_FILE_NAME} was unusable; its .bak was read (as the broker does)"
    for (e0, s0), (e1, s1) in zip(entries, entries[1:]):
        if e1 <= e0:
            sink.add("epochs", node, EPOCH_FILE_NAME, s1, f"epoch {e1} (start {s1}) follows epoch {e0}: epochs must grow")
        if s1 < s0:
            sink.add("epochs", node, EPOCH_FILE_NAME, s1,
                     f"epoch {e1} starts at {s1}, below epoch {e0}'s start {s0}: start offsets must not fall")
    files = writable_files(lay)
    if files is None:
        mine["note"] = "the store is in DLedger mode (no writable classic region): entries only read and ordered"
        return
    cf = lay.classic_from
    if entries and cf is not None and entries[0][1] < cf:
        e, s = entries[0]
        sink.add("epochs", node, EPOCH_FILE_NAME, s,
                 f"the first epoch {e} starts at {s}, below classicFrom {cf} ({region_of(lay, s)}): epochs of a "
                 f"migrated store start in the writable classic region")
    for e, s in entries:
        if cf is not None and s < cf:
            continue  # reported above (the first) or by the order rule
        fname, fo = _file_of(files, s)
        where = f"{fname}+{fo}" if fname is not None else "no file"
        if max_offset is not None and s > max_offset:
            sink.add("epochs", node, EPOCH_FILE_NAME, s,
                     f"epoch {e} starts at {s} ({region_of(lay, s)}, {where}), above the max offset {max_offset}")
        elif s != max_offset and s not in record_starts:
            sink.add("epochs", node, EPOCH_FILE_NAME, s,
                     f"epoch {e} starts at {s} ({region_of(lay, s)}, {where}), which is not a message boundary of "
                     f"the writable classic region")
