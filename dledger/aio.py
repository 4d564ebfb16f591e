"""asyncio helpers whose cancellation cannot be lost (shared by dledger and the broker).

Rules:
- Every bounded wait in ``dledger/`` and ``broker/`` goes through :func:`wait_for`, never
  ``asyncio.wait_for`` (``tests/test_no_lost_cancellation.py`` fails on a new call).
- :func:`wait_for` raises ``CancelledError`` whenever the calling task is cancelled, even when
  the awaited thing finished in the same loop iteration; on timeout it cancels the awaited
  thing, lets it finish cancelling, and raises ``asyncio.TimeoutError``.
- :func:`wait_event` is ``wait_for(event.wait(), timeout)`` as a bool, without a task when the
  event is already set.
- :func:`cancel_and_wait` cancels a task and waits, at most ``timeout`` seconds when given, for
  it to end; it returns False (and leaves the task behind) when it did not end in time, so a
  caller can name the service that would not stop instead of hanging on it.

Why: on CPython 3.10 and 3.11, ``asyncio.wait_for`` returns the inner result when the caller's
cancellation arrives in the same few loop iterations in which the inner awaitable completes
(cpython gh-86296, fixed by the 3.12 rewrite on ``asyncio.timeout``). A service loop of the form
``while True: await wait_for(event.wait(), t); ...`` then never sees its cancellation, and the
shutdown that awaits it hangs for ever: issue 21's broker that never exited was SlaveSynchronize
retargeted (``trigger()`` set its wake event) by a role change in the same iteration in which
shutdown cancelled it. ``asyncio.wait`` never swallows the caller's cancellation, so it is the
building block here; on 3.12+ the standard ``asyncio.wait_for`` is used as is.
"""
from __future__ import annotations

import asyncio
import sys
from typing import Any, Awaitable, Optional, TypeVar

T = TypeVar("T")

_STDLIB_IS_SAFE = sys.version_info >= (3, 12)


async def wait_for(aw: Awaitable[T], timeout: Optional[float]) -> T:
    """``asyncio.wait_for`` that never swallows the caller's cancellation (see the module rules)."""
    if timeout is None:
        return await aw
    if _STDLIB_IS_SAFE:
        return await asyncio.wait_for(aw, timeout)
    fut: asyncio.Future[T] = asyncio.ensure_future(aw)
    if fut.done():
        return fut.result()
    try:
        await asyncio.wait((fut,), timeout=max(0.0, timeout))
    except asyncio.CancelledError:
        fut.cancel()
        raise
    if fut.done():
        return fut.result()
    fut.cancel()
    await asyncio.wait((fut,))  # let it finish cancelling; raises only if *we* are cancelled
    try:
        return fut.result()  # it completed (or failed) while being cancelled: as asyncio.wait_for
    except asyncio.CancelledError as exc:
        raise asyncio.TimeoutError() from exc


async def wait_event(event: asyncio.Event, timeout: Optional[float]) -> bool:
    """True when ``event`` is set within ``timeout`` seconds, False on timeout."""
    if event.is_set():
        return True
    try:
        await wait_for(event.wait(), timeout)
    except asyncio.TimeoutError:
        return event.is_set()
    return True


async def cancel_and_wait(task: Optional["asyncio.Future[Any]"], timeout: Optional[float] = None) -> bool:
    """Cancel ``task`` and wait for it to end (at most ``timeout`` s); True when it ended.

    Its ``CancelledError`` is swallowed; any other exception it ends with propagates (a service
    loop that failed is not hidden). The caller's own cancellation propagates."""
    if task is None:
        return True
    task.cancel()
    if not task.done():
        await asyncio.wait((task,), timeout=timeout)
        if not task.done():
            return False
    if not task.cancelled() and task.exception() is not None:
        raise task.exception()  # type: ignore[misc]
    return True
