"""The second divide and the epoch file as rows (issue 27.4), without Spark and without a store:
each rule of ``upgrade.validate.regions`` / ``divides`` driven with plain data, its finding
asserted word for word (the lines an operator reads)."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from broker.ha.autoswitch.epoch_file import EPOCH_FILE_NAME, EpochEntry, EpochFileCache
from upgrade.validate.divides import check_epochs, check_regions
from upgrade.validate.layout import FileRef, StoreLayout, UnusableInput, discover
from upgrade.validate.regions import EpochRead, Region, Regions, read_epochs, read_regions

MB = 1 << 20


class Rows:
    def __init__(self) -> None:
        self.rows: list[tuple[str, str | None, int | None, str]] = []

    def add(self, check: str, node: str, file: str | None, offset: int | None, message: str,
            file_offset: int | None = None, queue: str | None = None, space: str = "physical") -> None:
        self.rows.append((check, file, offset, message))


def _regions(classic_from: int = 6 * MB, **kw: object) -> Regions:
    base = dict(file="/s/commitlogRegions.json", version=1, file_size=MB, classic_from=classic_from,
                regions=(Region("classic", "/s/commitlog", 0, 4 * MB), Region("dledger", "/s/dledger-n0", 4 * MB, 5 * MB + 7)),
                problems=())
    base.update(kw)
    return Regions(**base)  # type: ignore[arg-type]


def _files(*starts: int, d: str = "/s/commitlog") -> tuple[FileRef, ...]:
    return tuple(FileRef(f"{d}/{s:020d}", s, MB) for s in starts)


def _migrated(new: tuple[FileRef, ...] = (), old: tuple[FileRef, ...] | None = None, **kw: object) -> StoreLayout:
    lay = StoreLayout("/s", "n0", _files(0, MB, 2 * MB, 3 * MB) if old is None else old, MB, None,
                      regions=_regions(), new=new)
    return replace(lay, **kw)  # type: ignore[arg-type]


def test_the_regions_file_rules(tmp_path: Path) -> None:
    doc = {"version": 2, "writtenBy": "mqupgrade", "mappedFileSizeCommitLog": MB, "classicFrom": 5 * MB,
           "regions": [{"kind": "dledger", "path": "dledger-n0", "start": 4 * MB, "end": 5 * MB + 7},
                       {"kind": "classic", "path": str(tmp_path / "commitlog"), "start": 0, "end": 4 * MB + 1},
                       {"kind": "other", "path": "x", "start": 9, "end": 3}]}
    (tmp_path / "commitlogRegions.json").write_text(json.dumps(doc))
    got = read_regions(tmp_path)
    assert got is not None and got.regions[0].path == str(tmp_path / "dledger-n0")
    assert got.regions[1].path == str(tmp_path / "commitlog") and got.last_end == 3
    assert list(got.problems) == [
        "unknown version 2 (known: 1)",
        "regions[0] (dledger) ends at 5242887, above classicFrom 5242880",
        "regions[1] (classic, [0, 4194305)) overlaps or precedes regions[0] (dledger, [4194304, 5242887)) "
        "(regions ascend without overlap)",
        "regions[2] has unknown kind 'other' (known: classic, dledger)",
        "regions[2] (other) ends at 3, before its start 9",
        "regions[2] (other, [9, 3)) overlaps or precedes regions[1] (classic, [0, 4194305)) "
        "(regions ascend without overlap)",
        "classicFrom 5242880 is not the first file boundary at or above the regions' end 5242887 (expected 6291456)",
    ]
    (tmp_path / "commitlog").mkdir()
    (tmp_path / "commitlogRegions.json").write_text("{not json")
    with pytest.raises(UnusableInput, match="commitlogRegions.json: not valid JSON"):
        discover(tmp_path)
    (tmp_path / "commitlogRegions.json").write_text(json.dumps({**doc, "classicFrom": "6291456"}))
    with pytest.raises(UnusableInput, match="field 'classicFrom' is '6291456', not an integer"):
        discover(tmp_path)


def test_the_second_divide_rows() -> None:
    sink, info = Rows(), {}
    stray = FileRef(f"/s/commitlog/{5 * MB:020d}", 5 * MB, MB)
    lay = _migrated(old=_files(0, MB, 2 * MB, 3 * MB) + (stray,),
                    new=(FileRef(f"/s/commitlog/{7 * MB:020d}", 7 * MB, MB // 2),),
                    regions=_regions(problems=("region 0 ends at 1, before its start 2",)))
    check_regions(sink, lay, info)
    assert sink.rows == [
        ("divide", "commitlogRegions.json", None, "commitlogRegions.json: region 0 ends at 1, before its start 2"),
        ("divide", f"{5 * MB:020d}", 5 * MB,
         f"commitlog file {5 * MB:020d} reaches into the DLedger region at {5 * MB}, outside every classic region"),
        ("divide", f"{7 * MB:020d}", 7 * MB,
         f"the writable classic region starts with {7 * MB:020d}, not at classicFrom {6 * MB}"),
        ("divide", f"{7 * MB:020d}", 7 * MB,
         f"writable classic file {7 * MB:020d} has {MB // 2} bytes; commitlogRegions.json says mappedFileSizeCommitLog "
         f"is {MB}"),
    ]
    assert info["regions"]["gap"] == [5 * MB + 7, 6 * MB]
    clean = Rows()
    check_regions(clean, _migrated(new=_files(6 * MB)), {})
    assert clean.rows == []


def test_a_migrated_store_without_an_epoch_file_has_nothing_to_check() -> None:
    sink, info = Rows(), {}
    check_epochs(sink, _migrated(new=_files(6 * MB)), info, set(), 6 * MB)
    assert sink.rows == [] and info["epochs"]["file"] is None
    assert info["epochs"]["note"].startswith(f"no {EPOCH_FILE_NAME}: nothing to check")


def test_the_epoch_rows() -> None:
    new = _files(6 * MB)
    entries = ((1, 5 * MB), (3, 6 * MB), (2, 6 * MB + 100), (4, 6 * MB + 50), (5, 6 * MB + 300))
    lay = _migrated(new=new, epochs=EpochRead(f"/s/{EPOCH_FILE_NAME}", entries, "main"))
    sink, info = Rows(), {}
    check_epochs(sink, lay, info, {6 * MB, 6 * MB + 100}, 6 * MB + 200)
    name = f"{6 * MB:020d}"
    assert [(r[2], r[3]) for r in sink.rows] == [
        (6 * MB + 100, f"epoch 2 (start {6 * MB + 100}) follows epoch 3: epochs must grow"),
        (6 * MB + 50, f"epoch 4 starts at {6 * MB + 50}, below epoch 2's start {6 * MB + 100}: start offsets must "
                      f"not fall"),
        (5 * MB, f"the first epoch 1 starts at {5 * MB}, below classicFrom {6 * MB} (DLedger region): epochs of a "
                 f"migrated store start in the writable classic region"),
        (6 * MB + 50, f"epoch 4 starts at {6 * MB + 50} (writable classic region, {name}+50), which is not a "
                      f"message boundary of the writable classic region"),
        (6 * MB + 300, f"epoch 5 starts at {6 * MB + 300} (writable classic region, {name}+300), above the max "
                       f"offset {6 * MB + 200}"),
    ]
    assert {r[0] for r in sink.rows} == {"epochs"} and {r[1] for r in sink.rows} == {EPOCH_FILE_NAME}
    broken = Rows()
    check_epochs(broken, replace(lay, epochs=EpochRead("/s/e", (), "error", "both copies unusable")), {}, set(), None)
    assert broken.rows == [("epochs", EPOCH_FILE_NAME, None, "the epoch file cannot be read: both copies unusable")]


def test_the_epoch_file_is_read_with_the_brokers_reader(tmp_path: Path) -> None:
    assert read_epochs(tmp_path) is None
    cache = EpochFileCache(tmp_path / EPOCH_FILE_NAME)
    assert cache.append_entry(EpochEntry(1, 6 * MB)) and cache.append_entry(EpochEntry(2, 6 * MB + 91))
    got = read_epochs(tmp_path)
    assert got is not None and got.entries == ((1, 6 * MB), (2, 6 * MB + 91)) and got.source == "main"
    (tmp_path / EPOCH_FILE_NAME).write_text("2\n1\n1-6291456\n")  # torn: its .bak is read, as the broker does
    bak = read_epochs(tmp_path)
    assert bak is not None and bak.source == "bak" and bak.entries == ((1, 6 * MB),)


def test_the_dledger_region_end_against_the_members_checkpoint() -> None:
    """mqupgrade writes the group's committed end: a member's checkpoint may lag (a note), never
    lead (that region would hide committed entries), and the end must be an entry's end."""
    from upgrade.validate.layout import DLedgerLayout

    def dl(own: tuple[int, int] | None, entry: bool = True) -> DLedgerLayout:
        return DLedgerLayout("n0", "/s/dledger-n0", _files(4 * MB, 5 * MB, d="/s/dledger-n0/data"), (), 41, 41,
                             5 * MB + 7, True, "checkpoint", own, entry)

    ahead, behind, off, info = Rows(), Rows(), Rows(), {}
    check_regions(ahead, _migrated(dledger=dl((44, 5 * MB + 99)), new=_files(6 * MB)), {})
    assert ahead.rows == [("divide", f"{5 * MB:020d}", 5 * MB + 7, f"the DLedger region of commitlogRegions.json ends "
                           f"at {5 * MB + 7} but this member's DLedger checkpoint (committedIndex 44) says the "
                           f"committed entries end at {5 * MB + 99}")]
    check_regions(behind, _migrated(dledger=dl((38, 5 * MB - 300)), new=_files(6 * MB)), info)
    assert behind.rows == [] and info["regions"]["own_checkpoint"]["committed_index"] == 38
    check_regions(off, _migrated(dledger=dl((41, 5 * MB + 99), entry=False), new=_files(6 * MB)), {})
    assert [r[3] for r in off.rows] == [f"the DLedger region of commitlogRegions.json ends at {5 * MB + 7}, which is "
                                        f"not the end of a DLedger entry in its index"]


def test_replicas_that_converted_at_different_points() -> None:
    from upgrade.validate.checks import evaluate
    from upgrade.validate.plan import Plan

    a = _migrated(new=_files(6 * MB))
    b = replace(_migrated(new=_files(7 * MB)), node="n1", regions=_regions(classic_from=7 * MB))
    findings, nodes = evaluate(Plan(), [a, b], {})
    assert [r["message"] for r in findings.rows["replicas"]] == [f"classicFrom {7 * MB} differs from n0's {6 * MB}"]
    assert "epochs" in findings.shown and "epochs" in findings.not_applicable  # migrated, no epoch file: n/a
    assert nodes["n0"]["mode"] == "migrated" and nodes["n0"]["epochs"]["file"] is None


def test_retention_may_move_the_frozen_regions_start_up_oldest_first() -> None:
    from upgrade.validate.layout import DLedgerLayout

    def dl(*starts: int) -> DLedgerLayout:
        return DLedgerLayout("n0", "/s/dledger-n0", _files(*starts, d="/s/dledger-n0/data"), (), -1, -1, 5 * MB + 7,
                             True, "checkpoint")

    gone = Rows()  # every classic file deleted, then the first DLedger one: allowed
    check_regions(gone, _migrated(old=(), dledger=dl(5 * MB), new=_files(6 * MB)), {})
    assert gone.rows == []
    early = Rows()  # a DLedger file deleted while classic files are left: not retention's order
    check_regions(early, _migrated(dledger=dl(5 * MB), new=_files(6 * MB)), {})
    assert early.rows == [("divide", f"{5 * MB:020d}", 5 * MB, f"the DLedger region of commitlogRegions.json starts "
                           f"at {4 * MB} but its first data file starts at {5 * MB}")]
    all_frozen_gone = Rows()  # then the writable region's first file too
    check_regions(all_frozen_gone, _migrated(old=(), new=_files(7 * MB)), {})
    assert all_frozen_gone.rows == []
    missing = Rows()
    check_regions(missing, _migrated(dledger=dl(4 * MB), new=_files(7 * MB)), {})
    assert [r[3] for r in missing.rows] == [f"the writable classic region starts with {7 * MB:020d}, not at classicFrom "
                                            f"{6 * MB}"]
