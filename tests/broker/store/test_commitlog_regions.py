"""A store migrated from DLedger mode to Controller mode ("a second divide", commitlogRegions.json)
opened in classic mode, on both Apache fixture stores (rmq-mixed, variety-mixed: a classic region
and the DLedger region of member n0).

The regions file is written by hand here, as ``mqupgrade apply`` writes it. Then: every manifest
message reads back by ConsumeQueue, offset msgId and key with identical fields; new puts land at
classicFrom with queue offsets continuing; HA reads and writes below classicFrom are refused; a
clean restart, a crash restart (abort left) and a crash that lost the ConsumeQueues and the index
(the dispatch gap) keep everything; retention deletes frozen files oldest first. The refusals
(each defect of the file, DLedger mode) each give their sentence.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from broker.store.commitlog_regions import REGIONS_FILE, RegionsFileError
from broker.store.message import MessageExt, encode_message
from broker.store.message_id import decode_message_id
from broker.store.message_store import DefaultMessageStore, GetMessageStatus, iter_messages
from broker.store.put_result import PutMessageStatus
from broker.store.shape import read_shape
from tests.broker.store.test_dledger_commitlog import FIXTURE_SETTINGS, dledger_store, same_fields
from tests.support.rmqfixtures import SETS, FixtureSet

MIB = 1 << 20


def classic_from(fs: FixtureSet) -> int:
    return -(-fs.mixed_max_offset // MIB) * MIB


def regions_doc(fs: FixtureSet, **changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "version": 1, "writtenBy": "mqupgrade", "mappedFileSizeCommitLog": MIB, "classicFrom": classic_from(fs),
        "regions": [{"kind": "classic", "path": "commitlog", "start": 0, "end": fs.divided_offset},
                    {"kind": "dledger", "path": "dledger-n0", "start": fs.divided_offset, "end": fs.mixed_max_offset}],
    }
    doc.update(changes)
    return doc


def write_regions(root: Path, doc: dict[str, Any] | str) -> None:
    text = doc if isinstance(doc, str) else json.dumps(doc, indent=2)
    tmp = root / (REGIONS_FILE + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, root / REGIONS_FILE)


def classic_store(root: Path, **settings: Any) -> DefaultMessageStore:
    return DefaultMessageStore(store_path_root_dir=str(root), **FIXTURE_SETTINGS, **settings)


def first_key(row: dict[str, Any]) -> str | None:
    if row.get("sysFlag", 0) & 0xC == 0xC:  # ROLLBACK: not indexed
        return None
    keys = (row.get("keys") or "").split(" ")
    return keys[0] or row.get("uniqKey") or None


def check_manifest(store: DefaultMessageStore, rows: list[dict[str, Any]], plain: bool, decode: bool = True) -> None:
    """Every row by ConsumeQueue unit, by key (the index) and by offset msgId; with ``decode``
    the message at that offset has the row's fields (every 50th row also read through the pull
    and the msgId lookup, which decode the same bytes again)."""
    assert store.index_service is not None
    now = int(time.time() * 1000) + 1
    for i, row in enumerate(rows):
        phy = row["commitLogOffset"]
        if decode:
            m = store.look_message_by_offset(phy)
            assert m is not None, row
            same_fields(m, row, plain)
            msg_id = row.get("msgId") or m.msg_id
            assert decode_message_id(msg_id)[1] == phy
            if i % 50 == 0:
                assert store.view_message_by_id(msg_id).commitlog_offset == phy
        if row.get("inConsumeQueue", 1):
            assert store.get_commitlog_offset_in_queue(row["topic"], row["queueId"], row["queueOffset"]) == phy, row
            if decode and i % 50 == 0:
                got = store.get_message(row["topic"], row["queueId"], row["queueOffset"], 1)
                assert got.status is GetMessageStatus.FOUND and got.physical_offsets == [phy], row
                same_fields(got.messages[0], row, plain)
        key = first_key(row)
        if key is not None:
            assert phy in store.index_service.query_offset(row["topic"], key, 64, 0, now), (row, key)


def next_queue_offsets(rows: list[dict[str, Any]]) -> dict[tuple[str, int], int]:
    expected: dict[tuple[str, int], int] = defaultdict(int)
    for r in rows:
        if r.get("inConsumeQueue", 1) and r["topic"] != "SCHEDULE_TOPIC_XXXX":
            key = (r["topic"], r["queueId"])
            expected[key] = max(expected[key], r["queueOffset"] + 1)
    return expected


def check_new(store: DefaultMessageStore, new: dict[tuple[str, int], tuple[int, int]]) -> None:
    for (topic, qid), (qo, phy) in new.items():
        got = store.get_message(topic, qid, qo, 1)
        assert got.status is GetMessageStatus.FOUND and got.physical_offsets == [phy], (topic, qid)
        assert [m.commitlog_offset for m in store.query_message(topic, f"new-{topic}-{qid}")] == [phy]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["plain", "variety"])
def test_migrated_store_reads_continues_restarts_and_retains(name: str, store_copy, manifests) -> None:
    fs = SETS[name]
    plain = name == "plain"
    root = store_copy(fs.mixed)
    write_regions(root, regions_doc(fs))
    rows = manifests(fs.mixed)
    start = classic_from(fs)
    store = classic_store(root, record_shape=True)
    store.load()
    try:
        cl = store.commitlog
        assert (cl.min_offset, cl.max_offset, cl.classic_from) == (0, start, start)
        assert not any((root / "commitlog").glob(f"{start:020d}"))
        store.start()
        check_manifest(store, rows, plain)
        assert read_shape(root).mode == "classic" and read_shape(root).min_offset == 0
        # new puts: the first lands at classicFrom, queue offsets continue (rmq-mixed: 875 per queue)
        expected = next_queue_offsets(rows)
        if plain:
            assert set(expected.values()) == {875}
        new: dict[tuple[str, int], tuple[int, int]] = {}
        for n, (topic, qid) in enumerate(sorted(expected)):
            res = store.put_message(MessageExt(topic=topic, queue_id=qid, body=b"new-%d" % n,
                                               properties={"KEYS": f"new-{topic}-{qid}"}))
            assert res.status is PutMessageStatus.PUT_OK, res
            ar = res.append_result
            assert ar.queue_offsets == [expected[(topic, qid)]]
            if n == 0:
                assert ar.wrote_offset == start
            new[(topic, qid)] = (ar.queue_offsets[0], ar.wrote_offset)
        assert store.wait_dispatched(10)
        check_new(store, new)
        # HA: never a byte below classicFrom, never a write or truncation there
        for below in (0, fs.divided_offset, fs.divided_offset + 48, start - 1):
            assert cl.get_data(below) is None
        got = cl.get_data(start)
        assert got is not None and got.start_offset == start and len(got.buffer) > 0
        end = cl.max_offset
        assert not cl.append_data(fs.divided_offset, b"\0" * 8)
        assert not cl.reset_offset(fs.divided_offset)
        cl.truncate_dirty_files(0)
        assert cl.max_offset == end and store.look_message_by_offset(rows[-1]["commitLogOffset"]) is not None
    finally:
        assert store.shutdown()

    # a clean restart, then a crash (abort left behind) with everything flushed
    for crash in (False, True):
        if crash:
            (root / "abort").write_text("1")
        store = classic_store(root, record_shape=True)
        store.load()
        try:
            assert store.last_exit_ok is not crash
            assert (store.commitlog.min_offset, store.commitlog.max_offset) == (0, end)
            store.start()
            check_new(store, new)
            if not crash:  # every record in offset order, the frozen regions first (tools read so)
                walked = [(phy, m.commitlog_offset) for phy, m in iter_messages(store)]
                want = sorted([r["commitLogOffset"] for r in rows] + [phy for _, phy in new.values()])
                assert [phy for phy, _ in walked] == want and all(a == b for a, b in walked)
            check_manifest(store, rows[::25], plain, decode=False)  # a crash drops the index file: rebuilt
            for row in rows[::50]:
                same_fields(store.look_message_by_offset(row["commitLogOffset"]), row, plain)
        finally:
            assert store.shutdown()

    # a crash that lost the ConsumeQueues and the index: both are rebuilt, the frozen regions
    # (the dispatch gap from offset 0) and the new file
    shutil.rmtree(root / "consumequeue")
    shutil.rmtree(root / "index")
    (root / "abort").write_text("1")
    store = classic_store(root)
    store.load()
    try:
        store.start()
        assert store.commitlog.max_offset == end
        check_manifest(store, rows, plain, decode=False)
        check_new(store, new)
        # retention: whole frozen files, oldest first; the new file stays
        assert store.delete_expired_files(clean_immediately=True, max_delete=2) == 2
        assert store.commitlog.min_offset == 2 * MIB
        assert store.look_message_by_offset(rows[0]["commitLogOffset"]) is None
        assert store.look_message_by_offset(rows[-1]["commitLogOffset"]) is not None
        assert store.delete_expired_files(clean_immediately=True, max_delete=100) > 0
        assert store.commitlog.min_offset == start
        assert not list((root / "dledger-n0" / "data").iterdir())
        assert [p.name for p in (root / "commitlog").iterdir()] == [f"{start:020d}"]
        check_new(store, new)
    finally:
        assert store.shutdown()
    store = classic_store(root)  # every frozen file gone by retention: still a valid migrated store
    store.load()
    try:
        assert (store.commitlog.min_offset, store.commitlog.max_offset) == (start, end)
        store.start()
        check_new(store, new)
    finally:
        store.shutdown()


def _refusal(root: Path, **settings: Any) -> str:
    store = classic_store(root, **settings)
    with pytest.raises(RegionsFileError) as err:
        store.load()
    assert not store.lock.held if hasattr(store.lock, "held") else True
    return str(err.value)


def test_refusals_each_name_their_defect(store_copy) -> None:
    fs = SETS["plain"]
    root = store_copy(fs.mixed)
    good = regions_doc(fs)
    cases: list[tuple[dict[str, Any] | str, str]] = [
        ("{not json", "not valid JSON"),
        (regions_doc(fs, version=2), "unknown version 2"),
        (regions_doc(fs, mappedFileSizeCommitLog=2 * MIB), "mappedFileSizeCommitLog 2097152 is not the broker conf's"),
        (regions_doc(fs, classicFrom=classic_from(fs) + 1), "is not a multiple of mappedFileSizeCommitLog"),
        (regions_doc(fs, classicFrom=classic_from(fs) + MIB), "is not the first file boundary at or above"),
        (regions_doc(fs, regions=[good["regions"][0], dict(good["regions"][1], start=fs.divided_offset - 1)]),
         "overlaps or precedes regions[0]"),
        (regions_doc(fs, regions=[good["regions"][0], dict(good["regions"][1], kind="raft")]), "unknown kind 'raft'"),
        (regions_doc(fs, regions=[good["regions"][0], dict(good["regions"][1], path="dledger-n9")]),
         "dledger-n9 does not exist"),
        (regions_doc(fs, regions=[]), "not a non-empty list"),
    ]
    for doc, sentence in cases:
        write_regions(root, doc)
        assert sentence in _refusal(root), doc
    # a missing frozen file, a stray commitlog file below classicFrom
    write_regions(root, good)
    last = root / "dledger-n0" / "data" / "00000000000005242880"
    last.rename(root / "aside")
    assert "no data file holding offset 5757789" in _refusal(root)
    (root / "aside").rename(last)
    for name in ("00000000000004194304", "00000000000005242880"):  # the whole newer region, older one held
        (root / "dledger-n0" / "data" / name).rename(root / name)
    assert "regions[1] (dledger) holds no file although the older regions[0] does" in _refusal(root)
    for name in ("00000000000004194304", "00000000000005242880"):
        (root / name).rename(root / "dledger-n0" / "data" / name)
    stray = root / "commitlog" / f"{5 * MIB:020d}"
    stray.write_bytes(b"\0" * MIB)
    assert "lies below classicFrom 6291456 but in no classic region" in _refusal(root)
    stray.unlink()
    # DLedger mode on a migrated store: one sentence naming the fix
    store = dledger_store(root, "n0-127.0.0.1:1")
    with pytest.raises(RegionsFileError) as err:
        store.load()
    text = str(err.value)
    assert "was migrated to Controller mode by mqupgrade on" in text
    assert "enableControllerMode=true and enableDLegerCommitLog=false, or run `mqupgrade rollback` first" in text
    # nothing was written by the refusals: the good file opens
    store = classic_store(root)
    store.load()
    try:
        assert store.commitlog.max_offset == classic_from(fs)
    finally:
        store.shutdown()


WRITER = """
import sys
from broker.store.message import MessageExt
from broker.store.message_store import DefaultMessageStore
store = DefaultMessageStore(store_path_root_dir=sys.argv[1], mapped_file_size_commit_log=1 << 20,
                            max_hash_slot_num=10000, max_index_num=40000, warm_mapped_file_enable=False,
                            flush_disk_type="SYNC_FLUSH", flush_interval_consume_queue=20)
store.load()
store.start()
print("started", flush=True)
i = 0
while True:
    r = store.put_message(MessageExt("TopicA", b"killed-%d" % i, queue_id=i % 4, properties={"KEYS": "kk-%d" % i}))
    if r.ok:
        print("ack", i, r.append_result.wrote_offset, i % 4, r.append_result.queue_offsets[0], flush=True)
        i += 1
"""


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_kill9_of_a_migrated_store_recovers_like_a_classic_one(store_copy, manifests) -> None:
    """SIGKILL a writer on the migrated rmq-mixed mid-stream: every ack and every frozen message stays."""
    fs = SETS["plain"]
    root = store_copy(fs.mixed)
    write_regions(root, regions_doc(fs))
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(root)], cwd=Path(__file__).resolve().parents[3],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    acks: list[list[int]] = []
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "started", proc.stderr.read() if proc.stderr else ""
        deadline = time.monotonic() + 60
        while len(acks) < 200 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line.startswith("ack"):
                acks.append([int(x) for x in line.split()[1:]])
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        rest = proc.stdout.read()  # through the text buffer readline filled (communicate reads the fd)
        acks += [[int(x) for x in ln.split()[1:]] for ln in rest.splitlines() if ln.startswith("ack")]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert len(acks) >= 200 and (root / "abort").exists()
    assert acks[0][1] == classic_from(fs) and [a[3] for a in acks[:4]] == [875] * 4
    store = classic_store(root)
    store.load()
    try:
        assert not store.last_exit_ok
        store.start()
        for i, phy, qid, qo in acks:
            m = store.look_message_by_offset(phy)
            assert m is not None and m.body == b"killed-%d" % i and (m.queue_id, m.queue_offset) == (qid, qo)
            assert store.get_commitlog_offset_in_queue("TopicA", qid, qo) == phy
        check_manifest(store, manifests(fs.mixed), True, decode=False)
        expected = max(a[3] for a in acks if a[2] == 0) + 1  # acked ones, maybe one more not acked in time
        have = store.get_max_offset_in_queue("TopicA", 0)  # start() dispatched everything recovered
        assert have in (expected, expected + 1)
        nxt = store.put_message(MessageExt("TopicA", b"after", queue_id=0))
        assert nxt.ok and nxt.append_result.queue_offsets == [have]
    finally:
        store.shutdown()


def test_consume_queues_behind_the_regions_end_are_dispatched_at_start(store_copy, manifests) -> None:
    """The dispatch gap (a kill -9 in DLedger mode before the migration): the ConsumeQueues stop
    inside the DLedger region and the crash left abort; the first start dispatches the rest."""
    fs = SETS["plain"]
    root = store_copy(fs.mixed)
    write_regions(root, regions_doc(fs))
    rows = manifests(fs.mixed)
    cut = next(r["commitLogOffset"] for r in rows if r["commitLogOffset"] > fs.divided_offset + 300_000)
    store = classic_store(root)
    store.load()
    try:
        store.consume_queue_store.truncate_dirty(cut)
        assert store.consume_queue_store.max_physical_offset() < cut
    finally:
        store.shutdown()  # never started: no abort written, the cut ConsumeQueues flushed
    (root / "abort").write_text("1")
    store = classic_store(root)
    store.load()
    try:
        assert not store.last_exit_ok and store.consume_queue_store.max_physical_offset() == fs.mixed_max_offset
        store.start()
        check_manifest(store, rows, True, decode=False)
        assert store.put_message(MessageExt("TopicB", b"x", queue_id=3)).append_result.queue_offsets == [875]
    finally:
        store.shutdown()


def test_a_replica_appends_from_classic_from_only(store_copy) -> None:
    """The HA slave path of a migrated replica: nothing below classicFrom; its first bytes land at
    classicFrom (the first file is created there) and dispatch continues the queue (875)."""
    fs = SETS["plain"]
    root = store_copy(fs.mixed)
    write_regions(root, regions_doc(fs))
    start = classic_from(fs)
    store = classic_store(root, broker_role="SLAVE")
    store.load()
    try:
        store.start()
        rec = encode_message(MessageExt("TopicA", b"from-master", queue_id=2, store_timestamp=1_800_000_000_000),
                             875, start)
        assert not store.append_to_commitlog(fs.mixed_max_offset, rec)
        assert not store.append_to_commitlog(start - len(rec), rec)
        assert store.append_to_commitlog(start, rec)
        assert (root / "commitlog" / f"{start:020d}").exists() and store.commitlog.max_offset == start + len(rec)
        assert store.wait_dispatched(5)
        got = store.get_message("TopicA", 2, 875, 1)
        assert got.status is GetMessageStatus.FOUND and got.physical_offsets == [start]
        assert got.messages[0].body == b"from-master"
    finally:
        store.shutdown()
