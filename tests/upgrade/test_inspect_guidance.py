"""mqupgrade inspect tells the truth about what it is given (issue 13.8).

- a store root that does not exist is an error naming it (before: exit 0, an "empty" clean store);
- an upgraded store (old commitlog + a DLedger log above the divide) shows its real max offset
  across the divide and its message count (before: max offset 0 and no count).
"""
from __future__ import annotations

import json
from pathlib import Path

from tests.upgrade.upgrade_helpers import mqupgrade
from upgrade.inspect import inspect_store


def test_nonexistent_root_is_an_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent"
    r = mqupgrade("inspect", str(missing))
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(missing) in lines[0] and "no such directory" in lines[0], r.stderr
    assert "storePathRootDir" in lines[0] and "Traceback" not in r.stderr and r.stdout == ""


def test_upgraded_store_shows_max_offset_across_the_divide_and_counts(fixture_root: Path, fixture_set,
                                                                         manifests) -> None:
    root = fixture_root / fixture_set.mixed
    s = inspect_store(root)
    rows = [r for r in manifests(fixture_set.mixed) if r.get("inConsumeQueue", 1)]  # not PREPARED/ROLLBACK
    assert s.max_offset == fixture_set.mixed_max_offset, (s.max_offset, s.max_offset_method, s.dledger)
    assert s.dledger is not None and s.dledger["divided_offset"] < s.max_offset
    assert s.messages == len(rows)
    assert any("already upgraded" in p for p in s.problems)  # plan/apply still refuse it
    r = mqupgrade("inspect", str(root))
    assert r.returncode == 2, r.stderr  # "already upgraded" is a problem for an upgrade
    table = r.stdout.splitlines()
    assert "messages" in table[0]
    assert str(fixture_set.mixed_max_offset) in table[1] and str(len(rows)) in table[1], r.stdout
    assert f"max offset {fixture_set.mixed_max_offset}" in r.stdout and "upgraded" in r.stdout
    j = json.loads(mqupgrade("inspect", "--json", str(root)).stdout)
    assert j["stores"][0]["max_offset"] == fixture_set.mixed_max_offset and j["stores"][0]["messages"] == len(rows)


def test_classic_store_counts_messages(fixture_root: Path, fixture_set, manifests) -> None:
    s = inspect_store(fixture_root / fixture_set.classic)
    rows = [r for r in manifests(fixture_set.classic) if r.get("inConsumeQueue", 1)]
    assert s.messages == len(rows) and s.dledger is None
