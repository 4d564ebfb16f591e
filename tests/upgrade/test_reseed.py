"""``mqupgrade reseed`` (issue 13.2): a replaced DLedger follower gets the old commitlog region
below dividedCommitlogOffset and config/ from a healthy member, verified; user errors are one
line. Runs the real command line in a subprocess."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from broker.store.lockfile import StoreLock

REPO = Path(__file__).resolve().parents[2]
SIZE = 4096


def _mq(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "upgrade.cli", "reseed", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def _leader(root: Path) -> None:
    cl = root / "commitlog"
    cl.mkdir(parents=True)
    for k in range(2):  # the old, frozen region
        (cl / ("%020d" % (k * SIZE))).write_bytes(os.urandom(SIZE))
    data = root / "dledger-n0" / "data"  # the DLedger log starts at the divided offset
    data.mkdir(parents=True)
    (data / ("%020d" % (2 * SIZE))).write_bytes(os.urandom(SIZE))
    (root / "config").mkdir()
    (root / "config" / "topics.json").write_text('{"topicConfigTable": {"T": {}}}')


def test_reseed_copies_verifies_and_is_idempotent(tmp_path: Path) -> None:
    src, dst = tmp_path / "leader", tmp_path / "follower"
    _leader(src)
    r = _mq("--from", str(src), "--to", str(dst))
    assert r.returncode == 0, r.stderr
    assert f"dividedCommitlogOffset {2 * SIZE}" in r.stdout and "copied 2 old commitlog files" in r.stdout
    for name in ("%020d" % 0, "%020d" % SIZE):
        assert (dst / "commitlog" / name).read_bytes() == (src / "commitlog" / name).read_bytes()
    assert not (dst / "dledger-n0").exists()  # the DLedger log is Raft's business
    assert (dst / "config" / "topics.json").read_text() == (src / "config" / "topics.json").read_text()
    again = _mq("--from", str(src), "--to", str(dst))
    assert again.returncode == 0 and "copied 0 old commitlog files (verified), kept 2" in again.stdout
    assert _mq("--from", str(src), "--to", str(dst), "--verify-only").returncode == 0


def test_reseed_refuses_differing_files_and_live_destination(tmp_path: Path) -> None:
    src, dst = tmp_path / "leader", tmp_path / "follower"
    _leader(src)
    assert _mq("--from", str(src), "--to", str(dst)).returncode == 0
    victim = dst / "commitlog" / ("%020d" % SIZE)
    with open(victim, "r+b") as f:
        f.seek(100)
        f.write(b"\xff")
    v = _mq("--from", str(src), "--to", str(dst), "--verify-only")
    assert v.returncode == 2 and f"differs {victim.name}" in v.stdout
    r = _mq("--from", str(src), "--to", str(dst))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--overwrite" in r.stderr and "Traceback" not in r.stderr
    assert _mq("--from", str(src), "--to", str(dst), "--overwrite").returncode == 0
    assert victim.read_bytes() == (src / "commitlog" / victim.name).read_bytes()
    lock = StoreLock(dst).acquire()
    try:
        r = _mq("--from", str(src), "--to", str(dst))
        assert r.returncode == 2 and "stop its broker first" in r.stderr
    finally:
        lock.release()
    r = _mq("--from", str(tmp_path / "nope"), "--to", str(dst))
    assert r.returncode == 2 and r.stderr.startswith("mqupgrade reseed: error:") and r.stderr.count("\n") == 1
