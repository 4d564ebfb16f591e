"""The stdout of a Java test process, line by line, read on a thread and waited on with a deadline."""
from __future__ import annotations

import queue
import threading
import time
from typing import IO, Callable, Optional


class ProcessLines:
    """Reads ``stream`` on a daemon thread; :meth:`wait_for` returns the first new line a predicate
    accepts within a timeout (None past it). ``seen`` keeps every line read, for error messages."""

    def __init__(self, stream: IO[str]) -> None:
        self._lines: "queue.Queue[str]" = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=lambda: [self._lines.put(ln) for ln in stream], daemon=True).start()

    def wait_for(self, accept: Callable[[str], bool], timeout: float) -> Optional[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                ln = self._lines.get(timeout=0.5)
            except queue.Empty:
                continue
            self.seen.append(ln)
            if accept(ln):
                return ln
        return None
