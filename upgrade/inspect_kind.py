"""What a store is, for ``mqupgrade inspect``, and what to do next (issue 27.3).

Rules:
- One of four kinds, decided by what is on disk, in this order: ``controller`` (a
  ``commitlogRegions.json``: migrated from DLedger mode to Controller mode by ``mqupgrade``;
  its regions, ``classicFrom`` and whether the new classic files hold a message yet),
  ``dledger`` (a ``dledger-*/data`` with DLedger files: its member, committed entry and end, the
  old classic region if any), ``classic`` (commitlog files only: master/slave, or Controller mode
  from master/slave, which has the same files), ``empty`` (no commitlog).
- ``next_step`` is one sentence naming the command or conf to use; read-only and O(1) like the
  rest of ``inspect``.

Theory of operation: :func:`describe` returns ``(kind, detail, next_step)``; ``inspect`` stores
them on the :class:`~upgrade.inspect_model.StoreInspection` and prints one line per store.
"""
from __future__ import annotations

import time
from pathlib import Path

from upgrade import regions_file
from upgrade.dledger_member import inspect_member, is_dledger_store
from upgrade.store_files import list_files


def _migrated(root: Path, commit_log_dir: Path) -> tuple[str, str, str]:
    try:
        r = regions_file.read(root)
    except regions_file.RegionsError as exc:
        return ("controller", f"{regions_file.REGIONS_FILE} is broken: {exc}",
                "restore the file from the plan (mqupgrade apply writes it again) before starting the broker")
    assert r is not None
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(regions_file.path_of(root).stat().st_mtime))
    new = [f for f in list_files(commit_log_dir) if f.from_offset >= r.classic_from]
    written = False
    if new:
        with open(commit_log_dir / new[0].name, "rb") as fh:
            written = fh.read(8).strip(b"\0") != b""
    detail = (f"migrated to Controller mode by mqupgrade on {when}: {r.describe()}; "
              f"{len(new)} new classic file(s), {'holding messages' if written else 'no message written yet'}")
    nxt = ("start it with enableControllerMode=true and enableDLegerCommitLog=false (the conf apply wrote)"
           + ("" if written else "; `mqupgrade rollback PLAN` undoes the migration until the first write"))
    return "controller", detail, nxt


def describe(root: str, commit_log_dir: str) -> tuple[str, str, str]:
    """``(kind, detail, next_step)`` of the store at ``root`` (see the module rules)."""
    rootp, cl = Path(root), Path(commit_log_dir)
    if regions_file.path_of(rootp).exists():
        return _migrated(rootp, cl)
    if is_dledger_store(rootp):
        try:
            m = inspect_member(rootp, commit_log_dir)
        except (OSError, ValueError) as exc:  # a damaged file is reported by the rest of inspect, not a traceback
            return "dledger", f"DLedger mode; its DLedger files could not be read ({exc})", "repair or reseed it first"
        old = f"; old classic region [{m.classic_start}, {m.classic_end})" if m.classic_files else ""
        end = (f"committed entry {m.committed_index} ends at {m.committed_end}" if not m.problems
               else "; ".join(m.problems))
        tail = f", {m.uncommitted_entries} uncommitted after it" if m.uncommitted_entries and not m.problems else ""
        return ("dledger", f"DLedger mode, member {m.self_id}: {end}{tail}{old}",
                "to Controller mode: `mqupgrade plan --to controller --controllers HOST:PORT;... <every member's "
                "store root>`")
    if list_files(cl):
        return ("classic", "classic commitlog (master/slave, or Controller mode from master/slave)",
                "`mqupgrade plan --group ... --peers ... --self-ids ...` for DLedger mode, or `mqupgrade plan --to "
                "controller --controllers HOST:PORT;... <every replica's store root>` for Controller mode")
    return "empty", "no commitlog", "a new node: name it in a plan (--self-ids), it is seeded from the master"
