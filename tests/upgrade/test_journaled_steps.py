"""The shared pieces of the journaled commands, alone: :meth:`Journal.run_steps` (the loop of
``apply`` and ``rollback``) and :mod:`upgrade.journaled_cli` (their yes and their exit codes).
In process, no stores: each test takes milliseconds."""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from upgrade.journal import Journal, Step
from upgrade.journaled_cli import confirmed, stopped
from upgrade.plan_model import PlanError


def test_run_steps_skips_done_and_optional_runs_the_rest_and_journals_each_before_the_next(tmp_path: Path) -> None:
    path = tmp_path / "p.journal.json"
    ran: list[str] = []

    def step(sid: str, skip: str | None = None, fail: bool = False) -> Step:
        def run() -> dict[str, Any]:
            if fail:  # the journal on disk holds every step before this one, none after
                assert set(json.loads(path.read_text())["steps"]) == set(ran)
                raise RuntimeError("world does not match")
            ran.append(sid)
            return {"n": len(ran)}
        return Step(sid, f"[{sid}]", run, skip)

    lines: list[str] = []
    first = Journal(path, "d")
    with pytest.raises(RuntimeError):
        first.run_steps([step("a"), step("b"), step("c", fail=True), step("d")], lines.append)
    assert lines == ["[a]: done", "[b]: done"] and ran == ["a", "b"]

    lines.clear()
    again = Journal(path, "d")  # the rerun resumes
    skipped = again.run_steps([step("a"), step("b"), step("c"), step("x", skip="pass --freeze"), step("d")],
                              lines.append)
    assert skipped == 1
    assert lines == ["[a]: done already", "[b]: done already", "[c]: done", "[x]: skipped (pass --freeze)", "[d]: done"]
    assert ran == ["a", "b", "c", "d"]
    on_disk = json.loads(path.read_text())
    assert on_disk["steps"]["c"] == {"state": "done", "detail": {"n": 3}} and "x" not in on_disk["steps"]
    assert on_disk["runs"] == 2


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_confirmed_asks_on_a_terminal_and_refuses_without_one(monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert not confirmed("rollback", "roll back")
    assert capsys.readouterr().err == "mqupgrade rollback: not confirmed (pass --yes to roll back without a terminal)\n"

    asked: list[str] = []
    monkeypatch.setattr("sys.stdin", _Tty())
    for answer, ok in ((" YES ", True), ("no", False)):
        monkeypatch.setattr("builtins.input", lambda q, a=answer: asked.append(q) or a)
        assert confirmed("apply", "apply") is ok
    assert asked == ["apply this plan? type yes: "] * 2
    assert capsys.readouterr().err == "mqupgrade apply: not confirmed\n"


def test_stopped_is_one_line_and_the_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    class Refused(Exception):
        pass

    assert stopped("apply", Refused("a lock is held"), Refused) == 2
    assert stopped("apply", PlanError("no such plan"), Refused) == 1
    assert stopped("rollback", KeyboardInterrupt(), Refused) == 130
    assert capsys.readouterr().err.splitlines() == [
        "mqupgrade apply: a lock is held", "mqupgrade apply: no such plan",
        "mqupgrade rollback: interrupted; run it again to resume"]
