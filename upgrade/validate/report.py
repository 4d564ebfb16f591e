"""The validation report: a JSON-able dict, a readable text summary, and the exit code.

Rules:
- ``ok`` is true iff every applicable check passed; the CLI exits 0 iff ``ok`` (2 otherwise).
- Each check is ``{"status": "pass"|"fail"|"n/a", "violations": [...], "violation_count": n}``;
  violation rows are ``{check, node, file, offset, file_offset, queue, space, message}``
  (``space``: what ``offset`` measures - ``physical``, ``index`` or ``consumequeue`` bytes),
  sorted by node and offset, capped per check (the count is exact).
- ``nodes`` holds the numbers: messages per region and per queue, divided offset, max offsets,
  committed index, transactional and barrier counts (not in ConsumeQueues, counted apart).
- ``segments`` per node (for the picture): ``old``, ``blank``, ``dledger``, ``new`` (a migrated
  store's writable classic region; the gap below classicFrom is ``blank``) spans and gaps.
- Optional checks (``checks.OPTIONAL_CHECKS``: the epoch file) appear only when a node has
  something for them; a node's ``epochs`` numbers say when there is no file to check.

Theory of operation: pure formatting over ``checks.evaluate``'s output.
"""
from __future__ import annotations

from typing import Any

from upgrade.validate.checks import CHECKS, OPTIONAL_CHECKS, Findings
from upgrade.validate.layout import StoreLayout

TITLES = {
    "structure": "1 structure (magic, sizes, CRCs, file-end blanks)",
    "old_continuity": "2 classic-region continuity (tiling, PHY_POS)",
    "divide": "3 the divides (divided_commitlog_offset; classicFrom of a migrated store)",
    "dledger_continuity": "4 DLedger-region continuity (pos, index, term, index units)",
    "consumequeue": "5 ConsumeQueues (units, queue offsets across the divides)",
    "replicas": "6 replicas (byte-identical ranges, committed indexes)",
    "epochs": "7 the epoch file (epochFileCheckpoint) against the commitlog",
}


def _segments(lay: StoreLayout, info: dict) -> list[dict]:
    segs: list[dict] = []
    if lay.old:
        we = info["old"].get("write_end")
        end_old = lay.old[-1].end
        segs.append({"kind": "old", "start": lay.old[0].start, "end": we if we is not None else end_old})
        if lay.divided_offset is not None and we is not None and we < end_old:
            segs.append({"kind": "blank", "start": we, "end": end_old})
    if lay.dledger is not None and lay.dledger.data:
        end = info.get("dledger", {}).get("data_end", lay.dledger.committed_pos)
        segs.append({"kind": "dledger", "start": lay.dledger.data[0].start, "end": end})
        if end < lay.dledger.committed_pos:  # committed bytes that are not there
            segs.append({"kind": "gap", "start": end, "end": lay.dledger.committed_pos})
    if lay.regions is not None:  # a migrated store: the gap below classicFrom, the writable region
        cf = lay.regions.classic_from
        if lay.regions.last_end < cf:
            segs.append({"kind": "blank", "start": lay.regions.last_end, "end": cf})
        we = info.get("new", {}).get("write_end")
        if we is not None and we > cf:
            segs.append({"kind": "new", "start": cf, "end": we})
    for a, b in zip(lay.old, lay.old[1:]):  # gaps last: drawn on top
        if b.start > a.end:
            segs.append({"kind": "gap", "start": a.end, "end": b.start})
    return segs


def build_report(layouts: list[StoreLayout], findings: Findings, nodes: dict[str, dict], params: dict,
                 summaries: dict[int, dict] | None = None) -> dict:
    checks: dict[str, Any] = {}
    for name in CHECKS:
        if name in OPTIONAL_CHECKS and name not in findings.shown:
            continue
        rows = sorted(findings.rows[name], key=lambda r: (r["node"] or "", r.get("space", "physical") != "physical",
                                                          r["offset"] if r["offset"] is not None else -1))
        if name in findings.not_applicable and not rows:
            status = "n/a"
        else:
            status = "fail" if findings.counts[name] else "pass"
        checks[name] = {"title": TITLES[name], "status": status, "violation_count": findings.counts[name], "violations": rows}
    for lay in layouts:
        nodes[lay.node]["segments"] = _segments(lay, nodes[lay.node])
    ok = all(c["status"] != "fail" for c in checks.values())
    return {"ok": ok, "nodes": nodes, "checks": checks, "params": params}


def exit_code(report: dict) -> int:
    return 0 if report["ok"] else 2


def _fmt(n: Any) -> str:
    return f"{n:,}" if isinstance(n, int) else str(n)


def summary_text(report: dict, max_rows: int = 10) -> str:
    lines = [f"mqupgrade validate: {'OK - all checks hold' if report['ok'] else 'VIOLATIONS FOUND'}"]
    for node, info in report["nodes"].items():
        lines.append(f"node {node} ({info['mode']}) {info['root']}")
        old = info["old"]
        lines.append(f"  old commitlog: {old['files']} files, {_fmt(old['messages'])} messages, "
                     f"write end {_fmt(old.get('write_end'))}")
        if old.get("undispatched"):
            lines.append(f"  {_fmt(old['undispatched'])} messages past the ConsumeQueues' dispatch frontier "
                         f"{_fmt(old.get('dispatch_frontier'))} (not dispatched yet; not checked against ConsumeQueues)")
        if old.get("unfinished_tail"):
            lines.append(f"  note: {old['unfinished_tail']['message']}")
        if "dledger" not in info and info.get("divided_offset") is not None:
            lines.append(f"  divided_commitlog_offset {_fmt(info['divided_offset'])} (frozen by the upgrade; "
                         f"no DLedger data yet)")
        if "dledger" in info:
            dl = info["dledger"]
            lines.append(f"  divided_commitlog_offset {_fmt(info['divided_offset'])}; DLedger: {dl['data_files']} files, "
                         f"{_fmt(dl['entries'])} entries, {_fmt(dl['messages'])} messages, committedIndex "
                         f"{_fmt(dl['committed_index'])}, committed pos {_fmt(dl['committed_pos'])}")
        if "new" in info:
            new = info["new"]
            lines.append(f"  migrated to Controller mode: classicFrom {_fmt(new['classic_from'])}; writable classic "
                         f"region: {new['files']} files, {_fmt(new['messages'])} messages, write end "
                         f"{_fmt(new.get('write_end'))}")
        if "epochs" in info:
            ep = info["epochs"]
            lines.append(f"  epoch file: {ep['note']}" if ep.get("file") is None else
                         f"  epoch file: {ep['entry_count']} entries {ep['entries'][:3]}"
                         + (f" ({ep['note']})" if ep.get("note") else ""))
        lines.append(f"  total {_fmt(info['messages'])} messages ({_fmt(info['dispatchable'])} in ConsumeQueues, "
                     f"{_fmt(info['tx_skipped'])} PREPARED/ROLLBACK, {_fmt(info['barriers'])} barriers), "
                     f"max offset {_fmt(info['max_offset'])}")
        pq = info.get("per_queue", {})
        if pq:
            counts = sorted({q["messages"] for q in pq.values()})
            desc = f"{_fmt(counts[0])} each" if len(counts) == 1 else f"{_fmt(counts[0])}..{_fmt(counts[-1])}"
            lines.append(f"  {len(pq)} queues, {desc}")
    for name, c in report["checks"].items():
        lines.append(f"[{c['status'].upper():4}] {c['title']}" + (f": {c['violation_count']} violation(s)" if c["violation_count"] else ""))
        for row in c["violations"][:max_rows]:
            q = f" queue {row['queue']}" if row.get("queue") else ""
            lines.append(f"       {row['node']} {row['file']} @{row['offset']} (file+{row['file_offset']}){q}: {row['message']}")
    p = report["params"]
    lines.append(f"scanned {_fmt(p['bytes_planned'])} bytes in {p['ranges']} ranges on {p['master']}: "
                 f"{p['scan_seconds']} s ({p['scan_gb_per_s']} GB/s), total {p['elapsed_seconds']} s")
    return "\n".join(lines)
