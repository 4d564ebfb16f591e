"""Broker .conf parsing: Java properties syntax, RocketMQ keys and defaults, clear errors."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from broker.config.conf_file import ConfigError, load_conf, parse_conf, to_conf
from broker.config.broker_config import FIELD_BY_KEY, BrokerConfig, BrokerRole, FlushDiskType, MessageStoreConfig, key_of
from broker.config.java_properties import escape_property, parse_properties
from broker.config.config_keys import APACHE_KEYS, APACHE_KEYS_4_9

REPO = Path(__file__).resolve().parents[3]

DLEDGER_CONF = """\
# distribution/conf/dledger/broker-n0.conf
brokerClusterName = RaftCluster
brokerName=RaftNode00
listenPort=30911
namesrvAddr=127.0.0.1:9876
storePathRootDir=/tmp/rmqstore/node00
storePathCommitLog=/tmp/rmqstore/node00/commitlog
enableDLegerCommitLog=true
dLegerGroup=RaftNode00
dLegerPeers=n0-127.0.0.1:40911;n1-127.0.0.1:40912;n2-127.0.0.1:40913
## must be unique
dLegerSelfId=n0
sendMessageThreadPoolNums=16
"""


def test_java_properties_syntax():
    text = (
        "  # comment\n! also a comment\n\n"
        "a=1\n"
        "b : 2\n"
        "c 3\n"
        "d\t=\t  4  \n"
        "e=multi \\\n    line \\\n  value\n"
        "f=tab\\there\\nnew\\u00e9\\uD83D\\uDE00\n"
        "key\\ with\\=odd\\:chars = v\n"
        "# comment ending in backslash \\\n"
        "g=after\n"
        "h\n"
        "i=x\\\\\n"
        "j=y\r\nk=z\rl=w"
    )
    props = parse_properties(text, "t.conf")
    got = {k: v for k, v, _ in props}
    assert got["a"] == "1" and got["b"] == "2" and got["c"] == "3"
    assert got["d"] == "4  "  # Java keeps trailing whitespace; the typed layer strips it
    assert got["e"] == "multi line value"
    assert got["f"] == "tab\there\nnew\u00e9\U0001F600"
    assert got["key with=odd:chars"] == "v"
    assert got["g"] == "after" and got["h"] == "" and got["i"] == "x\\"
    assert (got["j"], got["k"], got["l"]) == ("y", "z", "w")
    lines = {k: n for k, _, n in props}
    assert lines["a"] == 4 and lines["e"] == 8 and lines["g"] == 14


def test_malformed_unicode_escape_names_line():
    with pytest.raises(ConfigError, match=r"t.conf:2: malformed \\uxxxx"):
        parse_properties("a=1\nb=\\u12G4\n", "t.conf")


def test_defaults_are_rocketmq_defaults(tmp_path):
    conf = parse_conf("storePathRootDir=" + str(tmp_path) + "\n")
    s, b = conf.store, conf.broker
    assert s.mapped_file_size_commit_log == 1073741824 and s.mapped_file_size_consume_queue == 6_000_000
    assert s.broker_role is BrokerRole.ASYNC_MASTER and s.flush_disk_type is FlushDiskType.ASYNC_FLUSH
    assert (s.max_hash_slot_num, s.max_index_num, s.max_message_size) == (5_000_000, 20_000_000, 4 * 1024 * 1024)
    assert (s.ha_send_heartbeat_interval, s.ha_housekeeping_interval, s.ha_transfer_batch_size) == (5000, 20000, 32768)
    assert s.ha_slave_fallbehind_max == 268435456 and s.sync_flush_timeout == 5000 and s.slave_timeout == 3000
    assert (s.delete_when, s.file_reserved_time, s.disk_max_used_space_ratio) == ("04", 72, 75)
    assert b.listen_port == 10911 and s.ha_listen_port == 10912 and b.api_listen_port == 10911
    assert b.broker_cluster_name == "DefaultCluster" and b.broker_id == 0
    assert not s.enable_dleger_commit_log and s.dleger_entry_crc_enable
    assert Path(s.store_path_commit_log) == tmp_path / "commitlog"
    assert s.consume_queue_dir == tmp_path / "consumequeue" and s.index_dir == tmp_path / "index"
    assert s.checkpoint_path == tmp_path / "checkpoint" and s.lock_path == tmp_path / "lock"
    assert s.delay_offset_json == tmp_path / "config" / "delayOffset.json"
    assert s.delay_level_table[2] == 5000 and s.delay_level_table[18] == 7_200_000
    assert conf.warnings == []


def test_dledger_conf_and_apache_only_key_warns(caplog):
    conf = parse_conf(DLEDGER_CONF, "broker-n0.conf")
    s = conf.store
    assert s.enable_dleger_commit_log and s.dleger_group == "RaftNode00" and s.dleger_self_id == "n0"
    assert s.dledger_peer_map() == {"n0": "127.0.0.1:40911", "n1": "127.0.0.1:40912", "n2": "127.0.0.1:40913"}
    assert conf.broker.listen_port == 30911 and s.ha_listen_port == 30912
    assert conf.broker.namesrv_addr == "127.0.0.1:9876" and conf.broker.broker_cluster_name == "RaftCluster"
    assert s.dledger_dir == Path("/tmp/rmqstore/node00/dledger-n0")
    assert s.dledger_data_dir == Path("/tmp/rmqstore/node00/dledger-n0/data")
    assert len(conf.warnings) == 1 and "sendMessageThreadPoolNums (broker-n0.conf:13)" in conf.warnings[0]
    assert "sendMessageThreadPoolNums" in caplog.text
    settings = s.dledger_settings()
    assert settings["group"] == "RaftNode00" and settings["entry_crc"] is True
    assert settings["election_timeout_min_ms"] < settings["election_timeout_max_ms"]


def test_shipped_conf_files_parse():
    """Every shipped broker conf parses as a broker conf; conf/controller/ holds controller confs
    (another key set, ``controller.config``): each parses and validates as one."""
    from controller.config import load_config, validate  # noqa: WPS433

    brokers = sorted(p for p in (REPO / "conf").rglob("*.conf") if p.parent.name != "controller")
    controllers = sorted((REPO / "conf" / "controller").glob("*.conf"))
    assert brokers and len(controllers) == 3
    for path in brokers:
        load_conf(path)
    for path in controllers:
        validate(load_config(str(path)), str(path))


@pytest.mark.parametrize(
    ("line", "suggestion"),
    [
        ("brokerRol=SLAVE", "brokerRole"),
        ("dledgerGroup=g", "dLegerGroup"),
        ("mappedFileSizeCommitlog=1", "mappedFileSizeCommitLog"),
        ("enableDLedgerCommitLog=true", "enableDLegerCommitLog"),
        ("sendMessageThreadPoolNum=3", "sendMessageThreadPoolNums"),
    ],
)
def test_typo_names_key_line_and_nearest(line, suggestion):
    with pytest.raises(ConfigError) as err:
        parse_conf("brokerName=a\n" + line + "\n", "my.conf")
    msg = str(err.value)
    assert repr(line.split("=")[0]) in msg and "my.conf:2" in msg and repr(suggestion) in msg


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("listenPort=abc", "listenPort (c.conf:1): expected an integer, got 'abc'"),
        ("messageIndexEnable=yes", "messageIndexEnable (c.conf:1): expected true or false"),
        ("brokerRole=LEADER", "brokerRole (c.conf:1): expected one of ASYNC_MASTER, SYNC_MASTER, SLAVE"),
        ("flushDiskType=FAST", "flushDiskType (c.conf:1): expected one of ASYNC_FLUSH, SYNC_FLUSH"),
        ("listenPort=70000", "listenPort (c.conf:1): port 70000 out of range"),
        ("mappedFileSizeConsumeQueue=1001", "mappedFileSizeConsumeQueue (c.conf:1): must be a positive multiple of 20"),
        ("brokerRole=SLAVE\nbrokerId=0", "brokerId (c.conf:2): a SLAVE's brokerId must be > 0"),
        ("messageDelayLevel=1s 5x", "messageDelayLevel: bad level '5x'"),
        ("dLegerElectionTimeoutMs=soon", "dLegerElectionTimeoutMs (c.conf:1): expected <ms> or <min>-<max>"),
    ],
)
def test_bad_values_are_named(text, fragment):
    with pytest.raises(ConfigError) as err:
        parse_conf(text + "\n", "c.conf")
    assert fragment in str(err.value)


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ("dLegerSelfId=x", "dLegerSelfId (d.conf:12): must be a letter followed by digits"),
        ("dLegerSelfId=n7", "'n7' is not in dLegerPeers (n0, n1, n2)"),
        ("dLegerPeers=n0:127.0.0.1:1", "dLegerPeers (d.conf:10): peer 'n0:127.0.0.1:1' is not"),
        ("dLegerPeers=n0-127.0.0.1:1;n0-127.0.0.1:2", "peer id 'n0' appears twice"),
        ("dLegerGroup=", "dLegerGroup (d.conf:9): required"),
        ("preferredLeaderId=n9", "preferredLeaderId"),
        ("dLegerHeartbeatIntervalMs=900", "dLegerHeartbeatIntervalMs"),
        ("dLegerPeersHttp=n0-127.0.0.1:30911;n1-127.0.0.1:30921", "ids n0, n1 differ from dLegerPeers"),
        ("dLegerPeersHttp=n0-127.0.0.1:1;n1-127.0.0.1:2;n2-127.0.0.1:3", "does not use its own HTTP port 30911"),
        ("slaveSyncIntervalMs=0", "slaveSyncIntervalMs"),
    ],
)
def test_dledger_validation(change, fragment):
    key = change.split("=")[0]
    lines = DLEDGER_CONF.splitlines()
    replaced = [change if ln.startswith(key + "=") else ln for ln in lines]
    if replaced == lines:
        replaced.append(change)
    with pytest.raises(ConfigError) as err:
        parse_conf("\n".join(replaced) + "\n", "d.conf")
    assert fragment in str(err.value)


def test_dledger_http_peers_and_slave_sync_interval():
    conf = parse_conf(DLEDGER_CONF + "dLegerPeersHttp=n0-127.0.0.1:30911;n1-127.0.0.1:30921;n2-127.0.0.1:30931\n"
                      "slaveSyncIntervalMs=500\n")
    assert conf.store.dledger_http_peer_map()["n2"] == "127.0.0.1:30931"
    assert conf.broker.slave_sync_interval_ms == 500
    assert parse_conf(DLEDGER_CONF).store.dledger_http_peer_map() == {}


def test_election_timeout_forms():
    s = parse_conf("dLegerElectionTimeoutMs=400\n").store
    assert (s.dleger_election_timeout_min_ms, s.dleger_election_timeout_max_ms) == (400, 800)
    s = parse_conf("dLegerElectionTimeoutMs = 250-500\n").store
    assert (s.dleger_election_timeout_min_ms, s.dleger_election_timeout_max_ms) == (250, 500)


def test_mapped_spelling_alias():
    # Apache spells it warmMapedFileEnable (4.9.8 and 5.x); DESIGN.md says warmMappedFileEnable
    assert parse_conf("warmMappedFileEnable=true\n").store.warm_mapped_file_enable is True
    assert parse_conf("warmMapedFileEnable=true\n").store.warm_mapped_file_enable is True


def test_to_conf_round_trip():
    conf = parse_conf(DLEDGER_CONF + "dLegerAuthToken=s3cr=t:\\u00e9 x\nbrokerIP1=10.0.0.1\nbrokerRole=SLAVE\nbrokerId=3\n")
    text = to_conf(conf.broker, conf.store, header="written by mqupgrade\nnode n0")
    assert text.startswith("# written by mqupgrade\n# node n0\n")
    assert "dLegerAuthToken=s3cr=t:\\u00E9 x\n" in text
    again = parse_conf(text, "again.conf")
    assert again.broker == conf.broker and again.store == conf.store
    short = to_conf(conf.broker, conf.store, only_changed=True)
    assert "maxHashSlotNum" not in short and "brokerRole=SLAVE" in short
    assert parse_conf(short).store == conf.store


def test_every_field_has_a_unique_key_and_apache_keys_are_real():
    keys = [f.metadata["key"] for cls in (BrokerConfig, MessageStoreConfig) for f in dataclasses.fields(cls)]
    assert len(keys) == len(set(keys)) == len(FIELD_BY_KEY)
    for cls in (BrokerConfig, MessageStoreConfig):
        for f in dataclasses.fields(cls):
            # a key is either ours (marked) or one Apache RocketMQ knows
            assert f.metadata["ours"] or f.metadata["key"] in APACHE_KEYS, f.metadata["key"]
    assert key_of(MessageStoreConfig, "dleger_peers") == "dLegerPeers"
    assert {"brokerRole", "flushDiskType", "dLegerSelfId", "haListenPort", "listenPort"} <= APACHE_KEYS_4_9


def test_load_conf_latin1_fallback(tmp_path):
    path = tmp_path / "x.conf"
    path.write_bytes("brokerName=caf\u00e9\n".encode("iso-8859-1"))
    assert load_conf(path).broker.broker_name == "caf\u00e9"


def test_escape_property():
    assert escape_property(" k=y", True) == "\\ k\\=y"
    assert escape_property(" v=1", False) == "\\ v=1"
    assert escape_property("\U0001F600", False) == "\\uD83D\\uDE00"


def test_enable_slave_acting_master_is_refused_not_ignored():
    """RIP-32 is not built: a conf asking for it fails to load, naming the key and the fix."""
    assert parse_conf("brokerName=b\nenableSlaveActingMaster=false\n").broker.enable_slave_acting_master is False
    with pytest.raises(ConfigError) as err:
        parse_conf("brokerName=b\nenableSlaveActingMaster=true\n", "b.conf")
    assert "b.conf" in str(err.value) and "enableSlaveActingMaster=false" in str(err.value)
