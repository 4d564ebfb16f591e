"""A log that an attacker cannot flood: at most ``burst`` lines per key per ``window_s``.

Rules
-----
* Each call names a key (the reason: "refused-connection", "term-refused", ...). Within one
  window the first ``burst`` lines of a key are logged as given; later ones are only counted, and
  the first line of the next window says how many were suppressed ("... (and 37 more like it
  in the last 10 s)").
* No thread, no timer: the clock is read on each call (``time.monotonic`` unless injected).

Theory of operation
-------------------
One ``{key: [window_start, lines_in_window, suppressed]}`` table; a call either opens a new
window (flushing the suppressed count into the line it logs) or counts against the current one.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable


class RateLimitedLog:
    def __init__(self, logger: logging.Logger, burst: int = 5, window_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.burst = burst
        self.window_s = window_s
        self.clock = clock
        self._keys: dict[str, list[float]] = {}

    def warning(self, key: str, msg: str, *args: Any) -> bool:
        """Log ``msg % args`` at WARNING unless ``key`` is over its burst; True if logged."""
        now = self.clock()
        st = self._keys.get(key)
        if st is None or now - st[0] >= self.window_s:
            suppressed = int(st[2]) if st is not None else 0
            self._keys[key] = [now, 1, 0]
            if suppressed:
                msg += f" (and {suppressed} more like it in the last {self.window_s:.0f} s)"
            self.logger.warning(msg, *args)
            return True
        if st[1] < self.burst:
            st[1] += 1
            self.logger.warning(msg, *args)
            return True
        st[2] += 1
        return False
