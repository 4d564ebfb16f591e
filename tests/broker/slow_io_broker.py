"""Test-only fault injection (issue 24.7): ``mqbroker`` on a disk that answers in seconds.

Rules: ``python -m tests.broker.slow_io_broker -c <conf>`` runs the real ``mqbroker``. While the
file named by ``SLOW_IO_TRIGGER`` exists:
- every ``os.fsync`` / ``os.fdatasync`` first sleeps ``SLOW_IO_S`` seconds (default 2), on whatever
  thread makes it (wrapped before any broker module is imported, so every caller gets it);
- the DLedger loop thread is held ``SLOW_IO_S`` seconds at a time with a moment to run between,
  as a thread whose writes into mapped pages wait for a slow disk would be.
Nothing in the product reads these variables; only tests launch this module.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Callable, Optional

TRIGGER = os.environ.get("SLOW_IO_TRIGGER", "")
DELAY_S = float(os.environ.get("SLOW_IO_S", "2"))


def _slow() -> bool:
    return bool(TRIGGER) and os.path.exists(TRIGGER)


def _wrap(real: Callable[[Any], None]) -> Callable[[Any], None]:
    def call(fd: Any) -> None:
        if _slow():
            time.sleep(DELAY_S)
        real(fd)
    return call


_LOOPS: list[Any] = []  # the DLedger loop(s) of this process, recorded as they start


def _record_loops() -> None:
    from broker.store import dledger_commitlog as dc

    real = dc.DLedgerCommitLog._start_loop

    def start_loop(self: Any) -> None:
        real(self)
        _LOOPS.append(self._loop)

    dc.DLedgerCommitLog._start_loop = start_loop  # type: ignore[method-assign]


def _dledger_loop() -> Optional[Any]:
    return _LOOPS[-1] if _LOOPS else None


def _stall_dledger_loop() -> None:
    loop = None
    while True:
        time.sleep(0.05)
        if not _slow():
            continue
        loop = loop or _dledger_loop()
        if loop is None or loop.is_closed():
            continue
        held = threading.Event()

        def hold() -> None:
            time.sleep(DELAY_S)  # the DLedger loop thread waits, as on a slow disk write
            held.set()

        loop.call_soon_threadsafe(hold)
        held.wait(DELAY_S + 10)


os.fsync = _wrap(os.fsync)  # type: ignore[assignment]
os.fdatasync = _wrap(os.fdatasync)  # type: ignore[assignment]

if __name__ == "__main__":
    _record_loops()
    threading.Thread(target=_stall_dledger_loop, name="SlowIoFault", daemon=True).start()
    from broker.cli.mqbroker import main

    sys.exit(main(sys.argv[1:]))
