"""broker/store/_index_write.c: the C path of the IndexFile writes exactly what the Python loop writes.

Rules checked (the module's rules):
- for many generated records (ASCII and non-ASCII keys, empty and repeated spaces, collisions in
  a small slot table, files that fill and roll mid-record, begin timestamps unset, zero or
  negative, huge time deltas, a key whose Java hash is Integer.MIN_VALUE) an IndexService with
  the C path and one without write byte-identical files with equal attributes, and answer
  queries alike;
- C answers the everyday record and declines (writing nothing) a non-ASCII key, a record that
  would fill the file, entries past the reserved blocks, out-of-range numbers, a geometry that
  does not fit the buffer, a read-only buffer;
- in source mode (``RMQPY_PURE_PYTHON=1``) it is never imported, and the Python loop answers.
"""
from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from broker import native
from broker.store import index_file as ix
from broker.store.dispatch import DispatchRequest
from broker.store.index_file import IndexFile, IndexService
from broker.store.java_hash import index_key_hash, java_string_hash

PURE = os.environ.get(native.PURE_ENV) == "1"
iw = native.c_extension("broker.store._index_write")
needs_c = pytest.mark.skipif(iw is None, reason="source mode: the C path is not used (checked below)")
MAX_LONG = (1 << 63) - 1
INT_MIN = -(1 << 31)


def min_value_key(prefix: str) -> str:
    """An ASCII key whose ``prefix + key`` has the Java hash Integer.MIN_VALUE (index hash 0)."""
    h = java_string_hash(prefix) & 0xFFFFFFFF
    n = 7  # 31**7 > 2**32: seven base-31 digits reach any residue
    base = (h * pow(31, n, 1 << 32) + sum(33 * 31 ** i for i in range(n))) & 0xFFFFFFFF
    t = (0x80000000 - base) & 0xFFFFFFFF
    digits = []
    for _ in range(n):
        t, d = divmod(t, 31)
        digits.append(chr(33 + d))
    key = "".join(reversed(digits))
    assert java_string_hash(prefix + key) == INT_MIN and index_key_hash(prefix + key) == 0
    return key


def _key(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.05:
        return rng.choice(["中文", "é", "k\u00ff", "😀x"])
    if r < 0.1:
        return min_value_key("TopicA#")
    if r < 0.15:
        return "Aa" if rng.random() < 0.5 else "BB"  # equal Java hashes
    return "".join(rng.choice("abcXYZ019_-#|%\t") for _ in range(rng.randrange(1, 12)))


def _timestamp(rng: random.Random, i: int) -> int:
    r = rng.random()
    if r < 0.05:
        return rng.choice([0, -1, -5000, 1, 999, INT_MIN])
    if r < 0.1:
        return rng.choice([MAX_LONG, 1 << 62, 1_700_000_000_000 + (1 << 33) * 1000, 1_700_000_000_000 + 999])
    if r < 0.15:
        return 1_700_000_000_000 - rng.randrange(10**9)  # earlier than the file's begin
    return 1_700_000_000_000 + i * rng.randrange(0, 3000)


def requests(seed: int, n: int) -> list[DispatchRequest]:
    rng = random.Random(seed)
    out = []
    phy = 0
    for i in range(n):
        phy += rng.randrange(1, 400)
        topic = rng.choice(["TopicA", "TopicA", "BenchmarkTest", "%RETRY%g1", "T中"])
        uniq = "" if rng.random() < 0.15 else (f"{rng.getrandbits(128):032X}" if rng.random() < 0.9 else _key(rng))
        keys = " ".join(_key(rng) if rng.random() < 0.9 else "" for _ in range(rng.randrange(0, 4)))
        if rng.random() < 0.1:
            keys = "  " + keys + "   "
        sys_flag = rng.choice([0, 0, 0, 0x4, 0x8, 0xC])
        out.append(DispatchRequest(topic, 0, phy, 100, 0, _timestamp(rng, i), i, keys=keys, uniq_key=uniq,
                                   sys_flag=sys_flag))
    return out


def _ticks():
    t = 1_795_321_775.0
    while True:
        t += 1.0
        yield t


def _service(root: Path, slots: int, num: int, c_path: bool) -> IndexService:
    ticks = _ticks()
    svc = IndexService(root, slots, num, clock=lambda: next(ticks), max_msgs_num_batch=10_000)
    svc.c_path = c_path
    return svc


def _attrs(f: IndexFile) -> tuple:
    return (f.file_name, f.index_count, f.hash_slot_count, f.begin_phy_offset, f.end_phy_offset,
            f.begin_timestamp, f.end_timestamp)


@pytest.mark.parametrize("seed,slots,num,n", [
    (1, 7, 50, 600),  # collisions, many rolls, some mid-record
    (2, 1, 1000, 300),  # one slot: every key in one chain
    (3, 1000, 20_000, 3000),  # granule edges of the block reservation (20-byte entries, 4 KiB pages)
    (4, 3, 4, 200),  # three entries per file
])
def test_c_and_python_paths_write_the_same_files(tmp_path: Path, seed: int, slots: int, num: int, n: int) -> None:
    reqs = requests(seed, n)
    svcs = [_service(tmp_path / "c", slots, num, True), _service(tmp_path / "py", slots, num, False)]
    for r in reqs:
        for svc in svcs:
            svc.dispatch(r)
    for r in reqs[-20:]:  # a re-dispatch changes nothing
        for svc in svcs:
            svc.dispatch(r)
    a, b = ([_attrs(f) for f in svc.index_files] for svc in svcs)
    assert a == b
    for r in reqs[::7]:
        for key in [r.uniq_key] + r.keys.split(" "):
            if key:
                assert svcs[0].query_offset(r.topic, key, 10_000, 0, MAX_LONG) == \
                    svcs[1].query_offset(r.topic, key, 10_000, 0, MAX_LONG), key
                assert svcs[0].query_offset(r.topic, key, 3, r.store_timestamp, MAX_LONG) == \
                    svcs[1].query_offset(r.topic, key, 3, r.store_timestamp, MAX_LONG), key
    for svc in svcs:
        svc.shutdown()
    names = sorted(p.name for p in (tmp_path / "c" / "index").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "py" / "index").iterdir())
    assert len(names) == len(a)
    for name in names:
        assert (tmp_path / "c" / "index" / name).read_bytes() == (tmp_path / "py" / "index" / name).read_bytes(), name


def _python_record(f: IndexFile, r: DispatchRequest) -> None:
    """IndexService.dispatch's Python loop for a record that fits in ``f``."""
    keys = [ix.build_key(r.topic, r.uniq_key)] if r.uniq_key else []
    keys += [ix.build_key(r.topic, k) for k in r.keys.split(" ") if k]
    for key, h in zip(keys, f.reserve_keys(keys)):
        assert f.put_key(key, r.commitlog_offset, r.store_timestamp, h, True)


def test_c_answers_the_everyday_record_with_the_python_bytes(tmp_path: Path) -> None:
    """File by file, without rolls: C answers every ASCII record once the file's first
    reservation is made, and declines the others, writing nothing."""
    reqs = [r for r in requests(9, 4000) if r.sys_flag & 0xC != 0xC]
    files = [IndexFile(tmp_path / "c", 101, 20_000), IndexFile(tmp_path / "py", 101, 20_000)]
    answered = declined = 0
    for r in reqs:
        f = files[0]
        before = bytes(f._view)
        n = (1 if r.uniq_key else 0) + len([k for k in r.keys.split(" ") if k])
        fits = n == 0 or f._entries_base + (f.index_count + n) * 20 <= f._entries_ready
        done = f.put_record_keys(r.topic, r.uniq_key, r.keys, r.commitlog_offset, r.store_timestamp)
        if done:
            answered += 1
        else:
            declined += 1
            assert bytes(files[0]._view) == before
            _python_record(files[0], r)
        _python_record(files[1], r)
        assert _attrs(files[0])[1:] == _attrs(files[1])[1:]
        ascii_keys = (r.topic + r.uniq_key + r.keys).isascii()
        assert done == (iw is not None and ascii_keys and fits), r
    assert bytes(files[0]._view) == bytes(files[1]._view)
    if iw is None:
        assert answered == 0
    else:
        assert answered > 0.7 * len(reqs), (answered, declined)
    for f in files:
        f.close()


def _c_args(f: IndexFile, **kw) -> list:
    args = dict(view=f._view, topic="T", uniq_key="U", keys="a b", phy=1000, ts=1_700_000_000_000,
                count=f.index_count, num=f.index_num, slots=f.hash_slot_num, slot_count=f.hash_slot_count,
                begin_ts=f.begin_timestamp, begin_phy=f.begin_phy_offset, ready=f._entries_ready)
    args.update(kw)
    return list(args.values())


@needs_c
def test_c_declines_what_it_must_not_answer(tmp_path: Path) -> None:
    f = IndexFile(tmp_path / "x", 5, 10)
    assert iw.put_keys(*_c_args(f)) is None  # no blocks reserved yet: Python's (reserve_keys)
    _python_record(f, DispatchRequest("T", 0, 1, 1, 0, 1_700_000_000_000, 0, keys="k"))
    ready = f._entries_ready
    assert ready > f._entries_base + 10 * 20 or ready == f.file_size
    snapshot = bytes(f._view)
    for kw in [dict(topic="T中"), dict(uniq_key="é"), dict(keys="a b\u00ff"), dict(keys=None), dict(topic=b"T"),
               dict(phy=1 << 63), dict(ts=-(1 << 63) - 1), dict(begin_ts=1 << 64), dict(count=1.0),
               dict(count=0), dict(count=-3), dict(count=10), dict(count=9), dict(num=0), dict(num=1 << 31),
               dict(slots=0), dict(slots=-1), dict(slots=10**9), dict(slot_count=(1 << 31) - 2),
               dict(slot_count=-1), dict(ready=0), dict(ready=f._entries_base + 3 * 20 - 1),
               dict(view=bytes(f._view)), dict(view=memoryview(bytes(f._view))), dict(view="x"),
               dict(view=bytearray(40)), dict(num=1 << 40, count=(1 << 40) - 5, ready=MAX_LONG)]:
        assert iw.put_keys(*_c_args(f, **kw)) is None, kw
    assert bytes(f._view) == snapshot
    with pytest.raises(TypeError):
        iw.put_keys(*_c_args(f)[:-1])
    assert iw.put_keys(*_c_args(f, uniq_key="", keys="   ")) == (f.index_count, f.hash_slot_count)  # no keys
    assert bytes(f._view) == snapshot
    assert iw.put_keys(*_c_args(f, count=8)) is None  # 8 + 3 keys > 10: the roll is Python's
    assert iw.put_keys(*_c_args(f, count=7))[0] == 10  # 7 + 3 keys = 10: the file is just full
    f.close()


@needs_c
def test_the_min_value_hash_and_time_diff_edges(tmp_path: Path) -> None:
    key = min_value_key("T#")
    for begin_ts, ts in [(0, 5), (-7, 10_000), (1, MAX_LONG), (1000, 999), (1000, 1999), (1000, 2000),
                         (1_700_000_000_000, 1_700_000_000_000 + (1 << 31) * 1000)]:
        files = []
        for name in ("c", "py"):
            f = IndexFile(tmp_path / f"{name}{begin_ts}_{ts}", 3, 10)
            _python_record(f, DispatchRequest("T", 0, 1, 1, 0, begin_ts, 0, keys="first"))
            files.append(f)
        assert files[0].put_record_keys("T", key, "x x  " + key, 50, ts)
        _python_record(files[1], DispatchRequest("T", 0, 50, 1, 0, ts, 1, keys="x x  " + key, uniq_key=key))
        assert bytes(files[0]._view) == bytes(files[1]._view), (begin_ts, ts)
        assert _attrs(files[0])[1:] == _attrs(files[1])[1:]
        for f in files:
            f.close()


def test_source_mode_never_imports_it() -> None:
    if PURE:
        assert iw is None and ix._c_put_keys is None
        with pytest.raises(ModuleNotFoundError):
            __import__("broker.store._index_write")
    else:
        assert iw is not None and ix._c_put_keys is iw.put_keys
        assert native.native_status()["modules"]["broker.store._index_write"] == "compiled"


def test_source_mode_runs_the_python_loop(tmp_path: Path) -> None:
    f = IndexFile(tmp_path / "x", 5, 10)
    _python_record(f, DispatchRequest("T", 0, 1, 1, 0, 1000, 0, keys="k"))
    assert f.put_record_keys("T", "U", "a", 2, 2000) is (not PURE)
