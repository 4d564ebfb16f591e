"""asyncio driver for DLedger RPC: one listener per node, one outbound link per peer.

Rules
-----
* Peers are addressed by id; addresses come from the ``dLegerPeers`` string
  (``n0-127.0.0.1:40911;n1-127.0.0.1:40912``). A node listens on its own address and dials
  every other member. Messages from A to B always travel on A's outbound connection; B's
  replies travel on B's own outbound connection to A. Inbound peer connections are receive-only.
* The same port also serves **clients** (applications, the CLI): a connection whose handshake
  role is ``"client"`` carries request frames ``{"t": "req", "rid", "op", ...}`` answered, in any
  order, by ``{"t": "resp", "rid", "code", ...}`` frames (see ``client.py``).
* Every connection starts with the handshake of ``handshake.py`` (a challenge that reveals nothing,
  then the HMAC proof of ``dLegerAuthToken`` first, then group, member and role checks and the
  identity check: file sizes and broker name from ``identity``,
  ``DLedgerConfig.handshake_identity``); a failed handshake gets a reject frame, one warning line
  (rate-limited) naming the remote address, the claimed id and the reason, and is closed.
  ``serve_clients=False`` (a broker-hosted member) rejects the client role in the handshake:
  outsiders can neither append nor read.
* With a secret, every later frame in both directions carries a tag under the connection's
  per-direction session key and an implicit sequence number (``handshake.Session``). A frame whose
  tag fails (forged, injected, replayed, reordered, truncated) drops the connection with one
  warning line; the link reconnects and re-handshakes. Peer ids on an authenticated connection
  are therefore proven: a message claiming another ``src`` is dropped by the server.
* A frame over ``max_frame_size`` or an undecodable frame closes the connection. Until its
  handshake completed a connection may announce frames of ``handshake.HANDSHAKE_MAX_FRAME`` (4 KiB)
  at most; the decoder refuses a larger header before buffering its body (issue 23.1).
* Accepted connections are admitted by :mod:`.admission` (connection cap, unauthenticated cap
  with evict-oldest, per-address unauthenticated cap) and every decoder reserves large unfinished
  frames in the member's pending-bytes budget. Refusals are logged rate-limited
  (:mod:`dledger.ratelog`), so a flood of refused connections cannot flood the log.
* Outboxes queue untagged payloads; tags are added at flush time by the connection that writes
  them, so frames queued while a link is down are sealed with the next connection's keys.
* Raft tolerates message loss, so peer sends never block and never fail loudly: a link keeps a
  bounded queue (``max_queue_bytes``); when full, the **oldest** queued frames are dropped
  (counted in ``dropped_full``). Frames queued while a link is down are sent after the
  reconnect if they still fit. Client responses use the same bounded, drop-oldest queue.
* Writes are coalesced: ``send`` only appends encoded frames; one flush per event-loop
  iteration hands them all to ``transport.writelines``. When the kernel buffer is full
  (``pause_writing``), frames stay queued until ``resume_writing``.
* Outbound links reconnect with exponential backoff from ``reconnect_min_s`` doubling to
  ``reconnect_max_s`` (capped, with jitter) after a refused or reset dial; a dial that timed out
  (connect plus handshake within ``dial_timeout_s``) has already waited and is retried at once;
  a handshake refusal (misconfiguration) backs off at the cap.
* Silent peers (issue 24.5, :mod:`.liveness`): a peer we queued frames for that sent nothing for
  ``silence_s`` gets both its connections aborted (ours redials, its own sees the reset), counted
  in ``silent_resets`` (``silence_s=0``, the default here, disables it; the server sets it from
  ``DLedgerConfig.link_timeouts``); every socket carries keepalive and ``TCP_USER_TIMEOUT``.

Theory of operation
-------------------
:class:`_Conn` is an :class:`asyncio.Protocol` shared by both directions: it feeds received bytes
to a :class:`framing.FrameDecoder`, runs the handshake state machine on the first frames and then
hands payloads to its owner. While the handshake runs it decodes one frame at a time, so the
session (tag keys) a successful handshake yields is installed in the decoder before the next frame
is opened and in the outbox before the next flush. :class:`_PeerLink` owns the outbound connection to one peer, its
queue and its reconnect task. :class:`PeerTransport` ties them together and keeps counters
(``stats()``). No protocol logic lives here; the consensus core sees ``on_peer_message(from_id,
payload)`` and calls ``send(to_id, payload)``.
"""
from __future__ import annotations

import asyncio
import logging
import random
from typing import Any, Callable, Optional

from ..aio import wait_for
from ..ratelog import RateLimitedLog
from . import framing as fr
from .handshake import (
    AcceptorHandshake,
    ConnectorHandshake,
    HANDSHAKE_MAX_FRAME,
    HandshakeRejected,
    ROLE_CLIENT,
    ROLE_PEER,
    Session,
    UNSUPPORTED,
)
from .admission import Admission, PendingBudget, PortLimits
from .liveness import PeerWatch, tune_socket
from .outbox import Counters, _Outbox

__all__ = ["ClientSession", "Counters", "PeerTransport", "_Outbox"]  # Counters/_Outbox: re-exported for client.py

log = logging.getLogger("dledger.rpc")

PeerMessageHandler = Callable[[str, Any], None]
PeerStateHandler = Callable[[str, bool], None]
ClientRequestHandler = Callable[["ClientSession", dict], None]


class _Conn(asyncio.Protocol):
    """One TCP connection, either side. Subclasses implement the handshake steps."""

    def __init__(self, owner: "PeerTransport", outbox: _Outbox) -> None:
        self.owner = owner
        self.outbox = outbox
        # until the handshake completes, a few KiB at most (mark_ready raises the limit)
        self.decoder = fr.FrameDecoder(min(HANDSHAKE_MAX_FRAME, owner.max_frame_size), owner.budget)
        self.transport: Optional[asyncio.Transport] = None
        self.ready = False
        self.remote_id: Optional[str] = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._hs_timer: Optional[asyncio.TimerHandle] = None

    # -- asyncio callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._hs_timer = asyncio.get_running_loop().call_later(self.owner.handshake_timeout_s, self._hs_timeout)
        tune_socket(transport.get_extra_info("socket"), self.owner.tcp_user_timeout_ms)

    def connection_lost(self, exc: Optional[Exception]) -> None:
        if self._hs_timer:
            self._hs_timer.cancel()
        self.decoder.release()
        if self.outbox.transport is self.transport:
            self.outbox.attach(None, None)
        if not self.closed.done():
            self.closed.set_result(None)
        self.on_closed()

    def pause_writing(self) -> None:
        self.outbox.paused = True

    def resume_writing(self) -> None:
        self.outbox.paused = False
        self.outbox.schedule()

    def data_received(self, data: bytes) -> None:
        c = self.owner.counters
        c.bytes_received += len(data)
        while not self.ready:  # one frame at a time: the handshake may install a session
            frames = self._decode(data, 1)
            data = b""
            if not frames:
                return
            c.frames_received += 1
            if self.transport is None or self.transport.is_closing():
                return
            try:
                self.on_handshake_frame(frames[0])
            except HandshakeRejected as exc:
                c.handshake_failures += 1
                self.on_rejected(exc)
                return
        frames = self._decode(data, None)
        c.frames_received += len(frames)
        for frame in frames:
            if self.transport is None or self.transport.is_closing():
                return
            self.on_frame(frame)

    def _decode(self, data: bytes, limit: Optional[int]) -> list[Any]:
        """Decoder output, or ``[]`` after dropping the connection on a framing/auth error."""
        c = self.owner.counters
        try:
            return self.decoder.feed(data, limit)
        except fr.FrameTooLarge as exc:
            c.oversize_frames += 1
            self._drop(exc)
        except fr.BudgetExceeded as exc:
            c.budget_refusals += 1
            self._drop(exc)
        except fr.FrameAuthError as exc:
            c.auth_failures += 1
            self._drop(exc)
        except fr.FrameError as exc:
            c.frame_errors += 1
            self._drop(exc)
        return []

    def _drop(self, exc: Exception) -> None:
        self.owner.rlog.warning(f"drop-{type(exc).__name__}", "%s: dropping connection from %s (%s): %s",
                                self.owner.self_id, self.remote_id or "?", self.peername(), exc)
        self.abort()

    def peername(self) -> str:
        t = self.transport
        addr = t.get_extra_info("peername") if t is not None else None
        return f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) and len(addr) >= 2 else "?"

    # -- helpers
    def write_now(self, msg: Any) -> None:
        assert self.transport is not None
        self.transport.write(fr.encode_frame(msg))

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def mark_ready(self) -> None:
        self.ready = True
        self.decoder.max_frame_size = self.owner.max_frame_size
        if self._hs_timer:
            self._hs_timer.cancel()
            self._hs_timer = None

    def _hs_timeout(self) -> None:
        if not self.ready:
            self.owner.counters.handshake_failures += 1
            self.abort()

    # -- subclass hooks
    def on_handshake_frame(self, frame: Any) -> None:
        raise NotImplementedError

    def on_frame(self, frame: Any) -> None:
        raise NotImplementedError

    def on_rejected(self, exc: HandshakeRejected) -> None:
        self.abort()

    def on_closed(self) -> None:
        pass


class ClientSession:
    """Server side of one client connection; the request handler answers through :meth:`reply`."""

    def __init__(self, conn: "_AcceptedConn") -> None:
        self._conn = conn
        self.client_id = conn.remote_id or "?"

    @property
    def open(self) -> bool:
        t = self._conn.transport
        return t is not None and not t.is_closing()

    def reply(self, msg: dict) -> None:
        if self.open:
            self._conn.outbox.put(fr.encode_payload(msg))


class _AcceptedConn(_Conn):
    def __init__(self, owner: "PeerTransport") -> None:
        super().__init__(owner, _Outbox(owner.counters, owner.max_queue_bytes))
        self.hs = AcceptorHandshake(owner.group, owner.self_id, owner.peers.keys(), owner.secret,
                                    allow_clients=owner.serve_clients, ident=owner.ident,
                                    ident_keys=owner.ident_keys)
        self.role: Optional[str] = None
        self.session: Optional[ClientSession] = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.owner._accepted.add(self)
        host = self.peername().rpartition(":")[0]
        stays, evicted = self.owner.admission.admit(self, host)
        for old in evicted:
            assert isinstance(old, _AcceptedConn)
            self.owner.counters.evicted_unauthenticated += 1
            self.owner.rlog.warning("evicted", "%s: closed unauthenticated connection from %s to admit a newer one "
                         "(max %d per address, %d in all)", self.owner.self_id, old.peername(),
                         self.owner.limits.max_unauthenticated_per_host, self.owner.limits.max_unauthenticated)
            old.abort()
        if not stays:
            self.owner.counters.refused_connections += 1
            self.owner.rlog.warning("refused-cap", "%s: refused connection from %s: %d connections already open",
                         self.owner.self_id, self.peername(), self.owner.limits.max_connections)
            self.abort()
            return
        self.write_now(self.hs.challenge())

    def on_handshake_frame(self, frame: Any) -> None:
        acc = self.hs.receive_hello(frame)
        self.remote_id, self.role = acc.remote_id, acc.role
        self.write_now(acc.reply)
        self.mark_ready()
        self.owner.admission.authenticated(self)
        if acc.session is not None:
            self.decoder.opener = acc.session.opener
        self.outbox.attach(self.transport, acc.session.sealer if acc.session is not None else None)
        if acc.role == ROLE_CLIENT:
            self.session = ClientSession(self)
        else:
            self.owner._inbound_peer_ready(self)

    def on_rejected(self, exc: HandshakeRejected) -> None:
        self.owner.rlog.warning("refused-handshake", "%s: refused connection from %s: %s", self.owner.self_id,
                     self.peername(), exc)
        if self.transport is not None:
            self.write_now(exc.to_frame())
            self.transport.close()  # flushes the reject frame first

    def on_frame(self, frame: Any) -> None:
        if self.session is not None:
            if isinstance(frame, dict) and frame.get("t") == "req":
                self.owner.counters.client_requests += 1
                self.owner.on_client_request(self.session, frame)
            return
        self.owner.watch.heard(self.remote_id)  # type: ignore[arg-type]
        self.owner.on_peer_message(self.remote_id, frame)  # type: ignore[arg-type]

    def on_closed(self) -> None:
        self.owner._accepted.discard(self)
        self.owner.admission.closed(self)


class _DialledConn(_Conn):
    def __init__(self, owner: "PeerTransport", link: "_PeerLink") -> None:
        super().__init__(owner, link.outbox)
        self.link = link
        self.hs = ConnectorHandshake(owner.group, owner.self_id, ROLE_PEER, owner.secret, expect_id=link.peer_id,
                                     ident=owner.ident, ident_keys=owner.ident_keys)
        self.session: Optional[Session] = None
        self.handshake_done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def on_handshake_frame(self, frame: Any) -> None:
        if not self.hs.challenged:
            self.write_now(self.hs.receive_challenge(frame))
        else:
            self.remote_id = self.hs.receive_welcome(frame)
            self.session = self.hs.session
            if self.session is not None:
                self.decoder.opener = self.session.opener
            self.mark_ready()
            self.owner.watch.heard(self.link.peer_id)
            if not self.handshake_done.done():
                self.handshake_done.set_result(None)

    def on_rejected(self, exc: HandshakeRejected) -> None:
        self._fail_handshake(exc)
        self.abort()

    def _fail_handshake(self, exc: BaseException) -> None:
        if not self.handshake_done.done():
            self.handshake_done.set_exception(exc)
            self.handshake_done.exception()  # retrieved: the link may already be gone

    def on_frame(self, frame: Any) -> None:
        self.owner.watch.heard(self.link.peer_id)
        self.owner.on_peer_message(self.link.peer_id, frame)

    def on_closed(self) -> None:
        self._fail_handshake(ConnectionError("connection closed during handshake"))


class _PeerLink:
    """Outbound connection to one peer: queue + reconnect loop."""

    def __init__(self, owner: "PeerTransport", peer_id: str, addr: tuple[str, int]) -> None:
        self.owner = owner
        self.peer_id = peer_id
        self.addr = addr
        self.outbox = _Outbox(owner.counters, owner.max_queue_bytes)
        self.connected = False
        self.conn: Optional[_DialledConn] = None
        self.task: Optional[asyncio.Task[None]] = None
        self.last_error: Optional[str] = None
        self.closing = False

    async def run(self) -> None:
        # ``closing`` is checked after every await: on 3.11 ``wait_for`` can swallow a
        # cancellation that races with its inner future completing.
        loop = asyncio.get_running_loop()
        delay = self.owner.reconnect_min_s
        host, port = self.addr
        while not self.closing:
            conn: Optional[_DialledConn] = None
            deadline = loop.time() + self.owner.dial_timeout_s  # connect + handshake
            try:
                _, dialled = await wait_for(
                    loop.create_connection(lambda: _DialledConn(self.owner, self), host, port),
                    self.owner.dial_timeout_s,
                )
                conn = dialled
                await wait_for(asyncio.shield(dialled.handshake_done), max(0.0, deadline - loop.time()))
                if self.closing:
                    dialled.abort()
                    return
            except asyncio.CancelledError:
                if conn is not None:
                    conn.abort()
                raise
            except HandshakeRejected as exc:
                self.last_error = str(exc)
                log.warning("%s: handshake with peer %s failed: %s", self.owner.self_id, self.peer_id, exc)
                delay = self.owner.reconnect_max_s
            except (OSError, asyncio.TimeoutError, ConnectionError) as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                if conn is not None:
                    conn.abort()
                if isinstance(exc, asyncio.TimeoutError):  # the timeout already paced us
                    delay = self.owner.reconnect_min_s
            else:
                assert conn is not None  # set before the handshake wait that completed
                self.conn = conn
                self.connected = True
                self.last_error = None
                self.owner.counters.connects += 1
                self.outbox.attach(conn.transport, conn.session.sealer if conn.session is not None else None)
                self.outbox.paused = False
                self.outbox.schedule()
                self.owner._peer_state(self.peer_id, True)
                try:
                    await conn.closed
                finally:
                    self.connected = False
                    self.conn = None
                    self.outbox.attach(None, None)
                    self.owner.counters.disconnects += 1
                    self.owner._peer_state(self.peer_id, False)
                delay = self.owner.reconnect_min_s
            await asyncio.sleep(delay * (0.5 + random.random() / 2))
            delay = min(delay * 2, self.owner.reconnect_max_s)

    def close(self) -> None:
        self.closing = True
        if self.task is not None:
            self.task.cancel()
        if self.conn is not None:
            self.conn.abort()


class PeerTransport:
    """Listener plus outbound links for one member of a group.

    ``on_peer_message(from_id, payload)`` is called for every frame a member sends us;
    ``on_client_request(session, request)`` for every client request (answer with
    ``session.reply``); ``on_peer_state(peer_id, up)`` when an outbound link goes up or down.
    """

    def __init__(
        self,
        group: str,
        self_id: str,
        peers: dict[str, tuple[str, int]],
        *,
        on_peer_message: PeerMessageHandler,
        on_client_request: Optional[ClientRequestHandler] = None,
        on_peer_state: Optional[PeerStateHandler] = None,
        secret: Optional[str] = None,
        serve_clients: bool = True,
        max_frame_size: int = fr.DEFAULT_MAX_FRAME_SIZE,
        max_queue_bytes: int = 32 * 1024 * 1024,
        reconnect_min_s: float = 0.02,
        reconnect_max_s: float = 0.25,
        handshake_timeout_s: float = 2.0,
        dial_timeout_s: float = 1.0,
        silence_s: float = 0.0,  # 0: no silent-peer resets (the server passes DLedgerConfig.link_timeouts())
        tcp_user_timeout_ms: int = 2000,
        listen_host: Optional[str] = None,
        identity: Optional[dict[str, tuple[Any, str]]] = None,
        limits: Optional[PortLimits] = None,
    ) -> None:
        if self_id not in peers:
            raise ValueError(f"self id {self_id!r} is not in the peer list {sorted(peers)}")
        self.group = group
        self.self_id = self_id
        self.peers = dict(peers)
        self.secret = secret or None
        self.serve_clients = serve_clients
        self.on_peer_message = on_peer_message
        self.on_client_request = on_client_request or self._no_clients
        self.on_peer_state = on_peer_state
        self.max_frame_size = max_frame_size
        self.max_queue_bytes = max_queue_bytes
        self.reconnect_min_s = reconnect_min_s
        self.reconnect_max_s = reconnect_max_s
        self.handshake_timeout_s = handshake_timeout_s
        self.dial_timeout_s = dial_timeout_s
        self.tcp_user_timeout_ms = tcp_user_timeout_ms
        self.watch = PeerWatch(self, silence_s)  # silent peers (issue 24.5)
        self.listen_host = listen_host
        self.limits = limits or PortLimits()
        self.admission = Admission(self.limits)
        self.rlog = RateLimitedLog(log)  # per member: one flood cannot hide another member's lines
        self.budget = PendingBudget(self.limits.max_pending_bytes)
        # {name: (value, conf key)} every peer must share (DLedgerConfig.handshake_identity)
        self.ident = {name: value for name, (value, _key) in (identity or {}).items()}
        self.ident_keys = {name: key for name, (_value, key) in (identity or {}).items()}
        self.counters = Counters()
        self.links = {pid: _PeerLink(self, pid, addr) for pid, addr in self.peers.items() if pid != self_id}
        self._accepted: set[_AcceptedConn] = set()
        self._inbound_by_peer: dict[str, _AcceptedConn] = {}
        self._server: Optional[asyncio.base_events.Server] = None

    # -- lifecycle
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        host, port = self.peers[self.self_id]
        self._server = await loop.create_server(
            lambda: _AcceptedConn(self), self.listen_host or host, port, reuse_address=True
        )
        for link in self.links.values():
            link.task = loop.create_task(link.run(), name=f"dledger-link-{self.self_id}->{link.peer_id}")
        self.watch.start()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        await self.watch.stop()
        for link in self.links.values():
            link.close()
        tasks = [lk.task for lk in self.links.values() if lk.task is not None]
        for conn in list(self._accepted):
            conn.abort()
        while tasks:
            _, pending = await asyncio.wait(tasks, timeout=1.0)
            for t in pending:  # a swallowed cancellation: cancel again
                t.cancel()
            tasks = list(pending)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    # -- sending
    def send(self, peer_id: str, msg: Any) -> None:
        """Queue ``msg`` for ``peer_id`` (never blocks; bounded, drop-oldest)."""
        link = self.links.get(peer_id)
        if link is None:
            raise KeyError(f"unknown peer {peer_id!r}")
        link.outbox.put(fr.encode_payload(msg))
        self.watch.sent(peer_id)

    def is_connected(self, peer_id: str) -> bool:
        link = self.links.get(peer_id)
        return link is not None and link.connected

    # -- stats
    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = self.counters.as_dict()
        out["peers"] = {
            pid: {"connected": lk.connected, "queued_frames": len(lk.outbox.frames), "queued_bytes": lk.outbox.nbytes,
                  "last_error": lk.last_error, "silent_resets": self.watch.resets.get(pid, 0)}
            for pid, lk in self.links.items()
        }
        out["inbound_connections"] = len(self._accepted)
        out["unauthenticated_connections"] = self.admission.unauthenticated
        out["pending_bytes"] = self.budget.used
        return out

    # -- internals
    def reset_peer(self, peer_id: str) -> None:
        """Abort both connections with ``peer_id`` (it went silent): ours redials at once."""
        link = self.links.get(peer_id)
        if link is not None and link.conn is not None:
            link.conn.abort()
        inbound = self._inbound_by_peer.get(peer_id)
        if inbound is not None:
            inbound.abort()

    def _inbound_peer_ready(self, conn: _AcceptedConn) -> None:
        old = self._inbound_by_peer.get(conn.remote_id)  # type: ignore[arg-type]
        if old is not None and old is not conn:
            old.abort()  # the peer reconnected; the old socket is half-open or stale
        self._inbound_by_peer[conn.remote_id] = conn  # type: ignore[index]

    def _peer_state(self, peer_id: str, up: bool) -> None:
        if self.on_peer_state is not None:
            self.on_peer_state(peer_id, up)

    @staticmethod
    def _no_clients(session: ClientSession, req: dict) -> None:
        session.reply({"t": "resp", "rid": req.get("rid"), "code": UNSUPPORTED, "error": "no client API"})
