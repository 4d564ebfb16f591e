"""broker.store.record_walk: the one record loop of recovery, dispatch, DLedger re-dispatch and inspect."""
from __future__ import annotations

from broker.store import message as m
from broker.store.record_walk import BAD, END, RECORD, ROLL, SKIP, iter_records, walk
from tests.broker.store._store_manifest import commitlog_bytes


def _records(*msgs: m.MessageExt) -> bytearray:
    buf = bytearray()
    for msg in msgs:
        buf += m.encode_message(msg, 0, len(buf))
    return buf


def test_apache_commitlog_walks_to_every_manifest_record(fixture_root, fixture_set, manifests) -> None:
    """Every file of Apache's classic store: the RECORD steps are exactly the manifest's records
    in order, full files end in the end-of-file blank (ROLL) and the last one at the store's end."""
    files = commitlog_bytes(fixture_root / fixture_set.classic)
    seen: list[int] = []
    bases = sorted(files)
    for i, base in enumerate(bases):
        data = files[base]
        steps = list(walk(data, 0, len(data), m.check_message_and_return_size, check_crc=True))
        kinds = [s[0] for s in steps]
        assert set(kinds[:-1]) == {RECORD}, kinds[-3:]
        seen += [base + s[1] for s in steps[:-1]]
        last = steps[-1]
        if i < len(bases) - 1:
            assert last[0] == ROLL, (base, last[:3])
        else:
            assert last[0] == BAD and base + last[1] == fixture_set.classic_max_offset, (base, last[:3])
        for kind, pos, size, req, _ in steps[:-1]:
            assert req.success and size == req.msg_size and req.commitlog_offset == base + pos
    expected = sorted(r["commitLogOffset"] for r in manifests(fixture_set.classic))
    assert seen == expected


def test_skip_roll_bad_end_and_names() -> None:
    good = m.MessageExt(topic="T", body=b"a", queue_id=0)
    bad_name = m.MessageExt(topic="../evil", body=b"b", queue_id=0)
    buf = _records(good, bad_name, good)
    n = len(buf)
    buf += m.blank_record(64)
    parse = m.check_message_and_return_size
    steps = list(walk(buf, 0, len(buf), parse, check_names=True))
    assert [s[0] for s in steps] == [RECORD, SKIP, RECORD, ROLL]
    assert steps[1][4] == "topic '../evil' has characters outside ^[%|a-zA-Z0-9_-]+$"
    assert steps[-1][1] == n
    # recovery and inspect (check_names=False) count the badly named record as a record
    assert [s[0] for s in walk(buf, 0, len(buf), parse)] == [RECORD, RECORD, RECORD, ROLL]
    # a torn record: BAD at its start; an exhausted region: END at its end
    torn = _records(good) + _records(good)[:30]
    first = len(_records(good))
    assert [(s[0], s[1]) for s in walk(torn, 0, len(torn), parse)] == [(RECORD, 0), (BAD, first)]
    assert [(s[0], s[1]) for s in walk(torn, 0, first, parse)] == [(RECORD, 0), (END, first)]
    assert [p for p, _ in iter_records(torn)] == [0]


def test_framed_entry_that_is_not_a_message_is_skipped_by_its_frame() -> None:
    """DLedger: an entry whose body is not a message is skipped by the entry's own size
    (entry_size_at), never by guessing; without a frame the same bytes are BAD."""
    junk = bytes(100)
    buf = bytearray(junk) + _records(m.MessageExt(topic="T", body=b"x", queue_id=1))
    parse = m.check_message_and_return_size
    framed = list(walk(buf, 0, len(buf), parse, entry_size_at=lambda b, pos, off: 100 if pos == 0 else -1,
                       base=1000))
    assert [(s[0], s[1], s[2]) for s in framed[:2]] == [(SKIP, 0, 100), (RECORD, 100, len(buf) - 100)]
    assert framed[0][4] == "entry body is not a valid message" and framed[-1][0] == END
    assert [s[0] for s in walk(buf, 0, len(buf), parse)] == [BAD]
