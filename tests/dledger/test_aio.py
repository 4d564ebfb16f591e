"""dledger.aio: a bounded wait never loses the caller's cancellation (issue 21's hang).

The window that CPython 3.10/3.11's ``asyncio.wait_for`` gets wrong: the caller is cancelled in
the same few loop iterations in which the awaited thing completes. Each test sweeps that window
(0..6 loop iterations between "it completes" and "the caller is cancelled") on the default loop
and on uvloop, and asserts that a service loop built on the helper ends within a bound.
"""
from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

import pytest

from dledger.aio import cancel_and_wait, wait_event, wait_for

WINDOW = range(7)


def _loops() -> list[str]:
    out = ["asyncio"]
    try:
        import uvloop  # noqa: F401
        out.append("uvloop")
    except ImportError:
        pass
    return out


def _run(kind: str, coro_fn: Callable[[], Awaitable[object]]) -> object:
    if kind == "uvloop":
        import uvloop
        return uvloop.run(coro_fn())  # type: ignore[arg-type]
    return asyncio.run(coro_fn())  # type: ignore[arg-type]


async def _service_stops(wait: Callable[[asyncio.Event], Awaitable[object]], k: int) -> bool:
    """A service loop ``while True: wait(wake); ...``: woken, then cancelled ``k`` iterations later."""
    wake = asyncio.Event()

    async def service() -> None:
        while True:
            await wait(wake)
            wake.clear()
            await asyncio.sleep(0.001)  # "sync with the master"

    task = asyncio.ensure_future(service())
    await asyncio.sleep(0.005)
    wake.set()
    for _ in range(k):
        await asyncio.sleep(0)
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=1.0)
    if not done:  # the cancellation was lost: end it for the next trial, report it
        task.cancel()
        await asyncio.wait({task}, timeout=1.0)
    return bool(done)


async def _wait_for_10s(ev: asyncio.Event) -> None:
    try:
        await wait_for(ev.wait(), 10)
    except asyncio.TimeoutError:
        pass


@pytest.mark.parametrize("loop_kind", _loops())
def test_wait_for_never_swallows_a_cancellation_that_races_completion(loop_kind: str) -> None:
    async def main() -> list[bool]:
        return [await _service_stops(_wait_for_10s, k) for k in WINDOW]
    assert _run(loop_kind, main) == [True] * len(WINDOW)


@pytest.mark.parametrize("loop_kind", _loops())
def test_wait_event_never_swallows_a_cancellation_that_races_the_set(loop_kind: str) -> None:
    async def main() -> list[bool]:
        return [await _service_stops(lambda ev: wait_event(ev, 10), k) for k in WINDOW]
    assert _run(loop_kind, main) == [True] * len(WINDOW)


def test_wait_for_times_out_returns_results_and_raises_inner_errors() -> None:
    async def main() -> None:
        never = asyncio.Event()
        with pytest.raises(asyncio.TimeoutError):
            await wait_for(never.wait(), 0.01)
        assert await wait_for(asyncio.sleep(0, result=7), 1) == 7
        assert await wait_for(asyncio.sleep(0, result=8), None) == 8

        async def boom() -> None:
            raise ValueError("inner")
        with pytest.raises(ValueError, match="inner"):
            await wait_for(boom(), 1)
        # the inner awaitable is cancelled (and has ended) when the wait times out
        inner = asyncio.ensure_future(never.wait())
        with pytest.raises(asyncio.TimeoutError):
            await wait_for(inner, 0.01)
        assert inner.cancelled()
        assert await wait_event(never, 0.01) is False
        never.set()
        assert await wait_event(never, 0) is True
    asyncio.run(main())


def test_cancel_and_wait_is_bounded_and_reports_a_task_that_will_not_stop() -> None:
    async def main() -> None:
        give_up = asyncio.Event()

        async def stubborn() -> None:
            while not give_up.is_set():
                try:
                    await asyncio.sleep(10)
                except asyncio.CancelledError:
                    continue  # a buggy service that ignores cancellation

        t = asyncio.ensure_future(stubborn())
        await asyncio.sleep(0)
        assert await cancel_and_wait(t, timeout=0.05) is False  # bounded: named by the caller, not awaited for ever
        assert not t.done()

        async def polite() -> None:
            await asyncio.sleep(10)
        p = asyncio.ensure_future(polite())
        await asyncio.sleep(0)
        assert await cancel_and_wait(p, timeout=1.0) is True and p.cancelled()

        async def failed() -> None:
            raise RuntimeError("service loop failed")
        f = asyncio.ensure_future(failed())
        await asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="service loop failed"):
            await cancel_and_wait(f)
        assert await cancel_and_wait(None) is True
        give_up.set()  # let the stubborn task end so the loop can close
        t.cancel()
        await asyncio.wait({t}, timeout=1.0)
        assert t.done()
    asyncio.run(main())
