"""Which ``Host`` names this broker: a signed HTTP request is valid on the broker it was sent to only.

Rules (issue 23.7; the signature covers ``Host``, see ``broker.api.signing``):
- A signed ``Host`` is accepted when its port is the port the request arrived on (the socket's
  local port) and its name is one of: the socket's local address (the IP the client connected
  to), ``localhost`` when that address is loopback, ``brokerIP1``, this machine's hostname, or a
  DNS name that resolves to the socket's local address. Anything else is refused, so a request
  captured on a DLedger leader (``10.0.0.1:10911``) and replayed to a follower (``10.0.0.2:10911``,
  or ``127.0.0.1:10921`` on one host) fails there even though the account and signature are good.
- Consequences: a client must sign the address it connects to (``broker.api.client`` does); a
  reverse proxy or port mapping must pass ``Host`` through unchanged and keep the port.
- Name resolution runs in the loop's resolver thread, only for requests whose signature already
  verified; answers are cached (:data:`CACHE_SIZE` names, :data:`CACHE_TTL_S` seconds).

Theory of operation: :class:`HostBinding` is built once per broker (``broker.api.http_acl``);
:meth:`HostBinding.refusal` answers None (accepted) or the reason of a refusal.
"""
from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from typing import Any, Iterable, Optional

from broker.tasks import wait_for

CACHE_SIZE = 256
CACHE_TTL_S = 60.0
RESOLVE_TIMEOUT_S = 2.0


def split_host(value: str) -> tuple[str, Optional[int]]:
    """``name:port`` / ``[v6]:port`` / ``name`` -> (lower-case name without brackets, port or None)."""
    value = value.strip().lower()
    if value.startswith("["):
        name, _, rest = value[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif value.count(":") == 1:
        name, _, port = value.partition(":")
    else:
        name, port = value, ""
    return name, (int(port) if port.isdigit() and len(port) <= 5 else None)


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def _is_loopback(ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:
        return False


class HostBinding:
    """The names of this broker (module rules)."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self.names = {n.strip().lower() for n in names if n and n.strip()}
        try:
            self.names.add(socket.gethostname().lower())
        except OSError:
            pass
        self._resolved: dict[str, tuple[float, frozenset[str]]] = {}

    async def refusal(self, host_value: str, sockname: Any) -> Optional[str]:
        """None when ``host_value`` (the signed Host header) names this broker at ``sockname``."""
        if not host_value:
            return "the request has no Host header (a signed request names the broker it is sent to)"
        if not isinstance(sockname, tuple) or len(sockname) < 2:
            return None  # not a TCP socket (a test transport): nothing to compare with
        local_ip, local_port = str(sockname[0]).lower(), int(sockname[1])
        if local_ip.startswith("::ffff:"):
            local_ip = local_ip[7:]
        name, port = split_host(host_value)
        wrong = f"the request was signed for {host_value!r}, not for this broker ({local_ip}:{local_port})"
        if port != local_port:
            return wrong
        if name == local_ip or name in self.names or (name == "localhost" and _is_loopback(local_ip)):
            return None
        if _is_ip(name) or not name:
            return wrong
        if local_ip in await self._resolve(name):
            return None
        return wrong

    async def _resolve(self, name: str) -> frozenset[str]:
        now = time.monotonic()
        hit = self._resolved.get(name)
        if hit is not None and now - hit[0] < CACHE_TTL_S:
            return hit[1]
        try:
            infos = await wait_for(asyncio.get_running_loop().getaddrinfo(name, None, type=socket.SOCK_STREAM),
                                           RESOLVE_TIMEOUT_S)
            ips = frozenset(str(i[4][0]).lower() for i in infos)
        except (OSError, asyncio.TimeoutError, UnicodeError):
            ips = frozenset()
        if len(self._resolved) >= CACHE_SIZE:
            self._resolved.pop(next(iter(self._resolved)))
        self._resolved[name] = (now, ips)
        return ips
