"""tools.nodes: the one process harness's own rules, on small Python children (no broker).

A child runs under its wrapper with the caller's environment and ``PYTHONUNBUFFERED``; a paused
child still stops on ``terminate`` (SIGCONT before SIGTERM); ``check`` names an exited child with
its log tail; ``stop_all`` signals a group and reports every exit code; ``kill9`` may repeat.
BrokerProc hands its wrapper and ``proc`` to its Child (the clock nemesis and subclasses that
start their own Popen rely on it); the classic confs let a caller override every default.
"""
from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from tools.broker_confs import master_conf
from tools.nodes import BrokerProc, Child, kill_all, stop_all
from tools.procs import wait_until

_WAIT = ("import os, sys, time\n"
         "print('env', os.environ.get('H8_WRAPPED'), os.environ.get('H8_EXTRA'), os.environ.get('PYTHONUNBUFFERED'))\n"
         "time.sleep(30)\n")


def _py(name: str, code: str, tmp: Path, **kw: Any) -> Child:
    return Child(name, ["-c", code], tmp / f"{name}.log", program=[sys.executable], **kw)


def test_a_paused_wrapped_child_stops_on_terminate_and_kill9_repeats(tmp_path: Path) -> None:
    c = _py("sleeper", _WAIT, tmp_path, wrapper=["env", "H8_WRAPPED=yes"], env={"H8_EXTRA": "1"})
    try:
        c.start()
        wait_until(lambda: "env" in c.log(), 10, "the child's first line")
        assert c.log().split() == ["env", "yes", "1", "1"]
        c.signal(signal.SIGSTOP)
        assert c.terminate(10) == -signal.SIGTERM
        assert not c.alive()
        c.kill9()
        c.kill9()
    finally:
        c.kill9()


def test_check_names_an_exited_child_with_its_log_tail(tmp_path: Path) -> None:
    c = _py("boom", "print('the cause'); raise SystemExit(3)", tmp_path)
    c.check()  # never started: nothing to say
    c.start()
    try:
        assert c.proc is not None and c.proc.wait(10) == 3
        with pytest.raises(RuntimeError, match=r"boom exited with 3:\nthe cause"):
            c.check()
    finally:
        c.kill9()


def test_stop_all_signals_a_group_and_reports_every_exit(tmp_path: Path) -> None:
    group = [_py(f"m{i}", _WAIT, tmp_path) for i in range(2)] + [_py("never", _WAIT, tmp_path)]
    try:
        for c in group[:2]:
            c.start()
        assert stop_all(group, bound=10) == {"m0": -signal.SIGTERM, "m1": -signal.SIGTERM, "never": None}
    finally:
        kill_all(group)


def test_a_broker_proc_hands_wrapper_and_proc_to_its_child(tmp_path: Path) -> None:
    conf, port = master_conf(tmp_path, mappedFileSizeCommitLog=4096)
    assert "mappedFileSizeCommitLog=4096" in conf.read_text().splitlines()
    b = BrokerProc(conf, port, "b", tmp_path, log_name="broker-b")
    b.wrapper = ["unshare", "--time"]
    assert b.child.wrapper == ["unshare", "--time"] and b.log_path == tmp_path / "broker-b.log"
    b.proc = None
    assert b.child.proc is None and b.stop() is None and not b.alive()
