"""Crash safety with real processes: SIGKILL a writer mid-stream, reopen, check every ack.

After the kill the ``abort`` file is left behind, so the reopen runs abnormal recovery:
re-dispatch from the checkpoint, drop a torn tail, keep every acknowledged message at the
offset it was acknowledged with, and leave ConsumeQueues that agree with the commitlog.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker.store.errors import StoreCorruptionError
from broker.store.message import encode_message, MessageExt
from broker.store.message_store import DefaultMessageStore, iter_messages
from tests.broker.store._store_writer import body

REPO = Path(__file__).resolve().parents[3]
SETTINGS = dict(mapped_file_size_commit_log=64 * 1024, warm_mapped_file_enable=False,
                max_hash_slot_num=1000, max_index_num=4000)


def spawn_writer(root: Path, flush: str, batch: int, first: int = 0) -> subprocess.Popen:
    """The writer child on ``root``, numbering its messages from ``first``."""
    return subprocess.Popen([sys.executable, "-m", "tests.broker.store._store_writer", str(root), flush, str(batch),
                             str(first)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def kill_after(proc: subprocess.Popen, target: int, timeout: float = 40) -> tuple[list[tuple[int, int, int, int]], str]:
    """Wait for "started" (raise with the writer's stderr if it never comes: its recovery refused the
    store), read acks until ``target``, SIGKILL it; returns every ack it printed and its stderr."""
    acks: list[tuple[int, int, int, int]] = []
    err = ""
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "started":
            proc.wait(10)
            raise AssertionError(f"writer did not start (exit {proc.returncode}): "
                                 f"{(proc.stderr.read() if proc.stderr else '')[-3000:]}")
        deadline = time.monotonic() + timeout
        while len(acks) < target and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith("ack"):
                acks.append(tuple(int(x) for x in line.split()[1:]))  # type: ignore[arg-type]
        os.kill(proc.pid, signal.SIGKILL)
        rest, err = proc.communicate(timeout=10)
        acks += [tuple(int(x) for x in ln.split()[1:]) for ln in rest.splitlines() if ln.startswith("ack")]  # type: ignore[misc]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return acks, err


def run_and_kill(root: Path, flush: str, batch: int, min_acks: int) -> list[tuple[int, int, int, int]]:
    """Start the writer, SIGKILL it after at least ``min_acks`` acks; returns the acks."""
    proc = spawn_writer(root, flush, batch)
    acks, err = kill_after(proc, min_acks + random.randrange(min_acks))
    assert proc.returncode == -signal.SIGKILL
    assert len(acks) >= min_acks, f"writer too slow: {len(acks)} acks; stderr: {err[-2000:]}"
    return acks


def check_store(root: Path, acks: list[tuple[int, int, int, int]]) -> None:
    store = DefaultMessageStore(store_path_root_dir=str(root), **SETTINGS)
    store.load()
    store.start()
    try:
        assert not store.last_exit_ok
        for i, phy, qid, qoff in acks:
            m = store.look_message_by_offset(phy)
            assert m is not None and m.body == body(i) and (m.queue_id, m.queue_offset) == (qid, qoff), i
        assert store.wait_dispatched(20)
        # ConsumeQueues agree with the commitlog, record by record
        seen: dict[tuple[str, int], list[int]] = {}
        for phy, m in iter_messages(store):
            seen.setdefault((m.topic, m.queue_id), []).append(phy)
            assert m.queue_offset == len(seen[(m.topic, m.queue_id)]) - 1
        for (topic, qid), phys in seen.items():
            cq = store.find_consume_queue(topic, qid)
            assert cq.max_offset_in_queue == len(phys)
            assert [u[0] for _, u in cq.iter_units(0)] == phys
        assert sum(len(v) for v in seen.values()) >= len(acks)
        # the store keeps working after recovery
        r = store.put_message(MessageExt("Crash0", b"after", queue_id=0))
        assert r.ok and r.append_result.queue_offsets == [len(seen.get(("Crash0", 0), []))]
    finally:
        store.shutdown()


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
@pytest.mark.parametrize("flush,batch", [("SYNC_FLUSH", 1), ("ASYNC_FLUSH", 8)])
def test_kill9_mid_stream_keeps_every_ack(tmp_path: Path, flush: str, batch: int) -> None:
    root = tmp_path / "store"
    acks = run_and_kill(root, flush, batch, 300)
    assert (root / "abort").exists()
    check_store(root, acks)


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_torn_tail_after_kill_is_dropped(tmp_path: Path) -> None:
    """A half-written record after the last ack (what a power cut leaves) is truncated."""
    root = tmp_path / "store"
    acks = run_and_kill(root, "SYNC_FLUSH", 1, 100)
    # find the end of the log and write half a record there, as a torn write would
    store = DefaultMessageStore(store_path_root_dir=str(root), **SETTINGS)
    store.load()
    end = store.get_max_phy_offset()
    store.commitlog.shutdown()  # leave abort in place: still a crashed store
    store.consume_queue_store.shutdown()
    store.index_service.shutdown()
    store.checkpoint.shutdown()
    store.lock.release()
    size = 64 * 1024
    room = size - end % size - 8
    if room < 120:  # the writer was about to roll (p ~ 0.2%): a torn write cannot happen here
        pytest.skip("log end too close to the file end for a torn record")
    torn = b"torn" * (min(200, room - 100) // 4)
    rec = encode_message(MessageExt("Crash0", torn, store_timestamp=int(time.time() * 1000) + 10_000), 0, end)
    with open(root / "commitlog" / f"{end - end % size:020d}", "r+b") as fh:
        fh.seek(end % size)
        fh.write(rec[: len(rec) // 2])
    check_store(root, acks)
    store = DefaultMessageStore(store_path_root_dir=str(root), **SETTINGS)
    store.load()
    try:
        assert store.get_max_phy_offset() >= end
        assert all(not m.body.startswith(b"torntorn") for _, m in iter_messages(store, end))
    finally:
        store.commitlog.shutdown()
        store.consume_queue_store.shutdown()
        store.index_service.shutdown()
        store.checkpoint.shutdown()
        store.lock.release()


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_bit_flip_in_committed_message_is_reported(tmp_path: Path) -> None:
    root = tmp_path / "store"
    acks = run_and_kill(root, "SYNC_FLUSH", 1, 200)
    i, phy, _, _ = acks[len(acks) - 20]  # acknowledged, with acknowledged data after it
    size = 64 * 1024
    name = f"{phy - phy % size:020d}"
    path = root / "commitlog" / name
    data = bytearray(path.read_bytes())
    data[phy % size + 100] ^= 0x10  # inside the body
    path.write_bytes(data)
    store = DefaultMessageStore(store_path_root_dir=str(root), **SETTINGS)
    with pytest.raises(StoreCorruptionError) as err:
        store.load()
    assert err.value.path.endswith(name) and err.value.file_offset == phy % size
    assert name in str(err.value) and str(phy % size) in str(err.value)
    # the store refused to start and left the data alone
    assert path.read_bytes() == bytes(data)
