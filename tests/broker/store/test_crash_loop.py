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

The writers are forked from one "zygote" process (:class:`tests.remoting.py_zygote.Zygote`) that
imported the writer module (and so the store) once: a fresh interpreter's imports were most of a
round's time (CI budget). Each writer is still its own process (``python -m`` of the writer, run
as ``__main__``), SIGKILLed mid-write, and starts its store from the files only (the zygote never
opens a store and runs no thread); test_crash's ``kill_after`` drives it through
:class:`tests.remoting.py_zygote.Forked`, the ``subprocess.Popen`` subset it uses.
"""
from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Iterator

import pytest

from tests.broker.store.test_crash import check_store, kill_after
from tests.remoting.py_zygote import Zygote

ROUNDS = int(os.environ.get("RMQPY_CRASH_ROUNDS", "100"))
SEED = int(os.environ.get("RMQPY_CRASH_SEED", "13"))
BATCH = 16
WRITER = "tests.broker.store._store_writer"


@pytest.fixture
def zygote() -> Iterator[Zygote]:
    z = Zygote([WRITER])
    try:
        yield z
    finally:
        z.close()


def _round(zygote: Zygote, root: Path, flush: str, first: int, target: int) -> list[tuple[int, int, int, int]]:
    w = zygote.spawn(WRITER, str(root), flush, str(BATCH), str(first))
    try:
        return kill_after(w, target, timeout=20)[0]  # type: ignore[arg-type]  # the Popen subset it uses
    finally:
        for f in (w.stdout, w.stderr):
            f.close()


@pytest.mark.multiprocess
@pytest.mark.timeout(900)
def test_kill9_mid_batch_many_times_always_restarts(tmp_path: Path, zygote: Zygote) -> None:
    rng = random.Random(SEED)
    root = tmp_path / "store"
    acks: list[tuple[int, int, int, int]] = []
    for n in range(ROUNDS):
        flush = rng.choice(("SYNC_FLUSH", "ASYNC_FLUSH"))
        got = _round(zygote, root, flush, len(acks) and acks[-1][0] + 1,
                     rng.randrange(1, 6) * BATCH + rng.randrange(BATCH))
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
