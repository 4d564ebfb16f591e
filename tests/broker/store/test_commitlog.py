"""CommitLog: placement, file roll, queue offsets, batch == singles, reads, HA append, flush
policies, recovery verdicts, and byte-identical reproduction of Apache's commitlog files."""
from __future__ import annotations

import struct
import threading
from pathlib import Path

import pytest

from broker.store import commitlog_recovery as recovery
from broker.store.commitlog import SYNC_FLUSH, CommitLog
from broker.store.errors import StoreCorruptionError
from broker.store.message import (
    BLANK_MAGIC_CODE, MessageExt, check_message_and_return_size, decode_message, encode_message,
)
from broker.store.message_id import decode_message_id
from broker.store.put_result import PutMessageStatus
from tests.broker.store._store_manifest import commitlog_bytes, record_at, row_to_message

SIZE = 4096


def msg(i: int, topic: str = "T", queue_id: int = 0, body_len: int = 100, sys_flag: int = 0) -> MessageExt:
    return MessageExt(topic=topic, body=bytes([i % 251]) * body_len, queue_id=queue_id,
                      properties={"KEYS": f"k{i:05d}", "TAGS": "a"}, sys_flag=sys_flag,
                      born_timestamp=1000 + i, store_timestamp=2000 + i)


def open_log(path: Path, size: int = SIZE, **kw) -> CommitLog:
    cl = CommitLog(path, size, warm_mapped_file=False, **kw)
    cl.load()
    return cl


def test_roll_writes_blank_and_offsets_are_physical(tmp_path: Path) -> None:
    cl = open_log(tmp_path / "commitlog")
    n = len(encode_message(msg(0)))
    per_file = (SIZE - 8) // n  # a record is placed only if 8 bytes stay free after it
    res = cl.put_messages([msg(i) for i in range(per_file + 1)], keep_store_timestamp=True)
    assert res.ok
    ar = res.append_result
    assert ar.physical_offsets[:per_file] == [i * n for i in range(per_file)]
    assert ar.physical_offsets[per_file] == SIZE
    assert ar.queue_offsets == list(range(per_file + 1))
    first = (tmp_path / "commitlog" / "00000000000000000000").read_bytes()
    remaining = SIZE - per_file * n
    assert first[per_file * n:per_file * n + 8] == struct.pack(">ii", remaining, BLANK_MAGIC_CODE)
    assert (tmp_path / "commitlog" / "00000000000000004096").exists()
    m = cl.look_message_by_offset(SIZE)
    assert m.commitlog_offset == SIZE and m.queue_offset == per_file and m.store_timestamp == 2000 + per_file
    assert cl.max_offset == SIZE + n
    data = cl.get_data(SIZE)
    assert data.start_offset == SIZE and data.size == n
    cl.shutdown()


def test_transaction_prepared_and_rollback_do_not_take_queue_offsets(tmp_path: Path) -> None:
    cl = open_log(tmp_path / "cl", 1 << 20)
    flags = [0x0, 0x4, 0x8, 0xC, 0x0]
    res = cl.put_messages([msg(i, sys_flag=f) for i, f in enumerate(flags)])
    assert res.append_result.queue_offsets == [0, 0, 1, 0, 2]
    assert cl.topic_queue_table == {("T", 0): 3}
    assert cl.put_message(msg(9, queue_id=3)).append_result.queue_offsets == [0]
    assert cl.topic_queue_table_as_keys() == {"T-0": 3, "T-3": 1}
    cl.shutdown()


def test_batch_is_byte_identical_to_single_puts(tmp_path: Path) -> None:
    msgs = [msg(i, topic=f"T{i % 3}", queue_id=i % 2, body_len=50 + 37 * i % 300) for i in range(200)]
    a = open_log(tmp_path / "a")
    b = open_log(tmp_path / "b")
    for m in msgs:
        assert a.put_message(m, keep_store_timestamp=True).ok
    assert b.put_messages(msgs, keep_store_timestamp=True).ok
    a.shutdown()
    b.shutdown()
    names = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert len(names) > 5
    for name in names:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_store_timestamp_stamped_in_lock_and_msg_ids(tmp_path: Path) -> None:
    cl = open_log(tmp_path / "cl", 1 << 20)
    res = cl.put_messages([msg(1), msg(2)])
    ar = res.append_result
    m0 = cl.look_message_by_offset(ar.physical_offsets[0])
    assert m0.store_timestamp == ar.store_timestamp != 2001
    assert decode_message_id(ar.msg_ids[1]) == (("127.0.0.1", 10911), ar.physical_offsets[1])
    assert ar.msg_id == ",".join(ar.msg_ids)
    cl.shutdown()


def test_illegal_puts_are_refused_without_side_effects(tmp_path: Path) -> None:
    cl = open_log(tmp_path / "cl", max_message_size=1000)
    big = msg(1, body_len=1001)
    assert cl.put_message(big).status is PutMessageStatus.MESSAGE_ILLEGAL
    huge_props = msg(1)
    huge_props.properties = {"k": "v" * 40000}
    assert cl.put_message(huge_props).status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
    too_big_for_file = msg(1, body_len=999)
    cl2 = open_log(tmp_path / "cl2", size=1024)
    assert cl2.put_message(too_big_for_file).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert cl.max_offset == 0 and cl.topic_queue_table == {}
    cl.shutdown()
    cl2.shutdown()


def test_append_data_replicates_bytes_exactly(tmp_path: Path) -> None:
    master = open_log(tmp_path / "m")
    slave = open_log(tmp_path / "s")
    assert master.put_messages([msg(i) for i in range(100)], keep_store_timestamp=True).ok
    assert not slave.append_data(5, b"xx")  # not at the slave's max offset
    offset = 0
    while offset < master.max_offset:
        chunk = master.get_data(offset)
        for i in range(0, chunk.size, 1000):  # HA sends bounded pieces
            piece = chunk.buffer[i:i + 1000]
            assert slave.append_data(offset, piece)
            offset += len(piece)
    assert slave.max_offset == master.max_offset
    master.shutdown()
    slave.shutdown()
    for p in (tmp_path / "m").iterdir():
        assert p.read_bytes() == (tmp_path / "s" / p.name).read_bytes()


def test_sync_flush_group_commit(tmp_path: Path) -> None:
    cl = open_log(tmp_path / "cl", 1 << 20, flush_disk_type=SYNC_FLUSH)
    cl.start()
    results = []

    def producer(k: int) -> None:
        for i in range(50):
            r = cl.put_message(msg(i, queue_id=k))
            results.append((r.status, r.append_result.end_offset, cl.flushed_offset))

    threads = [threading.Thread(target=producer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 200
    for status, end, flushed_after in results:
        assert status is PutMessageStatus.PUT_OK and flushed_after >= end
    assert cl.flush_service.flush_count < 200  # grouped: fewer syncs than puts
    cl.shutdown()


def test_sync_flush_timeout_when_nothing_flushes(tmp_path: Path) -> None:
    cl = open_log(tmp_path / "cl", 1 << 20, flush_disk_type=SYNC_FLUSH, sync_flush_timeout_ms=50)
    r = cl.put_message(msg(1))  # flush service never started
    assert r.status is PutMessageStatus.FLUSH_DISK_TIMEOUT and r.status.stored
    assert cl.look_message_by_offset(0) is not None
    cl.shutdown()


def test_a_message_sent_without_wait_does_not_wait_for_the_sync_flush(tmp_path: Path) -> None:
    """WAIT=false (``wait_store_msg_ok``) skips the SYNC_FLUSH wait; the flag itself is not stored."""
    cl = open_log(tmp_path / "cl", 1 << 20, flush_disk_type=SYNC_FLUSH, sync_flush_timeout_ms=50)
    m = msg(1)  # flush service never started: a waiting put would time out
    m.wait_store_msg_ok = False
    r = cl.put_message(m)
    assert r.status is PutMessageStatus.PUT_OK
    stored = cl.look_message_by_offset(0)
    assert stored is not None and stored.wait_store_msg_ok and "WAIT" not in stored.properties
    assert cl.put_message(msg(2)).status is PutMessageStatus.FLUSH_DISK_TIMEOUT  # the default waits
    cl.shutdown()


def test_normal_recovery_and_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "cl"
    cl = open_log(path)
    assert cl.put_messages([msg(i) for i in range(60)], keep_store_timestamp=True).ok
    end = cl.max_offset
    last = cl.append_messages([msg(60)], True).append_result.wrote_offset
    cl.shutdown()
    # tear the last record: keep its first 30 bytes, zero the rest
    f = path / f"{last - last % SIZE:020d}"
    data = bytearray(f.read_bytes())
    pos = last % SIZE
    data[pos + 30:] = bytes(len(data) - pos - 30)
    f.write_bytes(data)
    cl = open_log(path)
    assert recovery.recover_normally(cl) == end == cl.max_offset
    assert cl.get_data(last) is None
    cl.shutdown()


def test_torn_batch_with_its_tail_written_first_is_a_torn_tail(tmp_path: Path) -> None:
    """kill -9 inside the memcpy of a batch: glibc's memmove stores the last vector of the copy
    before the first, so the torn batch is zeros followed by its last bytes. That is a torn tail
    (no valid record follows), not corruption; a whole valid record after it would be."""
    path = tmp_path / "cl"
    cl = open_log(path)
    assert cl.put_messages([msg(i) for i in range(20)], keep_store_timestamp=True).ok
    end = cl.max_offset
    ar = cl.append_messages([msg(20 + i) for i in range(3)], True).append_result
    first, stop = ar.physical_offsets[0], ar.end_offset
    cl.shutdown()
    f = path / f"{first - first % SIZE:020d}"
    assert stop - stop % SIZE == first - first % SIZE or stop % SIZE == 0, "batch in one file"
    data = bytearray(f.read_bytes())
    pristine = bytes(data)
    lo, hi = first % SIZE, (stop - 1) % SIZE + 1
    data[lo:hi - 64] = bytes(hi - 64 - lo)  # only the copy's last 64 bytes reached the file
    f.write_bytes(data)
    cl = open_log(path)
    assert recovery.recover_normally(cl) == end == cl.max_offset
    cl.shutdown()
    # the same hole with a whole valid record after it (the batch's last one) is still the torn
    # batch while it lies past the checkpointed flushed offset (issue 13: durable facts decide) ...
    data = bytearray(pristine)
    last = ar.physical_offsets[-1] % SIZE
    data[lo:last] = bytes(last - lo)
    f.write_bytes(data)

    class Ckpt:
        physic_msg_timestamp = 0
        physic_flushed_offset = first

    cl = open_log(path)
    assert recovery.recover_normally(cl, Ckpt()) == end == cl.max_offset
    cl.shutdown()
    # ... and damage once the checkpoint says a flush covered it
    f.write_bytes(data)
    Ckpt.physic_flushed_offset = stop
    cl = open_log(path)
    with pytest.raises(StoreCorruptionError, match=f"everything below offset {stop} was flushed"):
        recovery.recover_normally(cl, Ckpt())
    cl.shutdown()
    # without a flushed offset, a following record stored before the last flushed message is damage
    Ckpt.physic_flushed_offset = 0
    Ckpt.physic_msg_timestamp = 10**13
    cl = open_log(path)
    with pytest.raises(StoreCorruptionError, match="a valid record follows"):
        recovery.recover_normally(cl, Ckpt())
    cl.shutdown()


@pytest.mark.parametrize("missing", [4, 5, 7])
def test_torn_batch_missing_only_its_first_bytes_is_a_torn_tail(tmp_path: Path, missing: int) -> None:
    """The back-to-front copy can stop inside the record's first 8 bytes (its last store is the
    unaligned head): TOTALSIZE still zero, the magic code whole or cut. Seen in the kill -9 crash
    test (bad magic 0x00A320A7, 5 bytes missing): a torn tail, not corruption. The same bytes with a
    wrong PHYSICALOFFSET stay corruption (test_flip_in_last_flushed_message_caught_by_checkpoint
    keeps a body bit flip, whose TOTALSIZE is whole, corruption too)."""
    path = tmp_path / "cl"
    cl = open_log(path)
    assert cl.put_messages([msg(i) for i in range(20)], keep_store_timestamp=True).ok
    end = cl.max_offset
    ar = cl.append_messages([msg(20 + i) for i in range(3)], True).append_result
    first = ar.physical_offsets[0]
    cl.shutdown()
    f = path / f"{first - first % SIZE:020d}"
    data = bytearray(f.read_bytes())
    pristine = bytes(data)
    lo = first % SIZE
    data[lo:lo + missing] = bytes(missing)
    f.write_bytes(data)
    cl = open_log(path)
    assert recovery.recover_normally(cl) == end == cl.max_offset
    cl.shutdown()
    # the same cut head on a record whose PHYSICALOFFSET is not its own offset: damage
    data = bytearray(pristine)
    data[lo:lo + missing] = bytes(missing)
    data[lo + 28:lo + 36] = (first + 1).to_bytes(8, "big")
    f.write_bytes(data)
    cl = open_log(path)
    with pytest.raises(StoreCorruptionError, match="not a torn tail"):
        recovery.recover_normally(cl)
    cl.shutdown()


@pytest.mark.parametrize("cut", ["three-bytes", "wrong-offset", "wrong-low-byte"])
def test_torn_batch_missing_its_size_high_bytes_is_a_torn_tail(tmp_path: Path, cut: str) -> None:
    """The back-to-front copy can stop 1-3 bytes short of the record's start: TOTALSIZE then reads
    only its low byte(s) (seen in the kill -9 crash test: 111 for a 623-byte record, 0x26F, three
    bytes short; 'BODYLEN 517 runs past TOTALSIZE 111; data follows'). A torn tail when the
    record is otherwise whole: its own offset in PHYSICALOFFSET, a size by its fields that ends in
    the landed byte, every check passing with that size. The same head with a wrong
    PHYSICALOFFSET, or a landed byte that is not the size's, stays corruption."""
    path = tmp_path / "cl"
    cl = open_log(path, size=64 * 1024)
    assert cl.put_messages([msg(i) for i in range(20)], keep_store_timestamp=True).ok
    end = cl.max_offset
    ar = cl.append_messages([msg(20 + i, body_len=517) for i in range(3)], True).append_result
    first, size = ar.physical_offsets[0], ar.sizes[0]
    assert size > 256  # else three missing bytes leave the size whole
    cl.shutdown()
    f = path / f"{first - first % (64 * 1024):020d}"
    data = bytearray(f.read_bytes())
    lo = first % (64 * 1024)
    data[lo:lo + 3] = bytes(3)
    if cut == "wrong-offset":
        data[lo + 28:lo + 36] = (first + 1).to_bytes(8, "big")
    elif cut == "wrong-low-byte":
        data[lo + 3] ^= 0x01
    f.write_bytes(data)
    cl = open_log(path, size=64 * 1024)
    if cut == "three-bytes":
        assert recovery.recover_normally(cl) == end == cl.max_offset
    else:
        with pytest.raises(StoreCorruptionError, match="not a torn tail"):
            recovery.recover_normally(cl)
    cl.shutdown()


def test_bit_flip_in_committed_message_names_file_and_offset(tmp_path: Path) -> None:
    path = tmp_path / "cl"
    cl = open_log(path)
    ar = cl.put_messages([msg(i) for i in range(60)], keep_store_timestamp=True).append_result
    cl.shutdown()
    victim = ar.physical_offsets[-5]
    name = f"{victim - victim % SIZE:020d}"
    data = bytearray((path / name).read_bytes())
    data[victim % SIZE + 100] ^= 0x04  # inside the body
    (path / name).write_bytes(data)
    cl = open_log(path)
    with pytest.raises(StoreCorruptionError) as err:
        recovery.recover_normally(cl)
    assert err.value.path.endswith(name) and err.value.file_offset == victim % SIZE
    assert err.value.physical_offset == victim and "CRC" in str(err.value)
    cl.shutdown()


def test_flip_in_last_flushed_message_caught_by_checkpoint(tmp_path: Path) -> None:
    class Ckpt:
        physic_msg_timestamp = 0
        physic_flushed_offset = 0

    path = tmp_path / "cl"
    ckpt = Ckpt()
    cl = open_log(path, checkpoint=ckpt)
    ar = cl.put_messages([msg(i) for i in range(10)] + [msg(50)], keep_store_timestamp=True).append_result
    cl.start()
    cl.shutdown()
    assert ckpt.physic_msg_timestamp == 2050
    assert ckpt.physic_flushed_offset == cl.max_offset  # the flush service records the durable offset
    ckpt.physic_flushed_offset = 0  # as a checkpoint Apache wrote: the timestamp rule must catch it alone
    victim = ar.physical_offsets[-2]  # stored at 2009 < 2050: flushed, so acknowledged
    data = bytearray((path / "00000000000000000000").read_bytes())
    data[victim % SIZE + 90] ^= 1
    data[ar.physical_offsets[-1]:] = bytes(len(data) - ar.physical_offsets[-1])  # nothing follows
    (path / "00000000000000000000").write_bytes(data)
    cl = open_log(path)
    with pytest.raises(StoreCorruptionError, match="before the last flushed message"):
        recovery.recover_normally(cl, ckpt)
    cl.shutdown()


def test_manifest_messages_reproduce_apache_commitlog(fixture_root, fixture_set, manifests, tmp_path) -> None:
    """Issue 'must show' (b): same fields + store timestamps + 1 MiB files => Apache's bytes.

    Variety bodies are not in the manifest (only their SHA-1), so they are taken from the store;
    every other field comes from the manifest. Records Apache's scheduler re-delivered are put
    like any other record (topic, properties and timestamps as recorded), so they match too.
    """
    apache = fixture_root / fixture_set.classic
    files = commitlog_bytes(apache)
    rows = sorted(manifests(fixture_set.classic), key=lambda r: r["commitLogOffset"])
    msgs = []
    for row in rows:
        body = None
        if fixture_set.name == "variety":
            data, pos = record_at(files, row["commitLogOffset"])
            body = decode_message(data, pos).body
        msgs.append(row_to_message(row, body))
    cl = open_log(tmp_path / "commitlog", 1 << 20)
    for m in msgs:  # single puts, as Apache's writer did
        r = cl.append_messages([m], keep_store_timestamp=True)
        assert r.ok
        assert r.append_result.wrote_offset == m.commitlog_offset
        assert r.append_result.queue_offsets[0] == m.queue_offset
    assert cl.max_offset == fixture_set.classic_max_offset
    cl.shutdown()
    ours = commitlog_bytes(tmp_path)
    assert sorted(ours) == sorted(files)
    for start in files:
        assert ours[start] == files[start], f"commitlog file {start:020d} differs"


def test_every_record_of_fixture_scans_with_crc(fixture_root, fixture_set) -> None:
    count = 0
    for data in commitlog_bytes(fixture_root / fixture_set.classic).values():
        pos = 0
        while True:
            req = check_message_and_return_size(data, pos, True)
            if not req.success or req.msg_size == 0:
                break
            count += 1
            pos += req.msg_size
    assert count == {"plain": 5000, "variety": 2991}[fixture_set.name]


def test_past_the_flushed_offset_any_garbage_is_the_unfinished_write(tmp_path: Path) -> None:
    """Issue 13.4: the checkpointed flushed offset decides. A record with a garbled (non-zero) head
    and whole records after it is the unfinished last write when it lies past that offset (a copy
    killed mid-way stores chunks in no reliable order), and damage when a flush covered it."""
    path = tmp_path / "cl"
    cl = open_log(path)
    ar = cl.put_messages([msg(i) for i in range(30)], keep_store_timestamp=True).append_result
    cl.shutdown()
    victim = ar.physical_offsets[20]
    name = f"{victim - victim % SIZE:020d}"
    data = bytearray((path / name).read_bytes())
    data[victim % SIZE:victim % SIZE + 4] = (127).to_bytes(4, "big")  # TOTALSIZE garbled, body runs past it
    (path / name).write_bytes(data)

    class Ckpt:
        physic_msg_timestamp = 0
        physic_flushed_offset = victim  # the last flush ended right before it

    cl = open_log(path)
    assert recovery.recover_normally(cl, Ckpt()) == victim == cl.max_offset
    assert cl.get_data(ar.physical_offsets[19]) is not None
    cl.shutdown()
    # the truncated bytes are gone for good: nothing stale for a later torn write to mix with
    assert bytes((path / name).read_bytes()[victim % SIZE:]) == bytes(SIZE - victim % SIZE)
    (path / name).write_bytes(data)
    Ckpt.physic_flushed_offset = victim + 1
    cl = open_log(path)
    with pytest.raises(StoreCorruptionError, match=f"everything below offset {victim + 1} was flushed"):
        recovery.recover_normally(cl, Ckpt())
    cl.shutdown()


def test_group_commit_answers_the_rest_of_a_group_when_one_waiter_gave_up(tmp_path: Path) -> None:
    """An async put whose own timeout fired cancels the future it awaited; the group commit
    then completes every other request of the same flush pass (before: the cancelled future
    raised inside the pass and the requests after it were never answered)."""
    cl = open_log(tmp_path / "cl", 1 << 20, flush_disk_type=SYNC_FLUSH, sync_flush_timeout_ms=5000)
    svc = cl.flush_service  # not started: the test drives its passes
    reqs = []
    for i in range(3):
        ar = cl.append_messages([msg(i)]).append_result
        reqs.append(svc.put_request(ar.end_offset))
    assert reqs[0].future.cancel()  # the first waiter gave up
    svc._run_once()
    assert [r.future.result(timeout=1) for r in reqs[1:]] == [PutMessageStatus.PUT_OK] * 2
    late = svc.put_request(cl.append_messages([msg(9)]).append_result.end_offset)
    late.future.cancel()
    cl.shutdown()  # the final flush skips a cancelled waiter too, and does not raise

