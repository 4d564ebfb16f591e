"""``python -m MODULE ARGS`` as a fresh process forked from a warm interpreter (CI time).

Rules:

- :meth:`Zygote.run` has ``subprocess.run([sys.executable, "-m", MODULE, *args], cwd=REPO,
  capture_output=True, text=True, timeout=...)``'s contract and result (``CompletedProcess``, or
  ``subprocess.TimeoutExpired`` after killing the child). The child is its own process: it runs
  the module as ``__main__`` (``runpy``, as ``-m`` does), exits through the interpreter's normal
  exit (``SystemExit`` codes, a traceback and 1 for an uncaught exception, atexit handlers), with
  stdin on /dev/null and the environment the zygote started with.
- The zygote only imports (``warm`` modules, then forgets them but keeps what they imported); it
  never runs the module itself, opens nothing and runs no thread (checked at its start), so each child starts from the same state a fresh
  interpreter reaches after those imports.
- :meth:`Zygote.spawn` starts the same child without waiting: a :class:`Forked`, the
  ``subprocess.Popen(..., stdout=PIPE, stderr=PIPE, text=True)`` subset (``pid``, ``stdout``,
  ``stderr``, ``poll``, ``wait``, ``kill``, ``communicate``) a caller that kills it mid-run needs
  (the crash loop, ``tests/broker/store/test_crash_loop.py``).
- Calls from several threads are safe (one request at a time on the control socket; children
  run in parallel). A test module stops its zygote with :func:`close`; the zygote also ends
  when its parent dies (the control socket closes).

Theory of operation: the parent holds one end of a Unix socketpair; the zygote (``python -c``)
reads requests on the other. ``spawn MODULE ARGS`` carries two pipe ends (SCM_RIGHTS) for the
child's stdout and stderr; the zygote forks, answers the child's pid and closes its copies; the
child leaves the request loop and runs the module. ``wait PID TIMEOUT`` answers the exit code
(``os.waitstatus_to_exitcode``: a signal is its negative number, as ``Popen.returncode``) or
``running``. Arguments travel JSON-encoded, so any string survives.
"""
from __future__ import annotations

import atexit
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Iterator, Optional, Sequence

import pytest

REPO = Path(__file__).resolve().parents[2]

_ZYGOTE = r"""
import importlib, json, os, socket, sys, threading, time
for name in json.loads(sys.argv[2]):
    importlib.import_module(name)
    sys.modules.pop(name)  # its imports stay; runpy executes the module itself afresh, as -m does
assert threading.active_count() == 1, threading.enumerate()
sock = socket.socket(fileno=int(sys.argv[1]))

def serve():
    while True:
        msg, fds, _, _ = socket.recv_fds(sock, 1 << 16, 2)
        if not msg:
            sys.exit(0)
        req = json.loads(msg)
        if req[0] == "spawn":
            sys.stdout.flush(); sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                sock.close()
                devnull = os.open(os.devnull, os.O_RDONLY)
                os.dup2(devnull, 0)
                os.dup2(fds[0], 1)
                os.dup2(fds[1], 2)
                for fd in (devnull, *fds):
                    os.close(fd)
                return req[1], req[2]
            for fd in fds:
                os.close(fd)
            sock.sendall(b"%d\n" % pid)
        else:  # ["wait", pid, timeout]
            pid, deadline = req[1], time.monotonic() + req[2]
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done or time.monotonic() >= deadline:
                    break
                time.sleep(0.005)
            sock.sendall(b"%s\n" % (str(os.waitstatus_to_exitcode(status)).encode() if done else b"running"))

module, args = serve()
del serve, sock
import runpy
sys.argv = [module, *args]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


class Zygote:
    """A warm interpreter that forks one child per :meth:`run`."""

    def __init__(self, warm: Sequence[str]) -> None:
        self.sock, child = socket.socketpair()
        self.proc = subprocess.Popen([sys.executable, "-c", _ZYGOTE, str(child.fileno()), json.dumps(list(warm))],
                                     cwd=REPO, pass_fds=[child.fileno()])
        child.close()
        self.replies = self.sock.makefile("rb")
        self.lock = threading.Lock()

    def _ask(self, req: list, fds: Sequence[int] = ()) -> str:
        with self.lock:
            socket.send_fds(self.sock, [json.dumps(req).encode()], list(fds))
            reply = self.replies.readline()
        if not reply:
            raise RuntimeError(f"the python zygote died (exit {self.proc.wait(10)})")
        return reply.decode().strip()

    def _wait(self, pid: int, timeout: float) -> Optional[int]:
        reply = self._ask(["wait", pid, timeout])
        return None if reply == "running" else int(reply)

    def _fork(self, module: str, args: Sequence[str]) -> tuple[int, int, int]:
        """A child running ``module``: its pid and the read ends of its stdout and stderr."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            pid = int(self._ask(["spawn", module, list(args)], (out_w, err_w)))
        except BaseException:
            os.close(out_r)
            os.close(err_r)
            raise
        finally:
            os.close(out_w)
            os.close(err_w)
        return pid, out_r, err_r

    def spawn(self, module: str, *args: str) -> "Forked":
        """``python -m MODULE ARGS`` started, not waited for (stdout and stderr as text pipes)."""
        pid, out_r, err_r = self._fork(module, args)
        return Forked(self, pid, open(out_r, "r"), open(err_r, "r"))

    def run(self, module: str, *args: str, timeout: Optional[float] = None) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", module, *args]
        pid, out_r, err_r = self._fork(module, args)
        chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
        deadline = None if timeout is None else time.monotonic() + timeout
        sel = selectors.DefaultSelector()
        try:
            for fd in (out_r, err_r):
                sel.register(fd, selectors.EVENT_READ)
            while sel.get_map():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    os.kill(pid, signal.SIGKILL)
                    self._wait(pid, 10.0)
                    raise subprocess.TimeoutExpired(cmd, timeout or 0.0)
                for key, _ in sel.select(left):
                    data = os.read(key.fd, 65536)
                    if data:
                        chunks[key.fd].append(data)
                    else:
                        sel.unregister(key.fd)
        finally:
            sel.close()
            os.close(out_r)
            os.close(err_r)
        code = self._wait(pid, 60.0 if deadline is None else max(1.0, deadline - time.monotonic()))
        if code is None:
            os.kill(pid, signal.SIGKILL)
            self._wait(pid, 10.0)
            raise subprocess.TimeoutExpired(cmd, timeout or 0.0)
        out, err = (b"".join(chunks[fd]).decode("utf-8", "replace") for fd in (out_r, err_r))
        return subprocess.CompletedProcess(cmd, code, out, err)

    def close(self) -> None:
        self.replies.close()
        self.sock.close()  # EOF: the zygote's loop ends
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


class Forked:
    """A child forked by a :class:`Zygote`, as the ``subprocess.Popen`` subset a killer uses."""

    def __init__(self, zygote: Zygote, pid: int, stdout: IO[str], stderr: IO[str]) -> None:
        self.zygote, self.pid, self.stdout, self.stderr = zygote, pid, stdout, stderr
        self.returncode: Optional[int] = None

    def poll(self) -> Optional[int]:
        return self._wait(0.0)

    def wait(self, timeout: Optional[float] = None) -> int:
        code = self._wait(3600.0 if timeout is None else timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"forked child {self.pid}", timeout or 0.0)
        return code

    def _wait(self, timeout: float) -> Optional[int]:
        if self.returncode is None:
            self.returncode = self.zygote._wait(self.pid, timeout)
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            os.kill(self.pid, signal.SIGKILL)

    def communicate(self, timeout: Optional[float] = None) -> tuple[str, str]:
        """Both pipes to their end (the caller killed the child first), then its exit status."""
        out, err = self.stdout.read(), self.stderr.read()
        self.stdout.close()
        self.stderr.close()
        self.wait(timeout)
        return out, err


_lock = threading.Lock()
_zygotes: dict[tuple[str, ...], Zygote] = {}


def run(module: str, *args: str, timeout: Optional[float] = None) -> subprocess.CompletedProcess[str]:
    """``python -m MODULE ARGS`` in a child of this process's zygote for MODULE (started on first use)."""
    key = (module,)
    with _lock:
        z = _zygotes.get(key)
        if z is None or z.proc.poll() is not None:
            z = _zygotes[key] = Zygote([module])
    return z.run(module, *args, timeout=timeout)


def close() -> None:
    with _lock:
        zs = list(_zygotes.values())
        _zygotes.clear()
    for z in zs:
        z.close()


atexit.register(close)


@pytest.fixture(autouse=True, scope="module")
def py_zygotes() -> Iterator[None]:
    """Autouse in a module that imports it: the module's zygotes stop when its tests end."""
    try:
        yield
    finally:
        close()
