"""mqupgrade plan/apply/rollback --to controller from master/slave (issue 27.3; Apache's own in-place
upgrade) on Apache's classic stores (rmq-classic, variety-classic): only confs change."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support import rmqfixtures as rf
from tests.upgrade.test_controller_dledger import CONTROLLERS, Crash, crash_at, quiet, snapshot
from tests.upgrade.upgrade_helpers import flip_byte, hold_lock, make_behind
from upgrade.apply import apply_plan
from upgrade.controller_plan import make_controller_plan
from upgrade.node_conf import load_confs
from upgrade.plan_model import Plan
from upgrade.rollback import RollbackError, rollback_plan

SIZE = 1 << 20
TOKEN = "ha-secret-" + "k" * 32


def conf(path: Path, root: Path, role: str, port: int) -> str:
    slots = (next((root / "index").iterdir()).stat().st_size - 40) // 84  # the fixture's IndexFile settings
    lines = [f"maxHashSlotNum={slots}", f"maxIndexNum={4 * slots}", "brokerClusterName=DefaultCluster", "brokerName=broker-a", f"brokerId={0 if role != 'SLAVE' else 1}",
             f"brokerRole={role}", f"listenPort={port}", f"storePathRootDir={root}", f"mappedFileSizeCommitLog={SIZE}",
             f"haAuthToken={TOKEN}"] + (["haMasterAddress=127.0.0.1:30912"] if role == "SLAVE" else [])
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def pair(fixture_root: Path, fs: rf.FixtureSet, tmp: Path) -> tuple[Path, Path, list[str]]:
    tmp.mkdir(parents=True, exist_ok=True)
    m = rf.copy_store(fixture_root / fs.classic, tmp / "m")
    s = rf.copy_store(fixture_root / fs.classic, tmp / "s")
    return m, s, [conf(tmp / "m.conf", m, "ASYNC_MASTER", 30911), conf(tmp / "s.conf", s, "SLAVE", 30921)]


def write_plan(roots: list[Path], confs: list[str], tmp: Path) -> tuple[Plan, Path]:
    plan = make_controller_plan([str(r) for r in roots], CONTROLLERS, confs=load_confs(confs), conf_dir=tmp / "conf")
    path = tmp / "plan.json"
    plan.save(path)
    return plan, path


def test_master_slave_plan_apply_rollback(fixture_root: Path, fixture_set: rf.FixtureSet, tmp_path: Path) -> None:
    fs = fixture_set
    m, s, confs = pair(fixture_root, fs, tmp_path)
    before = {m: snapshot(m), s: snapshot(s)}
    plan, path = write_plan([m, s], confs, tmp_path)
    assert plan.ok, plan.refusals
    assert [(a.kind, a.node) for a in plan.actions] == [("record_end", "master"), ("record_end", "slave1"),
                                                        ("write_conf", "master"), ("write_conf", "slave1")]
    assert plan.master_max_offset == fs.classic_max_offset
    apply_plan(path, echo=quiet)
    assert {m: snapshot(m), s: snapshot(s)} == before  # no byte of either store changed: confs only
    for sid, port in (("master", 30911), ("slave1", 30921)):
        lines = (tmp_path / "conf" / f"broker-{sid}.conf").read_text().splitlines()
        for want in ("enableControllerMode=true", f"controllerAddr={CONTROLLERS}", "enableDLegerCommitLog=false",
                     "brokerId=-1", "brokerRole=SLAVE", "brokerName=broker-a", "brokerClusterName=DefaultCluster",
                     f"listenPort={port}", f"haAuthToken={TOKEN}"):
            assert want in lines, (want, lines)
        assert not any(x.startswith(("haMasterAddress", "dLeger")) for x in lines)
        assert not any(x.startswith("allAckInSyncStateSet") for x in lines)  # ASYNC_MASTER: Apache's default
    rollback_plan(path, echo=quiet)
    assert {m: snapshot(m), s: snapshot(s)} == before
    assert not list((tmp_path / "conf").glob("*.conf"))


def test_refusals_as_the_dledger_plan_refuses(fixture_root: Path, tmp_path: Path) -> None:
    fs = rf.SETS["plain"]
    m, s, confs = pair(fixture_root, fs, tmp_path)
    flip_byte(s, 2_000_000, SIZE)
    holder = hold_lock(m)
    try:
        plan, _ = write_plan([m, s], confs, tmp_path)
    finally:
        holder.kill()
        holder.wait()
    assert not plan.ok and not plan.actions
    assert any(r.startswith(f"{m}: in use:") and r.endswith("Stop the broker first.") for r in plan.refusals)
    plan, _ = write_plan([m, s], confs, tmp_path)
    assert plan.refusals == [f"{s}: bytes diverge from the master {m} in commitlog file {SIZE:020d} at file offset "
                             f"{2_000_000 - SIZE} (physical offset 2000000)"]
    m2, s2, confs2 = pair(fixture_root, fs, tmp_path / "ahead")
    make_behind(m2, 2_926_347, SIZE)
    plan, _ = write_plan([m2, s2], confs2, tmp_path / "ahead")
    assert plan.refusals == [f"{s2}: slave is ahead of its master {m2} ({fs.classic_max_offset} > 2926347); the "
                             "master must hold the most data (choose it with --master, or investigate)"]


def test_rollback_refused_once_the_end_moved(fixture_root: Path, tmp_path: Path) -> None:
    fs = rf.SETS["plain"]
    m, s, confs = pair(fixture_root, fs, tmp_path)
    make_behind(s, 2_926_347, SIZE)  # the slave had not caught up when the group stopped
    plan, path = write_plan([m, s], confs, tmp_path)
    assert [(a.kind, a.node) for a in plan.actions][:3] == [("recover", "slave1"), ("record_end", "master"),
                                                            ("record_end", "slave1")]  # its ConsumeQueues were ahead
    assert any(w.startswith(f"{s} is {fs.classic_max_offset - 2_926_347} bytes behind the master: start the master "
                            "first") for w in plan.warnings)
    apply_plan(path, echo=quiet)
    for f in sorted((m / "commitlog").iterdir()):  # AutoSwitch HA caught the slave up in Controller mode
        shutil.copyfile(f, s / "commitlog" / f.name)
    written = sorted(p.read_text() for p in (tmp_path / "conf").glob("*.conf"))
    with pytest.raises(RollbackError) as exc:
        rollback_plan(path, echo=quiet)
    assert str(exc.value) == (
        f"{s}: cannot roll back: its commitlog end moved from 2926347 to {fs.classic_max_offset} since apply (written, "
        "or replicated, in Controller mode); keep the group in Controller mode, or restore the previous confs "
        "yourself once `mqupgrade inspect` shows the replicas agree (nothing was changed)")
    assert sorted(p.read_text() for p in (tmp_path / "conf").glob("*.conf")) == written


def test_kill_at_every_step_then_resume(fixture_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m, s, confs = pair(fixture_root, rf.SETS["plain"], tmp_path)
    (tmp_path / "conf").mkdir()
    old = tmp_path / "conf" / "broker-master.conf"
    old.write_text("brokerName=before\n")
    plan, path = write_plan([m, s], confs, tmp_path)
    apply_plan(path, echo=quiet)
    applied = sorted(p.read_text() for p in (tmp_path / "conf").glob("*.conf"))
    rollback_plan(path, echo=quiet)
    for k in range(len(plan.actions)):
        crash_at(monkeypatch, k)
        with pytest.raises(Crash):
            apply_plan(path, echo=quiet)
        monkeypatch.undo()
        apply_plan(path, echo=quiet)
        assert sorted(p.read_text() for p in (tmp_path / "conf").glob("*.conf")) == applied
        crash_at(monkeypatch, k)
        with pytest.raises(Crash):
            rollback_plan(path, echo=quiet)
        monkeypatch.undo()
        rollback_plan(path, echo=quiet)
        assert [p.name for p in (tmp_path / "conf").glob("*.conf")] == ["broker-master.conf"]
        assert old.read_text() == "brokerName=before\n"


def test_a_sync_master_group_keeps_acks_durable(fixture_root: Path, tmp_path: Path) -> None:
    """A SYNC_MASTER's ack meant its slave held the message: every node's Controller-mode conf gets
    allAckInSyncStateSet=true (a node whose conf sets the key keeps its own value)."""
    m, s, confs = pair(fixture_root, rf.SETS["plain"], tmp_path)
    Path(confs[0]).write_text(Path(confs[0]).read_text().replace("brokerRole=ASYNC_MASTER", "brokerRole=SYNC_MASTER"))
    Path(confs[1]).write_text(Path(confs[1]).read_text() + "allAckInSyncStateSet=false\n")
    plan, _ = write_plan([m, s], confs, tmp_path)
    assert plan.ok, plan.refusals
    written = {a.node: a.params["content"].splitlines() for a in plan.actions if a.kind == "write_conf"}
    assert "allAckInSyncStateSet=true" in written["master"]
    assert "allAckInSyncStateSet=true" not in written["slave1"]  # its own conf said false: kept
