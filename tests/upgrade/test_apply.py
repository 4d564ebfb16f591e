"""mqupgrade apply: three identical stores, aligned slaves, recovered masters, refusals, kill -9."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from broker.config.conf_file import load_conf
from tests.upgrade.upgrade_helpers import (
    PEERS, REPO, copy, hold_lock, journal_state, make_behind, make_dirty, mqupgrade, tree_state, wait_for,
)
from upgrade import fileops
from upgrade.apply import ApplyError, apply_plan
from upgrade.inspect import inspect_store
from upgrade.plan import make_plan, parse_self_ids


def _plan(base: Path, slave: Path | None = None, **kw) -> Path:
    ids = parse_self_ids(f"n0={base / 'm'},n1={slave or base / 'n1'},n2={base / 'n2'}")
    kw.setdefault("auth_token", "test-group-secret-0123456789")  # the same group secret for ref and crash runs
    plan = make_plan("g0", PEERS, ids, conf_dir=base / "conf", **kw)
    assert plan.ok, plan.refusals
    plan.save(base / "plan.json")
    return base / "plan.json"


def _assert_old_files(nodes: list[Path], reference: Path) -> None:
    want = {p.name: p.read_bytes() for p in (reference / "commitlog").iterdir()}
    for n in nodes:
        got = {p.name: p.read_bytes() for p in (n / "commitlog").iterdir()}
        assert got.keys() == want.keys(), n
        for name in want:
            assert got[name] == want[name], f"{n}/{name}"


def _quiet(_: str) -> None:
    pass


def test_master_and_two_new_nodes(fixture_root: Path, fixture_set, tmp_path: Path) -> None:
    m = copy(fixture_root, fixture_set.classic, tmp_path / "m")
    plan = _plan(tmp_path)
    data = apply_plan(plan, echo=_quiet)
    assert not data["finished"]  # freeze steps skipped
    nodes = [m, tmp_path / "n1", tmp_path / "n2"]
    _assert_old_files(nodes, fixture_root / fixture_set.classic)
    for n in nodes[1:]:
        s = inspect_store(n)
        assert s.max_offset == fixture_set.classic_max_offset and s.cq_state == "agrees" and s.clean_shutdown
        assert (n / "config" / "delayOffset.json").read_bytes() == (m / "config" / "delayOffset.json").read_bytes()
    confs = [load_conf(tmp_path / "conf" / f"broker-n{i}.conf") for i in range(3)]
    assert [c.store.store_path_root_dir for c in confs] == [str(n.resolve()) for n in nodes]
    # the freeze, later: identical to Apache's own upgrade on every node
    data = apply_plan(plan, freeze=True, echo=_quiet)
    assert data["finished"] and data["runs"] == 2
    _assert_old_files(nodes, fixture_root / fixture_set.mixed)
    before = tree_state(tmp_path, (".journal.json",))
    lines: list[str] = []
    apply_plan(plan, freeze=True, echo=lines.append)
    assert all(line.endswith("done already") for line in lines)
    assert tree_state(tmp_path, (".journal.json",)) == before


@pytest.mark.parametrize("how", ["truncated", "dropped"])
def test_slave_behind_is_aligned(fixture_root: Path, fixture_set, manifests, tmp_path: Path, how: str) -> None:
    m = copy(fixture_root, fixture_set.classic, tmp_path / "m")
    s = copy(fixture_root, fixture_set.classic, tmp_path / "s")
    last = fixture_set.classic_max_offset - fixture_set.classic_max_offset % fixture_set.file_size
    rows = manifests(fixture_set.classic)
    cut = last if how == "dropped" else next(r["commitLogOffset"] for r in rows if r["commitLogOffset"] > last + 5000)
    make_behind(s, cut, fixture_set.file_size)
    plan = _plan(tmp_path, s)
    apply_plan(plan, freeze=True, echo=_quiet)
    _assert_old_files([m, s, tmp_path / "n2"], fixture_root / fixture_set.mixed)
    si = inspect_store(s)
    assert si.cq_state == "agrees" and si.clean_shutdown and si.frozen
    assert si.max_offset == fixture_set.classic_max_offset


def test_dirty_master_is_recovered_first(fixture_root: Path, tmp_path: Path) -> None:
    m = copy(fixture_root, "rmq-classic", tmp_path / "m")
    make_dirty(m, 3_665_318, 1 << 20)
    plan = _plan(tmp_path)
    lines: list[str] = []
    apply_plan(plan, freeze=True, echo=lines.append)
    assert lines[0].startswith("[1/") and "recover n0" in lines[0]
    assert not (m / "abort").exists()
    _assert_old_files([m, tmp_path / "n1", tmp_path / "n2"], fixture_root / "rmq-mixed")


def test_corrupt_master_stops_apply_with_file_and_offset(fixture_root: Path, tmp_path: Path) -> None:
    m = copy(fixture_root, "rmq-classic", tmp_path / "m")
    make_dirty(m, 3_665_318, 1 << 20, corrupt=True)
    plan = _plan(tmp_path)
    r = mqupgrade("apply", str(plan), "--yes")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "00000000000003145728 at file offset 519590" in r.stderr and "not a torn tail" in r.stderr
    assert not (tmp_path / "n1" / "commitlog").exists()


def test_running_broker_is_refused(fixture_root: Path, tmp_path: Path) -> None:
    copy(fixture_root, "rmq-classic", tmp_path / "m")
    plan = _plan(tmp_path)
    holder = hold_lock(tmp_path / "m")
    try:
        with pytest.raises(ApplyError, match=f"process {holder.pid}"):
            apply_plan(plan, echo=_quiet)
        r = mqupgrade("apply", str(plan), "--yes", "--journal", str(tmp_path / "j2.json"))
        assert r.returncode == 2 and "Traceback" not in r.stderr and "Stop the broker first" in r.stderr
    finally:
        holder.kill()
        holder.wait()
    journal = json.loads((tmp_path / "plan.journal.json").read_text())
    assert journal["steps"] == {}
    assert not (tmp_path / "n1" / "commitlog").exists()
    apply_plan(plan, echo=_quiet)


def test_store_changed_since_plan(fixture_root: Path, tmp_path: Path) -> None:
    m = copy(fixture_root, "rmq-classic", tmp_path / "m")
    plan = _plan(tmp_path)
    make_behind(m, 3_145_728, 1 << 20)
    with pytest.raises(ApplyError, match="changed since the plan"):
        apply_plan(plan, echo=_quiet)


def test_existing_conf_is_backed_up(fixture_root: Path, tmp_path: Path) -> None:
    copy(fixture_root, "rmq-classic", tmp_path / "m")
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "broker-n0.conf").write_text("# old\nbrokerName=old\n")
    plan = _plan(tmp_path)
    data = apply_plan(plan, echo=_quiet)
    bak = tmp_path / "conf" / f"broker-n0.conf.bak-{data['started_at']}"
    assert bak.read_text() == "# old\nbrokerName=old\n"
    assert load_conf(tmp_path / "conf" / "broker-n0.conf").store.dleger_self_id == "n0"


def test_cli_needs_confirmation(fixture_root: Path, tmp_path: Path) -> None:
    copy(fixture_root, "rmq-classic", tmp_path / "m")
    plan = _plan(tmp_path)
    r = mqupgrade("apply", str(plan))
    assert r.returncode == 1 and "--yes" in r.stderr and not (tmp_path / "n1").exists()
    r = mqupgrade("apply", str(tmp_path / "nope.json"), "--yes")
    assert r.returncode == 1 and "no such plan file" in r.stderr and "Traceback" not in r.stderr


def _visible_copies_are_whole(base: Path) -> None:
    master = base / "m" / "commitlog"
    for node in ("n1", "n2"):
        d = base / node / "commitlog"
        for f in d.glob("*") if d.exists() else []:
            if f.name.endswith(fileops.TMP_SUFFIX):
                continue
            size = f.stat().st_size
            assert fileops.content_digest(f, 0, size) == fileops.content_digest(master / f.name, 0, size), f


@pytest.mark.multiprocess
def test_kill9_during_apply_then_rerun_matches_uninterrupted(fixture_root: Path, tmp_path: Path) -> None:
    ref, crash = tmp_path / "ref", tmp_path / "crash"
    for base in (ref, crash):
        copy(fixture_root, "rmq-classic", base / "m")
        _plan(base)
    r = mqupgrade("apply", str(ref / "plan.json"), "--yes", "--freeze")
    assert r.returncode == 0, r.stderr

    journal = crash / "plan.journal.json"

    def steps_done() -> int:
        try:
            return len(json.loads(journal.read_text())["steps"])
        except (OSError, ValueError):
            return 0

    def tmp_in(node: str):
        return lambda: any((crash / node).rglob("*" + fileops.TMP_SUFFIX)) if (crash / node).exists() else False

    kill_points = [tmp_in("n1"), lambda: steps_done() >= 7, tmp_in("n2"), lambda: steps_done() >= 14]
    killed = 0
    for point in kill_points:
        p = subprocess.Popen([sys.executable, "-m", "upgrade.cli", "apply", str(crash / "plan.json"), "--yes",
                              "--freeze", "--no-progress"], cwd=REPO, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, env={**__import__("os").environ,
                                                           fileops.THROTTLE_ENV: str(3 << 20)})
        hit = wait_for(lambda: point() or p.poll() is not None, timeout=60)
        if p.poll() is None and hit:
            p.send_signal(signal.SIGKILL)
            killed += 1
        p.wait()
        _visible_copies_are_whole(crash)
    assert killed >= 3
    r = mqupgrade("apply", str(crash / "plan.json"), "--yes", "--freeze")
    assert r.returncode == 0, r.stderr
    assert not list(crash.rglob("*" + fileops.TMP_SUFFIX))
    assert tree_state(crash, (".journal.json", "plan.json")) == tree_state(ref, (".journal.json", "plan.json"))
    assert journal_state(journal, crash) == journal_state(ref / "plan.journal.json", ref)
    _assert_old_files([crash / "m", crash / "n1", crash / "n2"], fixture_root / "rmq-mixed")


def test_seed_by_rebuilding_consumequeues(fixture_root: Path, fixture_set, tmp_path: Path) -> None:
    m = copy(fixture_root, fixture_set.classic, tmp_path / "m")
    plan = _plan(tmp_path, seed_consumequeue="rebuild")
    apply_plan(plan, freeze=True, echo=_quiet)
    for n in (tmp_path / "n1", tmp_path / "n2"):
        assert inspect_store(n).cq_state == "agrees"
        for cq in sorted(p for p in (m / "consumequeue").rglob("0*") if p.is_file()):
            assert (n / cq.relative_to(m)).read_bytes() == cq.read_bytes(), cq
    _assert_old_files([m, tmp_path / "n1", tmp_path / "n2"], fixture_root / fixture_set.mixed)
