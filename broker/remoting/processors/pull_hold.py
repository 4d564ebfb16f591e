"""PullRequestHoldService: long-polled pulls waiting for a message, bounded (issue 23.5).

Rules:
- A pull that found nothing and asked to be suspended waits until a message is dispatched to its
  (topic, queueId), or its suspend time passes (RocketMQ's ``PullRequestHoldService``).
- Bounds (ours; Apache holds every request for as long as the client asks): the suspend time is
  clamped to ``longPollingMaxSuspendMillis`` (30 s); at most ``longPollingMaxHeldPerConnection``
  (1024) pulls of one connection and ``longPollingMaxHeld`` (8192) in all are held, and the
  held requests' own bytes (header fields and body, :func:`request_bytes`; a Java pull is a few
  hundred) stay within ``longPollingMaxHeldBytes`` (16 MiB): a pull padded to just under the
  64 KiB a frame may have without reserving ``serverMaxPendingBytes`` cannot multiply that by the
  count cap. A pull over a cap is not held: :meth:`PullRequestHoldService.admit` says no and the
  processor answers it at once (``SYSTEM_BUSY``), counted in ``refused``.
- When a connection closes, its held pulls are released at once (no fresh read, no answer), so
  what they hold goes back as soon as the client leaves.
- Counters for operators: :meth:`status` (``held``, ``heldBytes``, ``refused`` and the caps), read
  by the ``rocketmq_broker_pull_held*`` gauges.

Theory of operation: one asyncio future per held pull, filed under its (topic, queueId) and its
connection; the store's dispatch listener (a reput thread) hops onto the loop with
``call_soon_threadsafe`` and resolves the futures of the queues it dispatched to; a connection's
close listener resolves that connection's futures. Everything else runs on the loop.
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable, Optional

from broker.tasks import wait_for

MAX_SUSPEND_MILLIS = 30_000
MAX_HELD_PER_CONNECTION = 1024
MAX_HELD = 8192
MAX_HELD_BYTES = 16 * 1024 * 1024


def request_bytes(cmd: Any) -> int:
    """What a decoded request keeps in memory, roughly: its header fields, remark and body."""
    n = len(cmd.body or b"") + len(cmd.remark or "")
    for k, v in (cmd.ext_fields or {}).items():
        n += len(k) + (len(v) if isinstance(v, (str, bytes)) else 8)
    return n


class PullRequestHoldService:
    def __init__(self, max_suspend_millis: int = MAX_SUSPEND_MILLIS,
                 max_held_per_connection: int = MAX_HELD_PER_CONNECTION, max_held: int = MAX_HELD,
                 max_held_bytes: int = MAX_HELD_BYTES) -> None:
        self.max_suspend_millis = max_suspend_millis
        self.max_held_per_connection = max_held_per_connection
        self.max_held = max_held
        self.max_held_bytes = max_held_bytes
        self.refused = 0
        self._held = 0
        self._held_bytes = 0
        self._waiters: dict[tuple[str, int], dict[asyncio.Future[None], None]] = {}  # ordered sets
        self._by_conn: dict[Any, set[asyncio.Future[None]]] = {}
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    @classmethod
    def from_config(cls, bc: Any) -> "PullRequestHoldService":
        def num(name: str, default: int) -> int:
            value = getattr(bc, name, None)
            return value if isinstance(value, int) and not isinstance(value, bool) else default
        return cls(num("long_polling_max_suspend_millis", MAX_SUSPEND_MILLIS),
                   num("long_polling_max_held_per_connection", MAX_HELD_PER_CONNECTION),
                   num("long_polling_max_held", MAX_HELD), num("long_polling_max_held_bytes", MAX_HELD_BYTES))

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    @property
    def held(self) -> int:
        return self._held

    def held_by(self, conn: Any) -> int:
        return len(self._by_conn.get(conn, ()))

    def suspend_millis(self, asked: int) -> int:
        """The time a pull may be held: what it asked, within [0, longPollingMaxSuspendMillis]."""
        return max(0, min(asked, self.max_suspend_millis))

    def admit(self, conn: Any, nbytes: int = 0) -> bool:
        """May ``conn`` hold one more pull of ``nbytes``? (False is counted in ``refused``.)"""
        if (self._held >= self.max_held or self.held_by(conn) >= self.max_held_per_connection
                or self._held_bytes + nbytes > self.max_held_bytes):
            self.refused += 1
            return False
        return True

    def status(self) -> dict[str, int]:
        return {"held": self._held, "heldBytes": self._held_bytes, "maxHeld": self.max_held,
                "maxHeldPerConnection": self.max_held_per_connection, "maxHeldBytes": self.max_held_bytes,
                "maxSuspendMillis": self.max_suspend_millis, "refused": self.refused}

    # ------------------------------------------------------------------ wake-ups
    def on_dispatch(self, batch: list[Any]) -> None:
        """Store arrival listener (reput thread)."""
        loop = self._loop
        if loop is None or not self._waiters:
            return
        keys = {(d.topic, d.queue_id) for d in batch}
        try:
            loop.call_soon_threadsafe(self._wake, keys)
        except RuntimeError:  # loop closed during shutdown
            pass

    def _wake(self, keys: set[tuple[str, int]]) -> None:
        for key in keys:
            for fut in self._waiters.pop(key, {}):
                if not fut.done():
                    fut.set_result(None)

    def on_close(self, conn: Any) -> None:
        """Connection close listener: release that connection's held pulls now."""
        for fut in self._by_conn.pop(conn, ()):
            if not fut.done():
                fut.set_result(None)

    def wake_all(self) -> None:
        self._wake(set(self._waiters))

    # ------------------------------------------------------------------ holding
    async def wait(self, topic: str, queue_id: int, timeout: float, ready: Callable[[], bool],
                   conn: Any = None, nbytes: int = 0) -> None:
        """Until ``ready()``, a dispatch to (topic, queue_id), ``conn`` closing or ``timeout`` seconds.
        The caller checked :meth:`admit` for ``conn`` first."""
        assert self._loop is not None
        fut: asyncio.Future[None] = self._loop.create_future()
        key = (topic, queue_id)
        self._waiters.setdefault(key, {})[fut] = None
        self._by_conn.setdefault(conn, set()).add(fut)
        self._held += 1
        self._held_bytes += nbytes
        try:
            if ready():
                return
            await wait_for(fut, timeout)
        except asyncio.TimeoutError:
            pass
        finally:
            self._held -= 1
            self._held_bytes -= nbytes
            waiting = self._waiters.get(key)
            if waiting is not None and waiting.pop(fut, 0) is None and not waiting:
                del self._waiters[key]
            mine = self._by_conn.get(conn)
            if mine is not None:
                mine.discard(fut)
                if not mine:
                    del self._by_conn[conn]
