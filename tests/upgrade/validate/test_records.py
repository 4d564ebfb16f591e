"""The vectorised screening agrees with the shared codecs, record by record (no Spark)."""
from __future__ import annotations

import mmap
import random
from pathlib import Path

import numpy as np
import pytest

from broker.store import message as codec
from dledger import entry as dl_codec
from upgrade.validate import records as rec


def _map(path: Path) -> tuple[mmap.mmap, object]:
    fh = open(path, "rb")
    return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ), fh


def _old_files(root: Path) -> list[Path]:
    return sorted((root / "commitlog").iterdir())


def test_fields_match_codec_on_every_fixture_record(fixture_root, fixture_set):
    root = fixture_root / fixture_set.mixed
    seen = 0
    for path in _old_files(root):
        mm, fh = _map(path)
        try:
            starts, kind, _end = rec.walk_classic(mm, 0, len(mm), len(mm))
            assert kind == "blank"
            a = np.frombuffer(mm, dtype=np.uint8)
            f = rec.message_fields(a, np.array(starts), len(mm), True, mm)
            assert f.valid.all() and f.parsed.all()
            topics = rec.topics_of(mm, f, np.arange(len(starts)))
            for i, p in enumerate(starts):
                req = codec.check_message_and_return_size(mm, p, True)
                assert req.success and req.msg_size == f.total[i]
                assert (req.queue_id, req.consume_queue_offset, req.commitlog_offset, req.sys_flag) == (
                    f.queue_id[i], f.queue_offset[i], f.phy[i], f.sys_flag[i])
                assert req.topic.encode() == topics[i]
            seen += len(starts)
            del a, f
        finally:
            mm.close()
            fh.close()
    assert seen > 2000


@pytest.mark.parametrize("seed", range(3))
def test_screening_agrees_with_codec_on_corrupted_records(fixture_root, seed):
    """Random single-byte corruptions of headers, lengths, topic and properties."""
    path = _old_files(fixture_root / "variety-mixed")[1]
    data = bytearray(path.read_bytes())
    mv = memoryview(data)
    starts, _k, _e = rec.walk_classic(mv, 0, len(data), len(data))
    rnd = random.Random(seed)
    disagreements = []
    for p in rnd.sample(starts, 120):
        total = int.from_bytes(data[p:p + 4], "big")
        for at in (rnd.randrange(0, 48), rnd.randrange(84, total), total - rnd.randrange(1, 40)):
            old = data[p + at]
            data[p + at] = old ^ (1 << rnd.randrange(8))
            a = np.frombuffer(data, dtype=np.uint8)
            fast = bool(rec.message_fields(a, np.array([p]), len(data), True, data).valid[0])
            slow, _why = rec.codec_verdict(data, p, True)
            if fast != slow:
                disagreements.append((p, at, fast, slow))
            data[p + at] = old
            del a
    assert disagreements == []


def test_entry_screening_agrees_with_dledger_codec(fixture_root):
    path = sorted((fixture_root / "rmq-mixed" / "dledger-n0" / "data").iterdir())[0]
    data = bytearray(path.read_bytes())
    starts, kind, _e = rec.walk_dledger(data, 0, len(data), len(data))
    assert kind == "blank" and len(starts) > 300
    rnd = random.Random(7)
    for p in rnd.sample(starts, 150):
        at = rnd.choice([0, 3, 5, 7, 40, 41, 44, 47, 48 + rnd.randrange(200)])
        old = data[p + at]
        data[p + at] = old ^ 0x11
        a = np.frombuffer(data, dtype=np.uint8)
        fast = bool(rec.entry_fields(a, np.array([p]), len(data), True, data).valid[0])
        try:
            dl_codec.check_header(data, p, verify_crc=True)
            slow = True
        except dl_codec.EntryCorruptionError:
            slow = False
        assert fast == slow, (p, at)
        data[p + at] = old
        del a


def test_sync_finds_record_starts_from_any_byte(fixture_root):
    path = _old_files(fixture_root / "variety-mixed")[2]
    mm, fh = _map(path)
    try:
        starts, _k, end = rec.walk_classic(mm, 0, len(mm), len(mm))
        rnd = random.Random(3)
        for q in rnd.sample(range(1, end), 200):
            nxt = next((s for s in starts if s >= q), end)  # the blank at ``end`` also counts
            assert rec.sync_classic(mm, q, len(mm), len(mm)) == nxt
        assert rec.sync_classic(mm, end + 1, len(mm), len(mm)) is None  # zeros after the blank
    finally:
        mm.close()
        fh.close()


def test_runs_by_key():
    keys = np.array([0, 1, 0, 0, 1, 0])
    q = np.array([5, 0, 6, 8, 1, 9])
    offs = np.arange(6) * 100
    assert rec.runs_by_key(keys, q, offs) == [(0, 5, 6, 2, 0, 200), (0, 8, 9, 2, 300, 500), (1, 0, 1, 2, 100, 400)]


def test_fast_tags_codes_match_codec(fixture_root):
    """Tags codes of every variety message (non-ASCII, multi-tags, no tags) vs the codec."""
    from upgrade.validate.cq import tags_code_of

    path = _old_files(fixture_root / "variety-mixed")[3]
    mm, fh = _map(path)
    try:
        starts, _k, _e = rec.walk_classic(mm, 0, len(mm), len(mm))
        a = np.frombuffer(mm, dtype=np.uint8)
        f = rec.message_fields(a, np.array(starts), len(mm), False, mm)
        poff = (f.topic_off + f.topic_len).tolist()
        plen = rec.gather(a, f.topic_off + f.topic_len, 2).tolist()
        for p, o, n in zip(starts, poff, plen):
            want = codec.check_message_and_return_size(mm, p, False)
            if want.topic != codec.RMQ_SYS_SCHEDULE_TOPIC:
                assert tags_code_of(bytes(mm[o + 2:o + 2 + n])) == want.tags_code
        del a, f
    finally:
        mm.close()
        fh.close()


def test_topic_ids_are_exact():
    topics = [b"A", b"TopicA", b"TopicB", b"same-head-XXXXXX-same-tail", b"same-head-YYYYYY-same-tail", b"",
              b"%RETRY%VarGroupC", b"TopicA"]
    buf = bytearray()
    offs = []
    for t in topics * 3:
        buf += b"\xff" * 5
        offs.append(len(buf))
        buf += t
    a = np.frombuffer(bytes(buf), dtype=np.uint8)
    ids, names = rec.topic_ids(a, bytes(buf), np.array(offs), np.array([len(t) for t in topics * 3]))
    assert [names[i] for i in ids] == topics * 3
    assert len(set(names)) == len(names) == 7


def test_vectorised_tags_codes_match_codec(fixture_root):
    """digest.tags_codes (window + Horner, per-blob fallback) equals the codec on every record."""
    from upgrade.validate import digest

    for store, idx in (("variety-mixed", 3), ("rmq-mixed", 1)):
        path = _old_files(fixture_root / store)[idx]
        mm, fh = _map(path)
        try:
            starts, _k, _e = rec.walk_classic(mm, 0, len(mm), len(mm))
            a = np.frombuffer(mm, dtype=np.uint8)
            f = rec.message_fields(a, np.array(starts), len(mm), False, mm)
            rows = np.arange(len(starts))
            got = digest.tags_codes(mm, f.props_off, f.props_len, f.props_window(a, rows, digest.PROPS_WINDOW))
            for i, p in enumerate(starts):
                want = codec.check_message_and_return_size(mm, p, False)
                if want.topic != codec.RMQ_SYS_SCHEDULE_TOPIC:
                    assert got[i] == want.tags_code, (store, p)
            del a, f
        finally:
            mm.close()
            fh.close()


def test_synthetic_tags_codes():
    from upgrade.validate import digest
    from upgrade.validate.cq import tags_code_of

    blobs = [b"", b"TAGS\x01", b"TAGS\x01a", b"TAGS\x01tag3\x02KEYS\x01k", b"KEYS\x01k\x02TAGS\x01zz",
             b"TAGS\x01" + "\u00e4\u00f6".encode() + b"\x02X\x01y", b"TAGS\x01" + b"x" * 31, b"TAGS\x01" + b"x" * 32,
             b"TAGS\x01" + b"y" * 40 + b"\x02A\x01b", b"TAG", b"TAGS\x01\x02KEYS\x01b", b"TAGS\x01Hello World_123-~"]
    buf = b"".join(blobs) + bytes(64)
    offs = np.cumsum([0] + [len(b) for b in blobs[:-1]])
    a = np.frombuffer(buf, np.uint8)
    got = digest.tags_codes(buf, offs, np.array([len(b) for b in blobs]), rec.block(a, offs, digest.PROPS_WINDOW))
    assert got.tolist() == [tags_code_of(b) for b in blobs]


def test_digest_sensitivity():
    """Changing any one field of one tuple changes the bucket digest; order does not matter."""
    from upgrade.validate import digest

    rnd = np.random.default_rng(3)
    cols = [rnd.integers(0, 1 << 40, 5000) for _ in range(4)]
    base = digest.unit_digest(cols[0] // digest.CQ_BUCKET, digest.tuple_hash(*cols))
    perm = rnd.permutation(5000)
    assert digest.unit_digest(cols[0][perm] // digest.CQ_BUCKET, digest.tuple_hash(*[c[perm] for c in cols])) == base
    for k in range(4):
        for delta in (1, -1, 1 << 31, 20):
            changed = [c.copy() for c in cols]
            changed[k][1234] += delta
            assert digest.unit_digest(changed[0] // digest.CQ_BUCKET, digest.tuple_hash(*changed)) != base
