"""BrokerRegistrar: the broker's side of the name server (RocketMQ ``BrokerOuterAPI``).

Rules (apache/rocketmq 4.9.x ``BrokerController.registerBrokerAll``):
- REGISTER_BROKER to every address of ``namesrvAddr`` (``host:port;host:port``) at start, every
  ``registerNameServerPeriod`` (30 s), at once when the role or brokerId changes (the
  controller's role change calls :meth:`wakeup`) and at once when the topic table's
  ``dataVersion`` changes (a topic created by a client or synced from the master). Header
  ``brokerAddr`` (``brokerIP1:listenPort``), ``brokerId``, ``brokerName``, ``clusterName``,
  ``haServerAddr`` (``brokerIP2:haListenPort``), ``compressed=false``, ``bodyCrc32``; body
  ``{"topicConfigSerializeWrapper":{"topicConfigTable":..,"dataVersion":..},"filterServerList":[]}``.
- ``brokerPermission`` (6 = read and write): when it lacks read or write, every topic is
  registered with that perm instead of its own (mqadmin ``updateBrokerConfig -k brokerPermission
  -v 4`` drains a broker: routes say read-only); a change registers at once.
- A broker without a role yet (DLedger, brokerId -1) does not register.
- The connection to each name server stays open between registrations: a name server drops a
  broker whose connection closes, so a killed broker disappears from routes at once.
- On shutdown: UNREGISTER_BROKER to every name server.
- Failures are logged once per change of state (ok -> failing -> ok), never per attempt.
- Signed (issue 23): with ``innerAccessKey``/``innerSecretKey`` set, every request to a name server
  (register, unregister) carries AccessKey + Signature as Apache's ``AclClientRPCHook`` (RocketMQ
  5.3's ``innerClientAuthenticationCredentials`` sign the broker's name server calls the same way).
  A name server with ACL needs that account to be ``admin: true`` or in its
  ``namesrvBrokerAccessKeys``; one without ACL ignores the fields. A refusal's log line says so.

Theory of operation: one asyncio task polls (role, id, dataVersion) every ``poll_s`` and waits
on an event in between; one :class:`RemotingClient` per name server, reconnected on demand.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
import zlib
from typing import Any, Optional

from broker.remoting.acl import signer
from broker.remoting.client import RemotingClient
from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from broker.slave_sync import inner_credentials
from broker.tasks import cancel_and_wait, wait_for

log = logging.getLogger("broker.registrar")
UNREGISTER_TIMEOUT_S = 1.0  # at shutdown, all name servers at once (a hung one costs 1 s, not 6)


def parse_namesrv_addr(text: Optional[str]) -> list[tuple[str, int]]:
    out = []
    for part in (text or "").replace(",", ";").split(";"):
        part = part.strip()
        if part:
            host, _, port = part.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"namesrvAddr entry {part!r} is not host:port")
            out.append((host, int(port)))
    return out


class BrokerRegistrar:
    def __init__(self, controller: Any, namesrv: list[tuple[str, int]], *, period_s: float = 30.0,
                 timeout_s: float = 6.0, poll_s: float = 0.2) -> None:
        self.c = controller
        self.namesrv = namesrv
        self.period_s = period_s
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self._clients: dict[tuple[str, int], RemotingClient] = {}
        self._failing: dict[tuple[str, int], bool] = {}
        self._event = asyncio.Event()
        self._task: Optional[asyncio.Task[None]] = None
        self.registrations = 0
        self.last_registered: Optional[tuple[int, str]] = None
        creds = inner_credentials(getattr(controller, "broker_config", None))
        self._rpc_hook = signer(*creds) if creds else None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="broker-registrar")

    def wakeup(self) -> None:
        self._event.set()

    @property
    def broker_addr(self) -> str:
        return f"{self.c.broker_ip}:{self.c.listen_port}"

    def _ha_addr(self) -> str:
        ip2 = getattr(self.c.broker_config, "broker_ip2", None) or self.c.broker_ip
        return f"{ip2}:{self.c.ha_listen_port}"

    def _state(self) -> tuple[int, str, Any, int]:
        return (self.c.broker_id, self.c.broker_role, json.dumps(self.c.metadata.data_version("topics"), sort_keys=True),
                self._permission())

    def _permission(self) -> int:
        return int(getattr(self.c.broker_config, "broker_permission", 6))

    async def _run(self) -> None:
        last_state: Any = None
        next_due = 0.0
        while True:
            state = self._state()
            now = time.monotonic()
            if state[0] >= 0 and (state != last_state or now >= next_due):
                ok = await self.register_all()
                last_state = state if ok else None
                next_due = now + (self.period_s if ok else min(self.period_s, 1.0))
            self._event.clear()
            try:
                await wait_for(self._event.wait(), self.poll_s)
            except asyncio.TimeoutError:
                pass

    async def _client(self, addr: tuple[str, int]) -> RemotingClient:
        cl = self._clients.get(addr)
        if cl is None or cl.is_closed:
            cl = await wait_for(RemotingClient.connect(*addr, rpc_hook=self._rpc_hook), self.timeout_s)
            self._clients[addr] = cl
        return cl

    def _body(self) -> bytes:
        topics = json.loads(self.c.metadata.file_content("topics")[0])
        table = topics.get("topicConfigTable", {})
        perm = self._permission()
        if perm & 6 != 6:  # not both readable and writable: every topic registers with the broker's perm
            table = {name: dict(tc, perm=perm) for name, tc in table.items()}
        wrapper = {"dataVersion": topics.get("dataVersion"), "topicConfigTable": table}
        return json.dumps({"filterServerList": [], "topicConfigSerializeWrapper": wrapper},
                          separators=(",", ":")).encode("utf-8")

    async def register_all(self) -> bool:
        body = self._body()
        fields = {"brokerAddr": self.broker_addr, "brokerId": self.c.broker_id, "brokerName": self.c.broker_name,
                  "clusterName": self.c.cluster_name, "haServerAddr": self._ha_addr(), "compressed": False,
                  "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF}
        results = await asyncio.gather(*(self._register_one(a, fields, body) for a in self.namesrv))
        if any(results):
            self.registrations += 1
            self.last_registered = (self.c.broker_id, self.c.broker_role)
        return all(results)

    async def _register_one(self, addr: tuple[str, int], fields: dict[str, Any], body: bytes) -> bool:
        try:
            cl = await self._client(addr)
            resp = await cl.invoke(RemotingCommand.request(RC.REGISTER_BROKER, fields, body), self.timeout_s)
            if resp.code == R.NO_PERMISSION:
                hint = "" if self._rpc_hook else "; no innerAccessKey/innerSecretKey set: the registration is unsigned"
                raise RuntimeError(f"refused by the name server's ACL: {resp.remark}{hint}")
            if resp.code != R.SUCCESS:
                raise RuntimeError(f"code {resp.code}: {resp.remark}")
        except (OSError, asyncio.TimeoutError, ConnectionError, RuntimeError) as exc:
            if not self._failing.get(addr):
                log.warning("register broker %s (id %s) to name server %s:%d failed: %s", self.broker_addr,
                            fields["brokerId"], addr[0], addr[1], exc or type(exc).__name__)
            self._failing[addr] = True
            stale = self._clients.pop(addr) if addr in self._clients else None
            if stale is not None:
                await stale.close()
            return False
        if self._failing.get(addr, True):
            log.info("registered broker %s (%s id %s) to name server %s:%d", self.broker_addr, self.c.broker_name,
                     fields["brokerId"], addr[0], addr[1])
        elif self.last_registered and self.last_registered[0] != fields["brokerId"]:
            log.info("re-registered broker %s as id %s to name server %s:%d", self.broker_addr, fields["brokerId"],
                     addr[0], addr[1])
        self._failing[addr] = False
        return True

    async def stop(self, unregister: bool = True) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        if unregister and self.c.broker_id >= 0:
            fields = {"brokerAddr": self.broker_addr, "brokerId": self.c.broker_id, "brokerName": self.c.broker_name,
                      "clusterName": self.c.cluster_name}

            async def unregister_from(cl: RemotingClient) -> None:
                try:
                    await cl.invoke(RemotingCommand.request(RC.UNREGISTER_BROKER, fields),
                                    min(self.timeout_s, UNREGISTER_TIMEOUT_S))
                except (OSError, asyncio.TimeoutError, ConnectionError):
                    pass  # a name server that is down forgets the broker when its heartbeat expires
            await asyncio.gather(*(unregister_from(cl) for cl in self._clients.values()))
        await asyncio.gather(*(cl.close() for cl in self._clients.values()))  # in parallel: shutdown is bounded
        self._clients.clear()
