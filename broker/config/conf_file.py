"""Broker ``.conf`` files: Java-properties text <-> the typed model of :mod:`broker.config.broker_config`.

Rules:
- Syntax is ``java.util.Properties.load``: ``key=value``, ``key:value`` or ``key value``;
  ``#``/``!`` comment lines; a line ending in an odd number of backslashes continues on the next
  (whose leading whitespace is dropped); escapes ``\\t \\n \\r \\f \\uXXXX`` and ``\\<c>`` -> ``c``;
  whitespace around keys and before values is dropped. Java reads the file as ISO-8859-1; we
  read UTF-8 (falling back to ISO-8859-1), and :func:`to_conf` writes non-ASCII as ``\\uXXXX``
  so both agree. Unlike Java we also drop trailing whitespace of values (Java would fail to
  parse ``10911 `` as an int and silently ignore the key).
- A key we implement is converted strictly (int, bool ``true``/``false``, enum names); a bad
  value is a :class:`ConfigError` naming key, file and line. A key Apache RocketMQ knows but we
  do not use (broker/config/config_keys.py) is accepted with one warning line. Any other key is a
  typo: :class:`ConfigError` naming key, file and line and the nearest known key.
- DLedger keys are validated when ``enableDLegerCommitLog=true``: ``dLegerSelfId`` is a letter
  followed by digits and appears in ``dLegerPeers`` (``n0-host:port;n1-host:port``); our
  ``dLegerPeersHttp`` (same form, each peer's HTTP API) must list the same ids and this node's
  own HTTP port.

Theory of operation: ``broker.config.java_properties.parse_properties`` yields ``(key, value, line)``
triples; :func:`parse_conf` routes each to the dataclass owning the key, converts it, remembers
where it came from (for later error messages), applies the derived defaults and validates.
:func:`to_conf` is the inverse, used by the upgrade tool to write node conf files.
"""
from __future__ import annotations

import logging
import os
import re
import typing
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any

from broker.config.broker_config import (
    _PEER_ID, FIELD_BY_KEY, BrokerConfig, BrokerRole, MessageStoreConfig, Owner,
)
from broker.config.config_keys import APACHE_KEYS
from broker.config.java_properties import ConfigError, escape_property, nearest_key_hint, parse_properties

__all__ = ["ConfigError", "KNOWN_KEYS", "ParsedConf", "load_conf", "parse_conf", "to_conf", "to_properties",
           "validate_conf"]

log = logging.getLogger("broker.config")


#: Spellings we read as another key (Apache's field is spelt "Maped"; people write "Mapped").
KEY_ALIASES = {"warmMappedFileEnable": "warmMapedFileEnable"}
_ELECTION_KEY = "dLegerElectionTimeoutMs"  # "300" (300..600) or "300-600"
KNOWN_KEYS = frozenset(FIELD_BY_KEY) | frozenset(KEY_ALIASES) | {_ELECTION_KEY} | APACHE_KEYS




def _convert(kind: Any, raw: str, where: str) -> Any:
    value = raw.strip()
    args = typing.get_args(kind)
    if args and type(None) in args:  # Optional[X]
        if value == "":
            return None
        kind = next(a for a in args if a is not type(None))
    if kind is bool:
        if value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise ConfigError(f"{where}: expected true or false, got {raw!r}")
    if kind is int:
        if re.fullmatch(r"[+-]?\d+", value):
            return int(value)
        raise ConfigError(f"{where}: expected an integer, got {raw!r}")
    if isinstance(kind, type) and issubclass(kind, Enum):
        try:
            return kind[value.upper()]
        except KeyError:
            names = ", ".join(m.name for m in kind)
            raise ConfigError(f"{where}: expected one of {names}, got {raw!r}") from None
    return value


_HINTS: dict[Owner, dict[str, Any]] = {
    BrokerConfig: typing.get_type_hints(BrokerConfig),
    MessageStoreConfig: typing.get_type_hints(MessageStoreConfig),
}


@dataclass
class ParsedConf:
    """The typed content of one ``.conf`` file."""

    broker: BrokerConfig
    store: MessageStoreConfig
    source: str = "<defaults>"
    warnings: list[str] = field(default_factory=list)
    #: conf key -> line it was set on (for later error messages)
    lines: dict[str, int] = field(default_factory=dict)

    def where(self, key: str) -> str:
        line = self.lines.get(key)
        return f"{key} ({self.source}:{line})" if line else f"{key} ({self.source})"


def _suggest(key: str) -> str:
    return nearest_key_hint(key, KNOWN_KEYS)


def parse_conf(text: str, source: str = "<string>", *, validate: bool = True) -> ParsedConf:
    """Parse ``.conf`` text; raises ConfigError for typos and bad values."""
    conf = ParsedConf(BrokerConfig(), MessageStoreConfig(), source)
    for key, raw, line in parse_properties(text, source):
        where = f"{key} ({source}:{line})"
        key = KEY_ALIASES.get(key, key)
        if key == _ELECTION_KEY:
            m = re.fullmatch(r"\s*(\d+)\s*(?:[-,]\s*(\d+)\s*)?", raw)
            if not m:
                raise ConfigError(f"{where}: expected <ms> or <min>-<max>, got {raw!r}")
            lo = int(m.group(1))
            conf.store.dleger_election_timeout_min_ms = lo
            conf.store.dleger_election_timeout_max_ms = int(m.group(2)) if m.group(2) else 2 * lo
            conf.lines[key] = line
            continue
        target = FIELD_BY_KEY.get(key)
        if target is None:
            if key in APACHE_KEYS:
                msg = f"{where}: Apache RocketMQ key not used by this broker, ignored"
                log.warning(msg)
                conf.warnings.append(msg)
                continue
            raise ConfigError(f"unknown key {key!r} at {source}:{line}{_suggest(key)}")
        cls, name = target
        obj = conf.broker if cls is BrokerConfig else conf.store
        setattr(obj, name, _convert(_HINTS[cls][name], raw, where))
        conf.lines[key] = line
    if conf.store.ha_listen_port == 0:
        conf.store.ha_listen_port = conf.broker.listen_port + 1
    if conf.store.store_path_commit_log is None:
        conf.store.store_path_commit_log = str(conf.store.commit_log_dir)
    if validate:
        validate_conf(conf)
    return conf


def load_conf(path: str | os.PathLike[str], *, validate: bool = True) -> ParsedConf:
    """Read and parse a ``.conf`` file (UTF-8, else ISO-8859-1 as Java reads it)."""
    raw = Path(path).read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("iso-8859-1")
    return parse_conf(text, str(path), validate=validate)


def validate_conf(conf: ParsedConf) -> None:
    """Cross-key checks RocketMQ does at start-up (and a few it should)."""
    b, s = conf.broker, conf.store
    for key, port in (("listenPort", b.listen_port), ("haListenPort", s.ha_listen_port)):
        if not 0 < port < 65536:
            raise ConfigError(f"{conf.where(key)}: port {port} out of range 1..65535")
    if not 0 <= b.http_listen_port < 65536:
        raise ConfigError(f"{conf.where('httpListenPort')}: port {b.http_listen_port} out of range")
    if s.mapped_file_size_consume_queue <= 0 or s.mapped_file_size_consume_queue % 20:
        raise ConfigError(f"{conf.where('mappedFileSizeConsumeQueue')}: must be a positive multiple of 20")
    if s.mapped_file_size_commit_log <= 0:
        raise ConfigError(f"{conf.where('mappedFileSizeCommitLog')}: must be positive")
    s.delay_level_table  # noqa: B018 - raises ConfigError on a malformed level list
    if b.slave_sync_interval_ms <= 0:
        raise ConfigError(f"{conf.where('slaveSyncIntervalMs')}: must be positive")
    if b.enable_slave_acting_master:
        # Apache 5's RIP-32 (a slave serves pops, queue locks and the delay/transaction escape while
        # its master is down) is not built: refused rather than read and ignored, so a broker never
        # looks as if it does what its conf asks
        raise ConfigError(f"{conf.where('enableSlaveActingMaster')}: not supported by this broker (RIP-32 is not "
                          "implemented); set enableSlaveActingMaster=false: in Controller mode the controller "
                          "elects a new master instead (typically well under a second)")
    if b.enable_controller_mode:
        _validate_controller_mode(conf)
    if not s.enable_dleger_commit_log:
        if s.broker_role is BrokerRole.SLAVE and b.broker_id <= 0 and not b.enable_controller_mode:
            raise ConfigError(f"{conf.where('brokerId')}: a SLAVE's brokerId must be > 0 (got {b.broker_id})")
        return
    if not s.dleger_group:
        raise ConfigError(f"{conf.where('dLegerGroup')}: required when enableDLegerCommitLog=true")
    try:
        peers = s.dledger_peer_map()
    except ValueError as exc:
        raise ConfigError(f"{conf.where('dLegerPeers')}: {exc}") from None
    if not s.dleger_self_id or not _PEER_ID.fullmatch(s.dleger_self_id):
        raise ConfigError(
            f"{conf.where('dLegerSelfId')}: must be a letter followed by digits (e.g. n0), got {s.dleger_self_id!r}"
        )
    if s.dleger_self_id not in peers:
        raise ConfigError(f"{conf.where('dLegerSelfId')}: {s.dleger_self_id!r} is not in dLegerPeers ({', '.join(peers)})")
    if s.preferred_leader_id and s.preferred_leader_id not in peers:
        raise ConfigError(f"{conf.where('preferredLeaderId')}: {s.preferred_leader_id!r} is not in dLegerPeers")
    if s.duplication_enable:
        raise ConfigError(f"{conf.where('duplicationEnable')}: must be false with enableDLegerCommitLog=true")
    if s.dleger_heartbeat_interval_ms <= 0 or s.dleger_election_timeout_min_ms <= s.dleger_heartbeat_interval_ms:
        raise ConfigError(f"{conf.where('dLegerHeartbeatIntervalMs')}: must be positive and below the election timeout")
    if s.dleger_election_timeout_max_ms < s.dleger_election_timeout_min_ms:
        raise ConfigError(f"{conf.where('dLegerElectionTimeoutMaxMs')}: below dLegerElectionTimeoutMinMs")
    try:
        http_peers = s.dledger_http_peer_map()
    except ValueError as exc:
        raise ConfigError(f"{conf.where('dLegerPeersHttp')}: {exc}") from None
    if http_peers and set(http_peers) != set(peers):
        raise ConfigError(f"{conf.where('dLegerPeersHttp')}: ids {', '.join(http_peers)} differ from dLegerPeers "
                          f"({', '.join(peers)}); list every peer's HTTP API address once")
    own = http_peers.get(s.dleger_self_id)
    if own is not None and int(own.rpartition(":")[2]) != b.api_listen_port:
        raise ConfigError(f"{conf.where('dLegerPeersHttp')}: this node's entry {s.dleger_self_id}-{own} does not use "
                          f"its own HTTP port {b.api_listen_port} (httpListenPort, else listenPort)")


def _validate_controller_mode(conf: ParsedConf) -> None:
    """``enableControllerMode=true`` (broker/controller_mode.py): the keys it needs, and no DLedger."""
    b, s = conf.broker, conf.store
    if s.enable_dleger_commit_log:
        raise ConfigError(f"{conf.where('enableControllerMode')}: Controller mode replaces DLedger mode: set "
                          "enableDLegerCommitLog=false (a DLedger store is migrated with `mqupgrade plan/apply`)")
    if b.fetch_controller_addr_by_dns_lookup:
        raise ConfigError(f"{conf.where('fetchControllerAddrByDnsLookup')}: not supported; list the controllers "
                          "in controllerAddr=host:port;host:port and set fetchControllerAddrByDnsLookup=false")
    addrs = [a.strip() for a in b.controller_addr.split(";") if a.strip()]
    if not addrs:
        raise ConfigError(f"{conf.where('controllerAddr')}: required with enableControllerMode=true "
                          "(the controllers' doors, host:port;host:port)")
    for a in addrs:
        host, _, port = a.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"{conf.where('controllerAddr')}: {a!r} is not host:port")
    for key, value in (("minInSyncReplicas", s.min_in_sync_replicas), ("inSyncReplicas", s.in_sync_replicas),
                       ("brokerHeartbeatInterval", b.broker_heartbeat_interval),
                       ("syncBrokerMetadataPeriod", b.sync_broker_metadata_period),
                       ("checkSyncStateSetPeriod", b.check_sync_state_set_period),
                       ("syncControllerMetadataPeriod", b.sync_controller_metadata_period),
                       ("controllerHeartBeatTimeoutMills", b.controller_heart_beat_timeout_mills)):
        if value <= 0:
            raise ConfigError(f"{conf.where(key)}: must be positive (got {value})")
    if bool(b.controller_access_key) != bool(b.controller_secret_key):
        raise ConfigError(f"{conf.where('controllerAccessKey')}: controllerAccessKey and controllerSecretKey go "
                          "together (an account of the controllers' plain_acl.yml)")


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Enum):
        return value.name
    return str(value)


def to_properties(broker: BrokerConfig, store: MessageStoreConfig, *, only_changed: bool = False) -> dict[str, str]:
    """``{key: text}`` of every field (``None`` fields omitted); ``only_changed`` drops defaults."""
    out: dict[str, str] = {}
    for obj, fresh in ((broker, BrokerConfig()), (store, MessageStoreConfig())):
        for f in fields(obj):
            value = getattr(obj, f.name)
            if value is None or (only_changed and value == getattr(fresh, f.name)):
                continue
            out[f.metadata["key"]] = _format(value)
    return out


def to_conf(
    broker: BrokerConfig, store: MessageStoreConfig, *, only_changed: bool = False, header: str = ""
) -> str:
    """A ``.conf`` that :func:`parse_conf` (and Apache RocketMQ, for its keys) reads back equal."""
    lines = [f"# {h}" for h in header.splitlines()]
    for key, value in to_properties(broker, store, only_changed=only_changed).items():
        lines.append(f"{escape_property(key, True)}={escape_property(value, False)}")
    return "\n".join(lines) + "\n"
