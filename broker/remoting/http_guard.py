"""HTTP connections under the listen-port limits: slow heads and bodies cut, idle closed, capped.

Rules (see ``broker.remoting.limits`` for the limits themselves):
- aiohttp 3.14 alone closes a connection that never completes a request head only after
  ``keepalive_timeout`` (3630 s by default, counted from the connection's start); a head sent one
  byte a minute holds the connection that long, and nothing bounds a slow body. So every HTTP
  connection of the broker, handed over by the shared ``listenPort`` or accepted on a split
  ``httpListenPort``, goes through :class:`HttpGuardProtocol`, which sits between the transport
  and aiohttp's ``RequestHandler`` and keeps a :class:`~broker.remoting.limits.ConnectionClock`.
- A head is "started" when bytes arrive and no request is being handled; it is "finished" when
  aiohttp hands the request to the application (:func:`limits_middleware` sees it). A head not
  finished within ``serverReadTimeoutMillis`` is cut (slowloris).
- The middleware reads the body itself, within ``serverReadTimeoutMillis``, after reserving its
  announced length (``Content-Length``, else ``client_max_size``) against the broker's
  pending-bytes budget when it is larger than ``SMALL_FRAME`` (a ``Content-Length`` over
  ``client_max_size`` is ``REQUEST_TOO_LARGE`` before any byte is read); a body that does not fit is
  answered ``SERVICE_NOT_AVAILABLE`` (503) without being read, a body not received in time closes
  the connection. The reservation is released when the handler returns.
- While a request is handled the connection is never idle; ``serverChannelMaxIdleTimeSeconds``
  after the last accepted request (or the connection's start) with no new head, it is closed. A
  request the ACL refused as unauthenticated (401) does not count (issue 23.6: a socket that
  keeps sending refused requests is idle). The HTTP ACL marks the connection's trust
  (:func:`note_trust`) for the port's eviction rule.

Theory of operation: the proxy protocol forwards every ``asyncio.Protocol`` callback to aiohttp's
protocol and is registered by transport in :data:`_BY_TRANSPORT`, so the middleware (which only
sees ``request.transport``) finds it.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, Optional

from aiohttp import web

from broker.refusals import UNAUTHORIZED, Refusal, ServiceNotAvailable
from broker.remoting.limits import EVICTED, READ_TIMEOUT, SMALL_FRAME, ConnectionClock, PortGuard
from broker.tasks import wait_for

#: transport -> its guard protocol (entries removed on connection_lost).
_BY_TRANSPORT: dict[Any, "HttpGuardProtocol"] = {}


class HttpGuardProtocol(asyncio.Protocol):
    """Forwards to aiohttp's protocol; tells the port guard when a head starts and finishes."""

    def __init__(self, guard: PortGuard, inner_factory: Callable[[], asyncio.Protocol], *, admitted: bool = False,
                 remote_addr: str = "?") -> None:
        self.guard = guard
        self._inner_factory = inner_factory
        self.inner: Optional[asyncio.Protocol] = None
        self.transport: Optional[asyncio.Transport] = None
        self.remote_addr = remote_addr
        self.clock = ConnectionClock()
        self._admitted = admitted
        self.closed = False

    # ---- asyncio.Protocol, forwarded
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        if peer:
            self.remote_addr = f"{peer[0]}:{peer[1]}"
        if not self._admitted and not self.guard.admit(self):
            self.closed = True
            transport.abort()  # type: ignore[attr-defined]
            return
        self._admitted = True
        _BY_TRANSPORT[transport] = self
        self.inner = self._inner_factory()
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.inner is None or self.closed:
            return
        if self.clock.busy == 0 and self.clock.partial_since is None:
            self.clock.partial_since = time.monotonic()  # a new head starts
        self.inner.data_received(data)

    def eof_received(self) -> Optional[bool]:
        return self.inner.eof_received() if self.inner is not None else None

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.closed = True
        if self.transport is not None:
            _BY_TRANSPORT.pop(self.transport, None)
        if self._admitted:
            self.guard.forget(self)
        if self.inner is not None:
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()

    # ---- guard callbacks
    def request_started(self) -> None:
        self.clock.busy += 1
        self.clock.partial_since = None

    def request_finished(self, accepted: bool = True) -> None:
        self.clock.busy = max(0, self.clock.busy - 1)
        if accepted:
            self.clock.touch()

    def guard_close(self, reason: str) -> None:
        if self.transport is None or self.closed:
            return
        if reason in (READ_TIMEOUT, EVICTED):
            self.transport.abort()
        else:
            self.transport.close()


def note_trust(transport: Any, level: int) -> None:
    """The HTTP ACL authenticated a request on ``transport`` at ``level`` (``limits.*_TRUST``)."""
    conn = _BY_TRANSPORT.get(transport)
    if conn is not None:
        conn.clock.prove(level)


@web.middleware
async def limits_middleware(request: web.Request,
                            handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    conn = _BY_TRANSPORT.get(request.transport)
    if conn is None:  # not one of ours (a test client, a runner without the guard)
        return await handler(request)
    guard = conn.guard
    conn.request_started()
    reserved = 0
    refused = False  # answered 401 (unauthenticated): does not reset the idle clock
    try:
        if request.body_exists:
            limit = request.client_max_size
            if request.content_length is not None and request.content_length > limit:
                raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=request.content_length)
            wanted = request.content_length if request.content_length is not None else limit
            if wanted > SMALL_FRAME:
                if not guard.budget.reserve(wanted):
                    guard.refuse_budget(conn, wanted, "a request body")
                    raise ServiceNotAvailable(f"the broker holds too many incomplete request "
                                              f"bodies to take {wanted} more bytes now; retry later")
                reserved = wanted
            timeout = guard.limits.read_timeout_s
            if request.content.is_eof():  # the whole body is already here: no wait, so no timer
                await request.read()      # (wait_for's task per request was ~5% of an HTTP send)
            else:
                try:
                    await wait_for(request.read(), timeout if timeout > 0 else None)
                except asyncio.TimeoutError:
                    guard.read_timed_out(conn, "a request body")
                    raise web.HTTPRequestTimeout() from None
        try:
            response = await handler(request)
        except Refusal as exc:  # the HTTP API's error middleware answers it; UNAUTHORIZED is its 401
            refused = exc.code == UNAUTHORIZED
            raise
        except web.HTTPException as exc:
            refused = exc.status == 401
            raise
        refused = response.status == 401
        return response
    finally:
        guard.budget.release(reserved)
        conn.request_finished(not refused)


def install_middleware(app: web.Application) -> None:
    """Put :func:`limits_middleware` right inside the API's error middleware (before ACL/handlers)."""
    mws = app.middlewares
    pos = 0
    for i, mw in enumerate(mws):
        if getattr(mw, "__name__", "") == "error_middleware":
            pos = i + 1
            break
    mws.insert(pos, limits_middleware)


async def start_http_listener(guard: PortGuard, factory: Callable[[], asyncio.Protocol], host: str,
                              port: int) -> asyncio.base_events.Server:
    """A split ``httpListenPort``: aiohttp's protocol factory behind the guard."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: HttpGuardProtocol(guard, factory), host=host, port=port,
                                      reuse_address=True)
    guard.start()
    return server
