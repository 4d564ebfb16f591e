"""``mqupgrade apply``: execute a plan, idempotently, under a journal.

Rules:
- A refused plan is not applied. Before the first step every node's root is locked with the
  store's own ``lock`` (as a broker would), so no broker can start on a store being upgraded;
  a lock held elsewhere stops apply with one line. Until a step is done (a first run, or a rerun
  after the check stopped it) every store
  that held data is re-inspected (O(1)) and must still match the plan (end offset, clean flag,
  files), else "plan again".
- Steps run in plan order; each is idempotent and is journaled only once its effects are durable.
  Killed at any instant and rerun, apply resumes at the first step not journaled and ends in
  the same state as an uninterrupted run (same files, same journal apart from the run count).
- Copies never expose a half-written file (``fileops``: ``.upgrade-tmp``, fsync, digest check,
  rename). Files that apply overwrites outside the commitlog (conf files, a slave's ``config/``)
  are first kept as ``<name>.bak-<journal started_at>``.
- Old commitlog bytes are only ever *added* (missing files, the missing tail of a slave's last
  file) or, with ``--freeze``, the 8-byte tail blank (:mod:`broker.store.freeze`); bytes a store
  already holds are never rewritten. ``recover`` and ``dispatch`` open the store with its own
  DefaultMessageStore (its recovery, its ReputMessageService) and shut it down cleanly.
- Cost model: on a node that already holds the data (the master, a caught-up slave) apply does a
  tail inspection (a few records), writes a conf file and at most 8 bytes: O(1) in the store size.
  A slave behind pays O(missing bytes) (+ one in-kernel clone of its last file); a new node pays
  O(master data) for the copy and its verification digests; a dirty store pays its recovery.
- A ``--to controller`` plan (:mod:`upgrade.controller_plan`) adds two step kinds,
  ``write_regions`` and ``record_end`` (:mod:`upgrade.controller_apply`); ``mqupgrade rollback``
  undoes it before the first write in Controller mode (:mod:`upgrade.rollback`).
- ``freeze`` steps are optional: without ``--freeze`` they are skipped (not journaled), and the
  first DLedger start writes the same blank.

Theory of operation: :func:`apply_plan` loads the plan and journal, takes the locks, and calls
one executor per action kind; executors return a deterministic detail dict for the journal and
raise :class:`ApplyError` (one line) when the world does not match the plan.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from broker.store.errors import StoreError
from broker.store.lockfile import StoreLock, StoreLockedError
from upgrade import fileops
from upgrade.journaled_cli import confirmed, stopped
from broker.store.freeze import FreezeError, freeze_commitlog
from upgrade.store_links import refuse_links
from upgrade.inspect import inspect_store
from upgrade.journal import Journal, Step, plan_digest
from upgrade.plan_model import Action, Plan

Echo = Callable[[str], None]


class ApplyError(Exception):
    """The plan cannot proceed (one line for the operator)."""


def _store_kwargs(root: str, settings: dict[str, Any]) -> dict[str, Any]:
    return {"store_path_root_dir": root, "warm_mapped_file_enable": False, **settings}


class _Applier:
    def __init__(self, plan: Plan, journal: Journal, freeze: bool, echo: Echo, progress: bool) -> None:
        self.plan, self.journal, self.freeze, self.echo, self.progress = plan, journal, freeze, echo, progress
        self.locks: dict[str, StoreLock] = {}

    # ---- locks --------------------------------------------------------------------------------
    def lock_all(self) -> None:
        for n in self.plan.nodes:
            lock = StoreLock(n.root)
            try:
                lock.acquire()
            except StoreLockedError as exc:
                self.unlock_all()
                raise ApplyError(f"{exc} Stop the broker first.") from None
            self.locks[n.root] = lock

    def unlock_all(self) -> None:
        for lock in self.locks.values():
            lock.release()
        self.locks.clear()

    @contextmanager
    def unlocked(self, root: str) -> Iterator[None]:
        """The store's own code takes the lock itself: hand it over for the duration."""
        lock = self.locks[root]
        lock.release()
        try:
            yield
        finally:
            try:
                lock.acquire()
            except StoreLockedError as exc:
                raise ApplyError(f"{exc} (taken while apply ran the store's recovery)") from None

    # ---- helpers ------------------------------------------------------------------------------
    def _bar(self, total: int, desc: str) -> Any:
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, unit="B", unit_scale=True, file=sys.stderr,
                    disable=not self.progress, leave=False)

    def _backup(self, path: Path) -> Optional[str]:
        bak = path.with_name(path.name + self.journal.backup_suffix)
        if not bak.exists():
            tmp = bak.with_name(bak.name + fileops.TMP_SUFFIX)
            shutil.copy2(path, tmp)
            os.replace(tmp, bak)
            fileops.fsync_dir(path.parent)
        return bak.name

    def _run_store(self, root: str, settings: dict[str, Any]) -> None:
        from broker.store.message_store import DefaultMessageStore

        with self.unlocked(root):
            store = DefaultMessageStore(**_store_kwargs(root, settings))
            try:
                store.load()
                store.start()
            except (StoreError, OSError, ValueError) as exc:
                store.shutdown()
                raise ApplyError(f"{root}: the store's recovery stopped: {exc}") from None
            store.shutdown()

    def _end_check(self, root: str, settings: dict[str, Any], expect: int, what: str) -> dict[str, Any]:
        s = inspect_store(root, settings=settings)
        if not s.clean_shutdown:
            raise ApplyError(f"{root}: still not clean after {what} (abort file present)")
        if s.max_offset != expect:
            raise ApplyError(f"{root}: ends at {s.max_offset} after {what}, the plan expected {expect}; "
                             "run mqupgrade plan again")
        return {"max_offset": s.max_offset, "consumequeue": s.cq_state}

    # ---- executors ----------------------------------------------------------------------------
    def do_recover(self, a: Action) -> dict[str, Any]:
        p = a.params
        self._run_store(p["root"], p["settings"])
        return self._end_check(p["root"], p["settings"], p["expect_max_offset"], "recovery")

    def do_dispatch(self, a: Action) -> dict[str, Any]:
        p = a.params
        self._run_store(p["root"], p["settings"])
        detail = self._end_check(p["root"], p["settings"], p["expect_max_offset"], "dispatch")
        if detail["consumequeue"] not in ("agrees", "none"):
            raise ApplyError(f"{p['root']}: ConsumeQueues still disagree with the commitlog after dispatch")
        return detail

    def do_copy_file(self, a: Action) -> dict[str, Any]:
        p = a.params
        src, dst, size = Path(p["src"]), Path(p["dst"]), p["size"]
        if not src.is_file() or src.stat().st_size != size:
            raise ApplyError(f"{src}: missing or not {size} bytes any more; run mqupgrade plan again")
        if dst.exists():
            if dst.stat().st_size == size and fileops.content_digest(dst, 0, size) == fileops.content_digest(src, 0, size):
                return {"digest": fileops.content_digest(src, 0, size)}  # a killed run got as far as the rename
            if not p.get("overwrite"):
                raise ApplyError(f"{dst} exists and differs from {src}; it was not there when the plan was made")
        dst.parent.mkdir(parents=True, exist_ok=True)
        bar = self._bar(fileops.allocated_bytes(src), f"{a.node} {dst.name}")
        try:
            digest = fileops.atomic_copy_file(src, dst, size, on_bytes=bar.update)
        finally:
            bar.close()
        return {"digest": digest}

    def do_patch_file(self, a: Action) -> dict[str, Any]:
        p = a.params
        src, dst, start, end = Path(p["src"]), Path(p["dst"]), p["start"], p["end"]
        if not dst.is_file():
            raise ApplyError(f"{dst}: the slave's file is gone; run mqupgrade plan again")
        want = fileops.content_digest(src, start, end)
        if fileops.content_digest(dst, start, end) == want:
            return {"digest": want}
        bar = self._bar(end - start, f"{a.node} {dst.name} tail")
        try:
            digest = fileops.atomic_patch_file(src, dst, start, end, on_bytes=bar.update)
        finally:
            bar.close()
        return {"digest": digest}

    def do_copy_tree(self, a: Action) -> dict[str, Any]:
        p = a.params
        src, dst = Path(p["src"]), Path(p["dst"])
        files = sorted(x for x in src.rglob("*") if x.is_file() and not x.name.endswith(fileops.TMP_SUFFIX))
        digests = []
        backups = []
        for f in files:
            rel = f.relative_to(src)
            target = dst / rel
            size = f.stat().st_size
            want = fileops.content_digest(f, 0, size)
            if target.exists():
                if target.stat().st_size == size and fileops.content_digest(target, 0, size) == want:
                    digests.append(f"{rel}:{want}")
                    continue
                if p.get("backup"):
                    backups.append(self._backup(target))
            target.parent.mkdir(parents=True, exist_ok=True)
            fileops.atomic_copy_file(f, target, size)
            digests.append(f"{rel}:{want}")
        return {"files": len(files), "digest": hashlib.sha256("\n".join(digests).encode()).hexdigest()}

    def do_write_conf(self, a: Action) -> dict[str, Any]:
        p = a.params
        path, content = Path(p["path"]), p["content"]
        if path.exists():
            if path.read_text(encoding="utf-8", errors="replace") == content:
                return {"path": str(path)}
            self._backup(path)
        fileops.atomic_write_text(path, content, mode=0o600)  # it holds dLegerAuthToken
        return {"path": str(path)}

    def do_align_offsets(self, a: Action) -> dict[str, Any]:
        """``--to controller``: a member's consumerOffset.json / delayOffset.json aligned to the group's
        largest offsets (:mod:`upgrade.controller_offsets`); written like a conf (the original kept
        for rollback), with the original file's mode (no secret in it)."""
        p = a.params
        path, content = Path(p["path"]), p["content"]
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
        if path.exists():
            if path.read_text(encoding="utf-8", errors="replace") == content:
                return {"path": str(path)}
            self._backup(path)
        fileops.atomic_write_text(path, content, mode=mode)
        return {"path": str(path)}

    def do_freeze(self, a: Action) -> dict[str, Any]:
        p = a.params
        settings = {"store_path_commit_log": p["commit_log_dir"], "mapped_file_size_commit_log": p["file_size"]}
        s = inspect_store(p["root"], settings=settings)
        if s.max_offset != p["expect_max_offset"]:
            raise ApplyError(f"{p['root']}: ends at {s.max_offset}, the plan freezes at {p['expect_max_offset']}")
        try:
            point = freeze_commitlog(p["commit_log_dir"], p["expect_max_offset"], p["file_size"])
        except FreezeError as exc:
            raise ApplyError(str(exc)) from None
        if point.divided_commitlog_offset != p["divided_commitlog_offset"]:
            raise ApplyError(f"{p['root']}: divide {point.divided_commitlog_offset} != planned "
                             f"{p['divided_commitlog_offset']}")
        return {"divided_commitlog_offset": point.divided_commitlog_offset, "blank_at": point.wrote_position,
                "last_file": Path(point.last_file).name}

    def do_write_regions(self, a: Action) -> dict[str, Any]:
        """``--to controller`` from DLedger mode: the member's ``commitlogRegions.json``."""
        from upgrade import controller_apply

        try:
            return controller_apply.write_regions(a.params)
        except controller_apply.StepError as exc:
            raise ApplyError(str(exc)) from None

    def do_record_end(self, a: Action) -> dict[str, Any]:
        """``--to controller`` from master/slave: the end rollback compares with."""
        from upgrade import controller_apply

        try:
            return controller_apply.record_end(a.params)
        except controller_apply.StepError as exc:
            raise ApplyError(str(exc)) from None

    def do_verify(self, a: Action) -> dict[str, Any]:
        p = a.params
        expect = p["expect_max_offset"]
        insp = [inspect_store(r, settings=p["settings"][r]) for r in p["roots"]]
        ref = next(s for s in insp if s.root == self.plan.master)
        names = [f.name for f in ref.files]
        for s in insp:
            if s.max_offset != expect or not s.clean_shutdown:
                raise ApplyError(f"verify: {s.root} ends at {s.max_offset} (clean={s.clean_shutdown}), expected {expect}")
            if [f.name for f in s.files] != names:
                raise ApplyError(f"verify: {s.root} holds commitlog files {len(s.files)} files, the master {len(names)}")
            if s.cq_state not in ("agrees", "none"):
                raise ApplyError(f"verify: {s.root}: ConsumeQueues {s.cq_state}: {s.cq_detail}")
        frozen = {s.frozen for s in insp}
        if len(frozen) != 1:
            raise ApplyError("verify: some nodes are frozen and some are not")
        tail = ref.tail_file  # None: no commitlog file anywhere (the name lists agree), no bytes to compare
        pos = ref.tail_position
        lo, hi = max(0, pos - fileops.CHUNK), min(ref.file_size, pos + 8)
        for s in insp:
            if s is ref or tail is None:
                continue
            diff, _ = fileops.first_difference(ref.file_path(tail), s.file_path(tail), lo, hi)
            if diff is not None:
                raise ApplyError(f"verify: {s.root}: {tail} differs from the master at file offset {diff}")
        return {"max_offset": expect, "files": len(names), "frozen": frozen.pop(), "nodes": len(insp)}

    # ---- driver -------------------------------------------------------------------------------
    def preflight(self) -> None:
        """First run only: the stores must still be what the plan saw."""
        if self.plan.inspection.get("members"):  # --to controller from DLedger mode
            from upgrade import controller_apply

            try:
                controller_apply.preflight_members(self.plan)
            except controller_apply.StepError as exc:
                raise ApplyError(str(exc)) from None
            return
        for sd in self.plan.inspection["stores"]:
            if not sd["files"]:
                continue
            node = next(n for n in self.plan.nodes if n.root == sd["root"])
            s = inspect_store(sd["root"], settings=node.store_settings)
            now = (s.max_offset, s.clean_shutdown, [f.name for f in s.files])
            then = (sd["max_offset"], sd["clean_shutdown"], [f["name"] for f in sd["files"]])
            if now != then:
                raise ApplyError(f"{sd['root']} changed since the plan was made (end {then[0]} -> {now[0]}, "
                                 f"clean {then[1]} -> {now[1]}); run mqupgrade plan again")

    def run(self) -> int:
        """Every step of the plan in order (:meth:`Journal.run_steps`); returns how many were skipped."""
        total = len(self.plan.actions)
        return self.journal.run_steps((self._step(i, total, a) for i, a in enumerate(self.plan.actions, 1)), self.echo)

    def _step(self, i: int, total: int, a: Action) -> Step:
        tag = f"[{i}/{total}] {a.kind} {a.node}" + (f" {a.params.get('name') or a.params.get('tree') or ''}".rstrip())
        skip = ("pass --freeze, or let the first DLedger start write the blank"
                if a.optional == "freeze" and not self.freeze else None)
        return Step(a.id, tag, lambda: getattr(self, f"do_{a.kind}")(a), skip)


def apply_plan(plan_path: str | os.PathLike[str], *, freeze: bool = False, journal_path: Optional[str] = None,
               echo: Echo = print, progress: bool = False) -> dict[str, Any]:
    """Apply the plan at ``plan_path``; returns the journal data. Raises ApplyError / PlanError."""
    plan = Plan.load(plan_path)
    if plan.refusals:
        raise ApplyError("the plan was refused: " + "; ".join(plan.refusals))
    # issue 23.8: no step may write through a link out of a store (--freeze once did)
    refuse_links([d for n in plan.nodes for d in (n.root, n.commit_log_dir)], ApplyError)
    jpath = journal_path or str(Path(plan_path).with_suffix("")) + ".journal.json"
    journal = Journal(jpath, plan_digest(plan_path))
    applier = _Applier(plan, journal, freeze, echo, progress)
    applier.lock_all()
    try:
        if not journal.data["steps"]:  # no step done yet (a first run, or one whose preflight stopped it)
            applier.preflight()
        skipped = applier.run()
    finally:
        applier.unlock_all()
    journal.finish(skipped == 0)
    return journal.data


# ---- command line -------------------------------------------------------------------------------
HELP = "execute a plan (idempotent, resumable after a crash; --freeze writes the tail blank now)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("plan", help="plan file written by mqupgrade plan")
    p.add_argument("--freeze", action="store_true",
                   help="also write the old commitlog's tail blank now (as the first DLedger start would)")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--journal", help="journal file (default: <plan>.journal.json next to the plan)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")


def run(args: argparse.Namespace) -> int:
    from upgrade.journal import JournalError
    from upgrade.plan import PlanError, render

    try:
        plan = Plan.load(args.plan)
        if not args.yes:
            print(render(plan))
            if not confirmed("apply", "apply"):
                return 1
        data = apply_plan(args.plan, freeze=args.freeze, journal_path=args.journal,
                          progress=not args.no_progress and sys.stderr.isatty())
    except (ApplyError, PlanError, JournalError, KeyboardInterrupt) as exc:
        return stopped("apply", exc, ApplyError)
    done = sum(1 for s in data["steps"].values() if s["state"] == "done")
    print(f"applied: {done}/{len(plan.actions)} steps done" + ("" if data["finished"] else
          " (freeze steps skipped: the first DLedger start writes the blank)"))
    return 0
