"""A log that an attacker cannot flood: at most ``burst`` lines per key per ``window_s``.

The one rate-limited log of the project: the DLedger transport and admission, the term guard,
and the broker's doors (remoting refusals and limits, the HTTP ACL, the HA port) all use it.

Rules
-----
* Each call names a key (the reason: "refused-connection", "term-refused", ...). Within one
  window the first ``burst`` lines of a key are logged as given; later ones are only counted, and
  the first line of the next window says how many were suppressed ("... (and 37 more like it
  in the last 10 s)").
* A window whose suppressed lines no later line reports is summarised by :meth:`flush` (a
  periodic sweep calls it): "... and 37 more like it (key) in the last 10 s".
* Every line starts with ``prefix`` when one is given (the port's name).
* No thread, no timer: the clock is read on each call (``time.monotonic`` unless injected).
  The table holds one row per key; keys are reasons chosen by the code, never by a peer.

Theory of operation
-------------------
One ``{key: [window_start, lines_in_window, suppressed]}`` table; a call either opens a new
window (flushing the suppressed count into the line it logs) or counts against the current one.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional


class RateLimitedLog:
    def __init__(self, logger: logging.Logger, burst: int = 5, window_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic, prefix: str = "") -> None:
        self.logger = logger
        self.burst = burst
        self.window_s = window_s
        self.clock = clock
        self.prefix = prefix
        self._keys: dict[str, list[float]] = {}

    def warning(self, key: str, msg: str, *args: Any) -> bool:
        """Log ``msg % args`` at WARNING unless ``key`` is over its burst; True if logged."""
        now = self.clock()
        msg, args = "%s" + msg, (self.prefix, *args)
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

    def flush(self, now: Optional[float] = None) -> None:
        """End the windows older than ``window_s``, saying how many lines each held back."""
        now = self.clock() if now is None else now
        for key, st in list(self._keys.items()):
            if now - st[0] < self.window_s:
                continue
            if st[2]:
                self.logger.warning("%s... and %d more like it (%s) in the last %.0f s",
                                    self.prefix, int(st[2]), key, now - st[0])
            del self._keys[key]
