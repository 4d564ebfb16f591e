"""Issue 23.8: no mqupgrade command follows a symbolic link out of the store it was given.

Before: ``mqupgrade apply --freeze`` wrote the 8-byte tail blank into a file outside the store
through a linked commitlog file. Each command is given a store (Apache 4.9.8's fixtures, both
sets) with a link in it, pointing at a copy of the real file outside the store: the command is
refused naming the link, and the outside file keeps every byte.
"""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from tests.upgrade.upgrade_helpers import PEERS, commitlog_files, copy, mqupgrade
from upgrade.apply import ApplyError, apply_plan
from upgrade.inspect import InspectError
from upgrade.plan import make_plan, parse_self_ids
from upgrade.reseed import ReseedError, reseed


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _link_last_commitlog(store: Path, outside: Path) -> tuple[Path, Path]:
    """Move the store's last commitlog file outside and leave a link in its place."""
    last = commitlog_files(store)[-1]
    outside.mkdir(parents=True, exist_ok=True)
    target = outside / last.name
    shutil.move(str(last), target)
    last.symlink_to(target)
    return last, target


def _plan(base: Path):
    ids = parse_self_ids(f"n0={base / 'm'},n1={base / 'n1'},n2={base / 'n2'}")
    return make_plan("g0", PEERS, ids, conf_dir=base / "conf", auth_token="test-group-secret-0123456789")


def test_apply_freeze_never_writes_through_a_link_swapped_in_after_the_plan(fixture_root: Path, fixture_set,
                                                                           tmp_path: Path) -> None:
    copy(fixture_root, fixture_set.classic, tmp_path / "m")
    plan = _plan(tmp_path)
    assert plan.ok, plan.refusals
    plan.save(tmp_path / "plan.json")
    link, target = _link_last_commitlog(tmp_path / "m", tmp_path / "elsewhere")
    before = _digest(target)
    with pytest.raises(ApplyError, match="symbolic link"):
        apply_plan(tmp_path / "plan.json", freeze=True, echo=lambda _l: None)
    assert _digest(target) == before and link.is_symlink()
    assert not (tmp_path / "n1").exists()  # refused before any step ran
    r = mqupgrade("apply", "--yes", "--freeze", "--no-progress", str(tmp_path / "plan.json"))
    assert r.returncode != 0 and "symbolic link" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert _digest(target) == before


def test_inspect_and_plan_refuse_a_store_with_a_link(fixture_root: Path, fixture_set, tmp_path: Path) -> None:
    copy(fixture_root, fixture_set.classic, tmp_path / "m")
    (tmp_path / "outside-config").mkdir()
    shutil.rmtree(tmp_path / "m" / "config")
    (tmp_path / "m" / "config").symlink_to(tmp_path / "outside-config")  # a linked directory
    with pytest.raises(InspectError, match="config is a symbolic link"):
        _plan(tmp_path)
    r = mqupgrade("inspect", str(tmp_path / "m"))
    assert r.returncode == 1 and "symbolic link" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert list((tmp_path / "outside-config").iterdir()) == []


def test_reseed_refuses_a_linked_destination_file(fixture_root: Path, fixture_set, tmp_path: Path) -> None:
    src = copy(fixture_root, fixture_set.classic, tmp_path / "src")
    dst = tmp_path / "dst"
    (dst / "commitlog").mkdir(parents=True)
    first = commitlog_files(src)[0]
    victim = tmp_path / "victim"
    victim.write_bytes(b"not yours")
    (dst / "commitlog" / first.name).symlink_to(victim)
    with pytest.raises(ReseedError, match="symbolic link"):
        reseed(src, dst, overwrite=True)
    assert victim.read_bytes() == b"not yours"
