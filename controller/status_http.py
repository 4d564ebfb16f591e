"""``/status`` and ``/metrics`` of a controller over plain HTTP (``controllerHttpPort``, 0 = off).

Rules:
- ``GET /status``: JSON of :meth:`controller.server.ControllerServer.status` (role, term, leader,
  applied index, every broker set with its master, SyncStateSet, epochs and live brokers).
  ``GET /metrics``: Prometheus text (``rocketmq_controller_*``: role, term, applied index, broker
  sets, live heartbeat rows and the counters). Anything else: 404; another method: 405.
- Answered only to loopback clients (403 otherwise), whatever ``bindAddress`` is: the status lists
  broker addresses and the port is not signed.
- Bounded: a request head of at most :data:`MAX_HEAD` bytes read within :data:`READ_TIMEOUT_S`;
  at most :data:`MAX_CONNECTIONS` at once (more are closed at once); one request per connection.

Theory of operation: ``asyncio.start_server``; the view is a callable returning a dict, so this
module knows nothing of the server.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any, Callable, Optional

from broker.security_policy import is_loopback
from dledger.aio import wait_for

MAX_HEAD = 8192
READ_TIMEOUT_S = 5.0
MAX_CONNECTIONS = 64

StatusView = Callable[[], dict[str, Any]]


def prometheus_text(st: dict[str, Any]) -> str:
    lines: list[str] = []

    def gauge(name: str, value: Any, help_text: str, labels: str = "") -> None:
        lines.append(f"# HELP rocketmq_controller_{name} {help_text}")
        lines.append(f"# TYPE rocketmq_controller_{name} gauge")
        lines.append(f"rocketmq_controller_{name}{labels} {float(value or 0):g}")

    gauge("is_leader", 1 if st.get("isLeader") else 0, "1 when this controller serves requests (leader, ready)")
    gauge("term", st.get("term"), "DLedger term")
    gauge("applied_index", st.get("appliedIndex"), "last log index applied to the state machine")
    gauge("broker_sets", len(st.get("brokerSets") or {}), "broker sets in the state machine")
    gauge("heartbeat_brokers", st.get("heartbeatBrokers"), "rows of the heartbeat table")
    gauge("pending_requests", st.get("pendingRequests"), "requests waiting for the state machine")
    lines.append("# HELP rocketmq_controller_events_total controller counters")
    lines.append("# TYPE rocketmq_controller_events_total counter")
    for k, v in sorted((st.get("counters") or {}).items()):
        lines.append(f'rocketmq_controller_events_total{{kind="{k}"}} {float(v):g}')
    return "\n".join(lines) + "\n"


class StatusHttp:
    def __init__(self, view: StatusView) -> None:
        self.view = view
        self.server: Optional[asyncio.base_events.Server] = None
        self.port = 0
        self.open = 0

    async def start(self, host: str, port: int) -> None:
        self.server = await asyncio.start_server(self._serve, host, port, reuse_address=True)
        srv: Any = self.server
        self.port = srv.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            try:
                await wait_for(self.server.wait_closed(), 2.0)
            except asyncio.TimeoutError:
                pass
            self.server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        try:
            if self.open > MAX_CONNECTIONS:
                return
            peer = writer.get_extra_info("peername")
            try:
                head = await wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                return
            if len(head) > MAX_HEAD:
                return
            parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            method, path = (parts[0], parts[1]) if len(parts) >= 2 else ("", "")
            status, ctype, body = self._answer(peer[0] if peer else "", method, path.split("?", 1)[0])
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                         "Connection: close\r\n\r\n".encode("latin-1") + body)
            await wait_for(writer.drain(), READ_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError):
            pass
        finally:
            self.open -= 1
            writer.close()

    def _answer(self, ip: str, method: str, path: str) -> tuple[str, str, bytes]:
        if not is_loopback(ip):
            return "403 Forbidden", "text/plain", b"the controller status is answered to loopback clients only\n"
        if path not in ("/status", "/metrics"):
            return "404 Not Found", "text/plain", b"try /status or /metrics\n"
        if method != "GET":
            return "405 Method Not Allowed", "text/plain", b"GET only\n"
        st = self.view()
        if path == "/status":
            return "200 OK", "application/json", json.dumps(st, sort_keys=True).encode("utf-8")
        return "200 OK", "text/plain; version=0.0.4", prometheus_text(st).encode("utf-8")
