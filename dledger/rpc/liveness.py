"""Silent peers: a peer we keep talking to that has gone quiet, and the TCP options that help.

Rules
-----
* A peer is *silent* when we queued at least one frame for it, the first such frame since we
  last received anything from it is ``silence_s`` old, and nothing arrived from it for
  ``silence_s`` either. Every Raft request expects an answer (a heartbeat or append an
  AppendResponse, a vote a VoteResponse) and a leader heartbeats its followers, so a live peer
  we talk to is never silent that long; a peer nobody talks to (two idle followers) never is.
* A silent peer's connections are suspect (issue 24.5: after a partition healed, a link sat in
  TCP retransmission for 22 s with 4 MB unacknowledged, and nothing noticed): the transport
  aborts both (its outbound link redials at once; the inbound one is reset, so the peer's own
  link sees the reset and redials too) and counts it. The clock then starts over: the same peer
  is reset again at the earliest ``silence_s`` later, so a long partition costs one redial per
  ``silence_s``, not a storm.
* :class:`SilenceDetector` is pure (no clock, no I/O: the transport passes ``now``), so its
  rule is tested without sockets.
* :func:`tune_socket` sets, where the platform has them, ``SO_KEEPALIVE`` (idle/interval/count)
  and Linux's ``TCP_USER_TIMEOUT`` (bytes unacknowledged for that long abort the connection with
  ETIMEDOUT instead of the kernel's ~15 minutes of backed-off retransmissions). These are the
  kernel's backstop; the detector is what works on every platform and on a path that still
  acknowledges bytes but delivers nothing (a proxy or middlebox in a bad state).

Theory of operation
-------------------
Two maps per peer: ``last_rx`` (time of the last frame received from it) and ``waiting`` (time of
the first frame queued for it after that). ``heard`` clears ``waiting``; ``sent`` sets it if
unset; ``due(now)`` returns the peers whose ``waiting`` and ``last_rx`` are both ``silence_s``
old and restarts their clocks.
"""
from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any, Optional

log = logging.getLogger("dledger.rpc")


class SilenceDetector:
    def __init__(self, silence_s: float) -> None:
        if silence_s <= 0:
            raise ValueError("silence_s must be positive")
        self.silence_s = silence_s
        self.last_rx: dict[str, float] = {}
        self.waiting: dict[str, float] = {}

    def sent(self, peer: str, now: float) -> None:
        """A frame was queued for ``peer``."""
        if peer not in self.waiting:
            self.waiting[peer] = now

    def heard(self, peer: str, now: float) -> None:
        """A frame arrived from ``peer``."""
        self.last_rx[peer] = now
        self.waiting.pop(peer, None)

    def due(self, now: float) -> list[str]:
        """Peers silent for ``silence_s`` while we waited for them; their clocks restart."""
        out = []
        for peer, since in list(self.waiting.items()):
            if now - since >= self.silence_s and now - self.last_rx.get(peer, since) >= self.silence_s:
                out.append(peer)
                self.waiting.pop(peer)
                self.last_rx[peer] = now  # the next reset comes silence_s later at the earliest
        return out


def tune_socket(sock: Any, user_timeout_ms: int, keepalive_s: int = 1, keepalive_count: int = 3) -> list[str]:
    """Keepalive and ``TCP_USER_TIMEOUT`` on ``sock``; returns the options that were set."""
    done: list[str] = []
    if sock is None:
        return done
    opts: list[tuple[int, int, int, str]] = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1, "SO_KEEPALIVE")]
    for name, value in (("TCP_KEEPIDLE", keepalive_s), ("TCP_KEEPINTVL", keepalive_s),
                        ("TCP_KEEPCNT", keepalive_count), ("TCP_USER_TIMEOUT", user_timeout_ms)):
        opt: Optional[int] = getattr(socket, name, None)
        if opt is not None and value > 0:
            opts.append((socket.IPPROTO_TCP, opt, int(value), name))
    for level, opt, value, name in opts:
        try:
            sock.setsockopt(level, opt, value)
            done.append(name)
        except (OSError, AttributeError) as exc:  # not a TCP socket, or not supported here
            log.debug("setsockopt %s=%s failed: %s", name, value, exc)
    return done


class PeerWatch:
    """The transport's side of the detector: the loop clock, a check task, the resets.

    ``transport`` needs ``self_id``, ``counters.silent_resets``, ``rlog`` and ``reset_peer(id)``;
    ``silence_s <= 0`` disables the watch (sent/heard become no-ops)."""

    def __init__(self, transport: Any, silence_s: float) -> None:
        self.transport = transport
        self.detector: Optional[SilenceDetector] = SilenceDetector(silence_s) if silence_s > 0 else None
        self.resets: dict[str, int] = {}
        self._task: Optional[asyncio.Task[None]] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    def start(self) -> None:
        if self.detector is not None:
            self._loop = asyncio.get_running_loop()
            self._task = self._loop.create_task(self._run(), name=f"dledger-watch-{self.transport.self_id}")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def sent(self, peer: str) -> None:
        if self.detector is not None and self._loop is not None:
            self.detector.sent(peer, self._loop.time())

    def heard(self, peer: str) -> None:
        if self.detector is not None and self._loop is not None:
            self.detector.heard(peer, self._loop.time())

    async def _run(self) -> None:
        assert self.detector is not None and self._loop is not None
        period = max(0.02, self.detector.silence_s / 5)
        while True:
            await asyncio.sleep(period)
            for peer in self.detector.due(self._loop.time()):
                self.resets[peer] = self.resets.get(peer, 0) + 1
                self.transport.counters.silent_resets += 1
                self.transport.rlog.warning(
                    f"silent-{peer}", "%s: peer %s sent nothing for %.1f s while we waited for it: "
                    "resetting both connections and redialling", self.transport.self_id, peer,
                    self.detector.silence_s)
                self.transport.reset_peer(peer)
