"""``mqupgrade reseed`` of a member of a group migrated to Controller mode (issue 27, H1): the frozen
regions, config/ and commitlogRegions.json (last) are copied from a healthy member, verified; the
writable classic files, the epoch file and the identity files are not. Store-level, on groups of
two Apache DLedger members migrated by plan/apply as tests/upgrade/test_controller_dledger.py
does, one group per fixture set, built once per module (and one hand-made layout for the path
rules); then one real-process test: a reseeded third node joins a running migrated group."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import pytest

from broker.store.lockfile import StoreLock
from broker.store.message_store import DefaultMessageStore, GetMessageStatus
from tests.support import rmqfixtures as rf
from tests.upgrade.test_controller_dledger import SIZE, member, quiet, snapshot, write_plan
from tests.upgrade.upgrade_helpers import mqupgrade
from upgrade import regions_file
from upgrade.apply import apply_plan
from upgrade.cli import main as cli_main

#: planted in the source as a running Controller-mode member has them: none may reach the new node
NODE_OWN = {"epochFileCheckpoint": "1\n1-{cf}\n", "brokerIdentity": "DefaultCluster#broker-a#1",
            "storeshape": "mode=classic\nbrokerName=broker-a\n"}


Group = tuple[rf.FixtureSet, Path, int]


@pytest.fixture(scope="module")
def groups(fixture_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Group]:
    """``groups(set name)`` -> (fixture set, the healthy member n0's root, classicFrom) of a migrated
    group n0 + n1, built once per module; n0 also holds what a member in Controller mode writes: a
    writable classic file, its epoch and identity."""
    built: dict[str, Group] = {}

    def get(name: str) -> Group:
        if name not in built:
            fs = rf.SETS[name]
            base = tmp_path_factory.mktemp(f"reseed-{fs.name}")
            roots = [member(fixture_root, fs, base, sid) for sid in ("n0", "n1")]
            plan, path = write_plan(roots, base)
            assert plan.ok, plan.refusals
            apply_plan(path, echo=quiet)
            cf = plan.divided_commitlog_offset
            n0 = roots[0]
            (n0 / "commitlog" / f"{cf:020d}").write_bytes(bytes(SIZE))  # the writable region: HA's to ship
            for own, text in NODE_OWN.items():
                (n0 / own).write_text(text.format(cf=cf))
            built[name] = (fs, n0, cf)
        return built[name]

    return get


def _reseed(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli_main(["reseed", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _open(root: Path) -> DefaultMessageStore:
    store = DefaultMessageStore(store_path_root_dir=str(root), mapped_file_size_commit_log=SIZE,
                                max_hash_slot_num=10000, max_index_num=40000, warm_mapped_file_enable=False)
    assert store.load()
    store.start()
    return store


def _queue(store: DefaultMessageStore, topic: str, qid: int) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    while True:
        got = store.get_message(topic, qid, len(out), 256)
        if got.status is not GetMessageStatus.FOUND:
            return out
        out += [(p, bytes(b)) for p, b in zip(got.physical_offsets, got.buffers)]


def test_reseeded_member_serves_every_old_message(groups: Callable[[str], Group], fixture_set: rf.FixtureSet,
                                                  manifests, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fs, src, cf = groups(fixture_set.name)
    dst = tmp_path / "new"
    code, out, err = _reseed(capsys, "--from", str(src), "--to", str(dst))
    assert code == 0, err
    regions = regions_file.read(src)
    assert regions is not None and regions.classic_from == cf
    assert f"migrated to Controller mode (commitlogRegions.json): {regions.describe()}" in out
    assert "commitlogRegions.json written (last)" in out and "trees: config" in out
    assert f"not copied: the writable classic commitlog from classicFrom {cf}" in out
    assert (dst / "commitlogRegions.json").read_text() == (src / "commitlogRegions.json").read_text()
    assert not (dst / "commitlog" / f"{cf:020d}").exists() and not any((dst / n).exists() for n in NODE_OWN)
    frozen = {k: v for k, v in snapshot(src).items()
              if k.startswith(("commitlog/", "dledger-n0/", "config/")) and k != f"commitlog/{cf:020d}"}
    assert {k: v for k, v in snapshot(dst).items() if k != "commitlogRegions.json"} == frozen
    rows = [r for r in manifests(fs.mixed) if r.get("inConsumeQueue", 1)]
    t = time.monotonic()
    new, old = _open(dst), _open(src)
    try:
        # a fresh node with no epoch file: its max offset is classicFrom, what it asks the master for
        assert new.get_max_phy_offset() == cf and new.get_min_phy_offset() == 0
        queues = sorted({(r["topic"], r["queueId"]) for r in rows})
        served = {q: _queue(new, *q) for q in queues}
        for q in queues:  # every old message by queue offset, byte-equal to the healthy member's
            assert served[q] == _queue(old, *q), q
        by_queue = {(r["topic"], r["queueId"], r["queueOffset"]): r["commitLogOffset"] for r in rows}
        assert {(t_, q, i): p for (t_, q), msgs in served.items() for i, (p, _) in enumerate(msgs)} == by_queue
        for r in rows:  # and by key
            key = r["keys"].split(" ")[0]
            if key:
                found = new.query_message(r["topic"], key, 64)
                assert r["commitLogOffset"] in [m.commitlog_offset for m in found], r
    finally:
        new.shutdown()
        old.shutdown()
    print(f"\n{fs.name}: {len(rows)} messages read back by queue offset and by key in {time.monotonic() - t:.1f}s")


def test_verify_only_killed_run_resume_and_differing_file(groups: Callable[[str], Group], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    _fs, src, _cf = groups("plain")  # the copy rules do not depend on the fixture set
    dst = tmp_path / "new"
    code, out, _ = _reseed(capsys, "--from", str(src), "--to", str(dst), "--verify-only")
    assert code == 2 and "0 identical" in out and "commitlogRegions.json missing" in out
    assert "  missing commitlog/00000000000000000000" in out and "  missing dledger-n0/index/00000000000000000000" in out
    assert not dst.exists()  # verify-only writes nothing
    assert _reseed(capsys, "--from", str(src), "--to", str(dst))[0] == 0
    total = len(list((dst / "dledger-n0").rglob("*"))) - 2 + len(list((dst / "commitlog").iterdir()))  # - data/, index/
    code, out, _ = _reseed(capsys, "--from", str(src), "--to", str(dst), "--verify-only")
    assert code == 0 and f"verified: {total} identical, 0 missing, 0 differ; commitlogRegions.json identical" in out
    code, out, _ = _reseed(capsys, "--from", str(src), "--to", str(dst))  # idempotent
    assert code == 0 and f"copied 0 frozen-region files (verified), kept {total} identical" in out
    assert "commitlogRegions.json identical (last)" in out
    # a run killed after the DLedger region's last file went to .upgrade-tmp: no regions file yet
    last = sorted((src / "dledger-n0" / "data").iterdir())[-1]
    dead = dst / "dledger-n0" / "data" / last.name
    dead.rename(dead.with_name(dead.name + ".upgrade-tmp"))
    (dst / "commitlogRegions.json").unlink()
    code, out, _ = _reseed(capsys, "--from", str(src), "--to", str(dst), "--verify-only")
    assert code == 2 and f"  missing dledger-n0/data/{last.name}" in out and "commitlogRegions.json missing" in out
    code, out, _ = _reseed(capsys, "--from", str(src), "--to", str(dst))
    assert code == 0 and "copied 1 frozen-region files" in out and "commitlogRegions.json written" in out
    assert dead.read_bytes() == last.read_bytes() and not list(dst.rglob("*.upgrade-tmp"))
    # a frozen file that differs: reported, refused in one line, replaced with --overwrite
    with open(dead, "r+b") as fh:
        fh.seek(200)
        b = fh.read(1)
        fh.seek(200)
        fh.write(bytes([b[0] ^ 0xFF]))
    code, out, _ = _reseed(capsys, "--from", str(src), "--to", str(dst), "--verify-only")
    assert code == 2 and f"  differs dledger-n0/data/{last.name}" in out
    code, _, err = _reseed(capsys, "--from", str(src), "--to", str(dst))
    assert code == 2 and "first difference at byte 200" in err and "--overwrite" in err
    assert _reseed(capsys, "--from", str(src), "--to", str(dst), "--overwrite")[0] == 0
    assert dead.read_bytes() == last.read_bytes()


def test_refusals_running_destination_and_another_layout(groups: Callable[[str], Group], tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    fs, src, cf = groups("plain")  # the refusals do not depend on the fixture set
    dst = tmp_path / "new"
    lock = StoreLock(dst).acquire()  # its broker runs
    try:
        code, _, err = _reseed(capsys, "--from", str(src), "--to", str(dst))
    finally:
        lock.release()
    assert code == 2 and "stop its broker first" in err
    assert not (dst / "commitlogRegions.json").exists() and not (dst / "dledger-n0").exists()
    regions = regions_file.read(src)
    assert regions is not None
    other = regions_file.Regions.of([regions_file.Region("dledger", "dledger-n0", fs.divided_offset,
                                                         cf + SIZE + 10)], SIZE)
    regions_file.write(dst, other)
    r = mqupgrade("reseed", "--from", str(src), "--to", str(dst), "--overwrite")  # the real command line, once
    said = [line for line in r.stderr.splitlines() if line.startswith("mqupgrade reseed:")]
    assert r.returncode == 2 and len(said) == 1 and "Traceback" not in r.stderr, r.stderr
    assert said[0].startswith("mqupgrade reseed: error: the destination already holds another commitlogRegions.json")
    assert f"classicFrom {cf + 2 * SIZE}) than the source's (" in said[0] and said[0].count(f"classicFrom {cf})") == 1
    assert not (dst / "dledger-n0").exists()
    code, _, err = _reseed(capsys, "--from", str(src), "--to", str(tmp_path / "x"), "--seed-consumequeue", "copy")
    assert code == 2 and "re-dispatches its ConsumeQueues" in err
    code, _, err = _reseed(capsys, "--from", str(dst), "--to", str(tmp_path / "y"))  # dst: regions, no region files
    assert code == 2 and "region directory" in err


def test_absolute_classic_region_stray_writable_files_and_a_broken_source(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A hand-made layout (reseed copies files, it does not parse them): a classic region whose path
    is absolute (storePathCommitLog outside the root) is copied to that path, the source's copy read
    from --from-commitlog; writable files with no epoch file, and a broken regions file, are refused."""
    fsz = 4096
    src, dst, mounted, cl = tmp_path / "src", tmp_path / "dst", tmp_path / "mounted-cl", tmp_path / "cl"
    for d in (mounted, src / "dledger-n0" / "data", src / "dledger-n0" / "index", src / "config"):
        d.mkdir(parents=True)
    (mounted / f"{0:020d}").write_bytes(b"\1" * fsz)
    (src / "dledger-n0" / "data" / f"{fsz:020d}").write_bytes(b"\2" * fsz)
    (src / "dledger-n0" / "data" / f"{2 * fsz:020d}").write_bytes(b"\3" * fsz)  # past the region's end: not copied
    (src / "config" / "topics.json").write_text("{}")
    layout = regions_file.Regions.of([regions_file.Region("classic", str(cl), 0, fsz),
                                      regions_file.Region("dledger", "dledger-n0", fsz, fsz + 100)], fsz)
    regions_file.write(src, layout)
    code, _, err = _reseed(capsys, "--from", str(src), "--to", str(dst))
    assert code == 2 and f"the classic region's directory {cl} is absolute" in err and "--from-commitlog" in err
    cl.mkdir()
    code, _, err = _reseed(capsys, "--from", str(src), "--to", str(dst))
    assert code == 2 and f"directory {cl} is absolute" in err  # the source's files are not there either way
    (dst / "commitlog").mkdir(parents=True)
    stray = dst / "commitlog" / f"{2 * fsz:020d}"  # classicFrom's file, but no epoch file
    stray.write_bytes(bytes(fsz))
    code, _, err = _reseed(capsys, "--from", str(src), "--to", str(dst), "--from-commitlog", str(mounted))
    assert code == 2 and "no epoch file" in err and f"classicFrom {2 * fsz}" in err
    stray.unlink()
    code, out, err = _reseed(capsys, "--from", str(src), "--to", str(dst), "--from-commitlog", str(mounted))
    assert code == 0 and "copied 2 frozen-region files" in out, err
    assert (cl / f"{0:020d}").read_bytes() == b"\1" * fsz and not (dst / "commitlog" / f"{0:020d}").exists()
    assert sorted(p.name for p in (dst / "dledger-n0" / "data").iterdir()) == [f"{fsz:020d}"]
    assert regions_file.read(dst) == layout and (dst / "config" / "topics.json").read_text() == "{}"
    (src / "commitlogRegions.json").write_text('{"version": 1}')
    code, _, err = _reseed(capsys, "--from", str(src), "--to", str(tmp_path / "z"))
    assert code == 2 and err.startswith("mqupgrade reseed: error: the source's regions file is broken")


@pytest.mark.multiprocess
def test_reseeded_third_node_joins_the_migrated_group(fixture_root: Path, manifests, tmp_path: Path) -> None:
    """Real processes (tools/controller_cluster.py): a migrated group of two in Controller mode, one
    controller; a third node reseeded from the running master's store root applies for its id, is
    accepted by the master as a slave from classicFrom (no epoch file: its max offset), catches up,
    and serves an old message of each frozen region by queue offset."""
    from tools.controller_cluster import ControllerCluster
    from tools.procs import wait_until
    from upgrade.reseed import reseed

    fs = rf.SETS["plain"]
    members = ("n0", "n1")
    roots = [member(fixture_root, fs, tmp_path / "stores", sid) for sid in members]
    plan, path = write_plan(roots, tmp_path)
    apply_plan(path, echo=quiet)
    cf = plan.divided_commitlog_offset
    nn = f"n{len(members)}"  # the new node
    rows = [r for r in manifests(fs.mixed) if r.get("inConsumeQueue", 1)]
    old = [rows[0], next(r for r in rows if r["commitLogOffset"] >= fs.divided_offset)]  # one per region
    t0 = time.monotonic()
    with ControllerCluster(tmp_path / "cluster", 1, 0,
                           broker_extra={"maxHashSlotNum": 10000, "maxIndexNum": 40000}) as c:  # the fixture's
        for sid, root in zip(members, roots):
            c.add_broker(sid, store_root=root)
        c.start(60, wait_master=True)
        master = c.master()
        with c.brokers[master].client() as client:
            sent = client.send("TopicA", "after the migration", queue_id=0)
        end = c.max_offset(master)
        assert end is not None and end > cf, sent
        new = tmp_path / "stores" / nn
        rep = reseed(roots[int(master[1:])], new)  # its broker keeps running
        assert rep.regions_state == "written" and not (new / "epochFileCheckpoint").exists()
        t1 = time.monotonic()
        c.add_broker(nn, store_root=new).start(timeout=60)
        c.wait_role(nn, "SLAVE", 30)
        wait_until(lambda: c.max_offset(nn) == c.max_offset(master) or None, 30, f"{nn} to catch up from classicFrom")
        st = c.status(nn)
        assert st is not None and st["brokerId"] >= 1 and st["commitLog"]["minOffset"] == 0
        with c.brokers[nn].client() as client:
            for r in old:
                got = wait_until(lambda r=r: client.pull(r["topic"], r["queueId"], r["queueOffset"], 1).get("messages")
                                 or None, 10, f"{nn} to serve {r['topic']}:{r['queueId']}@{r['queueOffset']}")
                assert got[0]["commitLogOffset"] == r["commitLogOffset"] and got[0]["keys"] == r["keys"], (got, r)
            tail = client.pull("TopicA", 0, sent["queueOffset"], 1)["messages"]
            assert [m["bodyText"] for m in tail] == ["after the migration"]
        print(f"\ncluster up in {t1 - t0:.1f}s; reseeded {nn} joined and caught up in {time.monotonic() - t1:.1f}s")
