"""GcWatch: how long Python's cyclic garbage collector stops the broker, measured and logged.

Rules
-----
- A collection holds the GIL: while it runs no thread of the process runs (the event loop, the
  DLedger loop, dispatch). A full (generation 2) collection costs time in proportion to the live
  container objects, so a broker whose heap grows pays longer and longer pauses; under load
  those pauses starved DLedger heartbeats and cost the leadership (issue 22.3).
- Every collection is timed through ``gc.callbacks``; one over ``report_ms`` is logged at
  WARNING with its generation and the objects it examined. Counts, total and worst pause per
  generation are kept for /status and the Prometheus metrics.
- :func:`freeze_startup` moves everything alive after start-up (modules, configs, metadata
  tables) to the permanent generation (``gc.freeze``): later full collections never walk it.
  A broker's start-up leaves ~40,000 objects (aiohttp alone ~14,000); walking them cost 30 ms
  idle and 50-90 ms on two saturated cores, every 1-2 s under load.
- Long-lived tables that grow with traffic keep no per-entry objects the collector walks
  (``broker.gc_quiet``).

Theory of operation: ``gc.callbacks`` are called with ``"start"`` and ``"stop"`` around each
collection on the thread that triggered it; the callback only reads a clock and updates a few
integers, so it costs nothing measurable.
"""
from __future__ import annotations

import gc
import logging
import time
from typing import Any

log = logging.getLogger("broker.gc")


class GcWatch:
    def __init__(self, report_ms: float = 50.0) -> None:
        self.report_ms = report_ms
        self.collections = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self.max_ms = [0.0, 0.0, 0.0]
        self._t0 = self._c0 = 0.0
        self._installed = False
        self.quiet = False  # freeze_startup's own collection

    def install(self) -> "GcWatch":
        if not self._installed:
            gc.callbacks.append(self._callback)
            self._installed = True
        return self

    def uninstall(self) -> None:
        if self._installed:
            gc.callbacks.remove(self._callback)
            self._installed = False

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
            self._c0 = time.thread_time()
            return
        gen = info.get("generation", 0)
        dt = time.perf_counter() - self._t0
        cpu = time.thread_time() - self._c0
        if not 0 <= gen <= 2:
            return
        self.collections[gen] += 1
        self.seconds[gen] += dt
        ms = dt * 1000.0
        if ms > self.max_ms[gen]:
            self.max_ms[gen] = ms
        if ms > self.report_ms and not self.quiet:
            log.warning("garbage collection of generation %d stopped every thread for %.0f ms (%.0f ms of CPU; "
                        "%d collected, %d uncollectable)", gen, ms, cpu * 1000, info.get("collected", 0),
                        info.get("uncollectable", 0))

    def snapshot(self) -> dict[str, Any]:
        return {"collections": list(self.collections), "seconds": [round(s, 3) for s in self.seconds],
                "maxMs": [round(m, 1) for m in self.max_ms], "frozen": gc.get_freeze_count()}


#: the process's watch (the collector is per process); ``mqbroker`` installs it
WATCH = GcWatch()


def freeze_startup() -> int:
    """Collect once, then move every object alive now to the permanent generation (the one
    collection asked for here is not reported as a pause)."""
    WATCH.quiet = True
    try:
        gc.collect()
    finally:
        WATCH.quiet = False
    gc.freeze()
    return gc.get_freeze_count()
