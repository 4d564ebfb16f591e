"""Issue 24.3: every byte of a served classic record is checked (per-page checksums).

Before: classic records carry only a body CRC, so a flipped byte in a record's properties (KEYS)
was served with 200. Now the classic commitlog (and an upgraded store's old region) has sealed
page checksums: Apache's stores of both sets are sealed at their first start, our writes at
flush, and a read of any record on a changed page is refused naming node, file, offset, page
and fix. Truncation unseals what it cuts, so rewritten bytes are never false alarms.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from broker.store.message import MessageExt
from broker.store.message_store import DefaultMessageStore
from broker.store.page_crc import PAGE, sidecar_dir
from broker.store.verify import CorruptRecordError
from tools.broker_confs import master_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import wait_until
from tests.broker.store.test_message_store import FIXTURE_SETTINGS
from tests.broker.store.test_verify import body_at, flip, pick

FILE = 1 << 20


def _open(root: Path, **kw) -> DefaultMessageStore:
    store = DefaultMessageStore(store_path_root_dir=str(root), **{**FIXTURE_SETTINGS, **kw})
    store.load()
    return store


def _pickable(rows: list[dict], r: dict) -> bool:
    try:
        return pick(rows, r["commitLogOffset"], r["commitLogOffset"] + 1) is r
    except AssertionError:
        return False


def _props_byte(row: dict) -> int:
    """A byte inside the record's properties (KEYS/UNIQ_KEY...), past body and topic: no CRC covers it."""
    return row["commitLogOffset"] + body_at(row) + row["bodyLen"] + 1 + len(row["topic"].encode()) + 2 + 3


def test_a_flipped_property_byte_of_an_apache_record_is_never_served(store_copy, fixture_set, manifests) -> None:
    root = store_copy(fixture_set.classic)
    rows = manifests(fixture_set.classic)
    store = _open(root, page_checksums=True)  # first start: recovery scans, then every page is sealed
    store.shutdown()
    assert (sidecar_dir(root / "commitlog") / f"{0:020d}").stat().st_size == (FILE // PAGE) * 8
    row = next(r for r in rows if r["commitLogOffset"] < FILE and r.get("keys") and _pickable(rows, r))
    path = root / "commitlog" / f"{0:020d}"
    flip(path, _props_byte(row))

    unguarded = _open(root)  # as before: the body CRC holds, the record is served
    try:
        assert unguarded.look_message_by_offset(row["commitLogOffset"]) is not None
    finally:
        unguarded.shutdown()
    store = _open(root, page_checksums=True)
    try:
        for read in (lambda: store.look_message_by_offset(row["commitLogOffset"]),
                     lambda: store.commitlog.get_record(row["commitLogOffset"])):
            with pytest.raises(CorruptRecordError) as ei:
                read()
            e = ei.value
            assert (e.path, e.physical_offset) == (str(path), row["commitLogOffset"]) and "does not match" in e.reason
            assert "restore the file" in str(e)
        with pytest.raises(CorruptRecordError):  # a pull that reaches it
            store.get_message(row["topic"], row["queueId"], row["queueOffset"], 1)
        assert store.commitlog.page_crc.mismatches >= 3
    finally:
        store.shutdown()


def test_our_writes_are_sealed_at_flush_and_truncation_unseals(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with DefaultMessageStore(store_path_root_dir=str(root), mapped_file_size_commit_log=FILE,
                             page_checksums=True) as store:
        offsets = [store.put_message(MessageExt(topic="TopicPage", body=b"z" * 700, queue_id=0,
                                                properties={"KEYS": f"key{i}"})).append_result.wrote_offset
                   for i in range(200)]
        store.commitlog.mapped_file_queue.flush_all()
        pc = store.commitlog.page_crc
        sealed = pc.sealed_pages
        assert sealed == store.commitlog.max_offset // PAGE
        cut = offsets[100]
        store.commitlog.mapped_file_queue.truncate_dirty_files(cut)  # as an HA slave following its master back
        assert pc._files[f"{0:020d}"].sealed == cut // PAGE
        for i in range(50):  # new bytes over the truncated pages
            store.put_message(MessageExt(topic="TopicPage", body=b"n" * 900, queue_id=0, properties={"KEYS": f"new{i}"}))
        store.commitlog.mapped_file_queue.flush_all()
        assert pc._files[f"{0:020d}"].sealed == store.commitlog.max_offset // PAGE
        for off in offsets[:100]:
            assert store.look_message_by_offset(off) is not None  # no false alarm anywhere
        assert pc.mismatches == 0


def test_a_pull_checks_each_page_once(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with DefaultMessageStore(store_path_root_dir=str(root), mapped_file_size_commit_log=FILE,
                             page_checksums=True) as store:
        for i in range(64):  # ~300-byte records: 13 or so to a page
            store.put_message(MessageExt(topic="TopicPull", body=b"p" * 200, queue_id=0, properties={"KEYS": f"k{i}"}))
        store.commitlog.mapped_file_queue.flush_all()
        wait_until(lambda: store.get_max_offset_in_queue("TopicPull", 0) == 64, 10, "dispatch")
        pc = store.commitlog.page_crc
        before = pc.pages_checked
        r = store.get_message("TopicPull", 0, 0, 32)
        assert r.message_count == 32
        last = r.physical_offsets[-1] + len(r.buffers[-1]) - 1
        pages = last // PAGE - r.physical_offsets[0] // PAGE + 1
        assert pc.pages_checked - before == pages < 32  # each page once, not once per record on it
        before = pc.pages_checked
        store.get_message("TopicPull", 0, 0, 32)  # a new pull checks again
        assert pc.pages_checked - before == pages
        assert pc.mismatches == 0


@pytest.mark.multiprocess
@pytest.mark.timeout(90)
def test_a_running_broker_refuses_a_record_whose_keys_changed_on_disk(tmp_path: Path) -> None:
    conf, port = master_conf(tmp_path, role="ASYNC_MASTER", autoCreateTopicEnable="true")
    b = BrokerProc(conf, port, "page-crc", tmp_path)
    try:
        b.start()
        with b.client() as c:
            sent = [c.send("TopicPageCrc", f"body-{i}" * 50, keys=f"k{i:04d}", queue_id=0) for i in range(40)]
            target = sent[3]
            side = sidecar_dir(tmp_path / "broker-a" / "commitlog") / f"{0:020d}"
            wait_until(lambda: side.exists() and side.read_bytes()[8 * (target["commitLogOffset"] // PAGE) + 4:][:4]
                       == b"PGC1", 10, "the page sealed at flush")
            assert c.by_offset(target["commitLogOffset"])  # served while intact
            raw = (tmp_path / "broker-a" / "commitlog" / f"{0:020d}").read_bytes()
            at = raw.index(b"k0003", target["commitLogOffset"])
            flip(tmp_path / "broker-a" / "commitlog" / f"{0:020d}", at + 2)
            with pytest.raises(Exception) as ei:
                c.by_offset(target["commitLogOffset"])
            assert "does not match the checksum" in str(ei.value)
            assert c.status()["verify"]["corruptRecords"] >= 1
            assert c.by_offset(sent[30]["commitLogOffset"])  # other pages keep serving
    finally:
        kill_all([b])
    assert time.monotonic() > 0
