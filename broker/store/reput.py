"""ReputMessageService: turns committed commitlog bytes into ConsumeQueue units and index keys.

Rules:
- It reads from ``reput_from_offset`` only what the commitlog says is committed (classic:
  written; DLedger: below committedPos, via ``limit_offset``), never beyond.
- Each wakeup processes whole ``get_data`` slices (everything readable in a file) before it
  sleeps again, so dispatch keeps up with batched puts.
- A record is described by the commitlog's ``parse_record`` (pluggable: a DLedger commitlog's
  parser skips the 48-byte entry header and reports ``buffer_size``); the scan advances by
  ``buffer_size`` when set, else ``msg_size``. An end-of-file blank moves to the next file.
- A record cut short by the readable end (an HA slave holds half a record until the next
  frame) just ends the pass; the next pass retries from its start.
- A record that parses but whose topic or queue id a send would refuse
  (``names.record_problem``: e.g. ``../../x``, NUL, a negative queue) is skipped: reported to
  ``skipped`` (file, position, offset, reason; once) and never handed to a dispatcher, so no
  ConsumeQueue, index entry or path is made from it. Its size is known, so the scan goes on.
- A record that cannot be parsed although complete: when the commitlog knows its entry
  boundaries (a DLedger commitlog's ``entry_size_at``: a DLedger entry frame written by
  DLedger itself, whatever its body), the entry is skipped and reported the same way (an
  outsider's 200 zero bytes never stop dispatch). Otherwise (classic commitlog, or the old
  region of a DLedger store) record boundaries are unknown: dispatch stops at that offset
  (``error`` says where and why, status shows it, and it is cleared once dispatch progresses
  past it, e.g. after an HA truncation); it never guesses where the next record starts.
- A dispatcher that cannot write (``DiskFullError``: a ConsumeQueue or IndexFile block on a full
  disk) is waited out by :class:`DiskFullGuard`: ``error`` names the file and offset (the store
  refuses puts while it is set), one log line; on the service thread the record is retried every
  second until it is written (or the store stops); on any other thread (start-up, shutdown,
  tests) the error is raised. The first record written after that clears ``error``. The guard
  is one compiled call per record for all dispatchers (it was an interpreted wrapper per
  dispatcher per record: 3% of a classic master under Apache's benchmark producer).
- ``dispatch_behind_bytes = max_offset - reput_from_offset``: 0 means everything committed is
  in the ConsumeQueues (used by shutdown and by the DLedger role change).

- Woken by a put, the thread first sleeps ``GATHER_S`` (1 ms, as Apache's ReputMessageService
  sleeps 1 ms between passes), so the puts of that millisecond are dispatched in one pass: one
  GIL hand-over between the event loop and this thread per pass rather than per put. On a
  GIL-bound master under Apache's benchmark producer the hand-overs cost more than the dispatch.

Theory of operation: :meth:`do_reput` is a pure pass over the available bytes (tests and
recovery call it directly); :meth:`start` runs it on a thread that sleeps until woken by a put
(or 50 ms). :meth:`on_service_thread` tells a dispatcher whether it runs on that thread.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Callable, Final, Iterable, Protocol

from broker.store.dispatch import CommitLogDispatcher, DispatchRequest, SkippedRecords, locate
from broker.store.mapped_file import DiskFullError
from broker.store.record_walk import BAD, RECORD, ROLL, SKIP, walk

#: after a wakeup, let the puts of this long land before the pass (module rules)
GATHER_S: Final = 0.001

if TYPE_CHECKING:  # pragma: no cover
    from broker.store.commitlog import SelectMappedBufferResult

log = logging.getLogger(__name__)


class _CommitLogReader(Protocol):
    """What dispatch reads: the classic ``CommitLog`` and ``DLedgerCommitLog`` both are one."""

    @property
    def max_offset(self) -> int: ...

    def get_data(self, offset: int, return_first_on_not_found: bool | None = None
                 ) -> SelectMappedBufferResult | None: ...

    def parse_record(self, buf: memoryview, pos: int, check_crc: bool) -> DispatchRequest: ...

    def entry_size_at(self, buf: memoryview, pos: int, offset: int) -> int:
        """Size of the outer frame at ``offset`` whatever its payload, -1 if there is none."""
        ...

    def explain_record(self, buf: memoryview, pos: int) -> str: ...

    def roll_next_file(self, offset: int) -> int: ...


def _incomplete(buf: memoryview, pos: int, end: int) -> bool:
    """True if the bytes at ``pos`` look like the start of a record that does not end before ``end``."""
    if end - pos < 8:
        return True
    total = int.from_bytes(buf[pos:pos + 4], "big", signed=True)
    return total > end - pos


class DiskFullGuard:
    """Every dispatcher of a record, in order, with a full disk waited out (module rules)."""

    def __init__(self, dispatchers: Iterable[CommitLogDispatcher], stopping: threading.Event) -> None:
        self.dispatchers = [d.dispatch for d in dispatchers]
        self.error: str | None = None  # set while dispatch is blocked by a full disk
        self._stopping = stopping
        self._service: ReputMessageService | None = None  # whose thread may wait (attach)

    def attach(self, service: ReputMessageService) -> None:
        self._service = service

    def dispatch(self, request: DispatchRequest) -> None:
        for dispatch in self.dispatchers:
            try:
                dispatch(request)
            except DiskFullError as exc:
                self._wait_out(dispatch, request, exc)
        if self.error is not None:
            self.error = None
            log.warning("disk space is back: dispatch resumed at commitlog offset %d, writes accepted again",
                        request.commitlog_offset)

    def _wait_out(self, dispatch: Callable[[DispatchRequest], None], request: DispatchRequest,
                  exc: DiskFullError) -> None:
        while True:
            if self.error is None:
                self.error = str(exc)
                log.error("dispatch stopped at commitlog offset %d: %s; the store is not writeable (puts "
                          "refused, reads served) until space is freed", request.commitlog_offset, exc)
            service = self._service
            on_service_thread = service is not None and service.on_service_thread()
            if not on_service_thread or self._stopping.wait(1.0):
                raise exc
            try:
                dispatch(request)
                return
            except DiskFullError as again:
                exc = again


class ReputMessageService:
    """Dispatches committed records to every CommitLogDispatcher, in commitlog order."""

    def __init__(self, commitlog: _CommitLogReader, dispatchers: Iterable[CommitLogDispatcher],
                 reput_from_offset: int = 0,
                 limit_offset: Callable[[], int] | None = None,
                 listeners: Iterable[Callable[[list[DispatchRequest]], None]] = (),
                 skipped: SkippedRecords | None = None) -> None:
        self.commitlog = commitlog
        self.skipped = skipped if skipped is not None else SkippedRecords()
        self.dispatchers = list(dispatchers)
        self.reput_from_offset = reput_from_offset
        self.limit_offset = limit_offset or (lambda: commitlog.max_offset)
        self.listeners = list(listeners)
        self.error: str | None = None  # why dispatch is stalled (classic: an unparsable record)
        self.dispatched = 0
        self._stop = threading.Event()
        self._wakeup = threading.Event()
        self._worker: threading.Thread | None = None
        self._lock = threading.Lock()

    def dispatch_behind_bytes(self) -> int:
        return max(0, self.limit_offset() - self.reput_from_offset)

    def is_commitlog_available(self) -> bool:
        return self.reput_from_offset < self.limit_offset()

    def do_reput(self) -> int:
        """Dispatch everything available now; returns the number of records dispatched."""
        with self._lock:
            return self._do_reput()

    def _do_reput(self) -> int:
        count = 0
        dispatchers = [d.dispatch for d in self.dispatchers]
        parse = self.commitlog.parse_record
        entry_size_at = self.commitlog.entry_size_at
        while True:
            limit = self.limit_offset()
            if self.reput_from_offset >= limit:
                break
            result = self.commitlog.get_data(self.reput_from_offset)
            if result is None:
                break
            base = result.start_offset
            buf = result.buffer
            if base != self.reput_from_offset:
                log.warning("reput offset %d not readable, moved to %d", self.reput_from_offset, base)
                self.reput_from_offset = base
            end = min(len(buf), limit - base)
            buf = buf[:end]
            pos = 0
            batch: list[DispatchRequest] = []
            rolled = False
            stalled: str | None = None
            for kind, at, size, req, why in walk(buf, 0, end, parse, check_names=True, entry_size_at=entry_size_at,
                                                 base=base):
                pos = at + size
                if kind == RECORD:
                    for dispatch in dispatchers:
                        dispatch(req)
                    batch.append(req)
                elif kind == SKIP:
                    self._skip(result, base + at, why if req.success else f"{why}: {self._explain(buf, at)}")
                elif kind == ROLL:
                    rolled = True
                elif kind == BAD and not _incomplete(buf, pos, end):  # else an HA slave holds half a record: wait
                    stalled = (f"cannot dispatch the record at commitlog offset {base + pos}: "
                               f"{self._explain(buf, pos)}; record boundaries are unknown here, "
                               "so dispatch waits at this offset")
            moved = base + pos > self.reput_from_offset
            self.reput_from_offset = self.commitlog.roll_next_file(base + pos) if rolled else base + pos
            count += len(batch)
            if stalled is not None:
                if stalled != self.error:  # one line per stall, not one per wakeup
                    log.error(stalled)
                self.error = stalled
            elif moved and self.error is not None:
                log.warning("dispatch moved past the stall (the bytes were rewritten): at %d now",
                            self.reput_from_offset)
                self.error = None
            if batch:
                for listener in self.listeners:
                    listener(batch)
            if self.error is not None or (not rolled and pos == 0):
                break
        self.dispatched += count
        return count

    def _skip(self, result: SelectMappedBufferResult, offset: int, reason: str) -> None:
        path, file_pos = locate(result.mapped_file, offset)
        self.skipped.report(path, file_pos, offset, reason)

    def _explain(self, buf: memoryview, pos: int) -> str:
        return self.commitlog.explain_record(buf, pos)

    # --- thread -----------------------------------------------------------------------------
    def start(self) -> None:
        if self._worker is None:
            self._stop.clear()
            self._worker = threading.Thread(target=self._run, name="ReputMessageService", daemon=True)
            self._worker.start()

    def wakeup(self) -> None:
        """Called per put: the event is set only when it is not (Event.set takes its lock and
        notifies; while the thread gathers or dispatches, the flag is already up)."""
        wakeup = self._wakeup
        if not wakeup.is_set():
            wakeup.set()

    def on_service_thread(self) -> bool:
        """True when called from this service's own dispatch thread (started by :meth:`start`).

        A dispatcher may block and retry there (the thread has nothing else to do), but must raise
        when called from :meth:`do_reput` on a caller's thread (start-up, shutdown, tests)."""
        return self._worker is not None and threading.current_thread() is self._worker

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.do_reput() == 0:
                    self._wakeup.wait(0.05)
                    self._wakeup.clear()
                    time.sleep(GATHER_S)
            except Exception:  # noqa: BLE001 - keep dispatching alive, but say why it stalled
                log.exception("reput failed at %d", self.reput_from_offset)
                self._wakeup.wait(0.1)

    def wait_dispatched(self, timeout: float = 10.0) -> bool:
        """Block until ``dispatch_behind_bytes() == 0`` (or timeout / a dispatch error)."""
        deadline = time.monotonic() + timeout
        while self.dispatch_behind_bytes() > 0 and self.error is None:
            if self._worker is None:
                self.do_reput()
                if self.dispatch_behind_bytes() > 0 and self.error is None:
                    return False
                break
            if time.monotonic() >= deadline:
                return False
            self.wakeup()
            time.sleep(0.001)
        return self.dispatch_behind_bytes() == 0

    def shutdown(self) -> None:
        """Stop after dispatching what is committed (RocketMQ waits up to 50 x 100 ms)."""
        if self._worker is not None:
            self._stop.set()
            self._wakeup.set()
            self._worker.join()
            self._worker = None
        if self.error is None:
            self.do_reput()
