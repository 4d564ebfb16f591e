"""Store lock and abort file, with a real second process."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from broker.store.lockfile import AbortFile, StoreLock, StoreLockedError

REPO = Path(__file__).resolve().parents[3]


def _holder(root: Path) -> subprocess.Popen:
    code = textwrap.dedent(
        f"""
        import sys, time
        from broker.store.lockfile import StoreLock
        StoreLock({str(root)!r}).acquire()
        print("ready", flush=True)
        sys.stdin.read()
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_second_process_is_refused_until_holder_dies(tmp_path):
    proc = _holder(tmp_path)
    try:
        assert (tmp_path / "lock").read_bytes() == b"lock"
        with pytest.raises(StoreLockedError, match=rf"locked by process {proc.pid}\b"):
            StoreLock(tmp_path).acquire()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with StoreLock(tmp_path) as lock:  # the kernel dropped the dead holder's lock
        assert lock.locked
    assert (tmp_path / "lock").exists()


def test_child_is_refused_while_we_hold(tmp_path):
    with StoreLock(tmp_path):
        code = (
            "from broker.store.lockfile import StoreLock, StoreLockedError\n"
            f"try:\n    StoreLock({str(tmp_path)!r}).acquire()\nexcept StoreLockedError as e:\n"
            "    print(e); raise SystemExit(3)\n"
        )
        res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
        assert res.returncode == 3, res.stderr
        assert f"process {os.getpid()}" in res.stdout
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_same_process_double_lock_is_refused(tmp_path):
    first = StoreLock(tmp_path).acquire()
    with pytest.raises(StoreLockedError, match="already locked by this process"):
        StoreLock(tmp_path).acquire()
    first.release()
    StoreLock(tmp_path).acquire().release()


def test_abort_file(tmp_path):
    abort = AbortFile(tmp_path)
    assert not abort.exists and abort.pid() is None
    abort.create()
    assert abort.exists and abort.pid() == os.getpid()
    assert (tmp_path / "abort").read_text() == str(os.getpid())
    abort.delete()
    assert not abort.exists
    abort.delete()  # idempotent
    (tmp_path / "abort").write_bytes(b"")  # 4.9.x writes an empty file
    assert abort.exists and abort.pid() is None
