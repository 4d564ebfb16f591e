"""The whole ``--to controller`` journey (``python -m tools.demo --to controller``) with small numbers.

One run, in this process with the session's shared Spark (both validator runs reuse it): the
DLedger journey, then the migration to Controller mode (tools.demo_controller). Asserted on the
journey's result object: every acknowledged message of both journeys on every replica (files and
consumer reads), the consumer group resumed exactly where it committed in DLedger mode, the new
messages at or above classicFrom, the failover measured with nothing lost, the killed master back
as a slave, the validator OK; and the progress lines, the summary and that nothing is left running.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.upgrade.test_demo import _processes_mentioning
from tools import demo
from tools.demo_controller import ControllerResult


@pytest.mark.multiprocess
@pytest.mark.spark
@pytest.mark.timeout(420)
def test_whole_controller_journey_small(spark, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    work = tmp_path / "demo"
    args = demo.build_parser().parse_args([
        "--messages", "200", "--dledger-messages", "150", "--after-failover-messages", "80", "--file-size", "65536",
        "--workdir", str(work), "--to", "controller"])
    d = demo.Demo(args, spark)
    try:
        code = d.run()
    finally:
        d.cleanup()
    out = capsys.readouterr().out
    assert code == 0, out[-8000:]
    r = d.facts["controller"]
    assert isinstance(r, ControllerResult) and r.ok
    phases = {p.name: p for p in d.phases}
    wanted = {"classic": 200, "dledger": 150, "after-failover": 80, "dledger-final": 80, "controller": 150,
              "controller-after-failover": 80}
    assert {n: (p.wanted, p.acked) for n, p in phases.items()} == {n: (w, w) for n, w in wanted.items()}
    assert r.acknowledged == len(d.acks) == sum(wanted.values())
    # every ack on every replica: the files (by region) and a consumer's pulls
    assert r.every_ack_on_every_replica and set(r.replica_problems) == {"n0", "n1", "n2"}
    for n, regions in r.by_region.items():
        assert regions == {"classic": 200, "dledger": 310, "writable": 230}, (n, regions)
    assert r.served_problems == {"n0": [], "n1": [], "n2": []}
    # the consumer group resumed at the offsets committed in DLedger mode, each queue exactly
    assert r.resumed_exactly and len(r.resumes) == 8
    assert all(x.answered == x.committed == x.first_pulled and x.pulled > 0 for x in r.resumes), r.resumes
    # Controller mode writes at/after classicFrom; the first master's epoch entry starts there
    assert r.classic_from % 65536 == 0 and r.new_below_classic_from == 0 and r.first_epoch == [1, r.classic_from]
    assert all(a.offset >= r.classic_from for a in d.acks if a.phase.startswith("controller"))
    assert all(a.offset < r.classic_from for a in d.acks if not a.phase.startswith("controller"))
    # failover measured, nothing lost, the killed master back as a slave; the validator passes
    assert r.failover_s is not None and r.failover_s > 0 and r.masters[0] != r.masters[1]
    assert r.lost_after_failover == [] and r.rejoined_as_slave and r.validate_code == 0
    for step in ("[C1/5] DLedger group back in service", "[C1/5] DLedger group stopped cleanly",
                 "[C2/5] mqupgrade inspect", "$ mqupgrade plan --to controller", "[C2/5] migration applied",
                 "[C3/5] three controllers up", "[C3/5] Controller mode up from the written confs",
                 "n0 OK, n1 OK, n2 OK", "[C4/5] kill -9 of the master", "[C4/5] failover: first write acknowledged",
                 "rejoined as a slave", "[C4/5] brokers and controllers stopped cleanly", "[C5/5] validator exit code 0"):
        assert step in out, step
    summary = out[out.index("=== summary: DLedger mode -> Controller mode ==="):]
    assert re.search(r"failover\s+\d+\.\d\ds client-visible", summary)
    assert re.search(r"acknowledged lost\s+0\b", summary)
    assert summary.rstrip().endswith("result                             PASS")
    assert not _processes_mentioning(str(work)), "a process the demo started is still running"
    for kept in ("upgrade-controller/plan.json", "controller-conf/broker-n0.conf", "controllers/controller-n0.conf",
                 "validate-controller/report.json", "logs/controller-mode-n0.log"):
        assert (work / kept).is_file(), kept
