"""enableControllerMode=true conf checks, the 1008 processor and the ReplicasManager keys, in process."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Optional

import pytest

from broker.config.conf_file import ConfigError, parse_conf
from broker.controller_mode import replicas_config
from broker.remoting.codec import RemotingCommand
from broker.remoting.processors.controller_notify import NOTIFY_BROKER_ROLE_CHANGED, ControllerNotifyProcessor

BASE = "brokerName=broker-a\nenableControllerMode=true\ncontrollerAddr=127.0.0.1:9878;127.0.0.1:9868\n"


def test_controller_mode_keys_are_apaches_with_their_defaults() -> None:
    conf = parse_conf(BASE)
    b, s = conf.broker, conf.store
    assert b.enable_controller_mode and b.controller_addr == "127.0.0.1:9878;127.0.0.1:9868"
    assert (b.sync_broker_metadata_period, b.check_sync_state_set_period, b.sync_controller_metadata_period,
            b.controller_heart_beat_timeout_mills, b.broker_heartbeat_interval) == (5000, 5000, 10000, 10000, 1000)
    assert (s.ha_max_time_slave_not_catchup, s.all_ack_in_sync_state_set, s.in_sync_replicas,
            s.min_in_sync_replicas) == (15000, False, 1, 1)
    rc = replicas_config(b, "127.0.0.1:10911")
    assert rc.controller_addresses == ("127.0.0.1:9878", "127.0.0.1:9868") and rc.broker_name == "broker-a"
    assert rc.broker_election_priority == 2 ** 31 - 1 and rc.sync_broker_metadata_period_ms == 5000


@pytest.mark.parametrize(("extra", "says"), [
    ("enableDLegerCommitLog=true\ndLegerGroup=g\ndLegerPeers=n0-127.0.0.1:1\ndLegerSelfId=n0\n",
     "set enableDLegerCommitLog=false"),
    ("fetchControllerAddrByDnsLookup=true\n", "fetchControllerAddrByDnsLookup=false"),
    ("controllerAddr=\n", "controllerAddr"),
    ("controllerAddr=nohost\n", "is not host:port"),
    ("minInSyncReplicas=0\n", "minInSyncReplicas"),
    ("controllerAccessKey=ak\n", "go together"),
])
def test_a_controller_mode_conf_error_names_the_key_and_the_fix(extra: str, says: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_conf(BASE + extra, "b.conf")
    assert says in str(err.value)


def test_role_change_notifications_go_to_the_driver_undecoded() -> None:
    got: list[tuple[dict[str, str], Optional[bytes]]] = []
    p = ControllerNotifyProcessor(lambda fields, body: got.append((fields, body)))
    cmd = RemotingCommand.request(NOTIFY_BROKER_ROLE_CHANGED, {"masterAddress": "127.0.0.1:1", "masterEpoch": 2,
                                                               "masterBrokerId": 1}, b'{"x":1}')
    resp = asyncio.run(p.notify(cmd, SimpleNamespace(remote_addr="127.0.0.1:5")))  # type: ignore[arg-type]
    assert resp.code == 0 and p.received == 1
    assert got == [({"masterAddress": "127.0.0.1:1", "masterEpoch": "2", "masterBrokerId": "1"}, b'{"x":1}')]
