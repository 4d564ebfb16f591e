"""Counters and the coalescing, bounded outbox shared by the peer transport and the client.

Rules
-----
* ``_Outbox`` queues untagged payloads; the writing connection's ``sealer`` frames and tags them
  at flush time, so frames queued while a link is down are sealed with the next connection's keys.
* Bounded: over ``max_bytes`` the **oldest** frames are dropped (``dropped_full``); Raft
  tolerates loss, so a send never blocks. One flush per loop iteration (``writelines``); while
  the kernel buffer is full (``paused``) frames stay queued.
"""
from __future__ import annotations

import asyncio
from collections import deque
from typing import Optional

from . import framing as fr


class Counters:
    """Plain integer counters; ``as_dict`` for status/metrics."""

    __slots__ = (
        "frames_sent", "bytes_sent", "writes", "frames_received", "bytes_received", "dropped_full",
        "connects", "disconnects", "handshake_failures", "frame_errors", "oversize_frames",
        "auth_failures", "client_requests", "refused_connections", "evicted_unauthenticated", "budget_refusals",
        "silent_resets",
    )
    frames_sent: int
    bytes_sent: int
    writes: int
    frames_received: int
    bytes_received: int
    dropped_full: int
    connects: int
    disconnects: int
    handshake_failures: int
    frame_errors: int
    oversize_frames: int
    auth_failures: int
    client_requests: int
    refused_connections: int
    evicted_unauthenticated: int
    budget_refusals: int
    silent_resets: int

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}


class _Outbox:
    """Bounded FIFO of encoded payloads with coalesced flushing to one asyncio transport;
    ``sealer`` (the writing connection's) frames and tags them at flush time."""

    def __init__(self, counters: Counters, max_bytes: int) -> None:
        self.counters = counters
        self.max_bytes = max_bytes
        self.frames: deque[bytes] = deque()
        self.nbytes = 0
        self.transport: Optional[asyncio.Transport] = None
        self.paused = False
        self.sealer: Optional[fr.FrameSealer] = None
        self._scheduled = False

    def attach(self, transport: Optional[asyncio.Transport], sealer: Optional[fr.FrameSealer]) -> None:
        """Write to ``transport`` from now on, sealing with ``sealer`` (None: untagged frames)."""
        self.transport = transport
        self.sealer = sealer

    def put(self, frame: bytes) -> None:
        self.frames.append(frame)
        self.nbytes += len(frame)
        if self.nbytes > self.max_bytes:
            frames = self.frames
            while self.nbytes > self.max_bytes and len(frames) > 1:
                self.nbytes -= len(frames.popleft())
                self.counters.dropped_full += 1
        self.schedule()

    def schedule(self) -> None:
        if not self._scheduled and self.transport is not None and not self.paused:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self._scheduled = False
        t = self.transport
        if t is None or self.paused or not self.frames or t.is_closing():
            return
        frames = self.frames
        self.counters.frames_sent += len(frames)
        self.counters.bytes_sent += self.nbytes
        self.counters.writes += 1
        parts: list[bytes] = []
        if self.sealer is not None:
            self.sealer.seal(frames, parts)
        else:
            fr.plain_frames(frames, parts)
        t.writelines(parts)
        self.frames = deque()
        self.nbytes = 0
