"""Code shipping for cluster masters (no Spark started here)."""
from __future__ import annotations

import zipfile

from upgrade.validate import session


def test_zip_project_holds_every_package(tmp_path):
    path = session.zip_project(tmp_path)
    names = set(zipfile.ZipFile(path).namelist())
    for module in ("broker/store/message.py", "dledger/entry.py", "upgrade/validate/tasks.py", "upgrade/validate/cq.py"):
        assert module in names
    assert all(n.endswith(".py") for n in names)


def test_local_masters():
    assert session.is_local_master("local[2]") and session.is_local_master("local")
    assert not session.is_local_master("spark://127.0.0.1:7077")
