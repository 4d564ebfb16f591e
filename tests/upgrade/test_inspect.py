"""mqupgrade inspect: per-store facts from a tail walk, replica comparison, the CLI."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.upgrade.upgrade_helpers import copy, flip_byte, hold_lock, make_behind, make_dirty, mqupgrade
from upgrade import fileops
from upgrade.inspect import InspectError, inspect_store, inspect_stores

FILES = {"plain": 4, "variety": 8}


def test_classic_fixture(fixture_root: Path, fixture_set) -> None:
    s = inspect_store(fixture_root / fixture_set.classic)
    assert len(s.files) == FILES[fixture_set.name]
    assert (s.min_offset, s.max_offset) == (0, fixture_set.classic_max_offset)
    assert s.file_size == fixture_set.file_size and s.file_size_source == "files"
    assert s.clean_shutdown and s.lock_holder is None and not s.problems and not s.needs_recovery
    assert not s.frozen and s.stop_reason == "zeros"
    assert s.cq_state == "agrees" and s.max_offset_method.startswith("walk from the last ConsumeQueue unit")
    assert "delayOffset.json" in s.config_files and s.dledger_dirs == []
    assert s.walked_bytes < fixture_set.file_size  # a tail walk, not a scan of the store
    assert s.tail_position == fixture_set.classic_max_offset % fixture_set.file_size
    assert s.free_bytes > 0


def test_plain_numbers(fixture_root: Path) -> None:
    s = inspect_store(fixture_root / "rmq-classic")
    assert [f.name for f in s.files][-1] == "00000000000003145728"
    assert (s.max_offset, s.tail_position) == (3_665_318, 519_590)
    assert s.index_settings["max_hash_slot_num"] == 10_000 and s.index_settings["max_index_num"] == 40_000


def test_mixed_store_is_already_upgraded(fixture_root: Path, fixture_set) -> None:
    s = inspect_store(fixture_root / fixture_set.mixed)
    assert any("already upgraded" in p for p in s.problems)


def test_no_consumequeue_falls_back_to_walk(fixture_root: Path, fixture_set, tmp_path: Path) -> None:
    root = copy(fixture_root, fixture_set.classic, tmp_path / "s")
    for p in sorted((root / "consumequeue").rglob("*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()
    s = inspect_store(root)
    assert s.max_offset == fixture_set.classic_max_offset
    assert s.max_offset_method.startswith("walk from the 3rd-last file") and s.cq_state == "none"


def test_slave_behind_and_identical(fixture_root: Path, fixture_set, manifests, tmp_path: Path) -> None:
    rows = manifests(fixture_set.classic)
    cut = rows[-300]["commitLogOffset"]
    m = copy(fixture_root, fixture_set.classic, tmp_path / "m")
    s = copy(fixture_root, fixture_set.classic, tmp_path / "s")
    make_behind(s, cut, fixture_set.file_size)
    insp = inspect_stores([str(s), str(m)])
    assert insp.master == str(m.resolve()) and insp.master_reason == "holds the most data"
    slave = insp.store(str(s.resolve()))
    assert slave.max_offset == cut and slave.role == "slave"
    assert slave.cq_state == "ahead" and slave.needs_recovery  # its CQs still reach the old end
    (c,) = insp.comparisons
    assert c.identical and c.behind_bytes == fixture_set.classic_max_offset - cut
    assert c.compared_bytes == cut


def test_divergent_bytes_name_file_and_offset(fixture_root: Path, fixture_set, manifests, tmp_path: Path) -> None:
    rows = manifests(fixture_set.classic)
    m = copy(fixture_root, fixture_set.classic, tmp_path / "m")
    s = copy(fixture_root, fixture_set.classic, tmp_path / "s")
    at = rows[len(rows) // 2]["commitLogOffset"] + 100  # inside a body, middle of the store
    f = flip_byte(s, at, fixture_set.file_size)
    (c,) = inspect_stores([str(m), str(s)]).comparisons
    assert not c.identical
    assert c.first_difference == {"file": f.name, "file_offset": at % fixture_set.file_size, "offset": at}
    # limiting the comparison to the last file does not see a difference in an earlier file
    if at < (FILES[fixture_set.name] - 1) * fixture_set.file_size:
        (c1,) = inspect_stores([str(m), str(s)], compare_last=1).comparisons
        assert c1.identical and c1.skipped_files == FILES[fixture_set.name] - 1


def test_dirty_store(fixture_root: Path, tmp_path: Path) -> None:
    root = copy(fixture_root, "rmq-classic", tmp_path / "m")
    make_dirty(root, 3_665_318, 1 << 20)
    s = inspect_store(root)
    assert not s.clean_shutdown and s.needs_recovery
    assert s.max_offset == 3_665_318 and s.stop_reason not in ("zeros", "blank")


def test_lock_held_by_another_process(fixture_root: Path, tmp_path: Path) -> None:
    root = copy(fixture_root, "rmq-classic", tmp_path / "m")
    holder = hold_lock(root)
    try:
        s = inspect_store(root)
        assert s.lock_holder and f"process {holder.pid}" in s.lock_holder
    finally:
        holder.kill()
        holder.wait()
    assert inspect_store(root).lock_holder is None


def test_master_from_conf_and_option(fixture_root: Path, tmp_path: Path) -> None:
    m = copy(fixture_root, "rmq-classic", tmp_path / "m")
    s = copy(fixture_root, "rmq-classic", tmp_path / "s")
    insp = inspect_stores([str(m), str(s)], master=str(s))
    assert insp.master == str(s.resolve()) and insp.master_reason == "given with --master"
    with pytest.raises(InspectError, match="not one of the store roots"):
        inspect_stores([str(m)], master=str(tmp_path / "elsewhere"))


def test_content_digest_ignores_holes(tmp_path: Path) -> None:
    dense, sparse = tmp_path / "dense", tmp_path / "sparse"
    payload = os.urandom(3000)
    dense.write_bytes(bytes(3 << 20) + payload + bytes(100))
    with open(sparse, "wb") as fh:
        fh.truncate((3 << 20) + 3100)
        fh.seek(3 << 20)
        fh.write(payload)
    n = dense.stat().st_size
    assert fileops.content_digest(dense, 0, n) == fileops.content_digest(sparse, 0, n)
    assert fileops.first_difference(dense, sparse, 0, n) == (None, fileops.first_difference(dense, sparse, 0, n)[1])
    with open(sparse, "r+b") as fh:
        fh.seek((3 << 20) + 1234)
        fh.write(b"\x00" if payload[1234] else b"\x01")
    assert fileops.first_difference(dense, sparse, 0, n)[0] == (3 << 20) + 1234


def test_cli_table_json_and_errors(fixture_root: Path, tmp_path: Path) -> None:
    r = mqupgrade("inspect", str(fixture_root / "rmq-classic"))
    assert r.returncode == 0, r.stderr
    assert "3665318" in r.stdout and "master" in r.stdout
    r = mqupgrade("inspect", "--json", str(fixture_root / "rmq-classic"))
    d = json.loads(r.stdout)
    assert d["stores"][0]["max_offset"] == 3_665_318 and d["master"].endswith("rmq-classic")
    r = mqupgrade("inspect", str(fixture_root / "rmq-mixed"))
    assert r.returncode == 2 and "already upgraded" in r.stdout
    (tmp_path / "afile").write_text("x")
    r = mqupgrade("inspect", str(tmp_path / "afile"))
    assert r.returncode == 1 and "Traceback" not in r.stderr and "not a directory" in r.stderr
