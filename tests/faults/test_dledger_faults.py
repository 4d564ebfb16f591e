"""CI-sized fault runs on a real three-node DLedger group (every DLedger nemesis at least once).

Each test starts three ``mqbroker`` processes with every peer link behind the fault proxy, runs
producers and consumers, applies its nemeses one after the other (each bounded and self-healing),
then checks after a clean shutdown that every acknowledged send is on every replica exactly once
at its acknowledged offsets, nothing else is there, queues are ordered, replicas agree, no term
had two leaders, reads were committed. ``FAULT_SEED`` reproduces a run; a failing run's directory
(history.jsonl, statuses.jsonl, node logs, stores, seed) is printed in the assertion.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.faults.conftest import assert_clean, seed_for
from tests.faults.harness.run import run_faults, spark_validate

pytestmark = pytest.mark.multiprocess

PROCESS_AND_NETWORK = ["kill-leader", "kill-follower", "kill-minority", "kill-all", "pause-leader", "pause-follower",
                       "partition-leader", "partition-halves", "partition-ring", "partition-bridge", "oneway-loss",
                       "oneway-cut", "delay", "wipe-follower"]
STORAGE_AND_CLOCK = ["torn-write", "bitflip", "disk-full", "clock-jump"]
_DISK_FULL: dict[str, Any] = {}


@pytest.mark.timeout(240)
def test_dledger_process_and_network_faults(fault_run_dir: Path, record_result) -> None:
    result = run_faults("dledger", PROCESS_AND_NETWORK, seed_for(8101), fault_run_dir, fault_s=2.5)
    record_result(result)
    assert_clean(result)
    assert result["summary"]["acked"] > 500 and result["summary"]["reads"] > 100, result["summary"]
    wipe = next(n["detail"] for n in result["nemeses"] if n["name"] == "wipe-follower")
    # a follower whose store was moved away and re-seeded gets the whole log back (issue 13.2)
    assert wipe["reseed_exit"] == 0 and wipe["caught_up"], wipe


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_dledger_storage_and_clock_faults_then_spark_validator(fault_run_dir: Path, record_result, spark) -> None:
    result = run_faults("dledger", STORAGE_AND_CLOCK, seed_for(8102), fault_run_dir, fault_s=2.5,
                        validate=spark_validate(spark))
    record_result(result)
    details = {n["name"]: n["detail"] for n in result["nemeses"]}
    _DISK_FULL.update(details.get("disk-full", {}))
    assert_clean(result)
    torn, flip = details["torn-write"], details["bitflip"]
    assert "skipped" not in torn and torn["torn_bytes"] > 0, torn
    # a flipped bit in committed data: the node refuses to start and names the file and the offset
    assert "skipped" not in flip and flip["refused"] and flip["names_file_and_offset"], flip
    assert result["validate"]["exit_code"] == 0, result["validate"]["summary"]


def test_dledger_full_disk_refuses_writes_with_a_clear_error() -> None:
    if not _DISK_FULL or "skipped" in _DISK_FULL:
        pytest.skip(f"no disk-full run in this session ({_DISK_FULL or 'not run'})")
    assert _DISK_FULL["alive_while_full"] and _DISK_FULL["log_names_path"], _DISK_FULL
