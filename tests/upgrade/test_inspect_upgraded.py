"""Issue 24.8: ``mqupgrade inspect`` exits non-zero, and says why, on every already-upgraded store.

Rules: a store whose ``storeshape`` records ``mode=dledger`` was run in DLedger mode, whether or not
its ``dledger-*`` directory is still beside it (moved away, deleted): inspect reports "already
upgraded", exits 2 (as for any problem) and ``plan`` refuses it for the same reason; the old region
is still inspected in full.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from broker.store.shape import DLEDGER, StoreShape, write_shape
from tests.upgrade.test_apply import PEERS
from tests.upgrade.upgrade_helpers import copy, mqupgrade
from upgrade.plan import make_plan, parse_self_ids


def test_a_dledger_store_without_its_dledger_dir_is_already_upgraded(fixture_root: Path, fixture_set,
                                                                     tmp_path: Path) -> None:
    m = copy(fixture_root, fixture_set.mixed, tmp_path / "m")
    shutil.rmtree(m / "dledger-n0")
    write_shape(m, StoreShape(DLEDGER, "RaftNode00", "g0", "n0", fixture_set.divided_offset, 0))
    r = mqupgrade("inspect", str(m))
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "already upgraded" in r.stdout and "storeshape" in r.stdout and "mode=dledger" in r.stdout, r.stdout
    assert "Traceback" not in r.stderr
    ids = parse_self_ids(f"n0={m},n1={tmp_path / 'n1'},n2={tmp_path / 'n2'}")
    plan = make_plan("g0", PEERS, ids, conf_dir=tmp_path / "conf", auth_token="test-group-secret-0123456789")
    assert not plan.ok and any("already upgraded" in r for r in plan.refusals), plan.refusals


def test_a_classic_store_is_not_upgraded(fixture_root: Path, fixture_set, tmp_path: Path) -> None:
    m = copy(fixture_root, fixture_set.classic, tmp_path / "m")
    r = mqupgrade("inspect", str(m))
    assert r.returncode == 0 and "already upgraded" not in r.stdout, r.stdout
