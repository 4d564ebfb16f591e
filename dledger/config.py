"""DLedgerConfig: every setting of a DLedger member, with DLedger's names in Python spelling.

Rules
-----
* Field names follow ``DLedgerConfig.java`` (0.3.1.2) in snake case; :meth:`DLedgerConfig.
  from_dledger_properties` accepts DLedger's own camelCase keys, so an operator's settings carry
  over.
* Timing defaults aim at sub-second failover on a LAN (DESIGN §4.2), not DLedger's 2 s
  heartbeat / 6 s leak: heartbeat 100 ms, randomized election timeout 300-600 ms. Timing is
  expressed in milliseconds here; the server converts it to core ticks of ``tick_ms``.
* ``validate()`` names the offending field in a ``ValueError``; the CLI turns that into a one-line
  error, never a traceback.
* Doors (issue 12): :meth:`DLedgerConfig.check_auth` (run by ``DLedgerServer.start`` and the
  ``dledger server`` CLI) refuses a member without a shared secret (``auth_token`` /
  ``dLegerAuthToken``, >= 16 characters) unless ``allow_insecure`` (``dLegerAllowInsecure``) is
  set **and** every peer address is loopback. The loopback test is dledger's own
  (:func:`is_loopback`): dledger does not import the broker.
* ``serve_clients=False`` (set by the broker for a broker-hosted member): the port serves peers
  only; the client role is refused in the handshake.
* Identity (issue 13.7): ``group``, ``self_id``, ``broker_name`` (broker-hosted) and both file
  sizes are recorded in the store's ``identity`` file (:meth:`store_identity`) and the group,
  broker name and file sizes are compared with every peer in the handshake
  (:meth:`handshake_identity`). ``conf_keys`` maps those fields to the keys an operator edits
  (the broker passes ``dLegerGroup``, ``mappedFileSizeCommitLog``...); errors name them.
* ``first_data_offset`` (``-1`` = none) is where the data file list starts for a store upgraded in
  place (RocketMQ's ``dividedCommitlogOffset``); the file store uses it for its first file.

Theory of operation
-------------------
A plain dataclass; derived values (peer map, directories, quorum) are properties computed from
the fields so the dataclass stays the single source of truth.
"""
from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, fields
from typing import Any, Mapping, Optional

from .rpc.admission import PortLimits
from .rpc.framing import DEFAULT_MAX_FRAME_SIZE, parse_peers


MIN_SECRET_LENGTH = 16


class InsecureConfigError(ValueError):
    """The member would accept unauthenticated peers; the message names the fix."""


def is_loopback(host: str) -> bool:
    """True for ``localhost``, 127.0.0.0/8 and ``::1`` (no DNS lookups: a name is not loopback)."""
    h = host.strip().strip("[]").lower()
    if h == "localhost" or h.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


@dataclass
class DLedgerConfig:
    group: str = "default"
    self_id: str = "n0"
    peers: str = "n0-127.0.0.1:20911"
    store_base_dir: str = "/tmp/dledgerstore"
    data_store_path: Optional[str] = None
    mapped_file_size_for_entry_data: int = 1024 * 1024 * 1024
    mapped_file_size_for_entry_index: int = 32 * 5 * 1024 * 1024
    first_data_offset: int = -1

    # timing (ms)
    tick_ms: int = 10
    heartbeat_interval_ms: int = 100
    election_timeout_min_ms: int = 300
    election_timeout_max_ms: int = 600
    max_wait_ack_ms: int = 2500
    leadership_transfer_wait_timeout_ms: int = 1000
    preferred_leader_check_ms: int = 1000
    checkpoint_interval_ms: int = 3000

    # flow control / batching
    max_pending_requests: int = 10000
    enable_batch_push: bool = True
    max_batch_push_bytes: int = 1024 * 1024
    max_inflight_pushes: int = 64
    max_leadership_transfer_wait_index: int = 1000

    # integrity and security
    entry_crc: bool = True
    auth_token: Optional[str] = None
    # no auth_token: the member refuses to start unless this is set and every peer is loopback
    allow_insecure: bool = False
    # False inside a broker: the port serves peers only (no client append/read ops)
    serve_clients: bool = True
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    # port admission (issue 23.1; dledger.rpc.admission): accepted connections in all, those still
    # in their handshake (in all / per remote address), bytes of unfinished large frames
    max_connections: int = 1024
    max_unauthenticated: int = 64
    max_unauthenticated_per_host: int = 8
    max_pending_bytes: int = 128 * 1024 * 1024
    # silent peers (issue 24.5; dledger.rpc.liveness), 0 = derived from the timing above:
    # silence max(election_timeout_max_ms, 5 heartbeats), a dial (connect + handshake) at most
    # max(1000, silence) ms, TCP_USER_TIMEOUT max(2000, 2 x silence) ms
    peer_silence_timeout_ms: int = 0
    peer_dial_timeout_ms: int = 0
    tcp_user_timeout_ms: int = 0

    preferred_leader_ids: Optional[str] = None
    pre_vote: bool = True

    # identity (issue 13.7): recorded in the store's ``identity`` file and compared at handshake
    broker_name: Optional[str] = None  # brokerName of the hosting broker (None: standalone member)
    # field -> the configuration key an operator edits (errors name it); the broker passes its own
    conf_keys: Optional[dict[str, str]] = None

    # -- derived
    @property
    def peer_map(self) -> dict[str, tuple[str, int]]:
        return parse_peers(self.peers)

    @property
    def peer_ids(self) -> list[str]:
        return list(self.peer_map)

    @property
    def preferred_leaders(self) -> list[str]:
        if not self.preferred_leader_ids:
            return []
        return [p.strip() for p in self.preferred_leader_ids.split(";") if p.strip()]

    @property
    def default_path(self) -> str:
        return os.path.join(self.store_base_dir, f"dledger-{self.self_id}")

    @property
    def data_dir(self) -> str:
        return self.data_store_path or os.path.join(self.default_path, "data")

    @property
    def index_dir(self) -> str:
        return os.path.join(self.default_path, "index")

    def address_of(self, peer_id: Optional[str]) -> Optional[str]:
        if peer_id is None:
            return None
        addr = self.peer_map.get(peer_id)
        return f"{addr[0]}:{addr[1]}" if addr else None

    # names of the settings in the standalone ``dledger server`` (a broker passes ``conf_keys``)
    _CLI_KEYS = {
        "group": "--group (group)", "self_id": "--id (selfId)", "broker_name": "brokerName",
        "data_file_size": "--data-file-size (mappedFileSizeForEntryData)",
        "index_file_size": "--index-file-size (mappedFileSizeForEntryIndex)", "store": "--store (storeBaseDir)",
    }

    def conf_key(self, name: str) -> str:
        """The configuration key behind identity field ``name`` (for error messages)."""
        return (self.conf_keys or {}).get(name) or self._CLI_KEYS.get(name, name)

    def store_identity(self) -> Any:
        """What the store's ``identity`` file records (:mod:`dledger.store.identity`)."""
        from .store.identity import StoreIdentity

        return StoreIdentity(self.group, self.self_id, self.mapped_file_size_for_entry_data,
                             self.mapped_file_size_for_entry_index, self.broker_name)

    def handshake_identity(self) -> dict[str, Any]:
        """Fields every peer must agree on, exchanged and MACed in the handshake (issue 13.7):
        ``{name: (value, conf key)}``; the group is checked by the handshake itself."""
        out: dict[str, Any] = {
            "data_file_size": (self.mapped_file_size_for_entry_data, self.conf_key("data_file_size")),
            "index_file_size": (self.mapped_file_size_for_entry_index, self.conf_key("index_file_size")),
        }
        if self.broker_name is not None:
            out["broker_name"] = (self.broker_name, self.conf_key("broker_name"))
        return out

    def port_limits(self) -> PortLimits:
        """The admission limits of this member's port (:mod:`dledger.rpc.admission`)."""
        return PortLimits(self.max_connections, self.max_unauthenticated, self.max_unauthenticated_per_host,
                          self.max_pending_bytes)

    def link_timeouts(self) -> dict[str, Any]:
        """The peer transport's liveness settings (:mod:`dledger.rpc.liveness`), defaults derived."""
        silence = self.peer_silence_timeout_ms or max(self.election_timeout_max_ms, 5 * self.heartbeat_interval_ms)
        return {"silence_s": silence / 1000.0,
                "dial_timeout_s": (self.peer_dial_timeout_ms or max(1000, silence)) / 1000.0,
                "tcp_user_timeout_ms": self.tcp_user_timeout_ms or max(2000, 2 * silence)}

    def validate(self) -> "DLedgerConfig":
        peers = self.peer_map  # raises ValueError with a readable message
        if self.self_id not in peers:
            raise ValueError(f"self_id {self.self_id!r} is not in peers ({', '.join(peers)})")
        for p in self.preferred_leaders:
            if p not in peers:
                raise ValueError(f"preferred leader {p!r} is not in peers ({', '.join(peers)})")
        if not self.group:
            raise ValueError("group must not be empty")
        positive = ("tick_ms", "heartbeat_interval_ms", "election_timeout_min_ms", "max_wait_ack_ms",
                    "max_pending_requests", "max_batch_push_bytes", "max_inflight_pushes", "max_frame_size",
                    "max_connections", "max_unauthenticated", "max_unauthenticated_per_host", "max_pending_bytes")
        for name in positive:
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in ("peer_silence_timeout_ms", "peer_dial_timeout_ms", "tcp_user_timeout_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (0: derived), got {getattr(self, name)}")
        if self.election_timeout_max_ms < self.election_timeout_min_ms:
            raise ValueError("election_timeout_max_ms must be >= election_timeout_min_ms")
        if self.heartbeat_interval_ms >= self.election_timeout_min_ms:
            raise ValueError("heartbeat_interval_ms must be below election_timeout_min_ms")
        if self.tick_ms > self.heartbeat_interval_ms:
            raise ValueError("tick_ms must not exceed heartbeat_interval_ms")
        if self.mapped_file_size_for_entry_index % 32:
            raise ValueError("mapped_file_size_for_entry_index must be a multiple of 32")
        return self

    def check_auth(self) -> "DLedgerConfig":
        """Raise :class:`InsecureConfigError` unless peers must authenticate (see module rules)."""
        where = f"DLedger member {self.self_id} of group {self.group}"
        if self.auth_token:
            if len(self.auth_token) < MIN_SECRET_LENGTH:
                raise InsecureConfigError(
                    f"{where}: the shared secret (--auth-token / dLegerAuthToken) has {len(self.auth_token)} "
                    f"characters; use at least {MIN_SECRET_LENGTH}")
            return self
        if not self.allow_insecure:
            raise InsecureConfigError(
                f"{where} has no shared secret, so anyone reaching its port could vote and append: set "
                "--auth-token / dLegerAuthToken=<secret> (the same on every member), or --allow-insecure / "
                "dLegerAllowInsecure=true for a loopback-only group")
        for pid, (host, _port) in self.peer_map.items():
            if not is_loopback(host):
                raise InsecureConfigError(
                    f"{where}: peer {pid} at {host} is not on loopback, and --allow-insecure / "
                    "dLegerAllowInsecure=true is only for loopback-only groups: set --auth-token / "
                    "dLegerAuthToken=<secret> (the same on every member)")
        return self

    # -- DLedger's own key names
    _JAVA_KEYS = {
        "group": "group", "selfId": "self_id", "peers": "peers", "storeBaseDir": "store_base_dir",
        "dataStorePath": "data_store_path", "mappedFileSizeForEntryData": "mapped_file_size_for_entry_data",
        "mappedFileSizeForEntryIndex": "mapped_file_size_for_entry_index",
        "heartBeatTimeIntervalMs": "heartbeat_interval_ms", "maxWaitAckTimeMs": "max_wait_ack_ms",
        "maxPendingRequestsNum": "max_pending_requests", "isEnableBatchPush": "enable_batch_push",
        "maxBatchPushSize": "max_batch_push_bytes", "preferredLeaderIds": "preferred_leader_ids",
        "leadershipTransferWaitTimeout": "leadership_transfer_wait_timeout_ms",
        "maxLeadershipTransferWaitIndex": "max_leadership_transfer_wait_index",
        "checkPointInterval": "checkpoint_interval_ms",
    }

    @classmethod
    def from_settings(cls, settings: Mapping[str, object]) -> "DLedgerConfig":
        """From snake_case names (a broker's ``MessageStoreConfig.dledger_settings()``); an unknown
        name is a ``TypeError`` naming it, as the constructor's."""
        kwargs: dict[str, Any] = dict(settings)
        return cls(**kwargs)

    @classmethod
    def from_dledger_properties(cls, props: dict[str, str], **overrides: Any) -> "DLedgerConfig":
        """Build from DLedger camelCase keys (unknown keys raise ``ValueError``)."""
        types = {f.name: f.type for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, raw in props.items():
            name = cls._JAVA_KEYS.get(key)
            if name is None:
                raise ValueError(f"unknown DLedger key {key!r}")
            kind = str(types[name])
            if "bool" in kind:
                kwargs[name] = str(raw).strip().lower() == "true"
            elif "int" in kind:
                kwargs[name] = int(raw)
            else:
                kwargs[name] = raw
        kwargs.update(overrides)
        return cls(**kwargs)
