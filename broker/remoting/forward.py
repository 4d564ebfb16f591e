"""SendForwarder: a DLedger follower passes a client's send to the leader and relays the answer.

Why (issue 22.4): a RocketMQ client learns the master from the name server, every 30 s. After a
leader change with every member alive, a 4.9.8 Java producer keeps sending to the old leader,
now a follower, and each send failed ("is SLAVE, not the master") until its route refreshed.
With forwarding, those sends succeed: zero failed sends for a leader change.

Rules
-----
- Only sends (SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE), only on a DLedger follower
  that knows its leader's address, whose member is running, with ``forwardSendsToLeader``
  (ours, default true), and only when HTTP shares ``listenPort`` (no ``httpListenPort`` of its
  own): a follower knows its leader by the leader's API address (``dLegerPeersHttp``), which is
  then its remoting address too. An answer that is no remoting frame (an HTTP port after all)
  counts as not sent: an HTTP server stores no remoting request. A classic slave never forwards (its master is not elected; a client
  that writes to a slave is misconfigured and is told so).
- The follower's RPC hook (ACL) has already accepted the request: nothing unauthenticated is
  forwarded. The request goes to the leader as it came (code, header fields, body, version,
  language), so the leader's ACL checks the client's own signature.
- One hop only: the forwarded request carries :data:`FORWARDED_FLAG` in ``flag`` (a bit RocketMQ
  does not use); a broker never forwards a request that carries it, it answers it itself.
- Bounded: at most ``max_inflight`` forwards at once per broker, each waits ``timeout_s`` (the
  Java producer's default send timeout, 3 s). Over the cap, or when the leader cannot be reached
  before anything was sent, the request is answered as without forwarding (the follower's
  NOT_MASTER refusal: nothing was stored). Once the request was written to the leader, a lost
  connection or a timeout is answered SYSTEM_ERROR "outcome unknown" naming the leader, never a
  refusal, because the leader may have stored it.
- The answer is the leader's (code, remark, header: msgId, queueId, queueOffset), with the
  client's opaque. The message's bornHost is the follower's address, as seen by the leader.

Theory of operation: one pipelined :class:`broker.remoting.client.RemotingClient` to the current
leader, reconnected when the leader's address changes or the connection closed; every forward is
one ``invoke`` on it.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Callable, Optional

from broker.remoting.client import RemotingClient
from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import ResponseCode as R
from broker.remoting.server import Handler, RemotingConnection
from broker.tasks import wait_for

log = logging.getLogger("broker.remoting")

#: set in ``flag`` on a request a follower forwarded (bits 0 and 1 are RocketMQ's response/oneway)
FORWARDED_FLAG = 1 << 4
CONNECT_TIMEOUT_S = 1.0


class SendForwarder:
    def __init__(self, leader_address: Callable[[], Optional[str]], *, max_inflight: int = 1024,
                 timeout_s: float = 3.0) -> None:
        self.leader_address = leader_address  # None: do not forward (not a follower with a leader)
        self.max_inflight = max_inflight
        self.timeout_s = timeout_s
        self.inflight = 0
        self.counters = {"forwarded": 0, "unknown": 0, "not_sent": 0}
        self._client: Optional[RemotingClient] = None
        self._client_addr: Optional[str] = None
        self._connecting: Optional[asyncio.Future[Optional[RemotingClient]]] = None
        self._down: tuple[str, float] = ("", 0.0)  # (leader, until): a failed connect is not retried at once

    def target(self, cmd: RemotingCommand) -> Optional[str]:
        """The leader to forward ``cmd`` to, or None to answer it here."""
        if cmd.flag & FORWARDED_FLAG or self.inflight >= self.max_inflight:
            return None
        return self.leader_address()

    def wrap(self, handler: Handler) -> Handler:
        """``handler`` preceded by forwarding when this broker is a follower with a leader."""
        async def forwarding(cmd: RemotingCommand, conn: RemotingConnection) -> Optional[RemotingCommand]:
            addr = self.target(cmd)
            if addr is not None:
                answer = await self.forward(cmd, addr)
                if answer is not None:
                    return answer
            return await handler(cmd, conn)
        return forwarding

    async def forward(self, cmd: RemotingCommand, addr: str) -> Optional[RemotingCommand]:
        """The leader's answer; None when nothing was sent (answer as without forwarding)."""
        self.inflight += 1
        try:
            client = await self._client_for(addr)
            if client is None:
                self.counters["not_sent"] += 1
                return None
            fwd = RemotingCommand(code=cmd.code, flag=(cmd.flag | FORWARDED_FLAG) & ~3, remark=cmd.remark,
                                  ext_fields=dict(cmd.ext_fields), body=cmd.body, language=cmd.language,
                                  version=cmd.version, serialize_type=cmd.serialize_type)
            try:
                answer = await client.invoke(fwd, self.timeout_s)
            except (asyncio.TimeoutError, ConnectionError, OSError) as exc:
                if client.protocol_error is not None and client.frames_received == 0:
                    log.warning("cannot forward sends to %s: it does not speak remoting (%s)", addr,
                                client.protocol_error)
                    self._down = (addr, asyncio.get_running_loop().time() + 60.0)
                    self.counters["not_sent"] += 1
                    return None
                self.counters["unknown"] += 1
                log.warning("send forwarded to leader %s: %s", addr, type(exc).__name__)
                return cmd.response(R.SYSTEM_ERROR, f"forwarded to the leader {addr}, which did not answer within "
                                    f"{self.timeout_s:g} s: outcome unknown, retry the send")
            self.counters["forwarded"] += 1
            answer.flag &= ~FORWARDED_FLAG
            return answer
        finally:
            self.inflight -= 1

    async def _client_for(self, addr: str) -> Optional[RemotingClient]:
        client = self._client
        if client is not None and self._client_addr == addr and not client.is_closed:
            return client
        if self._connecting is not None and self._client_addr == addr:
            return await asyncio.shield(self._connecting)
        loop = asyncio.get_running_loop()
        if self._down[0] == addr and loop.time() < self._down[1]:
            return None
        if client is not None:
            self._client = None
            loop.create_task(client.close())
        self._client_addr = addr
        fut: asyncio.Future[Optional[RemotingClient]] = asyncio.get_running_loop().create_future()
        self._connecting = fut
        host, _, port = addr.rpartition(":")
        made: Optional[RemotingClient] = None
        try:
            made = await wait_for(RemotingClient.connect(host, int(port)), CONNECT_TIMEOUT_S)
        except (asyncio.TimeoutError, OSError, ValueError) as exc:
            log.warning("cannot forward sends to the leader %s: %s", addr, exc)
            self._down = (addr, loop.time() + CONNECT_TIMEOUT_S)
        finally:  # also when cancelled: sends waiting on this connect must never wait for ever
            if self._client_addr == addr:
                self._client = made
            self._connecting = None
            fut.set_result(made)
        return made

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()
