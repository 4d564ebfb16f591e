"""Broker configuration model: typed BrokerConfig / MessageStoreConfig with RocketMQ's key names.

Rules:
- Key names are RocketMQ's (``MixAll.properties2Object``: setter name without ``set``, first
  letter lower-cased). Python fields are their snake_case spelling; every field carries its key
  in ``metadata["key"]``; :data:`FIELD_BY_KEY` maps back.
- Store paths derive from ``storePathRootDir`` as in RocketMQ's getters and
  ``StorePathConfigHelper``; ``haListenPort`` defaults to ``listenPort + 1`` (BrokerStartup);
  our HTTP API listens on ``httpListenPort``, default ``listenPort`` (then that one port speaks
  both RocketMQ remoting and HTTP, told apart by the first byte; see ``broker.remoting``).
- ``dLegerPeers``/``dLegerPeersHttp`` are ``n0-host:port;n1-host:port`` (:func:`parse_dleger_peers`).

Theory of operation: the dataclasses are plain values with defaults equal to Apache's; reading
and writing ``.conf`` files (syntax, conversion, typo detection, cross-key validation) is
:mod:`broker.config.conf_file`, one idea per module.
"""
from __future__ import annotations

import logging
import os
import re
import socket
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any, Optional, Union

from broker.config.java_properties import ConfigError  # noqa: F401 - raised by the model's derived values

log = logging.getLogger(__name__)


class BrokerRole(str, Enum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


class FlushDiskType(str, Enum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


# ---- the config dataclasses -----------------------------------------------------------------
def _key(key: str, default: Any = None, *, factory: Any = None, ours: bool = False) -> Any:
    """A field bound to its conf key; ``ours`` marks keys Apache RocketMQ does not have."""
    meta = {"key": key, "ours": ours}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def _local_address() -> str:
    """RemotingUtil.getLocalAddress, roughly: the host's address, else loopback."""
    try:
        addr = socket.gethostbyname(socket.gethostname())
        return addr if not addr.startswith("127.") else "127.0.0.1"
    except OSError:
        return "127.0.0.1"


def _host_name() -> str:
    try:
        return socket.gethostname() or "DEFAULT_BROKER"
    except OSError:
        return "DEFAULT_BROKER"


@dataclass
class BrokerConfig:
    """BrokerConfig + NettyServerConfig keys this project uses (RocketMQ defaults)."""

    rocketmq_home: Optional[str] = _key("rocketmqHome", factory=lambda: os.environ.get("ROCKETMQ_HOME"))
    namesrv_addr: Optional[str] = _key("namesrvAddr", factory=lambda: os.environ.get("NAMESRV_ADDR"))
    broker_ip1: str = _key("brokerIP1", factory=_local_address)
    broker_ip2: str = _key("brokerIP2", factory=_local_address)
    broker_name: str = _key("brokerName", factory=_host_name)
    broker_cluster_name: str = _key("brokerClusterName", "DefaultCluster")
    broker_id: int = _key("brokerId", 0)
    broker_permission: int = _key("brokerPermission", 6)
    default_topic_queue_nums: int = _key("defaultTopicQueueNums", 8)
    auto_create_topic_enable: bool = _key("autoCreateTopicEnable", True)
    cluster_topic_enable: bool = _key("clusterTopicEnable", True)
    broker_topic_enable: bool = _key("brokerTopicEnable", True)
    auto_create_subscription_group: bool = _key("autoCreateSubscriptionGroup", True)
    flush_consumer_offset_interval: int = _key("flushConsumerOffsetInterval", 5000)
    slave_read_enable: bool = _key("slaveReadEnable", False)
    notify_consumer_ids_changed_enable: bool = _key("notifyConsumerIdsChangedEnable", True)
    region_id: str = _key("regionId", "DefaultRegion")
    listen_port: int = _key("listenPort", 10911)
    http_listen_port: int = _key("httpListenPort", 0, ours=True)  # 0: same as listenPort
    # slave metadata sync period (RocketMQ: 10 s, fixed); also used by DLedger followers
    slave_sync_interval_ms: int = _key("slaveSyncIntervalMs", 10_000, ours=True)
    # a send whose topic + UNIQ_KEYs were stored in this window is answered, not stored again
    # (a producer's retry after an unknown outcome; broker/put_dedup.py); 0 turns it off
    send_dedup_window_seconds: int = _key("sendDedupWindowSeconds", 60, ours=True)
    # a DLedger follower passes a client's send to the leader and relays its answer, so a leader
    # change costs a client with a stale route no failed send (broker/remoting/forward.py)
    forward_sends_to_leader: bool = _key("forwardSendsToLeader", True, ours=True)
    # the orderly shutdown's whole budget; a step that overruns is abandoned and logged by name,
    # and the process exits with code 5 at most 5 s after it (broker/shutdown.py)
    shutdown_timeout_millis: int = _key("shutdownTimeoutMillis", 10_000, ours=True)
    # remoting (RocketMQ clients) on listenPort: name server registration, long polling, ACL
    register_name_server_period: int = _key("registerNameServerPeriod", 30_000)
    register_broker_timeout_mills: int = _key("registerBrokerTimeoutMills", 6000)
    long_polling_enable: bool = _key("longPollingEnable", True)
    # transactions (broker/transaction.py): check-back of half messages older than transactionTimeOut
    transaction_timeout: int = _key("transactionTimeOut", 6000)
    transaction_check_max: int = _key("transactionCheckMax", 15)
    transaction_check_interval: int = _key("transactionCheckInterval", 60_000)
    reject_transaction_message: bool = _key("rejectTransactionMessage", False)
    short_polling_time_mills: int = _key("shortPollingTimeMills", 1000)
    acl_enable: bool = _key("aclEnable", False)
    plain_acl_file: Optional[str] = _key("plainAclFile", ours=True)  # None: <rocketmqHome>/conf/plain_acl.yml
    # the plain_acl.yml account this broker signs its broker-to-broker calls with (a slave's
    # metadata sync from its master); RocketMQ 5.3 calls it innerClientAuthenticationCredentials
    inner_access_key: Optional[str] = _key("innerAccessKey", ours=True)
    inner_secret_key: Optional[str] = _key("innerSecretKey", ours=True)
    # aclEnable=true: GET /metrics also accepts "Authorization: Bearer <token>" (Prometheus)
    metrics_bearer_token: Optional[str] = _key("metricsBearerToken", ours=True)
    # ---- doors (broker/security_policy.py): where listenPort binds and what it lets in
    # RocketMQ 5's NettyServerConfig key; also the HTTP port's address when httpListenPort is split
    bind_address: str = _key("bindAddress", "0.0.0.0")
    # listenPort (remoting + HTTP) without aclEnable=true refuses to start unless this is set
    remoting_allow_insecure: bool = _key("remotingAllowInsecure", False, ours=True)
    # idle connections on listenPort are closed after this (Apache's key; RocketMQ default 120 s)
    server_channel_max_idle_time_seconds: int = _key("serverChannelMaxIdleTimeSeconds", 120)
    # a connection that starts a frame / HTTP head and does not finish it in this time is closed
    server_read_timeout_millis: int = _key("serverReadTimeoutMillis", 30_000, ours=True)
    # at most this many open connections on listenPort; more are closed at once
    server_max_connections: int = _key("serverMaxConnections", 1024, ours=True)
    # bytes of incomplete frames held for all connections of listenPort together
    server_max_pending_bytes: int = _key("serverMaxPendingBytes", 64 * 1024 * 1024, ours=True)
    # at most this many messages in one batch send (HTTP or remoting); bytes are capped by maxMessageSize
    max_batch_message_count: int = _key("maxBatchMessageCount", 4096, ours=True)
    # per-pull caps (issue 23.5, broker/store/transfer_limits.py): Apache's MessageStoreConfig keys
    # and defaults, kept here because the store reads them through its broker_config
    max_transfer_bytes_on_message_in_memory: int = _key("maxTransferBytesOnMessageInMemory", 256 * 1024)
    max_transfer_count_on_message_in_memory: int = _key("maxTransferCountOnMessageInMemory", 32)
    max_transfer_bytes_on_message_in_disk: int = _key("maxTransferBytesOnMessageInDisk", 64 * 1024)
    max_transfer_count_on_message_in_disk: int = _key("maxTransferCountOnMessageInDisk", 8)
    access_message_in_memory_max_ratio: int = _key("accessMessageInMemoryMaxRatio", 40)
    # the HTTP pull's byte cap (its count is maxCount, at most 1024); at least one message always
    http_pull_max_bytes: int = _key("httpPullMaxBytes", 4 * 1024 * 1024, ours=True)
    # long polling (broker/remoting/processors/pull.py): a held pull waits at most this long
    # whatever suspendTimeoutMillis asks, and at most this many are held per connection / in all;
    # beyond, a pull is answered SYSTEM_BUSY at once (a Java consumer retries 3 s later)
    long_polling_max_suspend_millis: int = _key("longPollingMaxSuspendMillis", 30_000, ours=True)
    long_polling_max_held_per_connection: int = _key("longPollingMaxHeldPerConnection", 1024, ours=True)
    long_polling_max_held: int = _key("longPollingMaxHeld", 8192, ours=True)
    long_polling_max_held_bytes: int = _key("longPollingMaxHeldBytes", 16 * 1024 * 1024, ours=True)
    # ---- Controller mode (RIP-44; broker/controller_mode.py): Apache 5.3.3's BrokerConfig keys and defaults
    enable_controller_mode: bool = _key("enableControllerMode", False)
    controller_addr: str = _key("controllerAddr", "")  # host:port;host:port (the controllers' doors)
    fetch_controller_addr_by_dns_lookup: bool = _key("fetchControllerAddrByDnsLookup", False)  # true: refused
    sync_broker_metadata_period: int = _key("syncBrokerMetadataPeriod", 5000)
    check_sync_state_set_period: int = _key("checkSyncStateSetPeriod", 5000)
    sync_controller_metadata_period: int = _key("syncControllerMetadataPeriod", 10_000)
    controller_heart_beat_timeout_mills: int = _key("controllerHeartBeatTimeoutMills", 10_000)
    broker_heartbeat_interval: int = _key("brokerHeartbeatInterval", 1000)
    broker_election_priority: int = _key("brokerElectionPriority", 2 ** 31 - 1)
    enable_slave_acting_master: bool = _key("enableSlaveActingMaster", False)  # true is refused (conf_file)
    # the account this broker signs its controller calls with (the controllers' plain_acl.yml);
    # unset: innerAccessKey/innerSecretKey
    controller_access_key: Optional[str] = _key("controllerAccessKey", ours=True)
    controller_secret_key: Optional[str] = _key("controllerSecretKey", ours=True)

    @property
    def api_listen_port(self) -> int:
        return self.http_listen_port or self.listen_port


_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


@dataclass
class MessageStoreConfig:
    """MessageStoreConfig keys this project uses (RocketMQ 4.9.8 defaults) and our DLedger timing."""

    store_path_root_dir: str = _key("storePathRootDir", factory=lambda: os.path.join(os.path.expanduser("~"), "store"))
    store_path_commit_log: Optional[str] = _key("storePathCommitLog")  # None: <root>/commitlog
    store_path_dledger_commit_log: Optional[str] = _key("storePathDLedgerCommitLog")
    read_only_commit_log_store_paths: Optional[str] = _key("readOnlyCommitLogStorePaths")
    mapped_file_size_commit_log: int = _key("mappedFileSizeCommitLog", 1024 * 1024 * 1024)
    mapped_file_size_consume_queue: int = _key("mappedFileSizeConsumeQueue", 300_000 * 20)
    flush_interval_commit_log: int = _key("flushIntervalCommitLog", 500)
    flush_commit_log_timed: bool = _key("flushCommitLogTimed", True)
    flush_interval_consume_queue: int = _key("flushIntervalConsumeQueue", 1000)
    clean_resource_interval: int = _key("cleanResourceInterval", 10_000)
    delete_commit_log_files_interval: int = _key("deleteCommitLogFilesInterval", 100)
    delete_consume_queue_files_interval: int = _key("deleteConsumeQueueFilesInterval", 100)
    delete_when: str = _key("deleteWhen", "04")
    disk_max_used_space_ratio: int = _key("diskMaxUsedSpaceRatio", 75)
    file_reserved_time: int = _key("fileReservedTime", 72)
    max_message_size: int = _key("maxMessageSize", 4 * 1024 * 1024)
    check_crc_on_recover: bool = _key("checkCRCOnRecover", True)
    # every record a read serves is checked by its CRCs first (broker.store.verify, issue 13.3)
    check_crc_on_read: bool = _key("checkCRCOnRead", True, ours=True)
    flush_commit_log_least_pages: int = _key("flushCommitLogLeastPages", 4)
    flush_consume_queue_least_pages: int = _key("flushConsumeQueueLeastPages", 2)
    flush_commit_log_thorough_interval: int = _key("flushCommitLogThoroughInterval", 10_000)
    flush_consume_queue_thorough_interval: int = _key("flushConsumeQueueThoroughInterval", 60_000)
    message_index_enable: bool = _key("messageIndexEnable", True)
    max_hash_slot_num: int = _key("maxHashSlotNum", 5_000_000)
    max_index_num: int = _key("maxIndexNum", 20_000_000)
    max_msgs_num_batch: int = _key("maxMsgsNumBatch", 64)
    message_index_safe: bool = _key("messageIndexSafe", False)
    ha_listen_port: int = _key("haListenPort", 0)  # 0: listenPort + 1 (BrokerStartup)
    ha_send_heartbeat_interval: int = _key("haSendHeartbeatInterval", 5000)
    ha_housekeeping_interval: int = _key("haHousekeepingInterval", 20_000)
    ha_transfer_batch_size: int = _key("haTransferBatchSize", 32 * 1024)
    ha_master_address: Optional[str] = _key("haMasterAddress")
    # HA authentication (ours): the master and its slaves share this secret; without it the HA
    # port refuses to start unless haAllowInsecure=true (broker/security_policy.py)
    ha_auth_token: Optional[str] = _key("haAuthToken", ours=True)
    ha_allow_insecure: bool = _key("haAllowInsecure", False, ours=True)
    ha_bind_address: Optional[str] = _key("haBindAddress", ours=True)  # None: bindAddress
    ha_slave_fallbehind_max: int = _key("haSlaveFallbehindMax", 256 * 1024 * 1024)
    broker_role: BrokerRole = _key("brokerRole", BrokerRole.ASYNC_MASTER)
    flush_disk_type: FlushDiskType = _key("flushDiskType", FlushDiskType.ASYNC_FLUSH)
    sync_flush_timeout: int = _key("syncFlushTimeout", 5000)
    slave_timeout: int = _key("slaveTimeout", 3000)
    message_delay_level: str = _key("messageDelayLevel", _DELAY_LEVELS)
    flush_delay_offset_interval: int = _key("flushDelayOffsetInterval", 10_000)
    clean_file_forcibly_enable: bool = _key("cleanFileForciblyEnable", True)
    warm_mapped_file_enable: bool = _key("warmMapedFileEnable", False)
    duplication_enable: bool = _key("duplicationEnable", False)
    os_page_cache_busy_timeout_mills: int = _key("osPageCacheBusyTimeOutMills", 1000)
    default_query_max_num: int = _key("defaultQueryMaxNum", 32)
    auto_message_version_on_topic_len: bool = _key("autoMessageVersionOnTopicLen", True)
    recheck_reput_offset_from_cq: bool = _key("recheckReputOffsetFromCq", False)
    # DLedger (RocketMQ keys)
    enable_dleger_commit_log: bool = _key("enableDLegerCommitLog", False)
    dleger_group: Optional[str] = _key("dLegerGroup")
    dleger_peers: Optional[str] = _key("dLegerPeers")
    dleger_self_id: Optional[str] = _key("dLegerSelfId")
    preferred_leader_id: Optional[str] = _key("preferredLeaderId")
    # Apache defaults to false (one entry per push); we batch by default: it is the hot path.
    enable_batch_push: bool = _key("enableBatchPush", True)
    # DLedger timing and integrity (our keys; DESIGN §4.2-4.3)
    dleger_heartbeat_interval_ms: int = _key("dLegerHeartbeatIntervalMs", 100, ours=True)
    dleger_election_timeout_min_ms: int = _key("dLegerElectionTimeoutMinMs", 300, ours=True)
    dleger_election_timeout_max_ms: int = _key("dLegerElectionTimeoutMaxMs", 600, ours=True)
    dleger_max_wait_ack_time_ms: int = _key("dLegerMaxWaitAckTimeMs", 2500, ours=True)
    dleger_max_pending_requests: int = _key("dLegerMaxPendingRequests", 10_000, ours=True)
    dleger_entry_crc_enable: bool = _key("dLegerEntryCrcEnable", True, ours=True)
    dleger_auth_token: Optional[str] = _key("dLegerAuthToken", ours=True)
    # without dLegerAuthToken a group starts only with every peer on loopback and this set
    dleger_allow_insecure: bool = _key("dLegerAllowInsecure", False, ours=True)
    # HTTP API address of every peer, same ids as dLegerPeers (``n0-127.0.0.1:30911;...``): a
    # follower answers NOT_MASTER with the leader's entry and syncs metadata from it. Unset: only
    # this node's own address is known (followers then answer without a masterAddress).
    dleger_peers_http: Optional[str] = _key("dLegerPeersHttp", ours=True)
    # ---- Controller mode (Apache 5.3.3 MessageStoreConfig keys and defaults)
    ha_max_time_slave_not_catchup: int = _key("haMaxTimeSlaveNotCatchup", 15_000)
    all_ack_in_sync_state_set: bool = _key("allAckInSyncStateSet", False)
    in_sync_replicas: int = _key("inSyncReplicas", 1)
    min_in_sync_replicas: int = _key("minInSyncReplicas", 1)
    store_path_epoch_file: Optional[str] = _key("storePathEpochFile")  # None: <root>/epochFileCheckpoint
    store_path_broker_identity: Optional[str] = _key("storePathBrokerIdentity")  # None: <root>/brokerIdentity

    # ---- derived paths (StorePathConfigHelper, BrokerPathConfigHelper, DLedgerConfig) --------
    @property
    def root(self) -> Path:
        return Path(self.store_path_root_dir)

    @property
    def commit_log_dir(self) -> Path:
        return Path(self.store_path_commit_log) if self.store_path_commit_log else self.root / "commitlog"

    consume_queue_dir = property(lambda self: self.root / "consumequeue")
    index_dir = property(lambda self: self.root / "index")
    checkpoint_path = property(lambda self: self.root / "checkpoint")
    abort_path = property(lambda self: self.root / "abort")
    lock_path = property(lambda self: self.root / "lock")
    config_dir = property(lambda self: self.root / "config")
    topics_json = property(lambda self: self.config_dir / "topics.json")
    consumer_offset_json = property(lambda self: self.config_dir / "consumerOffset.json")
    delay_offset_json = property(lambda self: self.config_dir / "delayOffset.json")
    subscription_group_json = property(lambda self: self.config_dir / "subscriptionGroup.json")

    @property
    def dledger_dir(self) -> Path:
        return self.root / f"dledger-{self.dleger_self_id}"

    @property
    def dledger_data_dir(self) -> Path:
        if self.store_path_dledger_commit_log:
            return Path(self.store_path_dledger_commit_log)
        return self.dledger_dir / "data"

    @property
    def delay_level_table(self) -> dict[int, int]:
        """``{level: delay ms}`` parsed from messageDelayLevel (s, m, h, d units)."""
        units = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
        table = {}
        for level, token in enumerate(self.message_delay_level.split(), start=1):
            if not re.fullmatch(r"\d+[smhd]", token):
                raise ConfigError(f"messageDelayLevel: bad level {token!r} (expected e.g. 5s, 1m, 2h)")
            table[level] = int(token[:-1]) * units[token[-1]]
        return table

    def dledger_peer_map(self) -> dict[str, str]:
        """``{selfId: "host:port"}`` from dLegerPeers (ValueError explains a malformed list)."""
        return parse_dleger_peers(self.dleger_peers or "")

    def dledger_http_peer_map(self) -> dict[str, str]:
        """``{selfId: "host:port"}`` of each peer's HTTP API from dLegerPeersHttp (``{}`` if unset)."""
        return parse_dleger_peers(self.dleger_peers_http) if self.dleger_peers_http else {}

    def dledger_settings(self) -> dict[str, Any]:
        """Keyword arguments for ``dledger.config.DLedgerConfig`` (DLedgerCommitLog's constructor)."""
        return {
            "group": self.dleger_group, "self_id": self.dleger_self_id, "peers": self.dleger_peers,
            "store_base_dir": str(self.root),
            "data_store_path": self.store_path_dledger_commit_log,
            "mapped_file_size_for_entry_data": self.mapped_file_size_commit_log,
            "heartbeat_interval_ms": self.dleger_heartbeat_interval_ms,
            "election_timeout_min_ms": self.dleger_election_timeout_min_ms,
            "election_timeout_max_ms": self.dleger_election_timeout_max_ms,
            "max_wait_ack_ms": self.dleger_max_wait_ack_time_ms,
            "max_pending_requests": self.dleger_max_pending_requests,
            "enable_batch_push": self.enable_batch_push,
            "entry_crc": self.dleger_entry_crc_enable,
            "auth_token": self.dleger_auth_token,
            "allow_insecure": self.dleger_allow_insecure,
            "serve_clients": False,  # a broker-hosted member serves its peers only (issue 12)
            "preferred_leader_ids": self.preferred_leader_id,
        }


_PEER_ID = re.compile(r"^[A-Za-z][0-9]+$")


def parse_dleger_peers(peers: str) -> dict[str, str]:
    """``n0-127.0.0.1:40911;n1-...`` -> ``{"n0": "127.0.0.1:40911", ...}``."""
    out: dict[str, str] = {}
    for part in (p.strip() for p in peers.split(";")):
        if not part:
            continue
        pid, sep, addr = part.partition("-")
        host, colon, port = addr.rpartition(":")
        if not sep or not _PEER_ID.fullmatch(pid) or not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"peer {part!r} is not <letter><digits>-<host>:<port>")
        if pid in out:
            raise ValueError(f"peer id {pid!r} appears twice")
        out[pid] = f"{host}:{port}"
    if not out:
        raise ValueError("no peers (expected n0-host:port;n1-host:port;...)")
    return out


Owner = Union[type[BrokerConfig], type[MessageStoreConfig]]

#: conf key -> (owning dataclass, field name)
FIELD_BY_KEY: dict[str, tuple[Owner, str]] = {
    f.metadata["key"]: (cls, f.name) for cls in (BrokerConfig, MessageStoreConfig) for f in fields(cls)
}

def key_of(cls: Owner, field_name: str) -> str:
    for f in fields(cls):
        if f.name == field_name:
            return f.metadata["key"]
    raise KeyError(field_name)
