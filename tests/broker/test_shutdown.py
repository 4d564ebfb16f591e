"""broker.shutdown: bounded steps, the exit watchdog, the signal gate, and SIGUSR1 stacks (issue 21).

The step runner runs on a real loop; the watchdog and the signal gate run in real child
processes (they end the process, which is what they are for); SIGUSR1 is sent to a real
``mqbroker``.
"""
from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from broker.shutdown import EXIT_SHUTDOWN_INCOMPLETE, ShutdownStep, run_steps
from tools.broker_confs import master_conf
from tools.nodes import BrokerProc
from tools.procs import REPO, wait_until


async def test_steps_run_in_order_and_a_hung_or_failing_step_is_named_not_awaited() -> None:
    ran: list[str] = []
    release = asyncio.Event()

    async def ok(name: str) -> None:
        ran.append(name)

    async def hangs() -> None:
        ran.append("hangs")
        while True:
            try:
                await release.wait()
                return
            except asyncio.CancelledError:
                continue  # ignores cancellation: the runner must not wait for it

    async def fails() -> None:
        ran.append("fails")
        raise OSError(28, "No space left on device")

    steps = [ShutdownStep("doors", lambda: ok("doors")), ShutdownStep("stuck service", hangs, 0.6),
             ShutdownStep("metadata", fails), ShutdownStep("store", lambda: ok("store"))]
    t0 = time.monotonic()
    seen: list[object] = []
    problems = await run_steps(steps, deadline_s=5.0, progress=seen.append)
    took = time.monotonic() - t0
    release.set()
    assert ran == ["doors", "hangs", "fails", "store"]  # the order is fixed; later steps still run
    assert 0.6 <= took < 1.8, took
    assert len(problems) == 2
    assert problems[0].startswith("stuck service: did not stop within 0.6 s")
    assert problems[1] == "metadata: OSError: [Errno 28] No space left on device"
    assert seen == ["doors", "stuck service", "metadata", "store", None]


async def test_the_deadline_caps_every_step_bound() -> None:
    async def slow() -> None:
        await asyncio.sleep(5)

    t0 = time.monotonic()
    problems = await run_steps([ShutdownStep("a", slow, 3.0), ShutdownStep("b", slow, 3.0)], deadline_s=1.0)
    took = time.monotonic() - t0
    assert [p.split(":")[0] for p in problems] == ["a", "b"]
    assert took < 2.0, took  # a: the 1 s left of the deadline; b: the minimum step bound (0.5 s)


def _child(body: str) -> subprocess.Popen[str]:
    code = textwrap.dedent(body)
    return subprocess.Popen([sys.executable, "-c", code], cwd=str(REPO), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_watchdog_ends_a_process_that_does_not_exit_and_prints_every_thread() -> None:
    p = _child("""
        import threading, time
        from broker.shutdown import ExitWatchdog
        ExitWatchdog(lambda: "message store (dispatch, flush, checkpoint)").arm(0.5)
        threading.Event().wait()  # a shutdown that hangs for ever
    """)
    t0 = time.monotonic()
    try:
        out, err = p.communicate(timeout=15)
    finally:
        p.kill()
    assert p.returncode == EXIT_SHUTDOWN_INCOMPLETE, (p.returncode, err)
    assert time.monotonic() - t0 < 10
    assert "did not finish within 0 s" in err or "did not finish within 1 s" in err, err
    assert "(at: message store (dispatch, flush, checkpoint))" in err
    assert "Thread 0x" in err and "ExitWatchdog" not in out  # faulthandler's stacks, on stderr


def test_first_sigterm_starts_the_shutdown_and_a_second_exits_at_once() -> None:
    p = _child("""
        import asyncio, sys
        from broker.shutdown import ExitWatchdog, SignalGate

        async def main():
            loop = asyncio.get_running_loop()
            stop = asyncio.Event()
            SignalGate(loop, stop.set, ExitWatchdog(), deadline_s=30.0).install()
            print("ready", flush=True)
            await stop.wait()
            print("shutting down", flush=True)
            await asyncio.sleep(60)  # a shutdown that takes far too long

        asyncio.run(main())
    """)
    try:
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "ready"
        p.send_signal(signal.SIGTERM)
        assert p.stdout.readline().strip() == "shutting down"  # the first signal reached the loop
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        code = p.wait(10)
        assert code == 128 + signal.SIGTERM and time.monotonic() - t0 < 5
        assert "second SIGTERM during shutdown: exiting now" in (p.stderr.read() if p.stderr else "")
    finally:
        p.kill()
        p.wait(5)


def test_sigterm_is_handled_while_the_loop_is_blocked_in_a_synchronous_call() -> None:
    """A stop is never lost: the handler runs in the main thread even inside a blocking call
    (a long recovery); the watchdog then bounds what the blocked call does not finish."""
    p = _child("""
        import asyncio, time
        from broker.shutdown import ExitWatchdog, SignalGate

        async def main():
            loop = asyncio.get_running_loop()
            gate = SignalGate(loop, lambda: None, ExitWatchdog(), deadline_s=0.5).install()
            print("ready", flush=True)
            time.sleep(60)  # the loop is blocked (a synchronous recovery)

        asyncio.run(main())
    """)
    try:
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "ready"
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        code = p.wait(15)
        assert code == EXIT_SHUTDOWN_INCOMPLETE, code  # 0.5 s budget + 5 s grace, then the watchdog
        assert time.monotonic() - t0 < 10
    finally:
        p.kill()
        p.wait(5)


@pytest.mark.multiprocess
def test_sigusr1_writes_thread_and_task_stacks_to_the_broker_log_and_sigterm_stops_it(tmp_path: Path) -> None:
    conf, port = master_conf(tmp_path, role="ASYNC_MASTER")
    b = BrokerProc(conf, port, "m", tmp_path)
    try:
        b.start()
        assert b.proc is not None
        b.proc.send_signal(signal.SIGUSR1)
        wait_until(lambda: "asyncio tasks of pid" in b.log(60_000), 10, "the task dump in the log")
        log = b.log(60_000)
        assert "Current thread 0x" in log or "Thread 0x" in log  # faulthandler
        assert "--- task broker-housekeeping" in log
        assert b.alive()  # a diagnostic, not a stop
        t0 = time.monotonic()
        assert b.stop() == 0
        assert time.monotonic() - t0 < 10
        assert "stopped cleanly" in b.log()
    finally:
        b.kill9()
