"""The store's ``lock`` and ``abort`` files.

Rules (RocketMQ ``DefaultMessageStore``; reference §2.4):

- ``<storePathRootDir>/lock``: one process at a time owns a store. Java takes
  ``FileChannel.tryLock(0, 1, false)``, which on Linux is a POSIX record lock (``fcntl``
  ``F_SETLK``) on byte 0, then writes the 4 bytes ``lock`` at position 0. We take the same lock
  with :func:`fcntl.lockf`, so a Java broker and ours exclude each other too.
- POSIX record locks belong to the *process*: a second lock attempt from the same process would
  succeed, and closing any descriptor of the file would drop the lock. A process-wide registry
  therefore refuses a second :class:`StoreLock` on the same file inside one process.
- The lock dies with the process (kill -9 included); the file itself stays, as in Java.
- ``<storePathRootDir>/abort``: created when the store has started (5.x writes the pid as text;
  4.9.x leaves it empty), deleted on a clean shutdown. Its presence at start-up means the last
  run did not shut down cleanly, so recovery must be the abnormal one.
- A start that fails in this process (a port already in use, issue 24.8) is undone by
  :func:`undo_failed_start`: the ``abort`` file is deleted only if this process wrote it on a store
  that had none (an earlier crash's ``abort`` stays, so its recovery still runs), and this
  process's lock on the store is released (the ``lock`` file itself stays, as after any stop).
"""
from __future__ import annotations

import errno
import fcntl
import os
import struct
import threading
from pathlib import Path
from typing import Optional

from broker.store.errors import StoreError
from dledger.store.safefile import fsync_dir

LOCK_FILE_NAME = "lock"
ABORT_FILE_NAME = "abort"

_held: dict[str, "StoreLock"] = {}
_held_lock = threading.Lock()


class StoreLockedError(StoreError, RuntimeError):
    """Another process (or another StoreLock in this process) owns the store."""


def _lock_holder_pid(fd: int) -> Optional[int]:
    """pid of the process holding a conflicting lock on byte 0 (Linux F_GETLK), None if unknown."""
    try:
        # struct flock { short l_type; short l_whence; off_t l_start; off_t l_len; pid_t l_pid; }
        fmt = "hhqqi"
        size = struct.calcsize(fmt)
        size += (-size) % 8
        req = struct.pack(fmt, fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0).ljust(size, b"\0")
        res = fcntl.fcntl(fd, fcntl.F_GETLK, req)
        l_type, _w, _s, _l, pid = struct.unpack_from(fmt, res)
        return pid if l_type != fcntl.F_UNLCK and pid > 0 else None
    except (OSError, struct.error):
        return None


class StoreLock:
    """Exclusive ownership of a store root; :meth:`acquire` it before touching any file."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.path = self.root / LOCK_FILE_NAME
        self._fd: Optional[int] = None

    @property
    def locked(self) -> bool:
        return self._fd is not None

    def acquire(self) -> "StoreLock":
        """Take the lock without blocking; StoreLockedError names the holder if it is taken."""
        if self._fd is not None:
            return self
        self.root.mkdir(parents=True, exist_ok=True)
        key = str(self.path.resolve())
        with _held_lock:
            if key in _held:
                raise StoreLockedError(
                    f"store {self.root} is already locked by this process (pid {os.getpid()}); "
                    f"MQ already started?"
                )
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0, os.SEEK_SET)
            except OSError as exc:
                if exc.errno not in (errno.EACCES, errno.EAGAIN):
                    os.close(fd)
                    raise
                pid = _lock_holder_pid(fd)
                os.close(fd)
                holder = f"process {pid}" if pid else "another process"
                raise StoreLockedError(
                    f"store {self.root} is locked by {holder} ({self.path}); MQ already started?"
                ) from None
            os.pwrite(fd, b"lock", 0)
            os.fsync(fd)
            _held[key] = self
            self._fd = fd
        return self

    def release(self) -> None:
        """Drop the lock (the file stays, as in Java)."""
        if self._fd is None:
            return
        with _held_lock:
            try:
                fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, 0, os.SEEK_SET)
            finally:
                os.close(self._fd)
                self._fd = None
                _held.pop(str(self.path.resolve()), None)

    def __enter__(self) -> "StoreLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class AbortFile:
    """``<root>/abort``: present while the store runs and after a crash."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.path = Path(root) / ABORT_FILE_NAME

    @property
    def exists(self) -> bool:
        return self.path.exists()

    def create(self) -> None:
        """Mark the store as running: our pid as text (like 5.x), fsynced with its directory."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, str(os.getpid()).encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(self.path.parent)

    def delete(self) -> None:
        """Mark a clean shutdown."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return
        fsync_dir(self.path.parent)

    def pid(self) -> Optional[int]:
        """pid written by the run that created it (None for 4.9.x's empty file or if absent)."""
        try:
            text = self.path.read_text(encoding="ascii").strip()
        except (FileNotFoundError, UnicodeDecodeError):
            return None
        return int(text) if text.isdigit() else None


def undo_failed_start(root: str | os.PathLike[str], abort_existed: bool) -> None:
    """After a start of the store at ``root`` failed in this process: delete the ``abort`` file this
    process created (only when ``abort_existed`` is False and it holds our pid) and release this
    process's lock on the store, whoever in the process took it."""
    abort = AbortFile(root)
    if not abort_existed and abort.pid() == os.getpid():
        abort.delete()
    lock_path = Path(root) / LOCK_FILE_NAME
    with _held_lock:
        holder = _held.get(str(lock_path.resolve()))
    if holder is not None:
        holder.release()
