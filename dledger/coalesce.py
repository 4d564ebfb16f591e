"""Cross-request coalescing of leader appends: many requests, one proposal, one store write.

Rules
-----
* :meth:`AppendCoalescer.submit` queues one request (one or more bodies) and returns at once;
  nothing is proposed yet. The queue is written when the event loop gets to it: in the next
  loop iteration (``window_s == 0``, the default: "whatever arrived in this iteration",
  typically every request decoded from every socket read of one poll) or ``window_s`` after
  the first queued request. A queue that reaches ``max_entries`` or ``max_bytes`` is written in
  the next iteration whatever the window.
* A flush takes the queue in arrival order and cuts it into proposals of at most
  ``max_entries`` bodies and ``max_bytes`` body bytes; a request is never split (its bodies
  get consecutive indexes and it completes once, like ``append_batch``), so one request larger
  than the bounds is a proposal of its own. Each proposal is one ``core.propose(n)`` and one
  ``append_batch_as_leader`` (the append hooks still run once per entry, before its bytes are
  written).
* Every request of a proposal gets the proposal's outcome: SUCCESS when its last entry commits
  (results ``[(index, pos), ...]`` of its own bodies only), or the proposal's failure code
  (``NOT_LEADER`` with the leader hint, ``LEADER_PENDING_FULL``, ``WAIT_QUORUM_ACK_TIMEOUT``,
  ``DISK_ERROR`` ...). A request refused before it was proposed (not leader, store full) is
  answered from the flush, never from inside ``submit``.
* A request's sink is either an :class:`AppendFuture` (``index``/``pos``/
  ``positions`` are set when the proposal is written, before the future resolves) or a
  callable ``sink(results, error)`` with exactly one of the two not None. Callables are called
  synchronously from the server's drive loop: they must not block or re-enter the server
  beyond queueing more work.

Theory of operation
-------------------
Per-request costs that batching removes on the leader are the proposal bookkeeping in the core
(pending entry, completion), the store call (planning, one ``pwrite`` for data and one for the
index) and the wake-ups of the flusher and the drive loop. Requests that arrive together are
therefore cheap to merge: the loop was going to process them back to back anyway, so the added
latency with the default window is one loop iteration.
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable, Optional, Protocol, Union

from .core.codes import Code
from .errors import DLedgerError

ReplySink = Callable[[Optional[list], Optional[DLedgerError]], None]
_SUCCESS = int(Code.SUCCESS)


class AppendFuture(asyncio.Future):
    """Future of one append (or batch). ``index``/``pos`` are the first entry's, set at once."""

    def __init__(self, *, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop=loop)
        self.index = -1
        self.pos = -1
        self.last_index = -1
        self.positions: list[int] = []
        self.code: int = Code.SUCCESS
        self.batch = False

    def results(self) -> list[tuple[int, int]]:
        return [(self.index + i, p) for i, p in enumerate(self.positions)]


Sink = Union[AppendFuture, ReplySink]


class ProposalTarget(Protocol):
    """What the coalescer needs of the server (``DLedgerServer``): its loop, its counters, and
    the two steps of a flush. A contract instead of the class, so this module imports no server."""

    _loop: Optional[asyncio.AbstractEventLoop]
    counters: dict[str, Any]

    def _propose_group(self, bodies: list[bytes], members: list[tuple[Sink, int, int]]) -> None: ...

    def _after_appends(self) -> None: ...


class Proposal:
    """One coalesced proposal: ``first_index`` .. and the requests it carries."""

    __slots__ = ("first_index", "positions", "members")

    def __init__(self, first_index: int, positions: list[int], members: list[tuple[Sink, int, int]]) -> None:
        self.first_index = first_index
        self.positions = positions
        self.members = members  # (sink, offset in the proposal, body count)

    def results(self, off: int, n: int) -> list[tuple[int, int]]:
        first, pos = self.first_index + off, self.positions
        return [(first + i, pos[off + i]) for i in range(n)]

    def finish(self, error: Optional[DLedgerError], counters: dict[str, Any]) -> None:
        for sink, off, n in self.members:
            deliver(sink, None if error is not None else self.results(off, n), error, counters)


def deliver(sink: Sink, results: Optional[list], error: Optional[DLedgerError], counters: dict[str, Any]) -> None:
    """Hand one request its outcome (see the module rules for the two kinds of sink)."""
    if isinstance(sink, asyncio.Future):
        if sink.done():
            return
        if error is None:
            sink.set_result(results)
        else:
            sink.code = error.code
            sink.set_exception(DLedgerError(error.code, error.message, error.leader_id, error.leader_addr))
        return
    try:
        sink(results, error)
    except Exception:  # a broken reply path must not stop the drive loop
        counters["sink_errors"] = counters.get("sink_errors", 0) + 1


class AppendCoalescer:
    """The leader's queue of not-yet-proposed append requests (see module rules)."""

    def __init__(self, server: ProposalTarget, *, window_s: float = 0.0, max_entries: int = 1024,
                 max_bytes: int = 4 * 1024 * 1024) -> None:
        if window_s < 0 or max_entries < 1 or max_bytes < 1:
            raise ValueError("coalescing window must be >= 0 and its bounds >= 1")
        self.server = server
        self.window_s = window_s
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.queue: list[tuple[list[bytes], int, Sink]] = []  # (bodies, body bytes, sink)
        self.entries = 0
        self.nbytes = 0
        self._handle: Optional[asyncio.Handle] = None
        self._soon = False

    def __len__(self) -> int:
        return len(self.queue)

    def submit(self, bodies: list[bytes], nbytes: int, sink: Sink) -> None:
        self.queue.append((bodies, nbytes, sink))
        self.entries += len(bodies)
        self.nbytes += nbytes
        if self._soon:
            return
        loop = self.server._loop
        assert loop is not None
        if self.window_s == 0 or self.entries >= self.max_entries or self.nbytes >= self.max_bytes:
            if self._handle is not None:
                self._handle.cancel()
            self._soon = True
            self._handle = loop.call_soon(self.flush)
        elif self._handle is None:
            self._handle = loop.call_later(self.window_s, self.flush)

    def flush(self) -> None:
        """Propose and write everything queued (called by the loop; safe to call directly)."""
        if self._handle is not None:
            self._handle.cancel()
        self._handle, self._soon = None, False
        queue, self.queue = self.queue, []
        self.entries = self.nbytes = 0
        if not queue:
            return
        server = self.server
        counters = server.counters
        counters["coalesce_flushes"] += 1
        max_entries, max_bytes = self.max_entries, self.max_bytes
        i, n = 0, len(queue)
        while i < n:
            bodies: list[bytes] = []
            members: list[tuple[Sink, int, int]] = []
            size = 0
            while i < n:
                b, nb, sink = queue[i]
                if members and (len(bodies) + len(b) > max_entries or size + nb > max_bytes):
                    break
                members.append((sink, len(bodies), len(b)))
                bodies.extend(b)
                size += nb
                i += 1
            server._propose_group(bodies, members)
        server._after_appends()

    def fail_all(self, error: DLedgerError) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle, self._soon = None, False
        queue, self.queue = self.queue, []
        self.entries = self.nbytes = 0
        for _, _, sink in queue:
            deliver(sink, None, error, self.server.counters)



class ClientReply:
    """Sink of one client append request: answers it through ``reply`` (``ClientSession.reply``)
    with the response frame of ``dledger.rpc.client``."""

    __slots__ = ("reply", "rid")

    def __init__(self, reply: Callable[[dict], None], rid: Any) -> None:
        self.reply, self.rid = reply, rid

    def __call__(self, results: Optional[list], error: Optional[DLedgerError]) -> None:
        if error is None:
            self.reply({"t": "resp", "rid": self.rid, "code": _SUCCESS, "results": results})
            return
        out = {"t": "resp", "rid": self.rid, "code": int(error.code), "error": error.message}
        if error.leader_id:
            out["leader_id"], out["leader_addr"] = error.leader_id, error.leader_addr
        self.reply(out)
