"""Freeze: the tail blank and the divide, byte-identical to Apache's first DLedger start."""
from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tests.upgrade.upgrade_helpers import commitlog_files, copy
from broker.store.freeze import FreezeError, freeze_commitlog, freeze_point


def test_freeze_equals_apache_upgrade(fixture_root: Path, fixture_set, tmp_path: Path) -> None:
    root = copy(fixture_root, fixture_set.classic, tmp_path / "s")
    point = freeze_commitlog(root / "commitlog", fixture_set.classic_max_offset, fixture_set.file_size)
    assert point.divided_commitlog_offset == fixture_set.divided_offset
    assert not point.blank_present
    mixed = fixture_root / fixture_set.mixed / "commitlog"
    ours = commitlog_files(root)
    assert [f.name for f in ours] == sorted(p.name for p in mixed.iterdir())
    for f in ours:
        assert f.read_bytes() == (mixed / f.name).read_bytes(), f.name


def test_plain_blank_bytes_and_position(fixture_root: Path, tmp_path: Path) -> None:
    root = copy(fixture_root, "rmq-classic", tmp_path / "s")
    point = freeze_commitlog(root / "commitlog", 3_665_318, 1 << 20)
    assert (point.wrote_position, point.divided_commitlog_offset) == (519_590, 4_194_304)
    raw = (root / "commitlog" / "00000000000003145728").read_bytes()
    assert raw[519_590:519_598] == struct.pack(">II", 0x0008125A, 0xCBD43194)
    assert raw[519_598:].strip(b"\0") == b""


def test_freeze_is_idempotent(fixture_root: Path, tmp_path: Path) -> None:
    root = copy(fixture_root, "rmq-classic", tmp_path / "s")
    freeze_commitlog(root / "commitlog", 3_665_318, 1 << 20)
    before = [f.read_bytes() for f in commitlog_files(root)]
    again = freeze_commitlog(root / "commitlog", 3_665_318, 1 << 20)
    assert again.blank_present and again.divided_commitlog_offset == 4_194_304
    assert [f.read_bytes() for f in commitlog_files(root)] == before


def test_mixed_store_is_already_frozen(fixture_root: Path) -> None:
    point = freeze_point(fixture_root / "rmq-mixed" / "commitlog", 3_665_318, 1 << 20)
    assert point.blank_present and point.divided_commitlog_offset == 4_194_304


def test_no_commitlog_means_no_divide(tmp_path: Path) -> None:
    assert freeze_commitlog(tmp_path / "nothing", 0, 1 << 20).divided_commitlog_offset == -1


def test_unrecovered_store_is_refused(fixture_root: Path, tmp_path: Path) -> None:
    root = copy(fixture_root, "rmq-classic", tmp_path / "s")
    with pytest.raises(FreezeError, match="recover the store first"):
        freeze_commitlog(root / "commitlog", 2_000_000, 1 << 20)  # end in an earlier file
    with pytest.raises(FreezeError, match="mappedFileSizeCommitLog"):
        freeze_commitlog(root / "commitlog", 3_665_318, 2 << 20)
    assert (root / "commitlog" / "00000000000003145728").read_bytes() == \
        (fixture_root / "rmq-classic" / "commitlog" / "00000000000003145728").read_bytes()
