"""The Spark session the validator runs in, local or on a cluster.

Rules:
- ``make_spark_session(master)`` is the only place that builds a SparkSession for the validator
  (tests share one through the ``spark`` fixture). Local settings are small and quiet: 4 shuffle
  partitions, UI off, WARN logs, driver memory left to the default.
- Executors run the same Python as the driver (``PYSPARK_PYTHON = sys.executable``). For any
  master that is not ``local[...]`` the project's packages (``broker``, ``dledger``, ``upgrade``)
  are zipped once per session and shipped with ``addPyFile``, so a worker needs nothing but
  Python with numpy.
- No file contents ever travel through the JVM: tasks receive small range descriptors and mmap
  the store files themselves (DESIGN §6), so a cluster's workers must see the stores at the same
  paths (shared filesystem, or the same machine).

Theory of operation: a cold local session costs ~8 s, most of it JVM start-up; we set the
environment before the builder starts the gateway, then ship code if needed.
"""
from __future__ import annotations

import os
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

PACKAGES = ("broker", "dledger", "upgrade")
REPO_ROOT = Path(__file__).resolve().parents[2]


def is_local_master(master: str) -> bool:
    return master == "local" or master.startswith("local[") or master.startswith("local-")


def zip_project(dest_dir: str | os.PathLike[str] | None = None) -> Path:
    """Zip the project's packages (``*.py`` only) into one file for ``addPyFile``."""
    out_dir = Path(dest_dir) if dest_dir else Path(tempfile.mkdtemp(prefix="mqvalidate-code-"))
    out = out_dir / "rocketmq_dledger_py.zip"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for pkg in PACKAGES:
            for path in sorted((REPO_ROOT / pkg).rglob("*.py")):
                zf.write(path, path.relative_to(REPO_ROOT).as_posix())
    return out


def make_spark_session(master: str = "local[*]", app_name: str = "mqupgrade-validate",
                       conf: dict[str, str] | None = None) -> Any:
    """A SparkSession for ``master`` with the project's code available on every executor."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession  # lazy: pyspark is heavy

    builder = (
        SparkSession.builder.master(master).appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "4" if is_local_master(master) else "16")
        .config("spark.python.worker.reuse", "true")
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
        .config("spark.driver.host", "127.0.0.1" if is_local_master(master) else _driver_host(master))
        .config("spark.driver.bindAddress", "127.0.0.1" if is_local_master(master) else "0.0.0.0")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    if not is_local_master(master):
        session.sparkContext.addPyFile(str(zip_project()))
    return session


def _driver_host(master: str) -> str:
    """Loopback masters get a loopback driver; anything else the default route's address."""
    if "127.0.0.1" in master or "localhost" in master:
        return "127.0.0.1"
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))
            return s.getsockname()[0]
        except OSError:
            return "127.0.0.1"
