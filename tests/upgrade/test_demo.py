"""The main job end to end (``python -m tools.demo``) with small numbers, and its user errors.

The journey itself runs in tests/upgrade/test_demo_controller.py (``--to controller`` runs it as
its first half: one run of the processes for both journeys, with the session's shared Spark); it
checks the exit code, the key summary lines, that every broker it started is gone and that
``--workdir`` keeps the confs, plan, journal, report and picture.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tools import demo


def _processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that mention ``text`` (the demo's brokers name their conf)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd:
            found.append(f"{d.name}: {cmd}")
    return found


def test_reused_workdir_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "master").mkdir()
    assert demo.main(["--workdir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("demo: ") and "already holds a demo run" in err and "Traceback" not in err
    assert (tmp_path / "master").is_dir()  # --workdir is never deleted


def test_bad_numbers_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        demo.main(["--messages", "0"])
    assert exc.value.code == 2
    assert "must be positive" in capsys.readouterr().err
