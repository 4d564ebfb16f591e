"""StateWriter: the member's hard state (``currterm``) and ``checkpoint`` written off the event loop.

Rules
-----
* Each write of those small files is three fsyncs (``.tmp``, ``.bak``, directory: the safe write
  of :mod:`dledger.store.safefile`). On the consensus loop, a slow disk turned every term change
  into a loop stall long enough to miss heartbeats and start more elections (issue 13.5: 1.8 s
  stalls with a 150 ms fsync). Here one worker thread does them, in submission order.
* Raft's rule is kept: a Ready's hard state is durable **before** any of its messages leaves.
  :meth:`StateWriter.send` is the only way the server sends peer messages; while a hard-state
  write is outstanding, every message is held (in order) and released when the write that was
  outstanding at its send time has completed. Messages of later Readies are held behind it too,
  so nothing that depends on the new term or vote overtakes it. Local effects (appends, commit
  index, client completions) need no gate: nothing leaves the process.
* Hard states that pile up while the worker is busy are collapsed: the worker writes the newest
  one, which covers every older submission (the hard state is a register, not a log).
* A failed write calls ``on_error`` (the server stops the member: it can no longer promise the
  vote it would announce); held messages are dropped.
* Checkpoints (:meth:`StateWriter.checkpoint`) go through the same worker, so ``checkpoint`` and
  ``currterm`` writes never interleave with each other or with :meth:`close`.

Theory of operation
-------------------
``issued`` counts hard states submitted, ``durable`` the highest one written. The held queue
stores ``(issued at send time, dst, payload)``; a completion for ``seq`` sets ``durable = seq``
and releases the head of the queue while its number is ``<= durable``. Completions are posted
to the loop with ``call_soon_threadsafe``, so all bookkeeping runs on the loop thread.
"""
from __future__ import annotations

import asyncio
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional


class StateWriter:
    def __init__(self, log_view: Any, loop: asyncio.AbstractEventLoop, send: Callable[[str, Any], None],
                 on_error: Callable[[BaseException], None], name: str) -> None:
        self._lv = log_view
        self._loop = loop
        self._send = send
        self._on_error = on_error
        self._exec = ThreadPoolExecutor(1, thread_name_prefix=name)
        self._lock = threading.Lock()
        self._latest: Optional[tuple[int, int, Optional[str]]] = None  # (seq, term, vote) not yet taken
        self.issued = 0
        self.durable = 0
        self.failed = False
        self._held: deque[tuple[int, str, Any]] = deque()
        self.counters = {"hard_state_writes": 0, "hard_states_collapsed": 0, "held_messages": 0,
                         "checkpoint_writes": 0}

    # ------------------------------------------------------------------ hard state
    def persist_hard_state(self, term: int, vote: Optional[str]) -> None:
        """Loop thread: make ``(term, vote)`` durable before any message sent from now on."""
        self.issued += 1
        with self._lock:
            if self._latest is not None:
                self.counters["hard_states_collapsed"] += 1
            queued = self._latest is not None
            self._latest = (self.issued, term, vote)
        if not queued:
            self._exec.submit(self._write_latest)

    def _write_latest(self) -> None:
        """Worker thread: write the newest submitted hard state and report its number."""
        with self._lock:
            job, self._latest = self._latest, None
        if job is None:
            return
        seq, term, vote = job
        try:
            self._lv.persist_hard_state(term, vote)
        except BaseException as exc:  # noqa: BLE001 - reported to the loop, which stops the member
            self._post(self._failed, exc)
            return
        self._post(self._written, seq)

    def _post(self, fn: Callable[..., None], arg: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(fn, arg)
        except RuntimeError:  # loop closed: the member is gone, nothing to release
            pass

    def _written(self, seq: int) -> None:
        self.counters["hard_state_writes"] += 1
        if self.failed:
            return
        self.durable = max(self.durable, seq)
        held, send = self._held, self._send
        while held and held[0][0] <= self.durable:
            _, dst, payload = held.popleft()
            send(dst, payload)

    def _failed(self, exc: BaseException) -> None:
        if not self.failed:
            self.failed = True
            self._held.clear()
            self._on_error(exc)

    # ------------------------------------------------------------------ the gate
    def send(self, dst: str, payload: Any) -> None:
        """Loop thread: send now if every hard state submitted so far is durable, else hold."""
        if self.failed:
            return
        if self.durable >= self.issued:
            self._send(dst, payload)
        else:
            self.counters["held_messages"] += 1
            self._held.append((self.issued, dst, payload))

    @property
    def pending(self) -> int:
        """Messages waiting for a hard-state write."""
        return len(self._held)

    # ------------------------------------------------------------------ checkpoint, lifecycle
    async def checkpoint(self) -> None:
        """Write ``checkpoint`` in the worker (after any hard state submitted before)."""
        await asyncio.wrap_future(self._exec.submit(self._lv.persist_checkpoint))
        self.counters["checkpoint_writes"] += 1

    def close(self) -> None:
        """Wait for every submitted write (blocking: call from a thread or at shutdown)."""
        self._exec.shutdown(wait=True)
