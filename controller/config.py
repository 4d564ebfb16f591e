"""The controller's settings: Apache RocketMQ 5.3.3's ``ControllerConfig`` keys with Apache's
defaults, plus the few doors and limits of ours, read from a Java properties file.

Rules:
- Keys are Apache's (``controllerDLegerGroup``, ``controllerDLegerPeers``, ``controllerDLegerSelfId``,
  ``controllerStorePath``, ``enableElectUncleanMaster``, ``scanNotActiveBrokerInterval``,
  ``notifyBrokerRoleChanged``, ...), defaults Apache's. An unknown key is a :class:`ConfigError`
  naming the file, the line and the nearest known key (as ``broker.config`` does; Apache ignores
  it). A bad number or boolean names the key. ``controllerType=jRaft`` is refused (only the
  DLedger controller is built).
- Ours (each named ``# ours`` in :data:`KEYS`):
  * ``listenPort`` / ``bindAddress``: the remoting door brokers and mqadmin call (their
    ``controllerAddr``). Divergence: Apache registers the controller's processors on DLedger's own
    remoting port (the address in ``controllerDLegerPeers``); our DLedger library keeps its port for
    peers, so the controller has two ports. ``controllerRemotingPeers`` (``id-host:port;...``, the
    ids of ``controllerDLegerPeers``) tells every member the doors of the others, for
    ``CONTROLLER_GET_METADATA_INFO`` and the ``CONTROLLER_NOT_LEADER`` answer.
  * ``aclEnable`` + ``plainAclFile``: every request signed (AccessKey + HmacSHA1, the broker's plain
    ACL); ``controllerAllowInsecure=true`` opens the door without ACL. Neither: refuse to start.
  * ``controllerDLegerAuthToken`` (>= 16 characters, the same on every member) guards the DLedger
    port between controllers (our dledger's ``dLegerAuthToken``); without it
    ``controllerDLegerAllowInsecure=true`` is needed and every peer must be loopback.
  * Sample secrets shipped in ``conf/controller`` (:data:`SAMPLE_SECRETS`) are refused as soon as
    the door they guard is reachable from another host.
  * Bounds: ``serverMaxConnections`` (1024), ``controllerMaxHeartbeatBrokers`` (100000),
    ``controllerMaxBrokerSets`` (10000) and ``controllerMaxBrokersPerSet`` (64): an
    ``CONTROLLER_APPLY_BROKER_ID`` that would add a broker set or an id beyond them is refused
    ``SYSTEM_BUSY`` by the leader before anything is appended (the replicated tables stay bounded),
    ``controllerRequestThreadPoolQueueCapacity`` (Apache's key, 50000: requests waiting for the
    state machine; more are answered ``SYSTEM_BUSY``).
  * ``controllerHttpPort`` (0 = off): ``/status`` (JSON) and ``/metrics`` (Prometheus) over HTTP,
    answered to loopback clients only.
- ``UPDATE_CONTROLLER_CONFIG`` may change :data:`HOT_KEYS` at runtime; the other keys need a
  restart; ``configBlackList`` (Apache's, default ``configBlackList;configStorePath``) is never
  changed remotely.

Theory of operation: :data:`KEYS` is the table ``javaKey -> (attribute, kind)``; a plain dataclass
holds the values; :func:`load_config` parses text through ``broker.config.java_properties``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any, Optional

from broker.config.java_properties import ConfigError, nearest_key_hint, parse_properties, read_properties_file
from broker.security_policy import is_loopback
from dledger.rpc.framing import parse_peers

MIN_SECRET_LENGTH = 16
SAMPLE_SECRETS = frozenset({"sample-controller-dledger-secret-change-me", "sample-controller-admin-change-me",
                            "sample-controller-broker-change-me"})


@dataclass
class ControllerConfig:
    # ---- Apache's ControllerConfig
    rocketmq_home: str = ""
    config_store_path: str = os.path.join(os.path.expanduser("~"), "controller", "controller.properties")
    controller_type: str = "DLedger"
    scan_not_active_broker_interval: int = 5000
    controller_thread_pool_nums: int = 16
    controller_request_thread_pool_queue_capacity: int = 50000
    controller_d_leger_group: Optional[str] = None
    controller_d_leger_peers: Optional[str] = None
    controller_d_leger_self_id: Optional[str] = None
    mapped_file_size: int = 1024 * 1024 * 1024
    controller_store_path: str = ""
    elect_master_max_retry_count: int = 3
    enable_elect_unclean_master: bool = False
    is_process_read_event: bool = False
    notify_broker_role_changed: bool = True
    scan_inactive_master_interval: int = 5000
    metrics_exporter_type: str = "DISABLE"
    metrics_prom_exporter_port: int = 5557
    metrics_prom_exporter_host: str = ""
    metrics_label: str = ""
    config_black_list: str = "configBlackList;configStorePath"
    # ---- ours (module rules)
    listen_port: int = 19876  # ControllerStartup's NettyServerConfig port
    bind_address: str = "127.0.0.1"
    controller_remoting_peers: Optional[str] = None
    acl_enable: bool = False
    plain_acl_file: Optional[str] = None
    controller_allow_insecure: bool = False
    controller_d_leger_auth_token: Optional[str] = None
    controller_d_leger_allow_insecure: bool = False
    server_max_connections: int = 1024
    controller_max_heartbeat_brokers: int = 100_000
    controller_max_broker_sets: int = 10_000
    controller_max_brokers_per_set: int = 64
    controller_http_port: int = 0

    @property
    def store_path(self) -> str:
        """``getControllerStorePath``: ``~/DLedgerController`` when unset."""
        return self.controller_store_path or os.path.join(os.path.expanduser("~"), self.controller_type + "Controller")

    def remoting_address_of(self, peer_id: Optional[str]) -> Optional[str]:
        """The door of a member (``controllerRemotingPeers``), else its DLedger address (Apache's)."""
        if peer_id is None:
            return None
        for table in (self.controller_remoting_peers, self.controller_d_leger_peers):
            if table:
                addr = parse_peers(table).get(peer_id)
                if addr is not None:
                    return f"{addr[0]}:{addr[1]}"
        return None

    def to_properties(self) -> dict[str, str]:
        """Every key with its value as text (``GET_CONTROLLER_CONFIG``); secrets masked."""
        out: dict[str, str] = {}
        for java, (attr, _kind) in KEYS.items():
            v = getattr(self, attr)
            if attr == "controller_d_leger_auth_token" and v:
                v = "******"
            out[java] = "" if v is None else ("true" if v is True else "false" if v is False else str(v))
        return out


#: javaKey -> (attribute, kind); kinds: str, int, bool
KEYS: dict[str, tuple[str, str]] = {
    "rocketmqHome": ("rocketmq_home", "str"), "configStorePath": ("config_store_path", "str"),
    "controllerType": ("controller_type", "str"),
    "scanNotActiveBrokerInterval": ("scan_not_active_broker_interval", "int"),
    "controllerThreadPoolNums": ("controller_thread_pool_nums", "int"),
    "controllerRequestThreadPoolQueueCapacity": ("controller_request_thread_pool_queue_capacity", "int"),
    "controllerDLegerGroup": ("controller_d_leger_group", "str"),
    "controllerDLegerPeers": ("controller_d_leger_peers", "str"),
    "controllerDLegerSelfId": ("controller_d_leger_self_id", "str"),
    "mappedFileSize": ("mapped_file_size", "int"), "controllerStorePath": ("controller_store_path", "str"),
    "electMasterMaxRetryCount": ("elect_master_max_retry_count", "int"),
    "enableElectUncleanMaster": ("enable_elect_unclean_master", "bool"),
    "isProcessReadEvent": ("is_process_read_event", "bool"),
    "notifyBrokerRoleChanged": ("notify_broker_role_changed", "bool"),
    "scanInactiveMasterInterval": ("scan_inactive_master_interval", "int"),
    "metricsExporterType": ("metrics_exporter_type", "str"),
    "metricsPromExporterPort": ("metrics_prom_exporter_port", "int"),
    "metricsPromExporterHost": ("metrics_prom_exporter_host", "str"), "metricsLabel": ("metrics_label", "str"),
    "configBlackList": ("config_black_list", "str"),
    # ours
    "listenPort": ("listen_port", "int"), "bindAddress": ("bind_address", "str"),
    "controllerRemotingPeers": ("controller_remoting_peers", "str"),
    "aclEnable": ("acl_enable", "bool"), "plainAclFile": ("plain_acl_file", "str"),
    "controllerAllowInsecure": ("controller_allow_insecure", "bool"),
    "controllerDLegerAuthToken": ("controller_d_leger_auth_token", "str"),
    "controllerDLegerAllowInsecure": ("controller_d_leger_allow_insecure", "bool"),
    "serverMaxConnections": ("server_max_connections", "int"),
    "controllerMaxHeartbeatBrokers": ("controller_max_heartbeat_brokers", "int"),
    "controllerMaxBrokerSets": ("controller_max_broker_sets", "int"),
    "controllerMaxBrokersPerSet": ("controller_max_brokers_per_set", "int"),
    "controllerHttpPort": ("controller_http_port", "int"),
}
#: keys UPDATE_CONTROLLER_CONFIG may change while running
HOT_KEYS = frozenset({"scanNotActiveBrokerInterval", "enableElectUncleanMaster", "isProcessReadEvent",
                      "notifyBrokerRoleChanged", "scanInactiveMasterInterval", "electMasterMaxRetryCount"})
_JAVA_OF = {attr: java for java, (attr, _) in KEYS.items()}
assert set(_JAVA_OF) == {f.name for f in fields(ControllerConfig)}


def nearest_key(key: str) -> str:
    return nearest_key_hint(key, KEYS)


def _value(kind: str, key: str, raw: str, where: str) -> Any:
    text = raw.strip()
    if kind == "str":
        return text
    if kind == "bool":
        if text.lower() not in ("true", "false"):
            raise ConfigError(f"{where}: expected true or false, got {raw!r}")
        return text.lower() == "true"
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"{where}: expected an integer, got {raw!r}") from None


def set_key(config: ControllerConfig, key: str, raw: str, where: str) -> None:
    """Set one Java key (``ConfigError`` for an unknown key or a bad value)."""
    entry = KEYS.get(key)
    if entry is None:
        raise ConfigError(f"{where}: unknown controller key{nearest_key(key)}")
    attr, kind = entry
    setattr(config, attr, _value(kind, key, raw, where))


def parse_config(text: str, source: str = "<string>") -> ControllerConfig:
    config = ControllerConfig()
    for key, raw, line in parse_properties(text, source):
        set_key(config, key, raw, f"{key} ({source}:{line})")
    return validate(config, source)


def load_config(path: str) -> ControllerConfig:
    with open(path, encoding="utf-8") as fh:
        return parse_config(fh.read(), path)


def validate(config: ControllerConfig, source: str = "<config>") -> ControllerConfig:
    if config.controller_type != "DLedger":
        raise ConfigError(f"controllerType ({source}): only DLedger is built here, got {config.controller_type!r}")
    for attr in ("controller_d_leger_peers", "controller_d_leger_self_id"):
        if not getattr(config, attr):  # ControllerManager.initialize's IllegalArgumentException
            raise ConfigError(f"Attribute value {_JAVA_OF[attr]} of ControllerConfig is null or empty ({source})")
    try:
        peers = parse_peers(config.controller_d_leger_peers or "")
        doors = parse_peers(config.controller_remoting_peers) if config.controller_remoting_peers else {}
    except ValueError as exc:
        raise ConfigError(f"controllerDLegerPeers / controllerRemotingPeers ({source}): {exc}") from None
    if config.controller_d_leger_self_id not in peers:
        raise ConfigError(f"controllerDLegerSelfId ({source}): {config.controller_d_leger_self_id!r} is not in "
                          f"controllerDLegerPeers ({', '.join(peers)})")
    extra = sorted(set(doors) - set(peers))
    if extra:
        raise ConfigError(f"controllerRemotingPeers ({source}): {extra[0]!r} is not in controllerDLegerPeers")
    positive = ("scan_not_active_broker_interval", "scan_inactive_master_interval", "elect_master_max_retry_count",
                "controller_request_thread_pool_queue_capacity", "server_max_connections",
                "controller_max_heartbeat_brokers", "controller_max_broker_sets", "controller_max_brokers_per_set",
                "mapped_file_size")
    for attr in positive:
        if getattr(config, attr) <= 0:
            raise ConfigError(f"{_JAVA_OF[attr]} ({source}): must be positive, got {getattr(config, attr)}")
    if not config.controller_d_leger_group:
        config.controller_d_leger_group = "DefaultControllerGroup"  # ours: DLedger needs a group name
    return config


class DoorRefused(Exception):
    """The settings would open a door of the controller: the message names the key to set."""


def check_doors(config: ControllerConfig, acl_accounts: Optional[dict[str, Any]]) -> list[str]:
    """Raise :class:`DoorRefused`, or return the warning lines to log at start.

    ``acl_accounts``: the loaded plain ACL's accounts (accessKey -> account with ``secret_key``),
    None without ACL."""
    warnings: list[str] = []
    host = config.bind_address
    if acl_accounts is not None:
        if not is_loopback(host):
            public = [k for k, a in acl_accounts.items() if getattr(a, "secret_key", None) in SAMPLE_SECRETS]
            if public:
                raise DoorRefused(f"{config.plain_acl_file}: account {public[0]} has the public sample secret from "
                                  f"conf/, and the controller would listen on {host}: set secrets of your own")
    elif config.controller_allow_insecure:
        warnings.append(f"controller door OPEN on {host}:{config.listen_port} (controllerAllowInsecure=true): "
                        "anyone who reaches it may elect masters and clean broker data")
    else:
        raise DoorRefused(f"the controller door {host}:{config.listen_port} would accept unsigned requests: set "
                          "aclEnable=true and plainAclFile=<plain_acl.yml> (brokers sign with their "
                          "AccessKey/SecretKey), or controllerAllowInsecure=true to run it open")
    token = config.controller_d_leger_auth_token
    peers = parse_peers(config.controller_d_leger_peers or "")
    off_host = [pid for pid, (h, _) in peers.items() if not is_loopback(h)]
    if token:
        if len(token) < MIN_SECRET_LENGTH:
            raise DoorRefused(f"controllerDLegerAuthToken has {len(token)} characters; use at least "
                              f"{MIN_SECRET_LENGTH} (the same on every controller)")
        if token in SAMPLE_SECRETS and off_host:
            raise DoorRefused(f"controllerDLegerAuthToken is the public sample secret and peer {off_host[0]} is not "
                              "on loopback: set a secret of your own on every controller")
    elif not config.controller_d_leger_allow_insecure:
        raise DoorRefused("the controllers' DLedger port has no shared secret: set controllerDLegerAuthToken=<secret> "
                          "(the same on every controller), or controllerDLegerAllowInsecure=true for a loopback-only "
                          "group")
    elif off_host:
        raise DoorRefused(f"controllerDLegerAllowInsecure=true is only for loopback-only groups and peer "
                          f"{off_host[0]} is not on loopback: set controllerDLegerAuthToken=<secret>")
    return warnings


__all__ = ["ConfigError", "ControllerConfig", "DoorRefused", "HOT_KEYS", "KEYS", "check_doors", "load_config",
           "nearest_key", "parse_config", "read_properties_file", "set_key", "validate"]
