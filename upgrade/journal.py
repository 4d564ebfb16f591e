"""The apply journal: which plan steps are done, durable across kill -9.

Rules:
- One JSON file per plan (default ``<plan>.journal.json``), bound to the plan by the SHA-256 of
  the plan file's bytes: a journal of another plan is refused, never reused.
- A step is recorded only after its effects are durable (files fsynced and renamed), and the
  journal itself is replaced atomically (``.upgrade-tmp`` + fsync + rename + directory fsync),
  so after a crash it says either "not done" (the step is redone; every step is idempotent) or
  "done" (its effects are on disk).
- ``started_at`` is fixed by the first run; backups made by any run of the plan use it
  (``<file>.bak-<started_at>``), so a resumed run makes the same backups as an uninterrupted one.
- Step details are deterministic (digests, offsets, counts; no timings), so an interrupted and
  rerun apply leaves the same journal as an uninterrupted one, apart from ``runs``.
- :meth:`Journal.run_steps` is the one loop of every journaled command (``apply``, ``rollback``):
  in order, a step journaled done is passed over ("done already"), a step with a ``skip`` reason
  is passed over unjournaled (and counted), any other runs and is journaled done, durably,
  before the next one starts; an exception stops the loop with that step not journaled.

Theory of operation: a dict in memory mirrored to disk on every change; a few hundred steps at
most, so rewriting the whole file each time is cheap and keeps it valid JSON at every instant.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from upgrade.fileops import atomic_write_text

JOURNAL_VERSION = 1


class JournalError(Exception):
    """The journal does not belong to this plan or is unreadable (one line)."""


@dataclass(frozen=True)
class Step:
    """One journaled step: ``run`` makes its effects durable and returns its deterministic detail."""

    id: str
    tag: str  # the head of its progress line, e.g. ``[2/7] copy_file n1 00000000000000000000``
    run: Callable[[], dict[str, Any]]
    skip: Optional[str] = None  # why this run passes it over (not journaled); None: it runs


def plan_digest(plan_path: str | os.PathLike[str]) -> str:
    return hashlib.sha256(Path(plan_path).read_bytes()).hexdigest()


class Journal:
    def __init__(self, path: str | os.PathLike[str], plan_sha256: str) -> None:
        self.path = Path(path)
        if self.path.exists():
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
            except ValueError as exc:
                raise JournalError(f"{self.path}: unreadable journal ({exc}); move it away to start over") from None
            if data.get("plan_sha256") != plan_sha256:
                raise JournalError(f"{self.path}: journal of another plan (plan file changed since the first apply); "
                                   "move it away to start over")
            self.data: dict[str, Any] = data
            self.resumed = True
        else:
            self.data = {"version": JOURNAL_VERSION, "plan_sha256": plan_sha256,
                         "started_at": time.strftime("%Y%m%d%H%M%S"), "steps": {}, "finished": False, "runs": 0}
            self.resumed = False
        self.data["runs"] = self.data.get("runs", 0) + 1
        self._write()

    @property
    def started_at(self) -> str:
        return str(self.data["started_at"])

    @property
    def backup_suffix(self) -> str:
        return f".bak-{self.started_at}"

    def done(self, step_id: str) -> bool:
        return self.data["steps"].get(step_id, {}).get("state") == "done"

    def detail(self, step_id: str) -> Optional[dict[str, Any]]:
        return self.data["steps"].get(step_id, {}).get("detail")

    def mark_done(self, step_id: str, detail: dict[str, Any]) -> None:
        self.data["steps"][step_id] = {"state": "done", "detail": detail}
        self._write()

    def note(self, key: str, value: Any) -> None:
        """Keep a fact of the first run (e.g. rollback's ``apply_started_at``), durably; set once."""
        if key not in self.data:
            self.data[key] = value
            self._write()

    def run_steps(self, steps: Iterable[Step], echo: Callable[[str], None]) -> int:
        """Run ``steps`` in order under this journal (see the module rules); returns how many were
        skipped."""
        skipped = 0
        for step in steps:
            if self.done(step.id):
                echo(f"{step.tag}: done already")
                continue
            if step.skip is not None:
                echo(f"{step.tag}: skipped ({step.skip})")
                skipped += 1
                continue
            self.mark_done(step.id, step.run())
            echo(f"{step.tag}: done")
        return skipped

    def finish(self, finished: bool) -> None:
        self.data["finished"] = finished
        self._write()

    def _write(self) -> None:
        atomic_write_text(self.path, json.dumps(self.data, indent=2, sort_keys=True) + "\n")
