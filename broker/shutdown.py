"""Broker shutdown: a fixed order of named steps, each bounded, and a process that always exits.

Rules (issue 21):
- The first SIGTERM/SIGINT starts the orderly shutdown (:class:`SignalGate`); a second one exits
  at once (exit code 128 + signal number, one line on stderr; the store is then recovered as
  after a crash at the next start). The handlers are Python-level ``signal.signal`` handlers,
  not ``loop.add_signal_handler``: they run in the main thread even while the broker loop is
  blocked in a synchronous call (a recovery, a join), so a stop is never lost.
- The first signal also arms the :class:`ExitWatchdog`, a thread independent of the event loop:
  if the process has not exited ``deadline + grace`` seconds later (``shutdownTimeoutMillis``,
  ours, default 10 s, plus 5 s), it writes which step was running and every thread's stack to
  stderr and ends the process with :data:`EXIT_SHUTDOWN_INCOMPLETE`. Nothing can keep a broker
  that was asked to stop alive for longer than that.
- :func:`run_steps` runs the steps in order. Each gets ``min(its bound, what is left of the
  deadline)`` (at least :data:`MIN_STEP_S`). A step that does not finish in time is logged by
  name, with the stacks of the asyncio tasks still running, and abandoned (cancelled, not
  awaited); a step that fails (raises: a metadata file that cannot be written on a full disk, a
  store that could not finish dispatching and so keeps its ``abort`` file) is logged and the next
  one runs. Both are returned as one line each: the caller then exits with
  :data:`EXIT_SHUTDOWN_INCOMPLETE` instead of 0, so a stop that was not clean never claims to be.
- :func:`in_thread` runs a blocking shutdown (the store's flush and unmap) on a daemon thread,
  so the loop stays free to time it out and report it, and an abandoned one cannot hold up the
  interpreter's exit.

Theory of operation: ``BrokerController.run_until_signal`` installs the gate, waits for it (or
for the DLedger member to stop itself), and hands its ordered steps (doors, background
services, replication, metadata, store, lock) to :func:`run_steps`.
"""
from __future__ import annotations

import asyncio
import faulthandler
import io
import logging
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Optional, TypeVar

log = logging.getLogger("broker.shutdown")

T = TypeVar("T")

EXIT_SHUTDOWN_INCOMPLETE = 5
DEFAULT_DEADLINE_S = 10.0
WATCHDOG_GRACE_S = 5.0
MIN_STEP_S = 0.5


@dataclass(frozen=True)
class ShutdownStep:
    """One service to stop: ``run`` is awaited for at most ``bound_s`` seconds."""

    name: str
    run: Callable[[], Awaitable[object]]
    bound_s: float = 3.0


def task_stacks(limit: int = 8) -> str:
    """The stacks of the running loop's unfinished tasks (what an abandoned step waits on)."""
    out = io.StringIO()
    try:
        tasks = [t for t in asyncio.all_tasks() if not t.done()]
    except RuntimeError:  # no running loop
        return ""
    for t in tasks:
        out.write(f"--- task {t.get_name()}\n")
        t.print_stack(limit=limit, file=out)
    return out.getvalue()


async def run_steps(steps: list[ShutdownStep], deadline_s: float,
                    progress: Optional[Callable[[Optional[str]], None]] = None) -> list[str]:
    """Run ``steps`` in order within ``deadline_s`` overall; returns what did not stop cleanly."""
    end = time.monotonic() + deadline_s
    problems: list[str] = []
    for step in steps:
        bound = max(MIN_STEP_S, min(step.bound_s, end - time.monotonic()))
        if progress is not None:
            progress(step.name)
        t0 = time.monotonic()
        task = asyncio.ensure_future(step.run())
        task.set_name(f"shutdown:{step.name}")
        done, _ = await asyncio.wait((task,), timeout=bound)
        if not done:
            log.error("shutdown: %s did not stop within %.1f s; abandoned, the broker exits without it "
                      "(exit code %d). Tasks still running:\n%s", step.name, bound, EXIT_SHUTDOWN_INCOMPLETE,
                      task_stacks())
            task.cancel()
            problems.append(f"{step.name}: did not stop within {bound:.1f} s (abandoned)")
            continue
        exc = None if task.cancelled() else task.exception()
        if exc is not None:
            log.error("shutdown: stopping %s failed (%s: %s); going on with the next step",
                      step.name, type(exc).__name__, exc)
            problems.append(f"{step.name}: {type(exc).__name__}: {exc}")
        elif time.monotonic() - t0 > 1.0:
            log.info("shutdown: %s stopped in %.1f s", step.name, time.monotonic() - t0)
    if progress is not None:
        progress(None)
    return problems


def in_thread(fn: Callable[[], T], name: str) -> "asyncio.Future[T]":
    """Run ``fn`` on a new daemon thread; the returned future resolves on the calling loop."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[T] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if fut.done():
            return
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)

    def body() -> None:
        try:
            result = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting step
            _post(loop, settle, False, exc)
            return
        _post(loop, settle, True, result)

    threading.Thread(target=body, name=name, daemon=True).start()
    return fut


def _post(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # the loop is gone: nobody waits any more
        pass


class ExitWatchdog:
    """Ends the process if it has not exited ``deadline`` seconds after :meth:`arm`."""

    def __init__(self, describe: Callable[[], str] = lambda: "") -> None:
        self._describe = describe
        self._armed = threading.Event()
        self._deadline = 0.0
        self.thread: Optional[threading.Thread] = None

    def arm(self, seconds: float) -> None:
        if self._armed.is_set():
            return
        self._deadline = time.monotonic() + seconds
        self._armed.set()
        self.thread = threading.Thread(target=self._run, args=(seconds,), name="ExitWatchdog", daemon=True)
        self.thread.start()

    def _run(self, seconds: float) -> None:
        while True:
            left = self._deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(left, 0.5))
        try:
            what = self._describe()
        except Exception:  # noqa: BLE001 - the exit must happen whatever the description does
            what = "?"
        msg = (f"mqbroker: shutdown did not finish within {seconds:.0f} s of the stop signal (at: {what or '?'}); "
               f"exiting with code {EXIT_SHUTDOWN_INCOMPLETE}; the next start recovers the store. "
               "Stacks of every thread follow.\n")
        try:
            os.write(2, msg.encode())
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
            sys.stderr.flush()
        finally:
            os._exit(EXIT_SHUTDOWN_INCOMPLETE)


class SignalGate:
    """SIGTERM/SIGINT: the first starts the shutdown (``on_stop`` on the loop) and arms the
    watchdog; the second exits at once."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, loop: asyncio.AbstractEventLoop, on_stop: Callable[[], None], watchdog: ExitWatchdog,
                 deadline_s: float) -> None:
        self.loop = loop
        self.on_stop = on_stop
        self.watchdog = watchdog
        self.deadline_s = deadline_s
        self.received: Optional[int] = None
        self._wakeup: tuple[socket.socket, socket.socket]

    def install(self) -> "SignalGate":
        for sig in self.SIGNALS:
            signal.signal(sig, self._handle)
        # A signal the kernel hands to another thread (dispatch, flush, the watchdog) only sets a
        # flag: the handler runs when the main thread next runs bytecode, and a loop asleep in
        # epoll_wait may not for a long time (S13C: a second SIGTERM unanswered for 10 s). The C
        # handler also writes to a wakeup fd from any thread: the loop reads it, wakes, runs ours.
        r, w = socket.socketpair()
        r.setblocking(False)
        w.setblocking(False)
        self._wakeup = (r, w)
        signal.set_wakeup_fd(w.fileno(), warn_on_full_buffer=False)
        self.loop.add_reader(r.fileno(), self._drain)
        return self

    def _drain(self) -> None:
        try:
            while self._wakeup[0].recv(4096):
                pass
        except (BlockingIOError, InterruptedError, OSError):
            pass

    def _handle(self, signum: int, frame: Any) -> None:  # main thread, between two bytecodes
        if self.received is not None:
            os.write(2, f"mqbroker: second {signal.Signals(signum).name} during shutdown: exiting now "
                        f"(code {128 + signum}); the next start recovers the store\n".encode())
            os._exit(128 + signum)
        self.received = signum
        self.watchdog.arm(self.deadline_s + WATCHDOG_GRACE_S)
        _post(self.loop, self.on_stop)


def install_stack_dump(loop: asyncio.AbstractEventLoop) -> None:
    """``kill -USR1 <pid>``: every thread's stack (faulthandler, even with the loop blocked) and,
    once the loop runs, every asyncio task's stack, to stderr (the broker's log)."""
    if not hasattr(signal, "SIGUSR1"):
        return

    def dump_tasks() -> None:
        sys.stderr.write(f"mqbroker: asyncio tasks of pid {os.getpid()}:\n{task_stacks(limit=16)}")
        sys.stderr.flush()

    signal.signal(signal.SIGUSR1, lambda signum, frame: _post(loop, dump_tasks))
    faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True, chain=True)
