"""Driver-side reduction: range summaries -> the six named checks and the store numbers.

Rules:
- Input is only per-range summaries (a few KiB each), never per-record rows; everything here
  is ordering and arithmetic over them.
- Chaining: within a file, range k+1 must start its walk exactly where range k's walk ended.
  :func:`reconcile` finds ranges whose own start (header sync) disagrees with the chain and asks
  for a rescan from the chained position (the job runs those on the executors), or drops a
  range that lies wholly inside a record owned by its predecessor.
- The checks (names as in the report):
  1 ``structure``          codec verdicts on every record/entry; every full file ends in a blank.
                           Classic stores only: an invalid record past the ConsumeQueues' dispatch
                           frontier, in the last file, followed by nothing but zeros is an
                           unfinished write (``old.unfinished_tail``, a note, the write end).
  2 ``old_continuity``     old files contiguous and equal-sized; records tile; PHY_POS == offset.
  3 ``divide``             old region ends at divided_commitlog_offset, blank-filled; the first
                           DLedger data file starts there with an entry (n/a for classic stores).
                           A store migrated to Controller mode (``commitlogRegions.json``): the
                           second divide too - the regions file's rules, region ends against the
                           files and the DLedger checkpoint, nothing in the gap below
                           ``classicFrom``, the writable classic region from it (``divides``).
  4 ``dledger_continuity`` pos fields tile; indexes contiguous up to committedIndex; terms never
                           decrease; PHY_POS == pos + 48; index units match entries.
  5 ``consumequeue``       units match their messages (decided by ``digest``: per-bucket digests of
                           the data scan vs the CQ units; differing buckets are rechecked unit by
                           unit); per queue the offsets of dispatchable messages form one +1 run
                           across the divide and the CQ covers it.
  6 ``replicas``           same bytes per range on every node up to the common limits; same divide.
  7 ``epochs``             the epoch file against the writable classic region: ordered, each start
                           a message boundary (or the max offset), the first at or above
                           ``classicFrom`` (``divides``). Reported only when a node is migrated or
                           has an epoch file (``Findings.shown``); n/a when none has the file.
  The writable classic region of a migrated store is checked as a classic log (checks 1, 2) and
  its queue-offset runs join the old and DLedger ones in check 5: offsets continue across every
  divide.
- Every violation row carries check, node, file, offset (absolute) and file_offset; queue rows
  also carry ``topic:queueId``.

Theory of operation: ``reconcile`` then ``evaluate``. Evaluate is two tables of named checks
(h11's transitions-as-data style), read top to bottom as what the validator verifies:
:data:`NODE_CHECKS` run per node in layout order (each walks that node's summaries in offset
order once per concern, appends violation rows to the check they belong to and fills the node's
numbers), then :data:`GROUP_CHECKS` across nodes (the executors' rows, n/a checks, replicas).
"""
from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from typing import Any, Callable, Iterable, NamedTuple

from upgrade.validate.divides import check_epochs, check_regions, region_of
from upgrade.validate.layout import FileRef, StoreLayout
from upgrade.validate.plan import Plan, ScanRange

CHECKS = ("structure", "old_continuity", "divide", "dledger_continuity", "consumequeue", "replicas", "epochs")
OPTIONAL_CHECKS = ("epochs",)  # reported only when a node has something for them (``Findings.shown``)
MAX_ROWS_PER_CHECK = 200


def _by_file(summaries: Iterable[dict], kind: str) -> dict[tuple[str, str], list[dict]]:
    out: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for s in summaries:
        if s["kind"] == kind:
            out[(s["node"], s["path"])].append(s)
    for v in out.values():
        v.sort(key=lambda s: s["start"])
    return out


def reconcile(plan: Plan, summaries: dict[int, dict]) -> list[ScanRange]:
    """Chain ranges within each file; returns ranges to rescan from their chained start."""
    ranges = {r.rid: r for r in plan.ranges}
    rescans: list[ScanRange] = []
    for kind in ("old", "new", "dl"):
        for _key, sums in _by_file(summaries.values(), kind).items():
            cursor: int | None = sums[0]["start"]
            for s in sums:
                s["discarded"] = False
                if cursor is None:  # after a blank, zeros or a break: accept what the sync found
                    cursor = s["next"] if s["end_kind"] in ("range", "committed") else None
                    continue
                if cursor >= s["end"]:  # wholly inside a record owned by an earlier range
                    s["discarded"] = s["first"] is not None
                    continue
                if s["first"] != cursor:  # the sync disagrees with the chain: rescan from it
                    rescans.append(ranges[s["rid"]].forced(cursor))
                    cursor = None
                    continue
                cursor = s["next"] if s["end_kind"] in ("range", "committed") else None
    return rescans


class Findings:
    """Violation rows per check plus the numbers of the report."""

    def __init__(self) -> None:
        self.rows: dict[str, list[dict]] = {c: [] for c in CHECKS}
        self.counts: Counter[str] = Counter()
        self.not_applicable: set[str] = set()
        self.shown: set[str] = {c for c in CHECKS if c not in OPTIONAL_CHECKS}

    def add(self, check: str, node: str, file: str | None, offset: int | None, message: str,
            file_offset: int | None = None, queue: str | None = None, space: str = "physical") -> None:
        self.counts[check] += 1
        if len(self.rows[check]) < MAX_ROWS_PER_CHECK:
            self.rows[check].append({"check": check, "node": node, "file": file, "offset": offset,
                                     "file_offset": file_offset, "queue": queue, "space": space, "message": message})

    def add_row(self, row: dict) -> None:
        self.counts[row["check"]] += 1
        if len(self.rows[row["check"]]) < MAX_ROWS_PER_CHECK:
            self.rows[row["check"]].append(row)


def locate(files: tuple[FileRef, ...], offset: int) -> tuple[str | None, int | None]:
    i = bisect.bisect_right([f.start for f in files], offset) - 1
    if i >= 0 and offset < files[i].end:
        return files[i].name, offset - files[i].start
    return None, None


def _locate_any(lay: StoreLayout, offset: int) -> tuple[str | None, int | None]:
    name, fo = locate(lay.dledger.data if lay.dledger else (), offset)
    if name is None:
        name, fo = locate(lay.old, offset)
    if name is None:
        name, fo = locate(lay.new, offset)
    return name, fo


def _file_terminals(sums: list[dict]) -> tuple[str, int | None]:
    """How a file's record walk ended: (kind, absolute position)."""
    live = [s for s in sums if not s.get("discarded")]
    for s in reversed(live):
        if s["end_kind"] in ("blank", "zeros", "break", "overrun", "committed", "error", "tail"):
            return s["end_kind"], s["end_pos"]
        if s["end_kind"] == "range":
            if s["next"] is not None and s["next"] >= s["file_start"] + s["file_size"]:
                return "exact-end", s["next"]
            return "range", s["next"]
    return "empty", None


def _old_region(f: Findings, lay: StoreLayout, sums_by_file: dict, info: dict,
                new_region: bool = False) -> None:
    """The old classic region's files (or, ``new_region``, a migrated store's writable classic
    region: written live, so like a classic store's)."""
    node = lay.node
    old, size = (lay.new, lay.regions.file_size) if new_region and lay.regions else (lay.old, lay.old_file_size)
    mixed = lay.divided_offset is not None and not new_region
    what_log = "the writable classic region" if new_region else "the old commitlog"
    for a, b in zip(old, old[1:]):
        if b.start > a.end:
            missing = [f"{o:020d}" for o in range(a.end, b.start, size or (b.start - a.end))]
            f.add("old_continuity", node, missing[0], a.end,
                  f"gap in {what_log}: {b.start - a.end} bytes missing between {a.name} and {b.name} "
                  f"(missing file{'s' if len(missing) > 1 else ''} {', '.join(missing[:5])})", 0)
        elif b.start < a.end:
            f.add("old_continuity", node, b.name, b.start, f"{b.name} overlaps {a.name} by {a.end - b.start} bytes", 0)
    for fr in old:
        if fr.size != size:
            f.add("old_continuity", node, fr.name, fr.start, f"file size {fr.size} differs from the others' {size}", 0)
    write_end = None
    terminals = [_file_terminals(sums_by_file.get((node, fr.path), [])) for fr in old]
    # A running classic broker pre-creates its next file (AllocateMappedFileService) before the
    # current one is full: trailing files with no record are not yet in use, and the last file
    # holding records is the one being written.
    last_used = len(old) - 1
    if not mixed:
        while last_used > 0 and (terminals[last_used][0] == "empty" or terminals[last_used] == ("zeros", old[last_used].start)):
            last_used -= 1
    for i, fr in enumerate(old):
        kind, pos = terminals[i]
        last = i >= last_used
        if i > last_used:
            continue  # pre-created, still empty: the write end stays in the last used file
        if kind == "blank":
            write_end = pos
            continue
        if last and not mixed and kind in ("zeros", "exact-end", "empty", "range", "tail"):
            write_end = pos if pos is not None else fr.start  # "tail": an unfinished write starts there
            continue
        where = pos if pos is not None else fr.start
        what = {"zeros": f"records stop at {where} (zeros)", "exact-end": "records run to the file end",
                "empty": "no records"}.get(kind, f"record walk ended with {kind} at {where}")
        f.add("structure", node, fr.name, where, f"file does not end in an end-of-file blank record: {what}",
              where - fr.start)
    info["write_end"] = write_end
    info["min_offset"] = old[0].start if old else None


def _dledger_region(f: Findings, lay: StoreLayout, sums_by_file: dict, dl_sums: list[dict],
                    idx_sums: list[dict], info: dict) -> None:
    node, dl = lay.node, lay.dledger
    assert dl is not None
    for a, b in zip(dl.data, dl.data[1:]):
        if b.start != a.end:
            f.add("dledger_continuity", node, b.name, a.end,
                  f"DLedger data files not contiguous: {a.name} ends at {a.end}, next file starts at {b.start}", 0)
    committed_files = [fr for fr in dl.data if fr.start < dl.committed_pos]
    for i, fr in enumerate(committed_files):
        kind, pos = _file_terminals(sums_by_file.get((node, fr.path), []))
        if i < len(committed_files) - 1 and kind != "blank":
            where = pos if pos is not None else fr.start
            f.add("structure", node, fr.name, where, f"DLedger data file does not end in a DLedger blank ({kind} at {where})",
                  where - fr.start)
    if not dl.committed_unit_ok and dl.committed_index >= 0:
        f.add("dledger_continuity", node, locate(dl.index, dl.committed_index * 32)[0], dl.committed_index * 32,
              f"checkpoint committedIndex {dl.committed_index} has no valid index unit", None, space="index")
    entries = sorted((s for s in dl_sums if not s.get("discarded") and s["first_index"] is not None),
                     key=lambda s: s["start"])
    prev = None
    for s in entries:
        if prev is not None:
            if s["first_index"] != prev["last_index"] + 1:
                f.add("dledger_continuity", node, s["file"], s["first"],
                      f"entry index {s['first_index']} follows {prev['last_index']}", s["first"] - s["file_start"])
            if s["first_term"] < prev["last_term"]:
                f.add("dledger_continuity", node, s["file"], s["first"],
                      f"term went backwards: {s['first_term']} after {prev['last_term']}", s["first"] - s["file_start"])
        prev = s
    n_entries = sum(s["records"] for s in dl_sums if not s.get("discarded"))
    info["entries"] = n_entries
    stops = [s["end_pos"] for s in dl_sums if not s.get("discarded") and s["end_kind"] in ("zeros", "break", "overrun")]
    info["data_end"] = min([e for e in stops if e < dl.committed_pos] or [dl.committed_pos])
    last_index = prev["last_index"] if prev else None
    if dl.committed_unit_ok and dl.committed_index >= 0 and last_index != dl.committed_index:
        end = max((s["next"] or 0) for s in dl_sums) if dl_sums else lay.divided_offset
        name, fo = _locate_any(lay, end) if end is not None else (None, None)
        f.add("dledger_continuity", node, name, end,
              f"committed entries missing: data holds entries up to index {last_index}, "
              f"checkpoint committedIndex is {dl.committed_index} (committed prefix ends at {dl.committed_pos})", fo)
    idx_live = sorted((s for s in idx_sums if s["first_index"] is not None), key=lambda s: s["start"])
    for before, after in zip(idx_live, idx_live[1:]):
        if after["first_term"] < before["last_term"]:
            f.add("dledger_continuity", node, after["file"], after["start"], "index unit term went backwards",
                  after["start"] - after["file_start"], space="index")
    info["first_index"] = entries[0]["first_index"] if entries else None
    info["last_index"] = last_index


def _divide(f: Findings, lay: StoreLayout, sums_by_file: dict, dl_by_file: dict, info: dict) -> None:
    node, div = lay.node, lay.divided_offset
    if div is None or not lay.old:
        return
    last = lay.old[-1]
    if last.end != div:
        f.add("divide", node, last.name, last.end,
              f"old region ends at {last.end} but divided_commitlog_offset (first DLedger data file) is {div}",
              last.size)
    for fr in lay.old:
        if fr.end > div:
            f.add("divide", node, fr.name, max(fr.start, div), f"old commitlog file {fr.name} reaches past the divide {div}", 0)
    kind, pos = _file_terminals(sums_by_file.get((node, last.path), []))
    if kind != "blank":
        f.add("divide", node, last.name, pos, f"the last old file is not blank-filled up to the divide ({kind})",
              None if pos is None else pos - last.start)
    else:
        info["blank_at"] = pos
    dlay = lay.dledger
    first = dlay.data[0] if dlay and dlay.data else None  # none yet right after the freeze
    if dlay is not None and first is not None:
        heads = [s for s in dl_by_file.get((node, first.path), []) if s["start"] == first.start]
        if not heads or heads[0]["first"] != div:
            if dlay.committed_index >= 0:
                f.add("divide", node, first.name, div, f"the first DLedger data file does not start with an entry at {div}", 0)


def _queues(f: Findings, lay: StoreLayout, data_sums: list[dict], cq_sums: list[dict], info: dict) -> None:
    node = lay.node
    runs: dict[tuple[str, int], list[list]] = defaultdict(list)
    for s in data_sums:
        if s.get("discarded"):
            continue
        for topic, qid, q0, q1, n, o0, o1 in s["runs"]:
            runs[(topic, qid)].append([q0, q1, n, o0, o1])
    per_queue: dict[str, dict[str, Any]] = {}
    for key in sorted(runs):
        topic, qid = key
        qname = f"{topic}:{qid}"
        rs = sorted(runs[key], key=lambda r: r[3])
        merged = [list(rs[0])]
        for q0, q1, n, o0, o1 in rs[1:]:
            cur = merged[-1]
            if q0 == cur[1] + 1:
                cur[1], cur[2], cur[4] = q1, cur[2] + n, o1
                continue
            name, fo = _locate_any(lay, o0)
            kind = "skip" if q0 > cur[1] + 1 else "duplicate or backwards"
            across = (f" ({region_of(lay, cur[4])} -> {region_of(lay, o0)})"
                      if lay.migrated or lay.divided_offset is not None and region_of(lay, cur[4]) != region_of(lay, o0)
                      else "")
            f.add("consumequeue", node, name, o0,
                  f"queue offset {kind}: message at {o0} has queue offset {q0}, previous message of the queue "
                  f"(at {cur[4]}) has {cur[1]}{across}", fo, qname)
            merged.append([q0, q1, n, o0, o1])
        total = sum(r[2] for r in rs)
        per_queue[qname] = {"messages": total, "min_queue_offset": min(r[0] for r in rs),
                            "max_queue_offset": max(r[1] for r in rs), "cq_units": 0}
    cq_by_q: dict[str, list[dict]] = defaultdict(list)
    for s in cq_sums:
        cq_by_q[f"{s['topic']}:{s['queue_id']}"].append(s)
    for qname, sums in sorted(cq_by_q.items()):
        live = [s for s in sums if s["first_index"] is not None]
        units = sum(s["last_index"] - s["first_index"] + 1 for s in live)
        entry = per_queue.setdefault(qname, {"messages": 0, "min_queue_offset": None, "max_queue_offset": None})
        entry["cq_units"] = units
        entry["cq_beyond_committed"] = sum(s.get("beyond_committed", 0) for s in sums)
        if not live:
            continue
        live.sort(key=lambda s: s["start"])
        for a, b in zip(live, live[1:]):
            if b["first_index"] != a["last_index"] + 1:
                f.add("consumequeue", node, b["file"], b["first_index"] * 20,
                      f"hole in the ConsumeQueue: units {a['last_index'] + 1}..{b['first_index'] - 1} empty",
                      b["first_index"] * 20 - b["file_start"], qname, space="consumequeue")
        lo, hi = live[0]["first_index"], live[-1]["last_index"] - entry["cq_beyond_committed"]
        if entry["max_queue_offset"] is not None and (hi < entry["max_queue_offset"] or lo > entry["min_queue_offset"]):
            f.add("consumequeue", node, live[-1]["file"], (hi + 1) * 20,
                  f"ConsumeQueue covers queue offsets {lo}..{hi} but the commitlog holds "
                  f"{entry['min_queue_offset']}..{entry['max_queue_offset']}", None, qname, space="consumequeue")
    for qname, entry in per_queue.items():
        if entry["messages"] and qname not in cq_by_q:
            f.add("consumequeue", node, None, None, f"{entry['messages']} messages but no ConsumeQueue directory", None, qname,
                  space="consumequeue")
    info["per_queue"] = per_queue


def replica_mismatches(plan: Plan, summaries: dict[int, dict], node_order: list[str]) -> list[dict]:
    """Ranges whose hash differs from the majority (ties: the first node's); one row per node."""
    groups: dict[tuple[str, int, int], dict[str, dict]] = defaultdict(dict)
    for s in summaries.values():
        if s.get("hash") and s["kind"] in ("old", "new", "dl", "idx"):
            groups[(s["kind"], s["hash"][0], s["hash"][1])][s["node"]] = s
    out = []
    for (kind, lo, hi), by_node in sorted(groups.items()):
        ref_node = next(n for n in node_order if n in by_node)
        for node in node_order:
            if node not in by_node:  # e.g. a deleted file on one replica
                s = by_node[ref_node]
                out.append({"kind": kind, "node": node, "ref_node": ref_node, "path": None, "ref_path": s["path"],
                            "file": s["file"], "file_start": s["file_start"], "lo": lo, "hi": hi, "missing": True})
        hashes = Counter(s["hash"][2] for s in by_node.values())
        best = max(hashes.values())
        ref_node = next(n for n in node_order if n in by_node and hashes[by_node[n]["hash"][2]] == best)
        ref = by_node[ref_node]
        for node, s in by_node.items():
            if s["hash"][2] != ref["hash"][2]:
                out.append({"kind": kind, "node": node, "ref_node": ref_node, "path": s["path"], "ref_path": ref["path"],
                            "file": s["file"], "file_start": s["file_start"], "lo": lo, "hi": hi})
    return out


# ---- evaluate: the checks as tables --------------------------------------------------------------
class NodeView:
    """One node's share of the evaluation: its layout, its summaries by kind, and its numbers."""

    def __init__(self, plan: Plan, lay: StoreLayout, by_kind: dict[str, list[dict]],
                 old_files: dict[tuple[str, str], list[dict]], dl_files: dict[tuple[str, str], list[dict]]) -> None:
        self.plan, self.lay, self.by_kind = plan, lay, by_kind
        self.old_files, self.dl_files = old_files, dl_files
        mode = "migrated" if lay.migrated else "mixed" if lay.dledger else ("frozen" if lay.frozen else "classic")
        self.info: dict[str, Any] = {"root": lay.root, "mode": mode}

    def live(self, kind: str) -> list[dict]:
        """The node's summaries of ``kind`` that chaining kept (``reconcile`` marks the others)."""
        return [s for s in self.by_kind[kind] if not s.get("discarded")]


class GroupView(NamedTuple):
    layouts: list[StoreLayout]
    summaries: dict[int, dict]
    mismatches: list[dict]


class NodeCheck(NamedTuple):
    name: str
    run: Callable[[Findings, NodeView], None]


class GroupCheck(NamedTuple):
    name: str
    run: Callable[[Findings, GroupView], None]


def _check_old_region(f: Findings, v: NodeView) -> None:
    lay = v.lay
    old_info: dict[str, Any] = {"files": len(lay.old), "file_size": lay.old_file_size}
    _old_region(f, lay, v.old_files, old_info)
    for key in ("messages", "dispatchable", "tx_skipped", "barriers", "records", "undispatched"):
        old_info[key] = sum(s.get(key, 0) for s in v.live("old"))
    ctx = v.plan.contexts.get(lay.node)
    if ctx is not None and ctx.live_tail is not None and not lay.migrated:
        old_info["dispatch_frontier"] = ctx.vouched
        notes = [s["tail"] for s in v.live("old") if s.get("tail")]
        if notes:
            old_info["unfinished_tail"] = notes[0]
    v.info["old"] = old_info
    if lay.migrated:  # the writable classic region, checked as a classic store's log
        new_info: dict[str, Any] = {"files": len(lay.new), "classic_from": lay.classic_from}
        _old_region(f, lay, v.old_files, new_info, new_region=True)
        for key in ("messages", "dispatchable", "tx_skipped", "barriers", "records", "undispatched"):
            new_info[key] = sum(s.get(key, 0) for s in v.live("new"))
        if ctx is not None and ctx.live_tail is not None:
            new_info["dispatch_frontier"] = ctx.vouched
            notes = [s["tail"] for s in v.live("new") if s.get("tail")]
            if notes:
                new_info["unfinished_tail"] = notes[0]
        v.info["new"] = new_info
    v.info["divided_offset"] = lay.divided_offset


def _check_dledger_region(f: Findings, v: NodeView) -> None:
    dl = v.lay.dledger
    if dl is None:
        return
    dl_info: dict[str, Any] = {"data_files": len(dl.data), "committed_index": dl.committed_index,
                               "end_index": dl.end_index, "committed_pos": dl.committed_pos,
                               "checkpoint": dl.checkpoint_source}
    _dledger_region(f, v.lay, v.dl_files, v.live("dl"), v.by_kind["idx"], dl_info)
    for key in ("messages", "dispatchable", "tx_skipped", "barriers"):
        dl_info[key] = sum(s[key] for s in v.live("dl"))
    v.info["dledger"] = dl_info


def _check_divide(f: Findings, v: NodeView) -> None:
    if v.lay.dledger is not None:
        _divide(f, v.lay, v.old_files, v.dl_files, v.info)
    check_regions(f, v.lay, v.info)  # the second divide of a migrated store


def _max_offset(f: Findings, v: NodeView) -> None:
    lay, dl = v.lay, v.lay.dledger
    if lay.migrated:  # the writable region's write end; classicFrom before its first message
        we = v.info["new"].get("write_end")
        v.info["max_offset"] = we if we is not None else lay.classic_from
    else:
        v.info["max_offset"] = dl.committed_pos if dl is not None else v.info["old"].get("write_end")
    if lay.migrated or lay.epochs is not None:
        starts = {o for kind in ("old", "new") for s in v.live(kind) for o in s.get("epoch_starts", [])}
        check_epochs(f, lay, v.info, starts, v.info["max_offset"])


def _check_queues(f: Findings, v: NodeView) -> None:
    _queues(f, v.lay, v.live("old") + v.live("dl") + v.live("new"), v.by_kind["cq"], v.info)


def _totals(f: Findings, v: NodeView) -> None:
    info, dl_info, new_info = v.info, v.info.get("dledger", {}), v.info.get("new", {})
    for key in ("messages", "dispatchable", "tx_skipped", "barriers"):
        info[key] = info["old"][key] + dl_info.get(key, 0) + new_info.get(key, 0)
    info["cq_units_checked"] = sum(s["messages"] for s in v.by_kind["cq"])


NODE_CHECKS: tuple[NodeCheck, ...] = (
    NodeCheck("classic regions (old; a migrated store's writable one): files tile, equal sizes, each full "
              "file ends in a blank (structure, old_continuity)", _check_old_region),
    NodeCheck("DLedger region: files contiguous, indexes and terms, committed entries (structure, "
              "dledger_continuity)", _check_dledger_region),
    NodeCheck("the divides: old region blank-filled up to the first, first entry there; a migrated store's "
              "regions file, nothing in the gap, the writable region from classicFrom (divide)", _check_divide),
    NodeCheck("the node's max offset (the writable region's write end, else the committed DLedger end, else the "
              "old write end) and the epoch file against it (epochs)", _max_offset),
    NodeCheck("queues: one +1 run of queue offsets per queue, ConsumeQueues cover it (consumequeue)",
              _check_queues),
    NodeCheck("the node's totals (old + DLedger + writable region, ConsumeQueue units checked)", _totals),
)


def _task_rows(f: Findings, g: GroupView) -> None:
    """The executors' rows last: the driver's root-cause rows are never crowded out."""
    for s in g.summaries.values():
        if s.get("discarded"):
            continue
        for row in s["violations"]:
            f.add_row(row)
        stored = Counter(row["check"] for row in s["violations"])
        for check, n in s["by_check"].items():
            f.counts[check] += n - stored[check]


def _not_applicable(f: Findings, g: GroupView) -> None:
    if any(lay.migrated or lay.epochs is not None for lay in g.layouts):
        f.shown.add("epochs")  # check 7 is reported for Controller-mode stores only
        if not any(lay.epochs is not None for lay in g.layouts):
            f.not_applicable.add("epochs")
    if not any(lay.divided_offset is not None and lay.old for lay in g.layouts):
        f.not_applicable.add("divide")
    if not any(lay.dledger is not None for lay in g.layouts):
        f.not_applicable.add("dledger_continuity")
    if len(g.layouts) < 2:
        f.not_applicable.add("replicas")


def _replica_divides(f: Findings, g: GroupView) -> None:
    if len(g.layouts) < 2:
        return
    ref = g.layouts[0]
    for lay in g.layouts[1:]:
        if lay.divided_offset != ref.divided_offset:
            f.add("replicas", lay.node, None, lay.divided_offset,
                  f"divided offset {lay.divided_offset} differs from {ref.node}'s {ref.divided_offset}")
        if lay.classic_from != ref.classic_from:  # the second divide: every replica converts at the same point
            f.add("replicas", lay.node, None, lay.classic_from,
                  f"classicFrom {lay.classic_from} differs from {ref.node}'s {ref.classic_from}")


def _replica_bytes(f: Findings, g: GroupView) -> None:
    if len(g.layouts) < 2:
        return
    for m in g.mismatches:
        at = m.get("at", m["lo"])
        kind = "writable classic region" if m["kind"] == "new" else m["kind"]
        what = (f"{kind} range {m['lo']}..{m['hi']} missing ({m['ref_node']} has it)" if m.get("missing")
                else f"{kind} bytes differ from {m['ref_node']} at {at} (range {m['lo']}..{m['hi']})")
        f.add("replicas", m["node"], m["file"], at, what, at - m["file_start"],
              space="index" if m["kind"] == "idx" else "physical")


GROUP_CHECKS: tuple[GroupCheck, ...] = (
    GroupCheck("the executors' violation rows and counts (structure, old/dledger continuity, consumequeue)",
               _task_rows),
    GroupCheck("checks with nothing to check are n/a (divide, dledger_continuity, replicas)", _not_applicable),
    GroupCheck("every replica has the first node's divided offset and classicFrom (replicas)", _replica_divides),
    GroupCheck("every replica's ranges hash as the majority's (replicas)", _replica_bytes),
)


def evaluate(plan: Plan, layouts: list[StoreLayout], summaries: dict[int, dict],
             mismatches: list[dict] | None = None) -> tuple[Findings, dict[str, dict]]:
    """Run :data:`NODE_CHECKS` over every node (layout order), then :data:`GROUP_CHECKS`: the
    findings per check and each node's numbers."""
    f = Findings()
    by_kind: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for s in summaries.values():
        by_kind[s["node"]][s["kind"]].append(s)
    old_files = _by_file(summaries.values(), "old")
    old_files.update(_by_file(summaries.values(), "new"))  # keyed by path: the two never share one
    dl_files = _by_file(summaries.values(), "dl")
    nodes: dict[str, dict] = {}
    for lay in layouts:
        view = NodeView(plan, lay, by_kind[lay.node], old_files, dl_files)
        for node_check in NODE_CHECKS:
            node_check.run(f, view)
        nodes[lay.node] = view.info
    group = GroupView(layouts, summaries, mismatches or [])
    for group_check in GROUP_CHECKS:
        group_check.run(f, group)
    return f, nodes
