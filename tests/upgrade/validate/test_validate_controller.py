"""The validator across every divide of a store migrated to Controller mode (issue 27.4), on local Spark.

Each fixture set's upgraded (mixed) store is migrated by hand as the shared spec says: a
``commitlogRegions.json`` naming the old classic region and the DLedger region; then the store
itself, opened in classic mode on it, puts new messages that land from ``classicFrom`` on and
continue two queues' offsets (its own writer, dispatch and ConsumeQueues); an epoch file written
by the broker's own ``EpochFileCache``. That store validates clean; then one corruption
per check fails with its finding: a ConsumeQueue unit into the gap, a queue offset skipped
across the second divide, an epoch entry off a message boundary, one above the max offset.

One store per fixture set (module scope), each corruption undone after its run.
"""
from __future__ import annotations

import json
import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from broker.ha.autoswitch.epoch_file import EPOCH_FILE_NAME, EpochEntry, EpochFileCache
from broker.store import message as codec
from broker.store.message_store import DefaultMessageStore
from broker.store.put_result import PutMessageStatus
from tests.support import rmqfixtures as rf
from tests.upgrade.validate.helpers import assert_located, failing, patch, read
from upgrade.validate.job import run_validation
from upgrade.validate.report import summary_text

pytestmark = pytest.mark.spark

NEW_PER_QUEUE = 3
RANGE = 1 << 20  # one range per file: the fixture stores are small, Spark's per-task cost is not
TAG = "ctl"


@dataclass
class Migrated:
    root: Path
    fs: rf.FixtureSet
    classic_from: int
    gap_start: int
    new_file: Path
    records: list[tuple[str, int, int, int, int]]  # topic, queueId, queueOffset, offset, size
    max_offset: int
    cq_probe: tuple[Path, int, int]  # a DLedger-region unit: CQ file, unit offset in it, its queue offset

    def epochs(self, *entries: tuple[int, int]) -> None:
        """Replace the epoch file with ``entries`` (written by the broker's EpochFileCache)."""
        for p in (self.root / EPOCH_FILE_NAME, self.root / (EPOCH_FILE_NAME + ".bak")):
            p.unlink(missing_ok=True)
        cache = EpochFileCache(self.root / EPOCH_FILE_NAME)
        for epoch, start in entries:
            assert cache.append_entry(EpochEntry(epoch, start)), (epoch, start)

    def validate(self, spark: object) -> dict:
        return run_validation([str(self.root)], spark=spark, range_size=RANGE, progress=False)


def _queues_to_extend(manifest: list[dict], divided: int) -> list[tuple[str, int, int]]:
    """Two ordinary queues whose last message lies in the DLedger region: (topic, qid, next offset)."""
    last: dict[tuple[str, int], tuple[int, int]] = {}
    for r in manifest:
        if r.get("inConsumeQueue", 1) != 1 or r["topic"].startswith(("%", "SCHEDULE", "RMQ_SYS")):
            continue
        key = (r["topic"], r["queueId"])
        last[key] = max(last.get(key, (-1, -1)), (r["queueOffset"], r["commitLogOffset"]))
    picked = sorted((k for k, (_q, off) in last.items() if off >= divided), key=lambda k: -last[k][1])[:2]
    assert len(picked) == 2, last
    return [(t, q, last[(t, q)][0] + 1) for t, q in picked]


def migrate(root: Path, fs: rf.FixtureSet, manifest: list[dict]) -> Migrated:
    """Turn a copy of ``fs.mixed`` into a store migrated to Controller mode (see the module doc)."""
    size = fs.file_size
    end = fs.mixed_max_offset
    classic_from = -(-end // size) * size
    (root / "commitlogRegions.json").write_text(json.dumps({
        "version": 1, "writtenBy": "mqupgrade", "mappedFileSizeCommitLog": size, "classicFrom": classic_from,
        "regions": [{"kind": "classic", "path": "commitlog", "start": 0, "end": fs.divided_offset},
                    {"kind": "dledger", "path": "dledger-n0", "start": fs.divided_offset, "end": end}]}))
    queues = _queues_to_extend(manifest, fs.divided_offset)
    store = DefaultMessageStore(store_path_root_dir=str(root), mapped_file_size_commit_log=size,
                                max_hash_slot_num=10000, max_index_num=40000, warm_mapped_file_enable=False)
    store.load()
    records = []
    try:
        store.start()
        for i in range(NEW_PER_QUEUE * len(queues)):
            topic, qid, first = queues[i % len(queues)]
            res = store.put_message(codec.MessageExt(topic, body=b"after-the-migration-%03d" % i, queue_id=qid,
                                                     properties={"TAGS": TAG, "KEYS": f"ctl-{i}"}))
            assert res.status is PutMessageStatus.PUT_OK, res
            ar = res.append_result
            assert ar is not None and list(ar.queue_offsets) == [first + i // len(queues)]  # offsets continue
            records.append((topic, qid, ar.queue_offsets[0], ar.wrote_offset, ar.wrote_bytes))
        assert store.wait_dispatched(10)
    finally:
        assert store.shutdown()
    assert records[0][3] == classic_from
    topic, qid, first = queues[0]
    probe = next(r for r in manifest if (r["topic"], r["queueId"]) == (topic, qid)
                 and r["commitLogOffset"] >= fs.divided_offset and r["queueOffset"] < first - 1)
    cq_file = root / "consumequeue" / topic / str(qid) / f"{0:020d}"
    return Migrated(root, fs, classic_from, end, root / "commitlog" / f"{classic_from:020d}", records,
                    records[-1][3] + records[-1][4], (cq_file, probe["queueOffset"] * 20, probe["queueOffset"]))


@pytest.fixture(scope="module", params=["plain", "variety"])
def migrated(request: pytest.FixtureRequest, fixture_root: Path, tmp_path_factory: pytest.TempPathFactory,
             manifests) -> Iterator[Migrated]:
    fs = rf.SETS[request.param]
    root = rf.copy_store(fixture_root / fs.mixed, tmp_path_factory.mktemp("controller") / fs.mixed)
    m = migrate(root, fs, manifests(fs.mixed))
    yield m
    shutil.rmtree(root, ignore_errors=True)


def test_a_migrated_store_validates_clean_across_every_divide(spark, migrated, manifests):
    m = migrated
    second = m.records[len(m.records) // 2][3]  # a record start inside the writable region
    m.epochs((1, m.classic_from), (2, second), (3, m.max_offset))  # the last: elected with nothing written since
    report = m.validate(spark)
    assert report["ok"], {k: v for k, v in report["checks"].items() if v["status"] == "fail"}
    assert {n: c["status"] for n, c in report["checks"].items()} == {
        "structure": "pass", "old_continuity": "pass", "divide": "pass", "dledger_continuity": "pass",
        "consumequeue": "pass", "replicas": "n/a", "epochs": "pass"}
    (node,) = report["nodes"].values()
    assert node["mode"] == "migrated" and node["divided_offset"] == m.fs.divided_offset
    assert node["max_offset"] == m.max_offset
    assert node["new"]["messages"] == len(m.records) and node["new"]["write_end"] == m.max_offset
    assert node["messages"] == len(manifests(m.fs.mixed)) + len(m.records)
    assert node["regions"]["gap"] == [m.gap_start, m.classic_from]
    assert node["epochs"]["entries"] == [[1, m.classic_from], [2, second], [3, m.max_offset]]
    for topic, qid, qo, _off, _n in m.records:  # the queues run on, one +1 run across both divides
        q = node["per_queue"][f"{topic}:{qid}"]
        assert q["max_queue_offset"] >= qo and q["cq_units"] == q["messages"]
    text = summary_text(report)
    assert f"migrated to Controller mode: classicFrom {m.classic_from:,}; writable classic region: 1 files, " \
           f"{len(m.records)} messages" in text and "[PASS] 7 the epoch file" in text


def test_a_consumequeue_unit_into_the_gap(spark, migrated):
    m = migrated
    path, at, qo = m.cq_probe
    saved = read(path, at, 8)
    into_gap = m.gap_start + (m.classic_from - m.gap_start) // 2
    patch(path, at, struct.pack(">q", into_gap))
    try:
        m.epochs((1, m.classic_from))
        report = m.validate(spark)
    finally:
        patch(path, at, saved)
    assert failing(report) == {"consumequeue"}
    assert_located(report, "consumequeue", "n0", path.name, at, contains=f"points at {into_gap}, into the gap "
                                                                          f"[{m.gap_start}, {m.classic_from})")
    assert report["checks"]["consumequeue"]["violation_count"] == 1


def test_a_queue_offset_skipped_across_the_second_divide(spark, migrated):
    m = migrated
    topic, qid, qo, off, _n = m.records[0]  # the queue's first message after the migration
    saved = read(m.new_file, 20, 8)
    patch(m.new_file, 20, struct.pack(">q", qo + 1))  # QUEUEOFFSET: one skipped
    try:
        m.epochs((1, m.classic_from))
        report = m.validate(spark)
    finally:
        patch(m.new_file, 20, saved)
    assert failing(report) == {"consumequeue"}
    row = assert_located(report, "consumequeue", "n0", m.new_file.name, off, queue=f"{topic}:{qid}",
                         contains=f"queue offset skip: message at {off} has queue offset {qo + 1}")
    assert "(DLedger region -> writable classic region)" in row["message"]


def test_epoch_entries_off_a_message_boundary_and_above_the_max_offset(spark, migrated):
    """Two entries, two rows of their own (one run: each row is located exactly)."""
    m = migrated
    inside = m.records[1][3] + 7  # 7 bytes into a record
    above = m.max_offset + 4096
    m.epochs((1, m.classic_from), (2, inside), (3, above))
    report = m.validate(spark)
    assert failing(report) == {"epochs"}
    assert_located(report, "epochs", "n0", EPOCH_FILE_NAME, inside,
                   contains=f"epoch 2 starts at {inside} (writable classic region, {m.new_file.name}+"
                            f"{inside - m.classic_from}), which is not a message boundary")
    assert_located(report, "epochs", "n0", EPOCH_FILE_NAME, above,
                   contains=f"epoch 3 starts at {above} (writable classic region, {m.new_file.name}+"
                            f"{above - m.classic_from}), above the max offset {m.max_offset}")
    assert report["checks"]["epochs"]["violation_count"] == 2


def test_a_classic_store_with_an_epoch_file(spark, store_copy, fixture_set, manifests):
    """master/slave -> Controller mode keeps the classic log: its epochs are checked against it."""
    root = store_copy(fixture_set.classic)
    rows = manifests(fixture_set.classic)
    inside = rows[len(rows) // 2]["commitLogOffset"]
    above = fixture_set.classic_max_offset + 1
    cache = EpochFileCache(root / EPOCH_FILE_NAME)
    for epoch, start in ((1, 0), (2, inside), (3, fixture_set.classic_max_offset), (4, above)):
        assert cache.append_entry(EpochEntry(epoch, start))
    report = run_validation([str(root)], spark=spark, range_size=RANGE, progress=False)
    assert failing(report) == {"epochs"} and report["checks"]["epochs"]["violation_count"] == 1
    row = assert_located(report, "epochs", root.name, EPOCH_FILE_NAME, above,
                         contains=f"above the max offset {fixture_set.classic_max_offset}")
    last = f"{above - above % fixture_set.file_size:020d}"
    assert row["message"].startswith(f"epoch 4 starts at {above} (commitlog, {last}+{above % fixture_set.file_size})")


def test_a_half_written_record_after_the_write_end_is_a_note(migrated):
    """The writable region is the live part of a migrated store: a record the broker is still
    writing (past the ConsumeQueues' frontier, only zeros after it) is its write end, not a
    violation (single process: the rule is the tasks', not Spark's)."""
    m = migrated
    first = read(m.new_file, 0, m.records[0][4])
    at = m.max_offset - m.classic_from
    patch(m.new_file, at, first[:len(first) // 2])
    try:
        m.epochs((1, m.classic_from))
        report = run_validation([str(m.root)], local=True, range_size=RANGE, progress=False)
    finally:
        patch(m.new_file, at, bytes(len(first) // 2))
    assert report["ok"], failing(report)
    new = report["nodes"]["n0"]["new"]
    assert new["write_end"] == m.max_offset and new["messages"] == len(m.records)
    assert new["unfinished_tail"]["offset"] == m.max_offset and new["dispatch_frontier"] == m.max_offset


def test_two_migrated_replicas_compare_their_writable_regions(migrated, tmp_path):
    """Replicas agree byte for byte in the writable region too; a differing byte there is named
    (single process: the comparison is the driver's)."""
    m = migrated
    other = tmp_path / "n1"
    subprocess.run(["cp", "-r", "--sparse=always", str(m.root), str(other)], check=True)
    (other / "dledger-n0").rename(other / "dledger-n1")
    doc = json.loads((other / "commitlogRegions.json").read_text())
    doc["regions"][1]["path"] = "dledger-n1"
    (other / "commitlogRegions.json").write_text(json.dumps(doc))
    m.epochs((1, m.classic_from))
    shutil.copy(m.root / EPOCH_FILE_NAME, other / EPOCH_FILE_NAME)
    same = run_validation([str(m.root), str(other)], local=True, range_size=RANGE, progress=False)
    assert same["ok"] and same["checks"]["replicas"]["status"] == "pass", failing(same)
    at = m.records[1][3] + m.records[1][4] - 3  # in the properties of the second new record: no CRC covers it
    patch(other / "commitlog" / m.new_file.name, at - m.classic_from, b"\x5a")
    report = run_validation([str(m.root), str(other)], local=True, range_size=RANGE, progress=False)
    assert "replicas" in failing(report)
    assert_located(report, "replicas", "n1", m.new_file.name, at,
                   contains=f"writable classic region bytes differ from n0 at {at}")


def test_a_followers_lagging_checkpoint_is_not_a_broken_divide(migrated):
    """mqupgrade writes the group's committed end into every member's regions file: a member
    whose own DLedger checkpoint lags still validates (its region is walked to the file's end);
    a region end that is not an entry's end is a divide row (single process)."""
    m = migrated
    cp = m.root / "dledger-n0" / "checkpoint"
    saved = cp.read_text()
    committed = int(saved.split("committedIndex=")[1].split()[0])
    regions = m.root / "commitlogRegions.json"
    doc = regions.read_text()
    try:
        cp.write_text(f"committedIndex={committed - 3}\nendIndex={committed - 3}\n")
        m.epochs((1, m.classic_from))
        lag = run_validation([str(m.root)], local=True, range_size=RANGE, progress=False)
        assert lag["ok"], failing(lag)
        node = lag["nodes"]["n0"]
        assert node["dledger"]["committed_index"] == committed and node["dledger"]["entries"] == committed + 1
        assert node["regions"]["own_checkpoint"]["committed_index"] == committed - 3
        regions.write_text(doc.replace(f'"end": {m.gap_start}', f'"end": {m.gap_start - 1}'))
        off = run_validation([str(m.root)], local=True, range_size=RANGE, progress=False)
    finally:
        cp.write_text(saved)
        regions.write_text(doc)
    assert "divide" in failing(off)
    assert any(f"ends at {m.gap_start - 1}, which is not the end of a DLedger entry" in r["message"]
               for r in off["checks"]["divide"]["violations"])


def test_what_mqupgrade_apply_writes_validates_across_a_group(fixture_root, fixture_set, tmp_path):
    """The validator agrees with ``mqupgrade plan/apply --to controller`` (issue 27.3): a group of
    three members, one with a lagging checkpoint, migrated by mqupgrade validates clean as a group
    (single process: the Spark path is the tests above)."""
    from upgrade.apply import apply_plan
    from upgrade.controller_plan import make_controller_plan

    roots = []
    for sid in ("n0", "n1", "n2"):
        root = rf.copy_store(fixture_root / fixture_set.mixed, tmp_path / sid)
        if sid != "n0":
            (root / "dledger-n0").rename(root / f"dledger-{sid}")
        roots.append(root)
    cp = roots[1] / "dledger-n1" / "checkpoint"
    committed = int(cp.read_text().split("committedIndex=")[1].split()[0])
    cp.write_text(f"committedIndex={committed - 3}\nendIndex={committed - 3}\n")
    plan = make_controller_plan([str(r) for r in roots], "127.0.0.1:9878", conf_dir=tmp_path / "conf", group="g")
    assert plan.ok, plan.refusals
    plan.save(tmp_path / "plan.json")
    apply_plan(tmp_path / "plan.json", echo=lambda _line: None)
    report = run_validation([str(r) for r in roots], local=True, range_size=RANGE, progress=False)
    assert report["ok"], {k: v["violations"][:3] for k, v in report["checks"].items() if v["status"] == "fail"}
    assert report["checks"]["replicas"]["status"] == "pass" and report["checks"]["epochs"]["status"] == "n/a"
    cf = -(-fixture_set.mixed_max_offset // fixture_set.file_size) * fixture_set.file_size
    for sid in ("n0", "n1", "n2"):
        node = report["nodes"][sid]
        assert node["mode"] == "migrated" and node["max_offset"] == cf  # no message written yet: classicFrom
        assert node["regions"]["gap"] == [fixture_set.mixed_max_offset, cf]
    assert report["nodes"]["n1"]["regions"]["own_checkpoint"]["committed_index"] == committed - 3
