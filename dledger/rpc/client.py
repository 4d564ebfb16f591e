"""Client side of the DLedger request/response channel (append, get, status, transfer).

Rules
-----
* A client connects to any member's RPC port with handshake role ``"client"`` (see
  ``handshake.py``); the shared secret is required of clients too, and every frame after the
  handshake is tagged with the connection's session keys. A broker-hosted member
  (``serve_clients=False``) refuses the client role.
* Requests are ``{"t": "req", "rid": int, "op": str, ...}``; responses ``{"t": "resp", "rid",
  "code", ...}`` with DLedger response codes (``dledger.core.codes.Code``). Many requests may be
  in flight on one connection; responses may arrive in any order and are matched by ``rid``.
* Operations (fields beyond ``t``/``rid``/``op``):

  ==========  ==============================  ==============================================
  op          request                         success response
  ==========  ==============================  ==============================================
  append      ``bodies: [bytes, ...]``        ``results: [[index, pos], ...]`` (one per body)
  get         ``index: int``                  ``entry: {index, term, pos, magic, body}``
  status      (none)                          ``status: {...}`` (``DLedgerServer.status()``)
  transfer    ``to: peer id``                 ``leader: peer id``
  ==========  ==============================  ==============================================

  Errors carry ``error`` (text) and, for ``NOT_LEADER``, ``leader_id`` / ``leader_addr`` when
  known.
* :class:`DLedgerClient` follows ``NOT_LEADER`` redirects and fails over between members. It
  retries only when the request provably had no effect (``NOT_LEADER``, ``LEADER_NOT_READY``,
  ``LEADER_TRANSFERRING``, refused connection); an append whose outcome is unknown (timeout,
  connection lost after sending) raises :class:`DLedgerError` so callers never double-append
  silently.

Theory of operation
-------------------
:class:`RpcConnection` is a small :class:`asyncio.Protocol`: the first frames run the connector
handshake, then response frames resolve futures in ``pending``. Writes go through the same
coalescing outbox as the peer transport, so a client with many concurrent requests issues one
write per loop iteration.
"""
from __future__ import annotations

import asyncio
import itertools
import os
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from ..aio import wait_for
from ..core.codes import Code
from ..errors import DLedgerError
from . import framing as fr
from .handshake import ConnectorHandshake, HANDSHAKE_MAX_FRAME, HandshakeRejected, ROLE_CLIENT
from .transport import Counters, _Outbox

RETRYABLE = {Code.NOT_LEADER, Code.LEADER_NOT_READY, Code.LEADER_TRANSFERRING}


class RpcConnection(asyncio.Protocol):
    """One client connection to one member."""

    def __init__(self, group: str, client_id: str, secret: Optional[str], max_frame_size: int) -> None:
        self.hs = ConnectorHandshake(group, client_id, ROLE_CLIENT, secret)
        self.decoder = fr.FrameDecoder(min(HANDSHAKE_MAX_FRAME, max_frame_size))  # raised by the welcome
        self.max_frame_size = max_frame_size
        self.outbox = _Outbox(Counters(), 256 * 1024 * 1024)
        self.transport: Optional[asyncio.Transport] = None
        self.remote_id: Optional[str] = None
        self.ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.pending: dict[int, tuple[asyncio.Future[dict], Optional[asyncio.TimerHandle]]] = {}
        self._rids = itertools.count(1)
        self.lost: Optional[BaseException] = None

    @classmethod
    async def open(
        cls, host: str, port: int, group: str, *, secret: Optional[str] = None, client_id: Optional[str] = None,
        timeout: float = 3.0, max_frame_size: int = fr.DEFAULT_MAX_FRAME_SIZE,
    ) -> "RpcConnection":
        loop = asyncio.get_running_loop()
        cid = client_id or f"client-{os.getpid()}"
        _, conn = await wait_for(
            loop.create_connection(lambda: cls(group, cid, secret, max_frame_size), host, port), timeout
        )
        try:
            await wait_for(asyncio.shield(conn.ready), timeout)
        except BaseException:
            conn.close()
            raise
        return conn

    # -- protocol callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self.lost = exc or ConnectionError("connection closed by the server")
        self.outbox.attach(None, None)
        if not self.ready.done():
            self.ready.set_exception(ConnectionError(f"connection closed during handshake: {self.lost}"))
        pending, self.pending = self.pending, {}
        for fut, timer in pending.values():
            if timer is not None:
                timer.cancel()
            if not fut.done():
                fut.set_exception(ConnectionError(f"connection lost: {self.lost}"))

    def pause_writing(self) -> None:
        self.outbox.paused = True

    def resume_writing(self) -> None:
        self.outbox.paused = False
        self.outbox.schedule()

    def data_received(self, data: bytes) -> None:
        try:
            while not self.ready.done():  # one frame at a time: the welcome installs the session
                frames = self.decoder.feed(data, 1)
                data = b""
                if not frames:
                    return
                self._handshake(frames[0])
            if self.transport is None or self.transport.is_closing():
                return
            frames = self.decoder.feed(data)
        except fr.FrameError as exc:
            self.lost = exc
            assert self.transport is not None
            self.transport.abort()
            return
        pending = self.pending
        for frame in frames:
            if isinstance(frame, dict) and frame.get("t") == "resp":
                entry = pending.pop(frame.get("rid"), None)  # type: ignore[arg-type]
                if entry is not None:
                    fut, timer = entry
                    if timer is not None:
                        timer.cancel()
                    if not fut.done():
                        fut.set_result(frame)

    def _handshake(self, frame: Any) -> None:
        assert self.transport is not None
        try:
            if not self.hs.challenged:
                self.transport.write(fr.encode_frame(self.hs.receive_challenge(frame)))
            else:
                self.remote_id = self.hs.receive_welcome(frame)
                self.decoder.max_frame_size = self.max_frame_size
                session = self.hs.session
                if session is not None:
                    self.decoder.opener = session.opener
                self.outbox.attach(self.transport, session.sealer if session is not None else None)
                self.ready.set_result(self.remote_id)
        except HandshakeRejected as exc:
            self.ready.set_exception(exc)
            self.transport.abort()

    # -- API
    @property
    def is_open(self) -> bool:
        return self.lost is None and self.transport is not None and not self.transport.is_closing()

    def request_nowait(self, op: str, timeout: Optional[float] = None, **fields: Any) -> "asyncio.Future[dict]":
        """Send a request; the future gets the response frame, or ``asyncio.TimeoutError``
        after ``timeout`` seconds (one timer, no wrapper task: this is the per-request path)."""
        if not self.is_open:
            raise ConnectionError(f"connection is closed: {self.lost}")
        rid = next(self._rids)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[dict] = loop.create_future()
        timer = loop.call_later(timeout, self._expire, rid) if timeout is not None else None
        self.pending[rid] = (fut, timer)
        self.outbox.put(fr.encode_payload({"t": "req", "rid": rid, "op": op, **fields}))
        return fut

    def _expire(self, rid: int) -> None:
        entry = self.pending.pop(rid, None)
        if entry is not None and not entry[0].done():
            entry[0].set_exception(asyncio.TimeoutError(f"no response to request {rid}"))

    async def request(self, op: str, timeout: float = 5.0, **fields: Any) -> dict:
        return await self.request_nowait(op, timeout=timeout, **fields)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


@dataclass(frozen=True)
class AppendResult:
    index: int
    pos: int


class DLedgerClient:
    """Talks to a group: finds the leader, follows redirects, fails over between members."""

    def __init__(
        self, peers: dict[str, tuple[str, int]], group: str = "default", *, secret: Optional[str] = None,
        timeout: float = 5.0, client_id: Optional[str] = None,
    ) -> None:
        self.peers = dict(peers)
        self.group = group
        self.secret = secret
        self.timeout = timeout
        self.client_id = client_id
        self.leader_id: Optional[str] = None
        self._conns: dict[str, RpcConnection] = {}
        self._connecting: dict[str, asyncio.Future[RpcConnection]] = {}
        self._rr = itertools.cycle(list(self.peers))

    async def connection(self, peer_id: str) -> RpcConnection:
        conn = self._conns.get(peer_id)
        if conn is not None and conn.is_open:
            return conn
        pending = self._connecting.get(peer_id)
        if pending is None:
            host, port = self.peers[peer_id]
            pending = asyncio.ensure_future(
                RpcConnection.open(host, port, self.group, secret=self.secret, client_id=self.client_id,
                                   timeout=min(self.timeout, 2.0))
            )
            self._connecting[peer_id] = pending
            pending.add_done_callback(lambda f: f.cancelled() or f.exception())  # never "unretrieved"
            try:
                conn = await asyncio.shield(pending)
                self._conns[peer_id] = conn
                return conn
            finally:
                self._connecting.pop(peer_id, None)
        return await asyncio.shield(pending)

    async def request_to(self, peer_id: str, op: str, timeout: Optional[float] = None, **fields: Any) -> dict:
        """One request to one member, no redirects. Connection problems raise ``OSError``/
        ``ConnectionError``/``asyncio.TimeoutError``."""
        conn = await self.connection(peer_id)
        return await conn.request(op, timeout=timeout or self.timeout, **fields)

    async def _leader_request(self, op: str, idempotent: bool, **fields: Any) -> dict:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        last: Optional[BaseException] = None
        while True:
            target = self.leader_id if self.leader_id in self.peers else next(self._rr)
            remaining = deadline - loop.time()
            if remaining <= 0:
                if isinstance(last, DLedgerError):
                    raise last
                raise DLedgerError(Code.NETWORK_ERROR, f"no leader reachable within {self.timeout}s: {last}")
            sent = False
            try:
                conn = self._conns.get(target)
                if conn is None or not conn.is_open:
                    conn = await wait_for(self.connection(target), remaining)
                fut = conn.request_nowait(op, timeout=max(deadline - loop.time(), 0.001), **fields)
                sent = True
                resp = await fut
            except (OSError, ConnectionError, asyncio.TimeoutError, HandshakeRejected) as exc:
                if isinstance(exc, HandshakeRejected):
                    raise DLedgerError(exc.code, f"{target} refused the connection: {exc.reason}") from None
                if sent and not idempotent:
                    raise DLedgerError(Code.TIMEOUT if isinstance(exc, asyncio.TimeoutError) else Code.NETWORK_ERROR,
                                       f"outcome unknown, {target}: {type(exc).__name__} {exc}") from None
                last = exc
                self.leader_id = None
                await asyncio.sleep(0.02)
                continue
            code = resp.get("code", Code.UNKNOWN)
            if code == Code.SUCCESS:
                self.leader_id = target
                return resp
            err = DLedgerError(code, resp.get("error", ""), resp.get("leader_id"), resp.get("leader_addr"))
            if code in RETRYABLE:
                last = err
                new_leader = resp.get("leader_id")
                if new_leader in self.peers and new_leader != target:
                    self.leader_id = new_leader
                else:
                    self.leader_id = None
                    await asyncio.sleep(0.05)
                continue
            raise err

    # -- operations
    async def append(self, body: bytes) -> AppendResult:
        (res,) = await self.append_batch([body])
        return res

    async def append_batch(self, bodies: Iterable[bytes]) -> list[AppendResult]:
        resp = await self._leader_request("append", idempotent=False, bodies=list(bodies))
        return [AppendResult(i, p) for i, p in resp["results"]]

    async def get(self, index: int, peer_id: Optional[str] = None) -> dict:
        if peer_id is not None:
            resp = await self.request_to(peer_id, "get", index=index)
            if resp.get("code") != Code.SUCCESS:
                raise DLedgerError(resp.get("code", Code.UNKNOWN), resp.get("error", ""))
        else:
            resp = await self._leader_request("get", idempotent=True, index=index)
        return resp["entry"]

    async def status(self, peer_id: str) -> dict:
        resp = await self.request_to(peer_id, "status")
        return resp["status"]

    async def transfer(self, to_id: str) -> str:
        resp = await self._leader_request("transfer", idempotent=True, to=to_id)
        return resp.get("leader", to_id)

    async def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()
        await asyncio.sleep(0)
