"""Injected faults (on private store copies) are caught by the right check, located exactly."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from upgrade.validate.job import run_validation
from tests.upgrade.validate.helpers import (RANGE, assert_located, data_file, failing, flip, patch, put_long,
                                            read)

pytestmark = pytest.mark.spark


def _validate(spark, *roots: Path) -> dict:
    return run_validation([str(r) for r in roots], spark=spark, range_size=RANGE, progress=False)


def _body_at(row: dict) -> int:
    """Physical offset of the middle byte of a manifest message's body."""
    sys_flag = row.get("sysFlag", 0)
    hosts = (20 if sys_flag & 0x10 else 8) + (20 if sys_flag & 0x20 else 8)
    return row["commitLogOffset"] + 68 + hosts + 4 + row["bodyLen"] // 2


def _pick(manifest: list[dict], fs, region: str, nth: float = 0.5) -> dict:
    """A message with a body of the given region ("old" or "dledger"), about ``nth`` of the way in."""
    rows = [r for r in manifest if r["bodyLen"] > 16 and r.get("inConsumeQueue", 1) == 1
            and (r["commitLogOffset"] < fs.divided_offset) == (region == "old")]
    return rows[int(len(rows) * nth)]


def _replica_pair(store_copy, name: str) -> tuple[Path, Path]:
    a = store_copy(name)
    b = a.parent / (a.name + "-replica")
    subprocess.run(["cp", "-r", "--sparse=always", str(a), str(b)], check=True)
    shutil.move(str(b / "dledger-n0"), str(b / "dledger-n1"))
    return a, b


def test_deleted_middle_old_file(spark, store_copy, fixture_set):
    root = store_copy(fixture_set.mixed)
    victim = root / "commitlog" / f"{2 * (1 << 20):020d}"
    os.remove(victim)
    report = _validate(spark, root)
    assert not report["ok"]
    row = assert_located(report, "old_continuity", "n0", victim.name, 2 << 20, contains="missing file")
    assert row["file_offset"] == 0
    assert "structure" not in failing(report)  # every remaining record is intact


@pytest.mark.parametrize("region", ["old", "dledger"])
def test_flipped_body_byte(spark, store_copy, fixture_set, manifests, region):
    root = store_copy(fixture_set.mixed)
    msg = _pick(manifests(fixture_set.mixed), fixture_set, region)
    path, at = data_file(root, _body_at(msg), fixture_set.divided_offset)
    flip(path, at)
    report = _validate(spark, root)
    row = assert_located(report, "structure", "n0", path.name, msg["commitLogOffset"], contains="CRC")
    assert row["file_offset"] == msg["commitLogOffset"] % (1 << 20)
    assert failing(report) == {"structure"}


@pytest.mark.parametrize("region,check", [("old", "old_continuity"), ("dledger", "dledger_continuity")])
def test_rewritten_phy_pos(spark, store_copy, fixture_set, manifests, region, check):
    root = store_copy(fixture_set.mixed)
    msg = _pick(manifests(fixture_set.mixed), fixture_set, region, 0.3)
    off = msg["commitLogOffset"]
    path, at = data_file(root, off, fixture_set.divided_offset)
    put_long(path, at + 28, off + 4096)
    report = _validate(spark, root)
    assert_located(report, check, "n0", path.name, off, contains=f"PHY_POS field is {off + 4096}")
    assert failing(report) == {check}


def test_cq_unit_pointing_elsewhere(spark, store_copy, fixture_set, manifests):
    root = store_copy(fixture_set.mixed)
    manifest = [r for r in manifests(fixture_set.mixed) if r.get("inConsumeQueue", 1) == 1]
    msg = manifest[len(manifest) // 2]
    other = next(r for r in manifest[len(manifest) // 2:] if (r["topic"], r["queueId"]) != (msg["topic"], msg["queueId"]))
    cq = root / "consumequeue" / msg["topic"] / str(msg["queueId"]) / f"{0:020d}"
    put_long(cq, msg["queueOffset"] * 20, other["commitLogOffset"])
    report = _validate(spark, root)
    assert_located(report, "consumequeue", "n0", cq.name, msg["queueOffset"] * 20,
                   queue=f"{msg['topic']}:{msg['queueId']}", contains=f"-> {other['commitLogOffset']}")
    assert failing(report) == {"consumequeue"}


def test_cq_unit_with_wrong_tags_code(spark, store_copy, fixture_set, manifests):
    """Only the tags code differs: the digest catches it, the detailed check names the unit."""
    root = store_copy(fixture_set.mixed)
    manifest = [r for r in manifests(fixture_set.mixed) if r.get("inConsumeQueue", 1) == 1 and r["topic"] != "SCHEDULE_TOPIC_XXXX"]
    msg = manifest[len(manifest) // 3]
    cq = root / "consumequeue" / msg["topic"] / str(msg["queueId"]) / f"{0:020d}"
    tags = int.from_bytes(read(cq, msg["queueOffset"] * 20 + 12, 8), "big", signed=True)
    put_long(cq, msg["queueOffset"] * 20 + 12, tags ^ 1)
    report = _validate(spark, root)
    assert_located(report, "consumequeue", "n0", cq.name, msg["queueOffset"] * 20,
                   queue=f"{msg['topic']}:{msg['queueId']}", contains=f"tags code {tags ^ 1} != message tags code {tags}")
    assert failing(report) == {"consumequeue"}
    assert report["params"]["detail_rescans"] == 1


def test_skipped_queue_offset(spark, store_copy, fixture_set, manifests):
    root = store_copy(fixture_set.mixed)
    manifest = manifests(fixture_set.mixed)
    first = next(r for r in manifest if r["commitLogOffset"] >= fixture_set.divided_offset and r.get("inConsumeQueue", 1) == 1
                 and r["queueOffset"] > 0)
    key = (first["topic"], first["queueId"])
    later = [r for r in manifest if (r["topic"], r["queueId"]) == key and r["queueOffset"] >= first["queueOffset"]
             and r.get("inConsumeQueue", 1) == 1]
    for r in later:  # the leader skipped one queue offset: every later message is one higher
        path, at = data_file(root, r["commitLogOffset"], fixture_set.divided_offset)
        put_long(path, at + 20, r["queueOffset"] + 1)
    report = _validate(spark, root)
    path, _ = data_file(root, first["commitLogOffset"], fixture_set.divided_offset)
    assert_located(report, "consumequeue", "n0", path.name, first["commitLogOffset"], queue=f"{key[0]}:{key[1]}",
                   contains=f"queue offset skip: message at {first['commitLogOffset']} has queue offset {first['queueOffset'] + 1}")
    assert failing(report) == {"consumequeue"}


def test_replica_with_one_differing_byte(spark, store_copy, fixture_set, manifests):
    a, b = _replica_pair(store_copy, fixture_set.mixed)
    msg = _pick(manifests(fixture_set.mixed), fixture_set, "dledger", 0.7)
    at_abs = msg["commitLogOffset"] + 47  # last byte of BORNTIMESTAMP: no CRC covers it
    path, at = data_file(b, at_abs, fixture_set.divided_offset, "n1")
    flip(path, at)
    report = _validate(spark, a, b)
    row = assert_located(report, "replicas", "n1", path.name, at_abs, contains="differ from n0")
    assert row["file_offset"] == at
    assert failing(report) == {"replicas"}


def test_truncated_dledger_tail_on_one_node(spark, store_copy, fixture_set, manifests):
    a, b = _replica_pair(store_copy, fixture_set.mixed)
    manifest = manifests(fixture_set.mixed)
    msg = manifest[-40]
    entry = msg["commitLogOffset"] - 48
    path, at = data_file(b, entry, fixture_set.divided_offset, "n1")
    size = path.stat().st_size
    before = read(path, at, 64)
    patch(path, at, bytes(size - at))  # the tail of the last data file is gone
    report = _validate(spark, a, b)
    assert_located(report, "dledger_continuity", "n1", path.name, entry, contains="data ends (zeros)")
    first_diff = next(i for i, byte in enumerate(before) if byte)  # the entry magic 00 00 00 01: byte 3
    assert_located(report, "replicas", "n1", path.name, entry + first_diff)
    assert "structure" not in failing(report)
    assert report["nodes"]["n0"]["dledger"]["entries"] == report["nodes"]["n0"]["dledger"]["committed_index"] + 1


def test_old_region_not_blank_filled_to_the_divide(spark, store_copy, fixture_set, manifests):
    root = store_copy(fixture_set.mixed)
    old = [r for r in manifests(fixture_set.mixed) if r["commitLogOffset"] < fixture_set.divided_offset]
    blank_at = max(r["commitLogOffset"] + r["storeSize"] for r in old)
    path, at = data_file(root, blank_at, fixture_set.divided_offset)
    assert int.from_bytes(read(path, at + 4, 4), "big") == 0xCBD43194
    patch(path, at, bytes(8))  # the upgrade's blank record is gone
    report = _validate(spark, root)
    assert_located(report, "divide", "n0", path.name, blank_at, contains="not blank-filled")
    assert failing(report) <= {"divide", "structure"}


def test_dledger_index_unit_not_matching_its_entry(spark, store_copy, fixture_set):
    root = store_copy(fixture_set.mixed)
    index = root / "dledger-n0" / "index" / f"{0:020d}"
    unit = 100
    pos = int.from_bytes(read(index, unit * 32 + 4, 8), "big")
    put_long(index, unit * 32 + 4, pos + 48)  # the unit now points 48 bytes into its entry
    report = _validate(spark, root)
    assert_located(report, "dledger_continuity", "n0", index.name, unit * 32, contains=f"index unit {unit}")
    assert failing(report) == {"dledger_continuity"}


def test_replica_missing_an_old_file(spark, store_copy, fixture_set):
    a, b = _replica_pair(store_copy, fixture_set.mixed)
    name = f"{1 << 20:020d}"
    os.remove(b / "commitlog" / name)
    report = _validate(spark, a, b)
    assert_located(report, "replicas", "n1", name, 1 << 20, contains="missing (n0 has it)")
    assert_located(report, "old_continuity", "n1", name, 1 << 20, contains="missing file")
    assert report["nodes"]["n1"]["segments"][-1] == {"kind": "gap", "start": 1 << 20, "end": 2 << 20}


def test_classic_master_and_lagging_slave(spark, store_copy, fixture_set, manifests):
    """Classic replicas compare up to the smaller write end; a lagging slave is fine, a flip is not."""
    master = store_copy(fixture_set.classic)
    slave = master.parent / (master.name + "-slave")
    subprocess.run(["cp", "-r", "--sparse=always", str(master), str(slave)], check=True)
    last = max(manifests(fixture_set.classic), key=lambda r: r["commitLogOffset"])
    path, at = data_file(slave, last["commitLogOffset"], None)
    patch(path, at, bytes(last["storeSize"]))  # the slave has not received the last message yet
    for cq in (slave / "consumequeue").rglob("0" * 20):  # nor dispatched it
        data = bytearray(cq.read_bytes())
        for q in range(0, len(data), 20):
            if int.from_bytes(data[q:q + 8], "big") == last["commitLogOffset"] and int.from_bytes(data[q + 8:q + 12], "big"):
                data[q:q + 20] = bytes(20)
        cq.write_bytes(bytes(data))
    report = _validate(spark, master, slave)
    assert report["ok"], failing(report)
    assert report["checks"]["replicas"]["status"] == "pass"
    msg = manifests(fixture_set.classic)[100]
    path, at = data_file(slave, msg["commitLogOffset"] + 47, None)
    flip(path, at)
    report = _validate(spark, master, slave)
    assert_located(report, "replicas", slave.name, path.name, msg["commitLogOffset"] + 47, contains=f"differ from {master.name}")
    assert failing(report) == {"replicas"}
