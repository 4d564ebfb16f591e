"""Seeded crash loop (issue 13.4): SIGKILL a batch writer at random moments, many times over the
same store; every restart must recover on its own and every acknowledgement must survive.

Each round starts the writer on the store the previous round killed (so each round's start is an
abnormal recovery of a store killed mid-write), lets it acknowledge a random number of messages in
batches of 16 (the process spends nearly all its time inside ``put_messages``, so most kills land
mid-batch: mid-encode, mid-copy or between copy and acknowledgement), and kills it. A round whose
writer cannot start (recovery refused the store) fails the test with the writer's error. At the end
one store check verifies every acknowledgement of every round, at its acknowledged offsets.

``RMQPY_CRASH_ROUNDS`` (default 100; CI time, issue 13.4 ran 200) and ``RMQPY_CRASH_SEED`` (default 13) reproduce a run;
more rounds are a soak (``RMQPY_CRASH_ROUNDS=1000``).
"""
from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.broker.store.test_crash import check_store, kill_after, spawn_writer

ROUNDS = int(os.environ.get("RMQPY_CRASH_ROUNDS", "100"))
SEED = int(os.environ.get("RMQPY_CRASH_SEED", "13"))
BATCH = 16


def _round(root: Path, flush: str, first: int, target: int) -> list[tuple[int, int, int, int]]:
    return kill_after(spawn_writer(root, flush, BATCH, first), target, timeout=20)[0]


@pytest.mark.multiprocess
@pytest.mark.timeout(900)
def test_kill9_mid_batch_many_times_always_restarts(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    root = tmp_path / "store"
    acks: list[tuple[int, int, int, int]] = []
    for n in range(ROUNDS):
        flush = rng.choice(("SYNC_FLUSH", "ASYNC_FLUSH"))
        got = _round(root, flush, len(acks) and acks[-1][0] + 1, rng.randrange(1, 6) * BATCH + rng.randrange(BATCH))
        acks += got
    assert (root / "abort").exists()
    assert len(acks) >= ROUNDS, f"only {len(acks)} acks in {ROUNDS} rounds"
    check_store(root, acks)


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_a_refused_recovery_leaves_the_checkpoint_alone(tmp_path: Path) -> None:
    """The fault suite's bit-flip nemesis: a store refuses to start over a flipped bit, the operator
    restores the byte, the next start must work. A refused load maps every file as full; the
    shutdown of that half-loaded store must not publish those positions as the flushed offset,
    or the restored store is refused again ("everything below the file end was flushed")."""
    from broker.store.errors import StoreCorruptionError
    from broker.store.message_store import DefaultMessageStore
    from tests.broker.store.test_crash import SETTINGS, run_and_kill

    root = tmp_path / "store"
    acks = run_and_kill(root, "SYNC_FLUSH", 1, 200)
    _, phy, _, _ = acks[len(acks) // 2]
    size = SETTINGS["mapped_file_size_commit_log"]
    path = root / "commitlog" / f"{phy - phy % size:020d}"
    at = phy % size + 100
    with open(path, "r+b") as fh:
        fh.seek(at)
        old = fh.read(1)[0]
        fh.seek(at)
        fh.write(bytes([old ^ 0x10]))
    with pytest.raises(StoreCorruptionError):
        DefaultMessageStore(store_path_root_dir=str(root), **SETTINGS).load()
    with open(path, "r+b") as fh:
        fh.seek(at)
        fh.write(bytes([old]))
    check_store(root, acks)
