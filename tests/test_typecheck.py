"""The typed core must stay typed: mypy over ``dledger/`` and ``broker/store/`` with zero errors (issue 15).

Runs mypy as a subprocess with the project's ``[tool.mypy]`` settings (pyproject.toml), so a
change that breaks a type contract fails CI with mypy's own report in the assertion message.
``broker/store`` too (issue 15 asks for both), and since then the whole ``broker`` package: the HTTP
routes reach the broker through the ``broker.api.backend.ApiBackend`` Protocol and the store through
typed ``StoreAccess``/``PutOutcome``; ``upgrade`` (the plan, apply and the Spark validator), ``controller``
(Controller mode's state machine and server) and ``tools`` (the demo and the process harness, not shipped).
``dledger.core`` and ``broker.store`` also refuse explicit ``Any`` (pyproject's mypy overrides, issue 26.3).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TYPED_PACKAGES = ["dledger", "broker", "controller", "namesrv", "tools", "upgrade"]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("package", TYPED_PACKAGES)
def test_package_type_checks_with_zero_errors(package: str) -> None:
    pytest.importorskip("mypy", reason="mypy is a test dependency: pip install -e '.[test]'")
    proc = subprocess.run([sys.executable, "-m", "mypy", package], cwd=REPO, capture_output=True, text=True,
                          timeout=580)
    assert proc.returncode == 0, f"mypy {package}: {proc.returncode}\n{proc.stdout[-6000:]}{proc.stderr[-2000:]}"
    assert "Success: no issues found" in proc.stdout, proc.stdout
