"""mqupgrade plan/apply/rollback --to controller from DLedger mode (issue 27.3, the shared spec's layout A)
on Apache's DLedger stores (rmq-mixed, variety-mixed: one member n0 each, copied into groups of members)."""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Callable

import pytest

from broker.store.message_store import DefaultMessageStore, GetMessageStatus
from dledger.entry import INDEX_UNIT
from tests.support import rmqfixtures as rf
from tests.upgrade.upgrade_helpers import hold_lock, mqupgrade
from upgrade import regions_file
from upgrade.apply import ApplyError, apply_plan
from upgrade.cli import main as cli_main
from upgrade.controller_plan import make_controller_plan
from upgrade.fileops import content_digest
from upgrade.inspect import inspect_store
from upgrade.journal import Journal
from upgrade.plan_model import Plan
from upgrade.rollback import RollbackError, rollback_plan

SIZE = 1 << 20
CONTROLLERS = "127.0.0.1:9878;127.0.0.1:9879;127.0.0.1:9880"


def quiet(_line: str) -> None:
    pass


def snapshot(root: Path) -> dict[str, tuple[int, str]]:
    """{relative path: (size, content digest)} of every file (sparse-aware; the lock file left out)."""
    return {str(p.relative_to(root)): (p.stat().st_size, content_digest(p, 0, p.stat().st_size))
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != "lock"}


def member(fixture_root: Path, fs: rf.FixtureSet, base: Path, sid: str) -> Path:
    """A copy of the fixture's DLedger store as member ``sid`` (its dledger-n0 renamed)."""
    base.mkdir(parents=True, exist_ok=True)
    root = rf.copy_store(fixture_root / fs.mixed, base / sid)
    if sid != "n0":
        (root / "dledger-n0").rename(root / f"dledger-{sid}")
    return root


def unit(root: Path, sid: str, i: int) -> tuple[int, int, int, int, int]:
    with open(root / f"dledger-{sid}" / "index" / f"{0:020d}", "rb") as fh:
        fh.seek(i * 32)
        return INDEX_UNIT.unpack(fh.read(32))


def set_checkpoint(root: Path, sid: str, committed: int) -> None:
    (root / f"dledger-{sid}" / "checkpoint").write_text(f"committedIndex={committed}\nendIndex={committed}\n")


def committed_of(root: Path, sid: str) -> int:
    text = (root / f"dledger-{sid}" / "checkpoint").read_text()
    return int(text.split("committedIndex=")[1].split()[0])


def data_path(root: Path, sid: str, offset: int) -> tuple[Path, int]:
    start = offset - offset % SIZE
    return root / f"dledger-{sid}" / "data" / f"{start:020d}", offset - start


def append_entry(root: Path, sid: str, at: int, index: int) -> bytes:
    """An entry after the log's end that no checkpoint calls committed (a leader's unreplicated tail)."""
    body = b"never committed"
    entry = struct.pack(">iiqqqiiii", 1, 48 + len(body), index, 0, at, 0, 0, 0, len(body)) + body
    f, off = data_path(root, sid, at)
    with open(f, "r+b") as fh:
        fh.seek(off)
        fh.write(entry)
    return entry


def write_plan(roots: list[Path], tmp: Path, group: str = "broker-a", **kw: Any) -> tuple[Plan, Path]:
    plan = make_controller_plan([str(r) for r in roots], CONTROLLERS, conf_dir=tmp / "conf", group=group, **kw)
    path = tmp / "plan.json"
    plan.save(path)
    return plan, path


def expected_regions(fs: rf.FixtureSet, dledger_dir: str) -> dict[str, Any]:
    return {"version": 1, "writtenBy": "mqupgrade", "mappedFileSizeCommitLog": SIZE,
            "classicFrom": -(-fs.mixed_max_offset // SIZE) * SIZE,
            "regions": [{"kind": "classic", "path": "commitlog", "start": 0, "end": fs.divided_offset},
                        {"kind": "dledger", "path": dledger_dir, "start": fs.divided_offset,
                         "end": fs.mixed_max_offset}]}


# ---- the whole journey on both fixture sets -----------------------------------------------------
def test_group_plan_apply_rollback(fixture_root: Path, fixture_set: rf.FixtureSet, tmp_path: Path) -> None:
    fs = fixture_set
    roots = [member(fixture_root, fs, tmp_path, sid) for sid in ("n0", "n1", "n2")]
    committed = committed_of(roots[0], "n0")
    set_checkpoint(roots[1], "n1", committed - 3)  # a follower's checkpoint lags: the group's committed end counts
    before = {r: snapshot(r) for r in roots}
    plan, path = write_plan(roots, tmp_path)
    assert plan.ok, plan.refusals
    assert plan.target == "controller" and plan.master_max_offset == fs.mixed_max_offset
    assert [a.kind for a in plan.actions] == ["write_regions"] * 3 + ["write_conf"] * 3
    apply_plan(path, echo=quiet)
    for r, sid in zip(roots, ("n0", "n1", "n2")):
        text = (r / "commitlogRegions.json").read_text()
        assert json.loads(text) == expected_regions(fs, f"dledger-{sid}")
        assert regions_file.parse(text).classic_from == plan.divided_commitlog_offset
        after = snapshot(r)
        assert set(after) - set(before[r]) == {"commitlogRegions.json"}  # nothing else in the store changed
        assert {k: v for k, v in after.items() if k != "commitlogRegions.json"} == before[r]
        conf = (tmp_path / "conf" / f"broker-{sid}.conf").read_text()
        for line in ("enableControllerMode=true", f"controllerAddr={CONTROLLERS}",
                     "enableDLegerCommitLog=false", "brokerId=-1", "brokerRole=SLAVE", "brokerName=broker-a",
                     f"storePathRootDir={r}", "allAckInSyncStateSet=true"):  # an ack still means a majority
            assert line in conf.splitlines(), (line, conf)
        assert "dLeger" not in conf
    s = inspect_store(roots[0])
    assert s.kind == "controller" and "migrated to Controller mode" in s.kind_detail
    assert "no message written yet" in s.kind_detail and "mqupgrade rollback" in s.next_step
    # the broker started once in Controller mode, took no message: the first classic file (zeros), an
    # epoch file and its identity; rollback removes them with the regions file and the confs
    cf = plan.divided_commitlog_offset
    (roots[0] / "commitlog" / f"{cf:020d}").write_bytes(bytes(SIZE))
    (roots[0] / "epochFileCheckpoint").write_text(f"1\n1-{cf}\n")
    (roots[0] / "brokerIdentity").write_text("DefaultCluster#broker-a#1")
    (roots[0] / "storeshape").write_text("mode=classic\nbrokerName=broker-a\n")  # the broker's record of its mode
    s = inspect_store(roots[0])  # the declared gap below classicFrom is not "a gap in the commitlog"
    assert [x for x in s.problems if "gap" in x or "does not follow" in x] == [], s.problems
    assert [x for x in s.problems if x.startswith("already upgraded")] == [
        f"already upgraded: migrated to Controller mode ({roots[0] / 'commitlogRegions.json'}); "
        "`mqupgrade rollback PLAN` undoes it until the first write in the new mode"]
    rollback_plan(path, echo=quiet)
    for r in roots:
        assert snapshot(r) == before[r]
    assert not list((tmp_path / "conf").glob("*.conf"))
    assert not (tmp_path / "plan.journal.json").exists() and not (tmp_path / "plan.rollback.json").exists()
    apply_plan(path, echo=quiet)  # the same plan applies again from the start
    assert all((r / "commitlogRegions.json").exists() for r in roots)
    again, _ = write_plan(roots[:1], tmp_path / "again")
    assert again.refusals == [f"{roots[0]}: already migrated to Controller mode (commitlogRegions.json is there): "
                              "nothing to plan; `mqupgrade rollback PLAN` undoes it until the first write in "
                              "Controller mode"]


# ---- refusals -----------------------------------------------------------------------------------
def test_refusals_in_use_dirty_and_mixed(fixture_root: Path, tmp_path: Path) -> None:
    fs = rf.SETS["plain"]
    n0, n1 = member(fixture_root, fs, tmp_path, "n0"), member(fixture_root, fs, tmp_path, "n1")
    (n1 / "abort").write_bytes(b"")
    holder = hold_lock(n0)
    try:
        plan, _ = write_plan([n0, n1], tmp_path)
    finally:
        holder.kill()
        holder.wait()
    assert not plan.ok and not plan.actions
    assert any(r.startswith(f"{n0}: in use:") and r.endswith("Stop the broker first.") for r in plan.refusals)
    assert (f"{n1}: not shut down cleanly (abort file present): start it once in DLedger mode and stop it cleanly, "
            "then plan again") in plan.refusals
    classic = rf.copy_store(fixture_root / fs.classic, tmp_path / "c")
    mixed, _ = write_plan([n0, classic], tmp_path)
    assert mixed.refusals == [f"the stores mix DLedger mode ({n0}) and master/slave ({classic}): plan one group at "
                              "a time"]
    dl, cl = inspect_store(n0), inspect_store(classic)  # inspect says what each is and what to do next
    assert (dl.kind, cl.kind) == ("dledger", "classic")
    assert dl.kind_detail == (f"DLedger mode, member n0: committed entry 1999 ends at {fs.mixed_max_offset}; old "
                              f"classic region [0, {fs.divided_offset})")
    assert "mqupgrade plan --to controller" in dl.next_step and "mqupgrade plan --to controller" in cl.next_step


def test_refusals_divergence_and_missing_entries(fixture_root: Path, tmp_path: Path) -> None:
    fs = rf.SETS["plain"]
    n0, n1, n2 = (member(fixture_root, fs, tmp_path, sid) for sid in ("n0", "n1", "n2"))
    _, pos, _size, _, _ = unit(n2, "n2", 1500)
    f, at = data_path(n2, "n2", pos + 100)
    with open(f, "r+b") as fh:
        fh.seek(at)
        b = fh.read(1)
        fh.seek(at)
        fh.write(bytes([b[0] ^ 0xFF]))
    _, cut, _, _, _ = unit(n1, "n1", 1995)  # n1 lost its last 5 entries (and its checkpoint says 1994)
    f, at = data_path(n1, "n1", cut)
    with open(f, "r+b") as fh:
        fh.seek(at)
        fh.write(bytes(SIZE - at))
    with open(n1 / "dledger-n1" / "index" / f"{0:020d}", "r+b") as fh:
        fh.seek(1995 * 32)
        fh.write(bytes(5 * 32))
    set_checkpoint(n1, "n1", 1994)
    plan, _ = write_plan([n0, n1, n2], tmp_path)
    assert plan.refusals == [
        f"{n1} (n1): holds entries up to 1994 but n0 committed 1999: start the group once in DLedger mode so it "
        "catches up, stop it cleanly, then plan again",
        f"{n2} (n2): committed entries differ from n0's at entry 1500, first differing offset {pos + 100}: the "
        "members disagree on committed data; investigate (or `mqupgrade reseed` the wrong member in DLedger mode) "
        "before migrating"]


def _last_cq_unit(root: Path, end: int) -> tuple[Path, int]:
    for f in sorted((root / "consumequeue").glob("*/*/" + "[0-9]" * 20)):
        data = f.read_bytes()
        used = -(-len(data.rstrip(b"\0")) // 20) * 20  # the queue's units end at its last non-zero byte
        if used:
            off, size = struct.unpack_from(">qi", data, used - 20)
            if off + size == end:
                return f, used - 20
    raise AssertionError("no unit ends at the store's end")


def test_consume_queues_ahead_refused_behind_dispatched_by_the_store(fixture_root: Path, fixture_set: rf.FixtureSet,
                                                                     manifests, tmp_path: Path) -> None:
    """Behind (a kill -9 in DLedger mode before the last dispatch): planned, with a note; the applied
    store, opened in classic mode (H2's broker/store/commitlog_regions), dispatches the gap and reads
    the manifest's messages back by offset and by queue. Ahead: refused."""
    fs = fixture_set
    n0 = member(fixture_root, fs, tmp_path, "n0")
    f, at = _last_cq_unit(n0, fs.mixed_max_offset)
    with open(f, "r+b") as fh:
        fh.seek(at)
        fh.write(bytes(20))
    plan, path = write_plan([n0], tmp_path)
    assert plan.ok, plan.refusals
    note = next(w for w in plan.warnings if w.startswith("n0: the ConsumeQueues lag the region end"))
    assert note.endswith("1 committed message(s) after it belong in ConsumeQueues); the store dispatches them at "
                         "its first start in Controller mode")
    apply_plan(path, echo=quiet)
    store = DefaultMessageStore(store_path_root_dir=str(n0), mapped_file_size_commit_log=SIZE, max_hash_slot_num=10000,
                                max_index_num=40000, warm_mapped_file_enable=False)
    store.load()
    store.start()
    try:
        assert store.get_max_phy_offset() == plan.divided_commitlog_offset  # no new file yet: max == classicFrom
        rows = [r for r in manifests(fs.mixed) if r.get("inConsumeQueue", 1)]
        split = next(i for i, r in enumerate(rows) if r["commitLogOffset"] >= fs.divided_offset)
        for row in (rows[0], rows[split - 1], rows[split], rows[-1]):  # both regions' first and last
            m = store.look_message_by_offset(row["commitLogOffset"])
            assert m is not None and (m.topic, m.queue_id, m.queue_offset, m.store_size) == (
                row["topic"], row["queueId"], row["queueOffset"], row["storeSize"]), row
            got = store.get_message(row["topic"], row["queueId"], row["queueOffset"], 1)
            assert got.status is GetMessageStatus.FOUND and got.physical_offsets == [row["commitLogOffset"]], row
    finally:
        store.shutdown()
    rollback_plan(path, echo=quiet)  # nothing was written in the new mode
    assert not (n0 / "commitlogRegions.json").exists()
    ahead = member(fixture_root, fs, tmp_path / "a", "n0")
    lower = committed_of(ahead, "n0") - 4
    set_checkpoint(ahead, "n0", lower)  # the ConsumeQueues reach entries the checkpoint does not call committed
    plan, _ = write_plan([ahead], tmp_path / "a")
    _, pos, size, _, _ = unit(ahead, "n0", lower)
    assert plan.refusals == [f"{ahead} (n0): ConsumeQueues reach {fs.mixed_max_offset}, beyond the committed end "
                             f"{pos + size}: start it once in DLedger mode and stop it cleanly, then plan again"]


def test_uncommitted_tail_is_left_in_the_files(fixture_root: Path, tmp_path: Path) -> None:
    fs = rf.SETS["plain"]
    n0 = member(fixture_root, fs, tmp_path, "n0")
    entry = append_entry(n0, "n0", fs.mixed_max_offset, 2000)
    before = snapshot(n0)
    plan, path = write_plan([n0], tmp_path)
    assert plan.ok, plan.refusals
    assert (f"n0: 1 uncommitted entry after index 1999 (bytes [{fs.mixed_max_offset}, "
            f"{fs.mixed_max_offset + len(entry)})) stay in the DLedger files and are never read in Controller mode "
            "(never committed, so never acknowledged)") in plan.warnings
    apply_plan(path, echo=quiet)
    regions = regions_file.read(n0)
    assert regions is not None and regions.regions[-1].end == fs.mixed_max_offset
    assert {k: v for k, v in snapshot(n0).items() if k != "commitlogRegions.json"} == before


# ---- rollback after a write; kill at every step --------------------------------------------------
def test_rollback_refused_after_the_first_write(fixture_root: Path, tmp_path: Path) -> None:
    n0 = member(fixture_root, rf.SETS["plain"], tmp_path, "n0")
    plan, path = write_plan([n0], tmp_path)
    apply_plan(path, echo=quiet)
    first = n0 / "commitlog" / f"{plan.divided_commitlog_offset:020d}"
    first.write_bytes(struct.pack(">ii", 331, -626843481) + bytes(SIZE - 8))  # a message's size and magic
    state = snapshot(n0), (tmp_path / "conf" / "broker-n0.conf").read_text()
    with pytest.raises(RollbackError) as exc:
        rollback_plan(path, echo=quiet)
    assert str(exc.value) == (
        f"{n0}: cannot roll back: {first.name} holds messages written in Controller mode (at or above classicFrom "
        f"{plan.divided_commitlog_offset}), which DLedger mode cannot take back in place; keep the group in "
        "Controller mode (nothing was changed)")
    assert (snapshot(n0), (tmp_path / "conf" / "broker-n0.conf").read_text()) == state


class Crash(Exception):
    """A kill -9 right after a step's effects are durable, before the journal records it."""


def crash_at(monkeypatch: pytest.MonkeyPatch, k: int, method: str = "mark_done") -> None:
    calls = {"n": 0}
    orig: Callable[..., None] = getattr(Journal, method)

    def crashing(self: Journal, *args: Any) -> None:
        if calls["n"] == k:
            calls["n"] += 1
            raise Crash(args)
        calls["n"] += 1
        orig(self, *args)

    monkeypatch.setattr(Journal, method, crashing)


def test_kill_at_every_step_of_apply_and_rollback_then_resume(fixture_root: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    n0 = member(fixture_root, rf.SETS["plain"], tmp_path, "n0")
    conf = tmp_path / "conf" / "broker-n0.conf"
    conf.parent.mkdir()
    conf.write_text("brokerName=old\n")  # a conf of the same name was there: apply keeps it, rollback restores it
    before = snapshot(n0)
    plan, path = write_plan([n0], tmp_path)
    apply_plan(path, echo=quiet)
    applied = snapshot(n0), conf.read_text()
    rollback_plan(path, echo=quiet)
    assert (snapshot(n0), conf.read_text()) == (before, "brokerName=old\n")
    for k in range(len(plan.actions)):
        crash_at(monkeypatch, k)
        with pytest.raises(Crash):
            apply_plan(path, echo=quiet)
        monkeypatch.undo()
        apply_plan(path, echo=quiet)
        assert (snapshot(n0), conf.read_text()) == applied
        for method, at in (("mark_done", k), ("finish", 0)):
            crash_at(monkeypatch, at, method)
            with pytest.raises(Crash):
                rollback_plan(path, echo=quiet)
            monkeypatch.undo()
            if method == "mark_done":
                apply_again = (tmp_path / "plan.journal.json").exists()
                assert apply_again  # still rolling back: apply's journal is set aside only at the end
        rollback_plan(path, echo=quiet)
        assert (snapshot(n0), conf.read_text()) == (before, "brokerName=old\n")
        assert not (tmp_path / "plan.rollback.json").exists()


def test_apply_refuses_a_member_that_moved_since_the_plan(fixture_root: Path, tmp_path: Path) -> None:
    fs = rf.SETS["plain"]
    n0 = member(fixture_root, fs, tmp_path, "n0")
    _, path = write_plan([n0], tmp_path)
    append_entry(n0, "n0", fs.mixed_max_offset, 2000)  # the broker ran again in DLedger mode
    for _run in range(2):  # and a rerun checks again (its journal has no step done)
        with pytest.raises(ApplyError, match="changed since the plan was made"):
            apply_plan(path, echo=quiet)
    assert not (n0 / "commitlogRegions.json").exists()


# ---- through the command line, once ---------------------------------------------------------------
def test_cli_plan_apply_inspect_rollback(fixture_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    n0 = member(fixture_root, rf.SETS["plain"], tmp_path, "n0")
    out = tmp_path / "p.json"
    r = mqupgrade("plan", "--to", "controller", "--controllers", CONTROLLERS, "--group", "g0", "--out", str(out),
                  str(n0))
    assert r.returncode == 0, r.stderr
    assert "classicFrom 6291456" in r.stdout and "write_regions-n0" in r.stdout
    r = mqupgrade("apply", "--yes", str(out))
    assert r.returncode == 0 and "applied: 2/2 steps done" in r.stdout, r.stderr
    assert cli_main(["inspect", str(n0)]) == 2  # in process from here on: the CLI's start-up is paid once above
    said = capsys.readouterr().out
    assert "migrated to Controller mode by mqupgrade on" in said and "classicFrom 6291456" in said
    r = mqupgrade("rollback", "--yes", str(out))
    assert r.returncode == 0 and "rolled back: 2 steps undone" in r.stdout, r.stderr
    assert not (n0 / "commitlogRegions.json").exists()
    assert cli_main(["rollback", "--yes", str(out)]) == 2
    assert capsys.readouterr().err.startswith("mqupgrade rollback: nothing to roll back")
    assert cli_main(["plan", "--to", "controller", "--group", "g0", "--out", str(out), str(n0)]) == 1
    assert "--controllers is required with --to controller" in capsys.readouterr().err


def test_inspect_of_dledger_members_with_their_confs(fixture_root: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Every DLedger member's conf says ASYNC_MASTER (the default): that names no master, so
    inspect compares the members instead of stopping with "more than one conf says *_MASTER"."""
    roots = [member(fixture_root, rf.SETS["plain"], tmp_path, sid) for sid in ("n0", "n1")]
    confs = []
    for sid, r in zip(("n0", "n1"), roots):
        c = tmp_path / f"{sid}.conf"
        c.write_text(f"brokerName=broker-a\nstorePathRootDir={r}\nenableDLegerCommitLog=true\ndLegerGroup=broker-a\n"
                     f"dLegerSelfId={sid}\ndLegerPeers=n0-127.0.0.1:40911;n1-127.0.0.1:40912\n"
                     "mappedFileSizeCommitLog=1048576\n")
        confs += ["--conf", str(c)]
    assert cli_main(["inspect", *confs, str(roots[0]), str(roots[1])]) == 2  # "already upgraded" (to DLedger mode)
    captured = capsys.readouterr()
    assert "more than one conf says" not in captured.err, captured.err
    assert captured.out.count("DLedger mode, member") == 2 and "plan --to controller" in captured.out


def test_pure_dledger_store_has_only_its_dledger_region(fixture_root: Path, tmp_path: Path) -> None:
    """A store that was in DLedger mode from the start (no classic commitlog: here, its files removed)."""
    fs = rf.SETS["plain"]
    n0 = member(fixture_root, fs, tmp_path, "n0")
    for f in (n0 / "commitlog").iterdir():
        f.unlink()
    plan, path = write_plan([n0], tmp_path)
    assert plan.ok, plan.refusals
    apply_plan(path, echo=quiet)
    assert json.loads((n0 / "commitlogRegions.json").read_text())["regions"] == [
        {"kind": "dledger", "path": "dledger-n0", "start": fs.divided_offset, "end": fs.mixed_max_offset}]
