"""BrokerLifetime: how a broker process ends: a stop signal, or its DLedger member stopping itself.

Rules:
- :meth:`BrokerLifetime.run_until_signal` is the process's life (``mqbroker``): install the
  signal gate (for the life of the process, ``broker.shutdown``'s rules) and the stack dump,
  start the broker, freeze what start-up left alive (``broker.gc_watch``), then wait for the
  first of a stop signal and the member stopping itself; arm the exit watchdog
  (``shutdownTimeoutMillis`` + its grace, in both cases) and shut the broker down. A member that
  stopped itself then raises :class:`BrokerMemberStoppedError` (cause and fix); a shutdown that
  was not clean raises :class:`BrokerShutdownIncompleteError`.
- A DLedger member that stops itself (disk full on a follower append, a failed flush or
  hard-state write, a store that refused what consensus decided: ``DLedgerServer._fatal``) ends
  the broker (issue 13.1): :meth:`member_stopped` records it at once (the broker refuses writes
  ``SERVICE_NOT_AVAILABLE``; ``/health`` answers 503 with the cause and :meth:`unhealthy`'s fix,
  ``/status`` carries ``memberStopped``, the gauge ``rocketmq_broker_dledger_member_stopped`` is 1,
  and the store's reads refuse instead of reporting data as removed/not found), then
  :meth:`run_until_signal` shuts down and raises, which ``mqbroker`` prints as one line with exit
  code 4. The first failure recorded stands.

  Why exit rather than restart the member in place: the member stops exactly when its store and
  the consensus state may disagree (a Ready half applied, a flush of unknown extent); the only
  path that re-establishes what is durable is the recovery that runs at start-up. Re-running it
  inside a live broker would mean tearing down the DLedgerCommitLog, the dispatch and the
  ConsumeQueues under running request handlers. A non-zero exit lets the operator's supervisor
  (systemd ``Restart=on-failure``, Kubernetes) restart it once the cause is fixed, through the
  one tested start path; a supervisor also sees a crash loop, which a silent in-process retry
  would hide.
- ``member_failure`` is also where the role handler reports a member that cannot win an election
  without stopping (``broker.role``); it sets and clears it through the broker.

Theory of operation: a composed object the ``BrokerController`` owns; it sees the broker only
through :class:`Lifecycle` (start, shutdown and what shutdown left to report) and imports nothing
that leads back to ``broker.controller``.
"""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, Optional, Protocol

from broker.gc_watch import freeze_startup
from broker.shutdown import WATCHDOG_GRACE_S, ExitWatchdog, SignalGate, install_stack_dump

log = logging.getLogger("broker.controller")


class BrokerShutdownIncompleteError(RuntimeError):
    """A shutdown step timed out (abandoned) or failed (e.g. a full disk); each is logged by name."""


class BrokerMemberStoppedError(RuntimeError):
    """The DLedger member stopped itself while the broker ran; the message names cause and fix."""


def member_stopped_fix(reason: str, root: Path) -> str:
    """The operator's next step for a DLedger member that stopped itself with ``reason``."""
    low = reason.lower()
    if "disk full" in low or "no space" in low or "enospc" in low or "store is marked full" in low:
        return (f"free space on the filesystem of storePathRootDir={root} (or give it a bigger disk), then restart "
                f"mqbroker; recovery on start keeps every committed entry")
    return (f"fix the cause above (see the log for the failing file), then restart mqbroker: recovery on start "
            f"re-checks storePathRootDir={root}; if it refuses to start, run `mqupgrade validate` on that store")


class Lifecycle(Protocol):
    """What the lifetime needs of its broker (``BrokerController``)."""

    @property
    def shutdown_step(self) -> Optional[str]: ...

    @property
    def shutdown_deadline_s(self) -> float: ...

    @property
    def shutdown_problems(self) -> list[str]: ...

    async def start(self) -> None: ...

    async def shutdown(self) -> None: ...


class BrokerLifetime:
    def __init__(self, broker_name: str, root_dir: Path) -> None:
        self.broker_name = broker_name
        self.root_dir = root_dir  # storePathRootDir, named in the fix
        self.member_failure: Optional[str] = None  # set once the DLedger member stopped itself (issue 13.1)
        self._member_stopped = asyncio.Event()

    def member_stopped(self, reason: str) -> bool:
        """Record that the DLedger member stopped itself (broker loop) and wake
        :meth:`run_until_signal`; False when a failure was recorded already (nothing changes)."""
        if self.member_failure is not None:
            return False
        self.member_failure = f"DLedger member of broker {self.broker_name} stopped itself: {reason}"
        log.critical("%s; the broker refuses reads and writes and shuts down (%s)", self.member_failure,
                     member_stopped_fix(reason, self.root_dir))
        self._member_stopped.set()
        return True

    def unhealthy(self) -> Optional[dict[str, Any]]:
        """``GET /health``'s answer while a member failure is recorded (cause and fix), else None."""
        if self.member_failure is None:
            return None
        return {"ok": False, "error": self.member_failure, "fix": member_stopped_fix(self.member_failure, self.root_dir)}

    async def run_until_signal(self, broker: Lifecycle) -> None:
        """Start ``broker``, wait for a stop signal or the member's stop, shut down (module rules)."""
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        watchdog = ExitWatchdog(lambda: broker.shutdown_step or "after the shutdown steps")
        SignalGate(loop, stop.set, watchdog, broker.shutdown_deadline_s).install()  # for the life of the process
        install_stack_dump(loop)
        await broker.start()
        freeze_startup()  # full collections never walk what start-up left alive (broker.gc_watch)
        waits = [loop.create_task(stop.wait()), loop.create_task(self._member_stopped.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        watchdog.arm(broker.shutdown_deadline_s + WATCHDOG_GRACE_S)  # also when the member stopped itself
        await broker.shutdown()
        if self.member_failure is not None:
            raise BrokerMemberStoppedError(f"{self.member_failure}; {member_stopped_fix(self.member_failure, self.root_dir)}")
        if broker.shutdown_problems:
            raise BrokerShutdownIncompleteError(
                f"shutdown not clean: {'; '.join(broker.shutdown_problems)}; the next start recovers what was not "
                f"stopped cleanly (the log has the details and, for a step that timed out, the stacks)")
