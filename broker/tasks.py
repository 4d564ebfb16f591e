"""Small asyncio task helpers shared by the broker's background services."""
from __future__ import annotations

import asyncio
from typing import Optional


async def cancel_and_wait(task: Optional["asyncio.Task[object]"]) -> None:
    """Cancel ``task`` (if any) and wait until it has ended; its CancelledError is swallowed.

    Any other exception the task ends with propagates (a service's loop failing is not hidden)."""
    if task is None:
        return
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
