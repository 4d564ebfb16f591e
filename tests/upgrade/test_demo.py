"""The main job end to end (``python -m tools.demo``) with small numbers, and its user errors.

The journey test runs the demo in this process (its brokers are child processes) with the
session's shared Spark, so the validator does not pay a second JVM start; it checks the exit
code, the key summary lines, that every broker it started is gone and that ``--workdir`` keeps
the confs, plan, journal, report and picture.
"""
from __future__ import annotations

import os
import re
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


@pytest.mark.multiprocess
@pytest.mark.spark
@pytest.mark.timeout(300)
def test_whole_journey_small(spark, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    work = tmp_path / "demo"
    code = demo.main(["--messages", "300", "--dledger-messages", "200", "--after-failover-messages", "100",
                      "--file-size", "65536", "--workdir", str(work)], spark=spark)
    out = capsys.readouterr().out
    assert code == 0, out[-6000:]
    for step in ("[1/5] classic pair up", "slave caught up", "[2/5] mqupgrade inspect", "[2/5] mqupgrade plan",
                 "[2/5] upgrade applied", "[3/5] DLedger group up", "kill -9 of the leader", "[3/5] failover",
                 "caught up in", "[3/5] group stopped cleanly", "[4/5] validator exit code 0", "n0 OK, n1 OK, n2 OK"):
        assert step in out, step
    assert "mqupgrade validate: OK - all checks hold" in out
    summary = out[out.index("=== summary ==="):]
    assert re.search(r"messages classic\s+300 acknowledged of 300", summary)
    assert re.search(r"messages dledger\s+200 acknowledged of 200", summary)
    assert re.search(r"messages after-failover\s+100 acknowledged of 100", summary)
    assert re.search(r"acknowledged total\s+600\b", summary)
    divided = int(re.search(r"divided_commitlog_offset\s+(\d+) \(planned\)", summary).group(1))
    assert divided % 65536 == 0 and divided > 0
    assert f"live: n0={divided}, n1={divided}, n2={divided}" in summary
    firsts = re.search(r"first DLedger entry\s+(.*)", summary).group(1)
    assert firsts.count(f"={divided} (first message at {divided + 48})") == 3
    assert re.search(r"failover\s+\d+\.\d\ds client-visible", summary)
    assert re.search(r"committed index\s+\d+ on n0, n1, n2", summary)
    assert "read-back check          PASS" in summary and "validator                PASS" in summary
    assert summary.rstrip().endswith("result                   PASS")
    assert not _processes_mentioning(str(work)), "a broker the demo started is still running"
    for kept in ("upgrade/plan.json", "upgrade/plan.journal.json", "dledger-conf/broker-n2.conf",
                 "validate/report.json", "validate/offsets.png", "logs/dledger-n0.log"):
        assert (work / kept).is_file(), kept


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
