"""A replaced follower of an upgraded DLedger broker group (issue 13.2), with real ``mqbroker``
processes on Apache's own store fixture.

The follower is killed and its store moved away (what ``EntryCorruptionError`` tells the operator
to do). Raft brings back the DLedger log by itself (the leader's reject-hint reset), but not the
old commitlog region below dividedCommitlogOffset: ``mqupgrade reseed --verify-only`` says so
(exit 2), ``mqupgrade reseed`` copies it from the running leader, and the restarted follower then
serves every old message and the new ones; the leader's status and metrics show the reset.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools.procs import REPO, wait_until
from tests.broker.test_dledger_group import IDS, DLedgerGroup

pytestmark = pytest.mark.multiprocess
DIVIDED = 4_194_304


def _reseed(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "upgrade.cli", "reseed", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.timeout(240)
def test_replaced_follower_is_reseeded_and_catches_up(tmp_path: Path, store_copy, manifests) -> None:
    from upgrade.apply import apply_plan
    from upgrade.plan import make_plan, parse_self_ids

    roots = {"n0": store_copy("rmq-classic"), "n1": tmp_path / "new-n1", "n2": tmp_path / "new-n2"}
    ids = parse_self_ids(",".join(f"{n}={roots[n]}" for n in IDS))
    plan = make_plan("g0", "n0-127.0.0.1:1;n1-127.0.0.1:2;n2-127.0.0.1:3", ids, conf_dir=tmp_path / "plan-conf")
    assert plan.ok, plan.refusals
    plan.save(tmp_path / "plan.json")
    apply_plan(tmp_path / "plan.json", echo=lambda _line: None)
    g = DLedgerGroup(tmp_path, roots=roots, maxHashSlotNum=10000, maxIndexNum=40000)
    rows = manifests("rmq-classic")[::25]
    try:
        g.start()
        leader = g.wait_master()
        with g.procs[leader].client() as c:
            sent = [c.send("TopicA", f"after the upgrade {i}", queue_id=1) for i in range(20)]
        g.wait_in_sync(30)
        victim = next(n for n in IDS if n != leader)
        g.procs[victim].kill9()
        shutil.move(str(roots[victim]), str(tmp_path / f"moved-away-{victim}"))
        v = _reseed("--from", str(roots[leader]), "--to", str(roots[victim]), "--verify-only")
        assert v.returncode == 2 and "missing" in v.stdout, v.stdout + v.stderr
        r = _reseed("--from", str(roots[leader]), "--to", str(roots[victim]))  # the leader keeps running
        assert r.returncode == 0 and f"dividedCommitlogOffset {DIVIDED}" in r.stdout, r.stdout + r.stderr
        t0 = time.monotonic()
        g.procs[victim].start(wait=False)
        g.procs[victim].wait_ready(60)
        g.wait_in_sync(60)
        took = time.monotonic() - t0
        with g.procs[victim].client() as c:
            for row in rows:  # the old region, served from the reseeded commitlog
                m = c.by_offset(int(row["commitLogOffset"]))
                assert (m["topic"], m["queueOffset"]) == (row["topic"], int(row["queueOffset"]))
            for s in sent:    # the DLedger region, replicated by Raft after the reset
                assert c.by_offset(s["commitLogOffset"])["queueOffset"] == s["queueOffset"]
            got = wait_until(lambda: c.pull("TopicA", 1, sent[-1]["queueOffset"], 1)["messages"], 15, "pull")
            assert got[0]["commitLogOffset"] == sent[-1]["commitLogOffset"]
        st = g.status(leader)["dledger"]["followers"][victim]
        assert st["hintResets"] >= 1 and st["behindBegin"] is False, st
        with g.procs[leader].client() as c:
            text = c.metrics()
        assert f'rocketmq_dledger_peer_resets_total{{peer="{victim}",kind="hint"}}' in text
        print(f"\nreseeded follower ready and in sync {took:.1f}s after its restart")
        g.stop()
    finally:
        g.kill_all()
