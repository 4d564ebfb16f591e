"""Opt-in (``-m cluster``): the validator on a real standalone Spark cluster on 127.0.0.1.

Starts a master and one worker from the pyspark installation (``spark-class``), runs
``mqupgrade validate --master spark://127.0.0.1:<port>`` in a subprocess (this pytest process
may already own a local SparkContext), and always kills both daemons.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools.procs import free_port

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[3]


def _free_port() -> int:
    return free_port()  # outside the ephemeral range (tools.procs)


def _spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


def _wait_for(log: Path, needle: str, proc: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if log.exists() and needle in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[1]} exited: {log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.5)
    raise TimeoutError(f"{needle!r} not in {log}: {log.read_text(errors='replace')[-2000:]}")


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


@pytest.fixture
def standalone_cluster(tmp_path):
    port = _free_port()
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               SPARK_LOG_DIR=str(tmp_path), SPARK_WORKER_DIR=str(tmp_path / "work"))
    procs: list[subprocess.Popen] = []
    try:
        mlog = tmp_path / "master.log"
        master = subprocess.Popen(
            [_spark_class(), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
             "--webui-port", str(_free_port())],
            stdout=open(mlog, "w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)
        procs.append(master)
        _wait_for(mlog, "I have been elected leader", master)
        wlog = tmp_path / "worker.log"
        worker = subprocess.Popen(
            [_spark_class(), "org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}", "--host", "127.0.0.1",
             "--webui-port", str(_free_port()), "--cores", "2", "--memory", "1g", "--work-dir", str(tmp_path / "work")],
            stdout=open(wlog, "w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)
        procs.append(worker)
        _wait_for(wlog, "Successfully registered with master", worker)
        yield f"spark://127.0.0.1:{port}", env, tmp_path
    finally:
        for p in reversed(procs):
            _kill(p)


def test_validate_on_standalone_cluster(standalone_cluster, fixture_root):
    url, env, tmp = standalone_cluster
    out = tmp / "report.json"
    run = subprocess.run(
        [sys.executable, "-m", "upgrade.cli", "validate", str(fixture_root / "rmq-mixed"),
         "--master", url, "--json", str(out), "--range-size", "256k", "--quiet"],
        cwd=tmp, env=dict(env, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=600)
    report = json.loads(out.read_text())
    assert report["params"]["master"] == url
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    assert report["ok"] and report["nodes"]["n0"]["messages"] == 7000
    assert report["nodes"]["n0"]["divided_offset"] == 4_194_304
    assert "OK - all checks hold" in run.stdout
    assert (tmp / "work").exists() and any((tmp / "work").iterdir())  # executors really ran on the worker
