"""The steps ``mqupgrade apply`` runs for a ``--to controller`` plan, beyond the shared ones
(``recover``, ``write_conf``), and the first-run check of a DLedger group.

Rules:
- ``write_regions`` writes the planned ``commitlogRegions.json`` text exactly (parsed first: it
  must be the spec's file), atomically; already there with the same text is done; another text
  is refused (not written by this plan). It is refused, too, when the classic commitlog already
  holds a file at or above ``classicFrom`` (data where the new classic files must start).
- ``record_end`` checks and records a master/slave node's commitlog end (clean, the planned
  end): rollback compares with it; and that the offset files the plan aligns on the node still
  hold the bytes the plan read (``offset_sources``).
- Both record which Controller-mode files (epoch file, broker identity) the store held before
  apply (``preexisting``): rollback removes only the ones that came after; and the store's mode
  record (``storeshape`` and its ``.bak``, ``shape``), which rollback puts back.
- The first run of a DLedger-group plan re-reads every member (O(1)) and stops with "plan
  again" when its committed end, its entries or its files moved since the plan, or when a
  consumer-offset or schedule-progress file the plan aligns changed (:mod:`upgrade.controller_offsets`).
- Every step is idempotent and returns a deterministic detail for the journal.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Optional

from upgrade import regions_file
from upgrade.controller_offsets import changed, check_sources
from upgrade.dledger_member import inspect_member
from upgrade.fileops import atomic_write_text
from upgrade.inspect import inspect_store
from upgrade.plan_model import Plan
from upgrade.store_files import list_files

#: files a broker in Controller mode writes in its store root (Apache's names): rollback removes them
CONTROLLER_FILES = ("epochFileCheckpoint", "epochFileCheckpoint.bak", "brokerIdentity", "brokerIdentity-temp")
#: the store's own record of its mode (``broker.store.shape``), which a start in Controller mode rewrites as
#: classic: rollback puts back what apply found
SHAPE_FILES = ("storeshape", "storeshape.bak")


class StepError(Exception):
    """The store is not what the plan expects (one line; apply reports it as ApplyError)."""


def preexisting(root: str) -> list[str]:
    return [n for n in CONTROLLER_FILES if (Path(root) / n).exists()]


def shape_before(root: str) -> dict[str, Optional[str]]:
    """The store's mode record as apply found it (None: absent)."""
    out: dict[str, Optional[str]] = {}
    for name in SHAPE_FILES:
        p = Path(root) / name
        out[name] = p.read_text(encoding="utf-8", errors="replace") if p.is_file() else None
    return out


def files_from(commit_log_dir: str, classic_from: int) -> list[Path]:
    """The classic commitlog files at or above ``classicFrom`` (the new, writable ones)."""
    return [Path(commit_log_dir) / f.name for f in list_files(Path(commit_log_dir)) if f.from_offset >= classic_from]


def write_regions(p: dict[str, Any]) -> dict[str, Any]:
    root, content = p["root"], p["content"]
    regions_file.parse(content)  # the plan carries the spec's file, or nothing is written
    path = regions_file.path_of(root)
    detail = {"path": str(path), "classic_from": p["classic_from"],
              "sha256": hashlib.sha256(content.encode()).hexdigest()}
    if path.exists():
        if path.read_text(encoding="utf-8", errors="replace") == content:
            return {**detail, "preexisting": preexisting(root), "shape": shape_before(root)}
        raise StepError(f"{path} exists and differs from the planned one; it was not written by this plan")
    new = files_from(p["commit_log_dir"], p["classic_from"])
    if new:
        raise StepError(f"{new[0]} already exists at or above classicFrom {p['classic_from']}; run mqupgrade plan again")
    pre, shape = preexisting(root), shape_before(root)
    atomic_write_text(path, content)
    return {**detail, "preexisting": pre, "shape": shape}


def record_end(p: dict[str, Any]) -> dict[str, Any]:
    s = inspect_store(p["root"], settings=p["settings"])
    if not s.clean_shutdown or s.max_offset != p["expect_max_offset"]:
        raise StepError(f"{p['root']}: ends at {s.max_offset} (clean={s.clean_shutdown}), the plan expected "
                        f"{p['expect_max_offset']}; run mqupgrade plan again")
    said = changed(p.get("offset_sources") or {}, "record_end")
    if said:
        raise StepError(said)
    return {"max_offset": s.max_offset, "tail_file": s.tail_file, "preexisting": preexisting(p["root"]),
            "shape": shape_before(p["root"])}


def _facts(d: dict[str, Any]) -> tuple[Any, ...]:
    return (d["committed_end"], d["last_index"], d["last_end"], d["clean_shutdown"],
            [f["name"] for f in d["data_files"]], [f["name"] for f in d["classic_files"]])


def preflight_members(plan: Plan) -> None:
    """First run of a DLedger-group plan: every member must still be what the plan saw."""
    k = plan.inspection.get("committed_index")
    for d in plan.inspection.get("members", []):
        node = next(n for n in plan.nodes if n.root == d["root"])
        m = inspect_member(d["root"], d["commit_log_dir"], int(node.store_settings["mapped_file_size_consume_queue"]),
                           committed_override=k)
        now = _facts(m.to_dict())
        if now != _facts(d) or m.problems:
            raise StepError(f"{d['root']} changed since the plan was made (committed end {d['committed_end']} -> "
                            f"{m.committed_end}, last entry {d['last_index']} -> {m.last_index}); run mqupgrade plan "
                            "again")
    changed = check_sources((a.id, a.params) for a in plan.actions)
    if changed:
        raise StepError(changed)
