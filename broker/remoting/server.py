"""RemotingServer: asyncio driver of the remoting codec, dispatching requests by code.

Rules (RocketMQ ``NettyRemotingServer`` / ``NettyRemotingAbstract.processRequestCommand``):
- Each request is handed to the processor registered for its code; an unknown code is answered
  ``REQUEST_CODE_NOT_SUPPORTED`` with the remark `` request type N not supported``. A
  processor's unexpected exception is answered ``SYSTEM_ERROR`` with a one-line description;
  the connection stays open.
- The RPC hook (ACL) runs before the processor; a refusal is answered ``NO_PERMISSION`` with
  the hook's remark and logged in one line, at most 20 such lines a second (:class:`dledger.ratelog.RateLimitedLog`). Oneway requests never get a response, whatever happens.
- Responses carry the request's opaque, the response flag and the request's serialize type.
  Requests of one connection are processed concurrently (pipelining); responses go out as
  they complete, so clients match them by opaque.
- Calls to clients (``Broker2Client``, :meth:`RemotingConnection.call`): the broker sends a
  request with its own opaque and waits, bounded by a timeout, for the response carrying that
  opaque. At most :data:`MAX_CALLS_PER_CONNECTION` calls wait on one connection; a response
  whose opaque no call waits for is dropped (a client cannot inject answers); a closed
  connection fails its waiting calls at once.
- A frame over the size limit, a length below 4, or an undecodable header closes that
  connection (RocketMQ's decoder closes the channel); every other connection is unaffected.
- Optional HTTP sharing: when ``http_factory`` is given, a connection whose first byte is an
  ASCII letter (``GET``, ``POST``...) is handed to that protocol factory (aiohttp's low-level
  server), so one port can speak both protocols. A remoting frame always starts with the high
  byte of its length, which is 0 or 1 for any frame within the 16 MiB limit.
- Flow control: a connection with more than ``max_in_flight`` requests being processed, or
  whose transport's write buffer is above its high-water mark, stops being read until it drains.
- Limits (``broker.remoting.limits``, issue 12): a :class:`~broker.remoting.limits.PortGuard`
  admits at most ``max_connections`` (both protocols), closes idle connections and connections
  that leave a frame (or, handed to HTTP, a request head) unfinished past the read timeout, and a
  frame announced larger than ``SMALL_FRAME`` must fit the shared pending-bytes budget before its
  body is buffered; otherwise the connection is closed at once.
- With RPC hooks (ACL, issue 23.6): a request that passes them *proves* its connection
  (``ConnectionClock.prove``: ``ADMIN_TRUST`` when the hook's account for the request's
  ``AccessKey`` is ``admin: true`` or no key was needed, i.e. a white address; else
  ``AUTHENTICATED_TRUST``), which the port guard's eviction rule reads; only a request that
  passed them (or any request without hooks) resets the idle clock — a refused one, or an
  unknown code, does not. The hook is asked through ``trust_of(cmd)`` if it has one, else
  through its ``accounts`` table (``PlainAccessValidator``).

Theory of operation: one :class:`RemotingConnection` (an ``asyncio.Protocol``) per client; its
:class:`broker.remoting.codec.FrameDecoder` turns bytes into commands, each processed in its own
task. Close listeners let the name server and the broker drop what a dead connection registered.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable, Final, Optional

from dledger.ratelog import RateLimitedLog
from mypy_extensions import mypyc_attr

from broker.remoting.codec import MAX_FRAME_LENGTH, FrameDecoder, RemotingCommand, RemotingCommandError, encode
from broker.remoting.codes import ResponseCode, request_name
from broker.remoting.limits import (ADMIN_TRUST, AUTHENTICATED_TRUST, EVICTED, READ_TIMEOUT, SMALL_FRAME,
                                    ConnectionClock, ListenLimits, PendingBudget, PortGuard)
from broker.store.errors import StoreError
from broker.tasks import wait_for

log = logging.getLogger("broker.remoting")

MAX_CALLS_PER_CONNECTION: Final = 64


class ClientCallError(Exception):
    """A call to a client that could not be made or was not answered (closed, too many, timeout)."""

Handler = Callable[[RemotingCommand, "RemotingConnection"], Awaitable[Optional[RemotingCommand]]]
RpcHook = Callable[[RemotingCommand, "RemotingConnection"], None]


@mypyc_attr(allow_interpreted_subclasses=True)  # broker.remoting.acl.AclRefusal (not compiled)
class RpcHookRefusal(Exception):
    """Raised by an RPC hook (ACL) to refuse a request; answered with ``code`` and the message."""

    def __init__(self, message: str, code: int = ResponseCode.NO_PERMISSION) -> None:
        super().__init__(message)
        self.code = code


class RemotingConnection(asyncio.Protocol):
    def __init__(self, server: "RemotingServer") -> None:
        self.server = server
        self.transport: Optional[asyncio.Transport] = None
        self.decoder = FrameDecoder(server.max_frame_length)
        self.remote_addr = "?"
        self.in_flight = 0
        self._read_paused = False
        self._write_paused = False
        self._first = True
        self.closed = False
        self.refused = False  # over the connection cap: closed before reading anything
        self.clock = ConnectionClock()
        self._reserved = 0  # bytes of the pending-bytes budget held by the incomplete frame
        self.attrs: dict[str, Any] = {}  # per-connection state of processors (client ids...)
        self._out: list[bytes] = []  # encoded responses of this loop turn (send / _flush_out)
        self._calls: dict[int, "asyncio.Future[RemotingCommand]"] = {}  # our requests to the client, by opaque

    # ------------------------------------------------------------------ asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        if peer:
            self.remote_addr = f"{peer[0]}:{peer[1]}"
        if not self.server.guard.admit(self):
            self.refused = True
            transport.abort()  # type: ignore[attr-defined]
            return
        self.server.connections.add(self)

    def data_received(self, data: bytes) -> None:
        if self.refused or self.closed:
            return
        if self._first:
            self._first = False
            if self.server.http_factory is not None and data[:1].isalpha():
                self._hand_to_http(data)
                return
        try:
            frames = self.decoder.feed(data)
        except RemotingCommandError as exc:
            log.warning("closing remoting connection from %s: %s", self.remote_addr, exc)
            self._abort()
            return
        for frame in frames:
            try:
                cmd = _decode(frame)
            except RemotingCommandError as exc:
                log.warning("closing remoting connection from %s: %s", self.remote_addr, exc)
                self._abort()
                return
            if cmd.is_response:  # the answer to one of our calls, else dropped
                fut = self._calls.pop(cmd.opaque, None)
                if fut is not None and not fut.done():
                    fut.set_result(cmd)
                continue
            self.in_flight += 1
            self.clock.busy = self.in_flight
            asyncio.get_running_loop().create_task(self._process(cmd))
        if not self._account_pending():
            return
        self.clock.partial(self.decoder.buffered > 0, bool(frames))
        self._update_reading()

    def _account_pending(self) -> bool:
        """Reserve the incomplete big frame's announced size; False (connection closed) if it does not fit."""
        wanted = self.decoder.pending_frame_length
        if wanted <= SMALL_FRAME:
            wanted = 0
        if wanted == self._reserved:
            return True
        budget = self.server.guard.budget
        budget.release(self._reserved)
        self._reserved = 0
        if not budget.reserve(wanted):
            self.server.guard.refuse_budget(self, wanted)
            self._abort()
            return False
        self._reserved = wanted
        return True

    def connection_lost(self, exc: Optional[BaseException]) -> None:
        self.closed = True
        calls, self._calls = self._calls, {}
        for fut in calls.values():
            if not fut.done():
                fut.set_exception(ClientCallError(f"the connection of {self.remote_addr} closed"))
        self.server.guard.budget.release(self._reserved)
        self._reserved = 0
        if self.refused:
            return
        self.server.guard.forget(self)
        self.server.connections.discard(self)
        for listener in list(self.server.close_listeners):
            try:
                listener(self)
            except Exception:  # noqa: BLE001 - a listener must not break the others
                log.exception("connection close listener failed")

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()

    # ------------------------------------------------------------------ internals
    def _hand_to_http(self, data: bytes) -> None:
        from broker.remoting.http_guard import HttpGuardProtocol  # noqa: WPS433 - aiohttp only when shared

        assert self.transport is not None and self.server.http_factory is not None
        self.server.connections.discard(self)
        proto = HttpGuardProtocol(self.server.guard, self.server.http_factory, admitted=True,
                                  remote_addr=self.remote_addr)
        proto.clock.last_activity = self.clock.last_activity
        self.server.guard.replace(self, proto)
        self.transport.set_protocol(proto)
        proto.connection_made(self.transport)
        proto.data_received(data)

    def guard_close(self, reason: str) -> None:
        """Called by the port guard when a limit ran out (already counted and logged)."""
        if reason in (READ_TIMEOUT, EVICTED):
            self._abort()
        elif self.transport is not None and not self.closed:
            self._flush_out()
            self.transport.close()

    def _abort(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.abort()

    def _update_reading(self) -> None:
        if self.transport is None or self.closed:
            return
        want_pause = self._write_paused or self.in_flight > self.server.max_in_flight
        if want_pause and not self._read_paused:
            self._read_paused = True
            self.clock.set_reading_paused(True)
            self.transport.pause_reading()
        elif not want_pause and self._read_paused:
            self._read_paused = False
            self.clock.set_reading_paused(False)
            self.transport.resume_reading()

    def send(self, cmd: RemotingCommand) -> None:
        """Queue ``cmd``; everything queued in one loop turn goes out in one write (the Java
        client multiplexes all its threads over one connection: one syscall per turn instead of
        one per response; issue 22). Closing the connection writes what is queued first."""
        if self.transport is None or self.closed:
            return
        out = self._out
        out.append(encode(cmd))
        if len(out) == 1:
            asyncio.get_running_loop().call_soon(self._flush_out)

    async def call(self, cmd: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """Send ``cmd`` to the client and wait for its response (``invokeSync`` of Broker2Client).
        Raises :class:`ClientCallError` when closed, over the call cap, or not answered in time."""
        if self.transport is None or self.closed:
            raise ClientCallError(f"the connection of {self.remote_addr} is closed")
        if len(self._calls) >= MAX_CALLS_PER_CONNECTION:
            raise ClientCallError(f"{MAX_CALLS_PER_CONNECTION} calls already wait on {self.remote_addr}")
        opaque = self.server.next_opaque()
        cmd.opaque = opaque
        fut: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._calls[opaque] = fut
        try:
            self.send(cmd)
            try:
                return await wait_for(fut, timeout_s)
            except asyncio.TimeoutError:
                raise ClientCallError(f"{self.remote_addr} did not answer in {timeout_s:g} s") from None
        finally:
            self._calls.pop(opaque, None)

    def _flush_out(self) -> None:
        out = self._out
        if not out:
            return
        self._out = []
        if self.transport is not None and not self.closed:  # (a write resets no idle clock: _process does)
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))

    async def _process(self, cmd: RemotingCommand) -> None:
        accepted = False
        try:
            response, accepted = await self.server.dispatch_checked(cmd, self)
            if response is not None and not cmd.is_oneway:
                response.opaque = cmd.opaque
                response.flag |= 1
                response.serialize_type = cmd.serialize_type
                self.send(response)
        finally:
            self.in_flight -= 1
            self.clock.busy = self.in_flight
            if accepted:
                self.clock.touch()
            self._update_reading()


def _decode(frame: bytes) -> RemotingCommand:
    from broker.remoting.codec import decode_frame  # noqa: WPS433 - local for speed of lookup

    return decode_frame(frame)


class RemotingServer:
    def __init__(self, *, name: str = "remoting", max_frame_length: int = MAX_FRAME_LENGTH,
                 http_factory: Optional[Callable[[], asyncio.Protocol]] = None, max_in_flight: int = 4096,
                 limits: Optional[ListenLimits] = None, budget: Optional[PendingBudget] = None) -> None:
        self.name = name
        self.guard = PortGuard(name, limits or ListenLimits(), budget)
        self.max_frame_length = max_frame_length
        self.http_factory = http_factory
        self.max_in_flight = max_in_flight
        self.processors: dict[int, Handler] = {}
        self.rpc_hooks: list[RpcHook] = []
        self.close_listeners: list[Callable[[RemotingConnection], None]] = []
        self._opaque = 0
        self.connections: set[RemotingConnection] = set()
        self.refusal_log = RateLimitedLog(log, burst=20, window_s=1.0)
        self._server: Optional[asyncio.base_events.Server] = None
        self.port = 0

    def next_opaque(self) -> int:
        """The opaque of the broker's next request to a client (int32, as RocketMQ's requestId)."""
        self._opaque = (self._opaque + 1) & 0x7FFFFFFF
        return self._opaque

    def register(self, code: int, handler: Handler) -> None:
        self.processors[code] = handler

    async def dispatch(self, cmd: RemotingCommand, conn: RemotingConnection) -> Optional[RemotingCommand]:
        return (await self.dispatch_checked(cmd, conn))[0]

    async def dispatch_checked(self, cmd: RemotingCommand,
                               conn: RemotingConnection) -> tuple[Optional[RemotingCommand], bool]:
        """(response, accepted): ``accepted`` when the request passed the RPC hooks (module rules)."""
        handler = self.processors.get(cmd.code)
        if handler is None:
            error = f" request type {cmd.code} not supported"
            self.refusal_log.warning("hook", "%s from %s:%s", self.name, conn.remote_addr, error)
            return cmd.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, error), not self.rpc_hooks
        accepted = False
        try:
            for hook in self.rpc_hooks:
                hook(cmd, conn)
            if self.rpc_hooks:
                conn.clock.prove(self._trust_of(cmd))
            accepted = True
            return await handler(cmd, conn), True
        except RpcHookRefusal as exc:
            if not accepted and getattr(exc, "authenticated", False):  # a known account's signature, not allowed
                conn.clock.prove(AUTHENTICATED_TRUST)
            self.refusal_log.warning("refused", "%s refused %s from %s: %s", self.name, request_name(cmd.code), conn.remote_addr, exc)
            return cmd.response(exc.code, str(exc)), accepted
        # (one name per except clause: compiled, a name keeps the type of its first clause)
        except StoreError as damaged:  # damaged or unreadable data: the message says where and what to do
            log.error("%s: %s from %s: %s", self.name, request_name(cmd.code), conn.remote_addr, damaged)
            return cmd.response(ResponseCode.SYSTEM_ERROR, str(damaged)), accepted
        except Exception as unexpected:  # noqa: BLE001 - RocketMQ answers SYSTEM_ERROR and keeps the channel
            log.exception("%s: processing %s from %s failed", self.name, request_name(cmd.code), conn.remote_addr)
            return cmd.response(ResponseCode.SYSTEM_ERROR, f"{type(unexpected).__name__}: {unexpected}"), accepted

    def _trust_of(self, cmd: RemotingCommand) -> int:
        """How far a request that passed every hook proves its connection (module rules)."""
        key = cmd.ext_fields.get("AccessKey")
        level = ADMIN_TRUST
        for hook in self.rpc_hooks:
            trust_of = getattr(hook, "trust_of", None)
            if callable(trust_of):
                level = min(level, int(trust_of(cmd)))
                continue
            accounts = getattr(hook, "accounts", None)
            if not isinstance(accounts, dict):
                level = min(level, AUTHENTICATED_TRUST)
            elif key:  # no key and passed: a white address, trusted as RocketMQ trusts it
                acc = accounts.get(key)
                level = min(level, ADMIN_TRUST if acc is not None and getattr(acc, "admin", False)
                            else AUTHENTICATED_TRUST)
        return level

    async def start(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: RemotingConnection(self), host=host, port=port,
                                                reuse_address=True)
        srv: Any = self._server  # uvloop's sockets is a list (typeshed: tuple; compiled code checks)
        self.port = srv.sockets[0].getsockname()[1]
        self.guard.start()

    async def stop(self) -> None:
        await self.guard.stop()
        if self._server is not None:
            self._server.close()
            for conn in list(self.connections):
                if conn.transport is not None:
                    conn._flush_out()
                    conn.transport.close()
            try:
                await wait_for(self._server.wait_closed(), 5.0)
            except asyncio.TimeoutError:
                pass
            self._server = None
