"""Which doors a broker may open: every port authenticates, or the operator said otherwise.

Rules (issue 12; ``mqbroker`` runs :func:`check_doors` on its parsed ``.conf`` before it binds
anything; parsing alone does not, so ``mqupgrade`` can still read an old store's Apache conf):

- **listenPort** (RocketMQ remoting + our HTTP API, and ``httpListenPort`` when split) binds
  ``bindAddress`` (RocketMQ 5's key; Apache's default ``0.0.0.0``). Requests are authenticated by
  plain ACL (``aclEnable=true``: AccessKey + HmacSHA1 signature on remoting, the same accounts on
  HTTP). Without ACL the broker starts only with ``remotingAllowInsecure=true``.
- **haListenPort** (classic mode, master side; the slave dials it) binds ``haBindAddress``
  (default ``bindAddress``). Master and slaves share ``haAuthToken``; without it the broker starts
  only with ``haAllowInsecure=true``.
- **DLedger port** (``enableDLegerCommitLog=true``) binds this node's own ``dLegerPeers`` address.
  Members share ``dLegerAuthToken``; without it the group starts only when every peer is a
  loopback address *and* ``dLegerAllowInsecure=true``.
- A shared secret is at least :data:`MIN_SECRET_LENGTH` characters. The sample secrets shipped in
  ``conf/`` (:data:`SAMPLE_SECRETS`) are public; they are refused as soon as the door they guard
  is reachable from another host (a non-loopback bind address or peer).

- A door the operator opened on purpose is still reported (issue 23.10): :func:`open_doors`
  lists every unauthenticated door with its bind address; one reachable off loopback
  (``exposed``) is logged as a loud WARNING at every start, listed in ``/status``
  (``openDoors``) and counted by ``rocketmq_broker_open_doors``; ``mqupgrade plan`` names the
  doors the confs it writes leave open.

Theory of operation: pure checks over a parsed conf; each refusal is one
:class:`~broker.config.java_properties.ConfigError` naming the key, the file and line, and the fix.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Optional

from broker.config.java_properties import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from broker.config.conf_file import ParsedConf

MIN_SECRET_LENGTH = 16
#: Secrets printed in the shipped conf files: anyone who read the repository knows them.
SAMPLE_SECRETS = frozenset({
    "sample-dledger-secret-change-me",
    "sample-ha-secret-change-me",
})


def is_loopback(host: Optional[str]) -> bool:
    """``127.0.0.0/8``, ``::1`` and ``localhost``; a wildcard or a name that is not
    ``localhost`` is not loopback (it may resolve to anything)."""
    if not host:
        return False
    h = host.strip().strip("[]")
    if h.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def _check_secret(conf: "ParsedConf", key: str, secret: str, exposed_hosts: Iterable[str]) -> None:
    if len(secret) < MIN_SECRET_LENGTH:
        raise ConfigError(f"{conf.where(key)}: the shared secret is {len(secret)} characters; use at least "
                          f"{MIN_SECRET_LENGTH} (e.g. the output of: python3 -c 'import secrets; "
                          "print(secrets.token_urlsafe(32))')")
    if secret in SAMPLE_SECRETS:
        exposed = [h for h in exposed_hosts if h and not is_loopback(h)]
        if exposed:
            raise ConfigError(f"{conf.where(key)}: this is the public sample secret from conf/, and the port is "
                              f"reachable on {exposed[0]}; set a secret of your own on every node")


def check_doors(conf: "ParsedConf") -> None:
    """Raise ConfigError if a port would accept unauthenticated traffic without the operator's say-so."""
    b, s = conf.broker, conf.store
    if not b.bind_address or not b.bind_address.strip():
        raise ConfigError(f"{conf.where('bindAddress')}: must be an address to listen on (0.0.0.0 for all)")
    if not b.acl_enable and not b.remoting_allow_insecure:
        raise ConfigError(
            f"listenPort {b.listen_port} ({conf.source}) would accept unauthenticated clients on {b.bind_address}: "
            "set aclEnable=true (accounts in plain_acl.yml), or remotingAllowInsecure=true to run it open")
    if not s.enable_dleger_commit_log:
        ha_bind = s.ha_bind_address or b.bind_address
        if s.ha_auth_token:
            _check_secret(conf, "haAuthToken", s.ha_auth_token, [ha_bind, (s.ha_master_address or "").rpartition(":")[0]])
        elif not s.ha_allow_insecure:
            raise ConfigError(
                f"haListenPort {s.ha_listen_port} ({conf.source}) would stream the commitlog to anyone and count "
                "any peer's acks: set haAuthToken=<secret> (the same on master and slaves), or haAllowInsecure=true "
                "to run it open")
        return
    peers = s.dledger_peer_map()
    hosts = [addr.rpartition(":")[0] for addr in peers.values()]
    if s.dleger_auth_token:
        _check_secret(conf, "dLegerAuthToken", s.dleger_auth_token, hosts)
        return
    remote = [h for h in hosts if not is_loopback(h)]
    if remote:
        raise ConfigError(
            f"{conf.where('dLegerPeers')}: peer {remote[0]} is not on loopback and no dLegerAuthToken is set: "
            "set dLegerAuthToken=<secret> (the same on every member; mqupgrade plan generates one)")
    if not s.dleger_allow_insecure:
        raise ConfigError(
            f"{conf.where('dLegerAuthToken')}: not set, so anyone could vote and append in group {s.dleger_group}: "
            "set dLegerAuthToken=<secret> (the same on every member), or dLegerAllowInsecure=true "
            "(loopback-only groups)")


@dataclass(frozen=True)
class OpenDoor:
    """A port that accepts unauthenticated traffic, and the key that made it so."""

    door: str
    port: int
    bind: str
    opened_by: str

    @property
    def exposed(self) -> bool:
        return not is_loopback(self.bind)

    def describe(self) -> str:
        where = "every interface" if self.bind in ("0.0.0.0", "::", "") else self.bind
        return (f"{self.door} {self.port} accepts unauthenticated traffic on {where} ({self.opened_by})"
                + ("" if self.exposed else ", loopback only"))

    def to_json(self) -> dict[str, Any]:
        return {"door": self.door, "port": self.port, "bindAddress": self.bind, "openedBy": self.opened_by,
                "exposed": self.exposed}


def open_doors(broker: Any, store: Any) -> list[OpenDoor]:
    """Every unauthenticated door of a broker with these configs (those :func:`check_doors` let
    through because the operator said so), loopback ones included."""
    out: list[OpenDoor] = []
    bind = (broker.bind_address or "0.0.0.0").strip()
    if not broker.acl_enable:
        out.append(OpenDoor("listenPort", int(broker.listen_port), bind, "no aclEnable: remotingAllowInsecure=true"))
        http = getattr(broker, "http_listen_port", None)
        if http and int(http) != int(broker.listen_port):
            out.append(OpenDoor("httpListenPort", int(http), bind, "no aclEnable: remotingAllowInsecure=true"))
    if not store.enable_dleger_commit_log:
        if not store.ha_auth_token:
            port = int(store.ha_listen_port or 0) or int(broker.listen_port) + 1
            out.append(OpenDoor("haListenPort", port, (store.ha_bind_address or bind).strip(),
                                "no haAuthToken: haAllowInsecure=true"))
    elif not store.dleger_auth_token:
        addr = store.dledger_peer_map().get(store.dleger_self_id or "", "")
        host, _, port = addr.rpartition(":")
        out.append(OpenDoor("dLeger", int(port or 0), host, "no dLegerAuthToken: dLegerAllowInsecure=true"))
    return out


def exposed_warnings(doors: Iterable[OpenDoor]) -> list[str]:
    """The start-up SECURITY lines for the open doors reachable off loopback."""
    return [f"SECURITY: {d.describe()}; anyone who can reach this host can use it. Set the key that authenticates "
            f"it, or bind it to 127.0.0.1" for d in doors if d.exposed]
