"""RemotingClient: a pipelined asyncio client of the remoting protocol.

Rules:
- One TCP connection; every request gets a fresh opaque and a future; responses are matched by
  opaque in any order, so any number of requests may be in flight (``invoke`` is safe to call
  concurrently). ``invoke_oneway`` sets the oneway flag and waits for nothing.
- A timeout fails only that request (its late response is dropped); a closed connection fails
  every pending request with :class:`ConnectionError`.
- An optional RPC hook (e.g. :func:`broker.remoting.acl.sign_request`) is applied to every
  request before it is encoded.
- Requests sent by the server (e.g. NOTIFY_CONSUMER_IDS_CHANGED) go to ``on_request`` if set.
- ``frames_received`` / ``protocol_error`` tell a caller probing a port whether the peer spoke
  remoting at all (e.g. an HTTP server answers ``HTTP/1.1 400``, which is no frame).

Theory of operation: an ``asyncio.Protocol`` with a :class:`FrameDecoder`; writes go straight to
the transport (the kernel batches them), so a burst of invokes costs one syscall each at most.
"""
from __future__ import annotations

import asyncio
import itertools
from typing import Any, Callable, Mapping, Optional

from broker.remoting.codec import FrameDecoder, RemotingCommand, RemotingCommandError, decode_frame, encode
from broker.tasks import wait_for


class RemotingClient(asyncio.Protocol):
    def __init__(self, *, rpc_hook: Optional[Callable[[RemotingCommand], None]] = None,
                 on_request: Optional[Callable[[RemotingCommand], None]] = None) -> None:
        self.rpc_hook = rpc_hook
        self.on_request = on_request
        self.transport: Optional[asyncio.Transport] = None
        self.decoder = FrameDecoder()
        self.pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._opaque = itertools.count(1)
        self.closed = asyncio.Event()
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._paused = False
        self.frames_received = 0  # valid frames decoded so far
        self.protocol_error: Optional[str] = None  # set when the server sent bytes that are no frame

    @classmethod
    async def connect(cls, host: str, port: int, **kwargs: Any) -> "RemotingClient":
        loop = asyncio.get_running_loop()
        client = cls(**kwargs)
        await loop.create_connection(lambda: client, host, port)
        return client

    # ------------------------------------------------------------------ protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.decoder.feed(data)
            for frame in frames:
                cmd = decode_frame(frame)
                self.frames_received += 1
                if cmd.is_response:
                    fut = self.pending.pop(cmd.opaque, None)
                    if fut is not None and not fut.done():
                        fut.set_result(cmd)
                elif self.on_request is not None:
                    self.on_request(cmd)
        except RemotingCommandError as exc:
            self.protocol_error = str(exc)
            self._fail_all(ConnectionError(f"bad frame from server: {exc}"))
            if self.transport is not None:
                self.transport.abort()

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        self._fail_all(ConnectionError(f"connection closed{': ' + str(exc) if exc else ''}"))
        self.closed.set()
        for w in self._drain_waiters:
            if not w.done():
                w.set_result(None)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        for w in self._drain_waiters:
            if not w.done():
                w.set_result(None)
        self._drain_waiters.clear()

    def _fail_all(self, exc: Exception) -> None:
        pending, self.pending = self.pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(exc)

    # ------------------------------------------------------------------ API
    @property
    def is_closed(self) -> bool:
        return self.closed.is_set() or self.transport is None or self.transport.is_closing()

    def _send(self, cmd: RemotingCommand) -> None:
        if self.is_closed:
            raise ConnectionError("connection closed")
        if self.rpc_hook is not None:
            self.rpc_hook(cmd)
        assert self.transport is not None
        self.transport.write(encode(cmd))

    async def drain(self) -> None:
        if self._paused and not self.is_closed:
            fut = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(fut)
            await fut

    async def invoke(self, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        cmd.opaque = next(self._opaque)
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self.pending[cmd.opaque] = fut
        try:
            self._send(cmd)
            await self.drain()
            return await wait_for(fut, timeout)
        finally:
            self.pending.pop(cmd.opaque, None)

    async def request(self, code: int, fields: Optional[Mapping[str, Any]] = None, body: bytes = b"",
                      timeout: float = 3.0, **kwargs: Any) -> RemotingCommand:
        return await self.invoke(RemotingCommand.request(code, fields, body, **kwargs), timeout)

    async def invoke_oneway(self, cmd: RemotingCommand) -> None:
        cmd.opaque = next(self._opaque)
        cmd.flag |= 2
        self._send(cmd)
        await self.drain()

    def send_raw(self, data: bytes) -> None:
        """Write bytes as they are (tests: garbage, oversize frames)."""
        assert self.transport is not None
        self.transport.write(data)

    async def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
        try:
            await wait_for(self.closed.wait(), 2.0)
        except asyncio.TimeoutError:
            if self.transport is not None:
                self.transport.abort()
