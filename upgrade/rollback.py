"""``mqupgrade rollback``: undo an applied ``--to controller`` plan, before the first write in
Controller mode; resumable after a kill at any step, like ``apply``.

Rules:
- Only a ``--to controller`` plan that ``apply`` has run (its journal exists) is rolled back.
  Every node's store is locked first (as ``apply`` does): a running broker stops it with one line.
- Allowed only before the first write in the new mode, checked on every node before anything
  is changed (and again on a resumed run, where it still holds):
  * from DLedger mode (the shared spec): no classic commitlog file at or above ``classicFrom``
    holds a message. The classic commitlog is written from the first byte of its first file, so
    a file whose first record header (8 bytes) is zeros holds none: O(1) per file.
  * from master/slave: every node's commitlog end is the one ``apply`` recorded (``record_end``).
  Otherwise nothing is changed and one sentence says why and what is now needed.
- Undo, in reverse plan order, one journaled step per applied action: ``write_conf`` puts back
  the file ``apply`` kept (``<conf>.bak-<apply started_at>``) or removes a conf that did not
  exist before (the same for a member's aligned ``consumerOffset.json`` / ``delayOffset.json``,
  :mod:`upgrade.controller_offsets`: its original comes back byte for byte; apply's leftover
  ``.upgrade-tmp`` files go); ``write_regions`` removes the new empty classic files (at or above
  ``classicFrom``), the Controller-mode files that came after apply (epoch file, broker
  identity), puts back the store's mode record (``storeshape``, rewritten as classic by a start in
  Controller mode) as apply found it, and then removes ``commitlogRegions.json``; ``record_end``
  does the same for the Controller-mode files and the mode record. The DLedger store and the old commitlog were never modified, so the previous mode
  starts as before.
- Each undo is idempotent: a conf holding the planned text is ours (restore or remove it), one
  holding anything else is already the restored one (kept); a regions file holding another text
  is not ours (kept, and said so). Finally the apply journal is set aside
  (``<journal>.rolled-back-<time>``), so the same plan can be applied again later, and the
  rollback journal with it.

Theory of operation: :func:`rollback_plan` loads the plan and both journals, locks the stores,
runs the gate (:func:`gate`), then one undo per action under the rollback journal
(``<plan>.rollback.json``, :class:`~upgrade.journal.Journal`, bound to the plan's bytes).
"""
from __future__ import annotations

import argparse
import json
import os
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable, Optional

from broker.store.lockfile import StoreLock, StoreLockedError
from dledger.store.safefile import fsync_dir
from upgrade import regions_file
from upgrade.journaled_cli import confirmed, stopped
from upgrade.controller_apply import CONTROLLER_FILES, SHAPE_FILES, files_from
from upgrade.fileops import TMP_SUFFIX, atomic_write_text
from upgrade.inspect import inspect_store
from upgrade.journal import Journal, Step, plan_digest
from upgrade.plan_model import Action, Plan

Echo = Callable[[str], None]


class RollbackError(Exception):
    """Rollback cannot proceed (one sentence for the operator)."""


def _journal_paths(plan_path: str | os.PathLike[str], journal: Optional[str]) -> tuple[Path, Path]:
    base = str(Path(plan_path).with_suffix(""))
    return Path(journal or base + ".journal.json"), Path(base + ".rollback.json")


def _read_apply_journal(path: Path, digest: str) -> dict[str, Any]:
    """Apply's journal, read only (a rollback does not count as one of its runs)."""
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise RollbackError(f"{path}: unreadable journal ({exc})") from None
    if data.get("plan_sha256") != digest:
        raise RollbackError(f"{path}: journal of another plan (the plan file changed since apply)")
    return data


def _holds_message(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(8).strip(b"\0") != b""


def gate(plan: Plan, applied: dict[str, Any]) -> None:
    """Raise :class:`RollbackError` when some node has been written in Controller mode."""
    for a in plan.actions:
        p = a.params
        if a.kind == "write_regions":
            written = next((f for f in files_from(p["commit_log_dir"], p["classic_from"]) if _holds_message(f)), None)
            if written is not None:
                raise RollbackError(
                    f"{p['root']}: cannot roll back: {written.name} holds messages written in Controller mode (at or "
                    f"above classicFrom {p['classic_from']}), which DLedger mode cannot take back in place; keep the "
                    "group in Controller mode (nothing was changed)")
        elif a.kind == "record_end":
            step = applied.get(a.id)
            if not step or step.get("state") != "done":
                continue  # apply stopped before it: no conf of this plan can have started this node
            then = step["detail"]["max_offset"]
            now = inspect_store(p["root"], settings=p["settings"]).max_offset
            if now != then:
                raise RollbackError(
                    f"{p['root']}: cannot roll back: its commitlog end moved from {then} to {now} since apply "
                    "(written, or replicated, in Controller mode); keep the group in Controller mode, or restore the "
                    "previous confs yourself once `mqupgrade inspect` shows the replicas agree (nothing was changed)")


class _Undo:
    """One undo per action kind; each idempotent, each returns its journal detail."""

    def __init__(self, applied: dict[str, Any], backup_suffix: str) -> None:
        self.applied, self.backup_suffix = applied, backup_suffix

    def _preexisting(self, a: Action) -> list[str]:
        step = self.applied.get(a.id) or {}
        return list((step.get("detail") or {}).get("preexisting", CONTROLLER_FILES))

    def _remove_controller_files(self, a: Action, root: str) -> list[str]:
        keep = set(self._preexisting(a))
        gone: list[str] = []
        for name in CONTROLLER_FILES:
            p = Path(root) / name
            if name not in keep and p.exists():
                p.unlink()
                gone.append(name)
        step = self.applied.get(a.id) or {}
        shape: Optional[dict[str, Optional[str]]] = (step.get("detail") or {}).get("shape")
        for name in SHAPE_FILES if shape is not None else ():  # the mode record, as apply found it
            assert shape is not None
            p, then = Path(root) / name, shape.get(name)
            now = p.read_text(encoding="utf-8", errors="replace") if p.is_file() else None
            if now == then:
                continue
            if then is None:
                p.unlink()
            else:
                atomic_write_text(p, then)
            gone.append(name)
        if gone:
            fsync_dir(Path(root))
        return gone

    def run(self, a: Action) -> dict[str, Any]:
        """The undo of ``a``'s kind, run; a kind without one stops the rollback."""
        fn: Optional[Callable[[Action], dict[str, Any]]] = getattr(self, f"undo_{a.kind}", None)
        if fn is None:
            raise RollbackError(f"{a.id}: a {a.kind} step cannot be rolled back")
        return fn(a)

    def undo_write_conf(self, a: Action) -> dict[str, Any]:
        path, content = Path(a.params["path"]), a.params["content"]
        bak = path.with_name(path.name + self.backup_suffix)
        for tmp in (path.with_name(path.name + TMP_SUFFIX), bak.with_name(bak.name + TMP_SUFFIX)):
            tmp.unlink(missing_ok=True)  # left by an apply killed mid-write or mid-backup
        if not path.exists() or path.read_text(encoding="utf-8", errors="replace") != content:
            return {"path": str(path), "conf": "previous"}  # restored already (or never written)
        if bak.exists():
            os.replace(bak, path)
            fsync_dir(path.parent)
            return {"path": str(path), "conf": "restored"}
        path.unlink()
        fsync_dir(path.parent)
        return {"path": str(path), "conf": "removed"}


    def undo_align_offsets(self, a: Action) -> dict[str, Any]:
        """The original offsets file back, byte for byte (or removed when there was none): as a conf."""
        return self.undo_write_conf(a)
    def undo_write_regions(self, a: Action) -> dict[str, Any]:
        p = a.params
        rf = regions_file.path_of(p["root"])
        if rf.exists() and rf.read_text(encoding="utf-8", errors="replace") != p["content"]:
            return {"regions": "not ours, kept"}
        new = files_from(p["commit_log_dir"], p["classic_from"])
        for f in new:
            f.unlink()
            (f.parent.with_name(f.parent.name + ".pagecrc") / f.name).unlink(missing_ok=True)
        if new:
            fsync_dir(Path(p["commit_log_dir"]))
        gone = self._remove_controller_files(a, p["root"])
        rf.with_name(rf.name + TMP_SUFFIX).unlink(missing_ok=True)  # left by an apply killed mid-write
        if rf.exists():
            rf.unlink()
            fsync_dir(rf.parent)
        return {"regions": "removed", "new_files": sorted(f.name for f in new), "controller_files": gone}

    def undo_record_end(self, a: Action) -> dict[str, Any]:
        return {"controller_files": self._remove_controller_files(a, a.params["root"])}

    def undo_recover(self, a: Action) -> dict[str, Any]:
        return {}  # the store's own recovery: the broker would have done it at its next start


def _lock_all(plan: Plan) -> list[StoreLock]:
    locks: list[StoreLock] = []
    for n in plan.nodes:
        lock = StoreLock(n.root)
        try:
            lock.acquire()
        except StoreLockedError as exc:
            for held in locks:
                held.release()
            raise RollbackError(f"{exc} Stop the broker first.") from None
        locks.append(lock)
    return locks


def rollback_plan(plan_path: str | os.PathLike[str], *, journal_path: Optional[str] = None,
                  echo: Echo = print) -> dict[str, Any]:
    """Roll back the applied plan at ``plan_path``; returns the rollback journal's data."""
    plan = Plan.load(plan_path)
    if plan.target != "controller":
        raise RollbackError("only a plan of `mqupgrade plan --to controller` can be rolled back; this one leads to "
                            f"{plan.target} mode")
    apply_jp, jp = _journal_paths(plan_path, journal_path)
    if not apply_jp.exists() and not jp.exists():
        raise RollbackError(f"nothing to roll back: apply has not run this plan (no journal at {apply_jp})")
    digest = plan_digest(plan_path)
    locks = _lock_all(plan)
    try:
        journal = Journal(jp, digest)
        if apply_jp.exists():
            applied = _read_apply_journal(apply_jp, digest)
            journal.note("apply_started_at", applied["started_at"])
            journal.note("applied", applied["steps"])
        steps: dict[str, Any] = journal.data.get("applied", {})
        gate(plan, steps)
        undo = _Undo(steps, f".bak-{journal.data.get('apply_started_at', '')}")
        actions = list(reversed(plan.actions))
        journal.run_steps([Step(f"undo-{a.id}", f"[{i}/{len(actions)}] undo {a.kind} {a.node}", partial(undo.run, a))
                           for i, a in enumerate(actions, 1)], echo)
        stamp = time.strftime("%Y%m%d%H%M%S")
        if apply_jp.exists():  # the same plan may be applied again later, from the start
            os.replace(apply_jp, apply_jp.with_name(f"{apply_jp.name}.rolled-back-{stamp}"))
        journal.finish(True)
        data = journal.data
        os.replace(jp, jp.with_name(f"{jp.name}.done-{stamp}"))
        fsync_dir(jp.parent)
        return data
    finally:
        for lock in locks:
            lock.release()


# ---- command line -------------------------------------------------------------------------------
HELP = "undo an applied --to controller plan, before the first write in Controller mode (resumable)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("plan", help="plan file written by mqupgrade plan --to controller and run by apply")
    p.add_argument("--journal", help="apply's journal (default: <plan>.journal.json next to the plan)")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")


def run(args: argparse.Namespace) -> int:
    from upgrade.journal import JournalError
    from upgrade.plan import PlanError

    try:
        if not args.yes and not confirmed("rollback", "roll back"):
            return 1
        data = rollback_plan(args.plan, journal_path=args.journal)
    except (RollbackError, PlanError, JournalError, KeyboardInterrupt) as exc:
        return stopped("rollback", exc, RollbackError)
    print(f"rolled back: {len(data['steps'])} steps undone; the stores are in their previous mode again")
    return 0
