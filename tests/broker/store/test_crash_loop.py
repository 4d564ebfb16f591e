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

The writers are forked from one "zygote" process that imported the writer module (and so the
store) once: a fresh interpreter's imports were most of a round's time (CI budget). Each writer
is still its own process, SIGKILLed mid-write, and starts its store from the files only (the
zygote never opens a store and runs no thread); test_crash's ``kill_after`` drives it through
:class:`ForkedWriter`, the ``subprocess.Popen`` subset it uses.
"""
from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import IO, Iterator, Optional

import pytest

from tests.broker.store.test_crash import REPO, check_store, kill_after

ROUNDS = int(os.environ.get("RMQPY_CRASH_ROUNDS", "100"))
SEED = int(os.environ.get("RMQPY_CRASH_SEED", "13"))
BATCH = 16


# The zygote: imports the writer, then per request (a line "spawn ARGS..." with the child's stdout
# and stderr pipe ends attached, or "wait PID TIMEOUT") forks a writer or reports its exit status.
ZYGOTE = r"""
import os, socket, sys, threading, time
import tests.broker.store._store_writer as writer
assert threading.active_count() == 1, threading.enumerate()
sock = socket.socket(fileno=int(sys.argv[1]))
while True:
    msg, fds, _, _ = socket.recv_fds(sock, 4096, 2)
    if not msg:
        break
    words = msg.decode().split()
    if words[0] == "spawn":
        sys.stdout.flush(); sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                sock.close()
                devnull = os.open(os.devnull, os.O_RDONLY)
                os.dup2(devnull, 0)
                os.dup2(fds[0], 1)
                os.dup2(fds[1], 2)
                for fd in (devnull, *fds):
                    os.close(fd)
                sys.argv = ["_store_writer", *words[1:]]
                writer.main()
                code = 0
            except BaseException:
                import traceback
                traceback.print_exc()
            finally:
                sys.stdout.flush(); sys.stderr.flush()
                os._exit(code)
        for fd in fds:
            os.close(fd)
        sock.sendall(b"%d\n" % pid)
    else:  # wait PID TIMEOUT
        pid, deadline = int(words[1]), time.monotonic() + float(words[2])
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done or time.monotonic() >= deadline:
                break
            time.sleep(0.005)
        sock.sendall(b"%s\n" % (str(os.waitstatus_to_exitcode(status)).encode() if done else b"running"))
"""


class Zygote:
    """The forking parent of every writer of a test (stopped by :meth:`close`)."""

    def __init__(self) -> None:
        self.sock, child = socket.socketpair()
        self.proc = subprocess.Popen([sys.executable, "-c", ZYGOTE, str(child.fileno())], cwd=REPO,
                                     pass_fds=[child.fileno()])
        child.close()
        self.replies = self.sock.makefile("rb")

    def ask(self, line: str, fds: tuple[int, ...] = ()) -> str:
        socket.send_fds(self.sock, [line.encode()], list(fds))
        reply = self.replies.readline()
        if not reply:
            raise AssertionError(f"the writer zygote died (exit {self.proc.wait(10)})")
        return reply.decode().strip()

    def spawn(self, root: Path, flush: str, batch: int, first: int) -> "ForkedWriter":
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            pid = int(self.ask(f"spawn {root} {flush} {batch} {first}", (out_w, err_w)))
        finally:
            os.close(out_w)
            os.close(err_w)
        return ForkedWriter(self, pid, open(out_r, "r"), open(err_r, "r"))

    def close(self) -> None:
        self.replies.close()
        self.sock.close()  # EOF: the zygote's loop ends
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


class ForkedWriter:
    """A writer forked by the zygote, as the ``subprocess.Popen`` subset ``kill_after`` uses."""

    def __init__(self, zygote: Zygote, pid: int, stdout: IO[str], stderr: IO[str]) -> None:
        self.zygote, self.pid, self.stdout, self.stderr = zygote, pid, stdout, stderr
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        return self._wait(0.0)

    def wait(self, timeout: Optional[float] = None) -> int:
        code = self._wait(3600.0 if timeout is None else timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"writer {self.pid}", timeout or 0.0)
        return code

    def _wait(self, timeout: float) -> Optional[int]:
        if self.returncode is None:
            reply = self.zygote.ask(f"wait {self.pid} {timeout}")
            if reply != "running":
                self.returncode = int(reply)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            os.kill(self.pid, signal.SIGKILL)

    def communicate(self, timeout: Optional[float] = None) -> tuple[str, str]:
        """Both pipes to their end (the caller killed the writer first), then its exit status."""
        out, err = self.stdout.read(), self.stderr.read()
        self.stdout.close()
        self.stderr.close()
        self.wait(timeout)
        return out, err


@pytest.fixture
def zygote() -> Iterator[Zygote]:
    z = Zygote()
    try:
        yield z
    finally:
        z.close()


def _round(zygote: Zygote, root: Path, flush: str, first: int, target: int) -> list[tuple[int, int, int, int]]:
    w = zygote.spawn(root, flush, BATCH, first)
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
