"""Fault-suite fixtures: seeded run directories and the session's results table.

Every fault run appends its result to ``FAULT_RESULTS``; at the end of the session the table
(per nemesis: runs, acknowledged sends, lost, duplicated, unknown, max unavailability) is
printed in the terminal summary and written as JSON next to the runs
(``<basetemp>/fault-results.json``). ``FAULT_SEED`` (environment) overrides the default seed.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.faults.harness.run import results_table

FAULT_RESULTS: list[dict[str, Any]] = []
_TABLE_PATH: list[Path] = []


def seed_for(default: int) -> int:
    return int(os.environ.get("FAULT_SEED", default))


@pytest.fixture
def fault_run_dir(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    d = tmp_path_factory.mktemp(f"fault-{request.node.name[:40]}", numbered=True)
    if not _TABLE_PATH:
        _TABLE_PATH.append(tmp_path_factory.getbasetemp() / "fault-results.json")
    return d


@pytest.fixture
def record_result() -> Any:
    return FAULT_RESULTS.append


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not FAULT_RESULTS:
        return
    table, text = results_table(FAULT_RESULTS)
    terminalreporter.section("fault results")
    terminalreporter.write_line(text)
    if _TABLE_PATH:
        _TABLE_PATH[0].write_text(json.dumps({"table": table, "runs": FAULT_RESULTS}, indent=1, default=str))
        terminalreporter.write_line(f"(JSON: {_TABLE_PATH[0]})")


def assert_clean(result: dict[str, Any]) -> None:
    """The run's checker verdict, with where to look when it is not clean."""
    assert result.get("ok"), (
        f"fault run failed (seed {result['seed']}, mode {result['mode']}); history, logs, statuses and stores in "
        f"{result['run_dir']}\n{json.dumps(result.get('anomalies'), indent=1)}")
