"""The whole ``--to controller`` journey (``python -m tools.demo --to controller``) with small numbers;
its first half is the DLedger journey of ``scripts/demo.sh`` (asserted here too: one run for both).

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
@pytest.mark.timeout(480)
def test_whole_journey_small_then_controller(spark, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Both journeys in one run (the DLedger journey is the first half of ``--to controller``):
    first what ``scripts/demo.sh`` alone prints and keeps, then the Controller-mode half."""
    work = tmp_path / "demo"
    args = demo.build_parser().parse_args([
        "--messages", "300", "--dledger-messages", "200", "--after-failover-messages", "100", "--file-size", "65536",
        "--workdir", str(work), "--to", "controller"])
    d = demo.Demo(args, spark)
    try:
        code = d.run()
    finally:
        d.cleanup()
    out = capsys.readouterr().out
    assert code == 0, out[-8000:]
    # ---- the DLedger journey (scripts/demo.sh without --to)
    for step in ("[1/5] classic pair up", "slave caught up", "[2/5] mqupgrade inspect", "[2/5] mqupgrade plan",
                 "[2/5] upgrade applied", "[3/5] DLedger group up", "kill -9 of the leader", "[3/5] failover",
                 "caught up in", "[3/5] group stopped cleanly", "[4/5] validator exit code 0", "n0 OK, n1 OK, n2 OK"):
        assert step in out, step
    assert "mqupgrade validate: OK - all checks hold" in out
    first = out.index("=== summary ===")
    summary = out[first:out.rfind("\n", 0, out.index("[C1/5]"))]  # up to the Controller-mode half's first line
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
    for kept in ("upgrade/plan.json", "upgrade/plan.journal.json", "dledger-conf/broker-n2.conf",
                 "validate/report.json", "validate/offsets.png", "logs/dledger-n0.log"):
        assert (work / kept).is_file(), kept
    # ---- the Controller-mode half
    r = d.facts["controller"]
    assert isinstance(r, ControllerResult) and r.ok
    phases = {p.name: p for p in d.phases}
    wanted = {"classic": 300, "dledger": 200, "after-failover": 100, "dledger-final": 100, "controller": 200,
              "controller-after-failover": 100}
    assert {n: (p.wanted, p.acked) for n, p in phases.items()} == {n: (w, w) for n, w in wanted.items()}
    assert r.acknowledged == len(d.acks) == sum(wanted.values())
    # every ack on every replica: the files (by region) and a consumer's pulls
    assert r.every_ack_on_every_replica and set(r.replica_problems) == {"n0", "n1", "n2"}
    for n, regions in r.by_region.items():
        assert regions == {"classic": 300, "dledger": 400, "writable": 300}, (n, regions)
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


# ---- the consumer checks themselves (no processes): each catches what it must ---------------------
def _acks(n: int) -> list[demo.Ack]:
    return [demo.Ack("dledger", i, "T", 0, i, 1000 + 100 * i, f"k{i}", "TagA", f"body {i}") for i in range(n)]


def _msg(a: demo.Ack) -> dict[str, object]:
    return {"queueOffset": a.queue_offset, "commitLogOffset": a.offset, "bodyText": a.body}


def test_resume_and_served_checks_catch_skips_repeats_and_stale_offsets(monkeypatch: pytest.MonkeyPatch) -> None:
    from tools import demo_readback as rb

    acks = _acks(6)
    table = {"answered": 4, "from": 4}
    monkeypatch.setattr(rb, "offsets_of", lambda _addr, _group: {("T", 0): table["answered"]})
    monkeypatch.setattr(rb, "served", lambda _addr, _t, _q, start=0, limit=None:
                        [_msg(a) for a in acks if a.queue_offset >= max(start, table["from"])])

    def resume(before: list[str]) -> list[str]:
        return rb.check_resume("x", "G", [rb.Resume("T", 0, 4)], {("T", 0): before}, acks)

    consumed = ["k0", "k1", "k2", "k3"]
    assert resume(consumed) == []
    assert resume(consumed + ["k4"]) != []  # a message consumed before and served again: repeated
    table["from"] = 5
    assert resume(consumed) != []  # the first pull skips queue offset 4
    table["from"], table["answered"] = 4, 3
    assert "answers committed offset 3" in resume(consumed)[0]  # a member with stale consumer offsets

    table["answered"], table["from"] = 4, 0
    assert rb.check_served("x", acks, "n0") == ([], 0)
    extra = demo.Ack("dledger", 9, "T", 0, 6, 9000, "k9", "TagA", "unacknowledged")
    monkeypatch.setattr(rb, "served", lambda *_a, **_k: [_msg(a) for a in acks + [extra]])
    assert rb.check_served("x", acks, "n0") == ([], 1)  # stored but never acknowledged: counted, no problem
    monkeypatch.setattr(rb, "served", lambda *_a, **_k: [_msg(a) for a in acks[:3] + acks[2:5]])
    problems, _ = rb.check_served("x", acks, "n0")
    assert any("not served, first at queue offset 5" in p for p in problems)
    assert any("queue offset 2 served more than once" in p for p in problems)
