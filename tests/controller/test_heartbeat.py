"""controller.heartbeat: Apache's DefaultBrokerHeartbeatManager rules, with the clock passed in."""
from __future__ import annotations

import pytest

from controller.elect_policy import INTEGER_MAX_VALUE
from controller.heartbeat import DEFAULT_BROKER_CHANNEL_EXPIRED_TIME, BrokerHeartbeatTable, HeartbeatTableFull


def test_new_row_takes_apache_defaults_and_is_alive_until_its_timeout() -> None:
    t = BrokerHeartbeatTable()
    assert t.on_heartbeat("c", "b", "127.0.0.1:1", 1, 1000) is True
    info = t.snapshot(1000).get("c", "b", 1)
    assert info is not None and (info.epoch, info.max_offset, info.confirm_offset) == (-1, -1, -1)
    assert info.election_priority == INTEGER_MAX_VALUE
    assert t.is_broker_active("c", "b", 1, 1000 + DEFAULT_BROKER_CHANNEL_EXPIRED_TIME)
    assert not t.is_broker_active("c", "b", 1, 1001 + DEFAULT_BROKER_CHANNEL_EXPIRED_TIME)
    assert not t.snapshot(1001 + DEFAULT_BROKER_CHANNEL_EXPIRED_TIME).check("c", "b", 1)


def test_progress_is_taken_only_when_newer() -> None:
    t = BrokerHeartbeatTable()
    t.on_heartbeat("c", "b", "a", 1, 0, epoch=2, max_offset=100, confirm_offset=90, timeout_ms=500)
    t.on_heartbeat("c", "b", "a", 1, 10, epoch=1, max_offset=999, confirm_offset=999, election_priority=3)
    info = t.snapshot(10).get("c", "b", 1)
    assert info is not None and (info.epoch, info.max_offset, info.confirm_offset) == (2, 100, 90)
    assert info.election_priority == 3  # always refreshed
    t.on_heartbeat("c", "b", "a", 1, 20, epoch=2, max_offset=150, confirm_offset=140)
    info = t.snapshot(20).get("c", "b", 1)
    assert info is not None and (info.max_offset, info.confirm_offset) == (150, 140)
    assert t.rows[("c", "b", 1)].timeout_ms == DEFAULT_BROKER_CHANNEL_EXPIRED_TIME  # absent: the default again


def test_expired_removes_and_returns_only_the_silent() -> None:
    t = BrokerHeartbeatTable()
    t.on_heartbeat("c", "b", "a1", 1, 0, timeout_ms=100)
    t.on_heartbeat("c", "b", "a2", 2, 50, timeout_ms=100)
    assert t.expired(120) == [("c", "b", 1)]
    assert list(t.rows) == [("c", "b", 2)]
    assert t.expired(150) == []


def test_a_closed_channel_ends_its_brokers_only() -> None:
    t = BrokerHeartbeatTable()
    ch1, ch2 = object(), object()
    t.on_heartbeat("c", "b", "a1", 1, 0, channel=ch1)
    t.on_heartbeat("c", "b", "a2", 2, 0, channel=ch1)
    t.on_heartbeat("c", "b", "a3", 3, 0, channel=ch2)
    assert sorted(t.on_channel_close(ch1)) == [("c", "b", 1), ("c", "b", 2)]
    assert list(t.rows) == [("c", "b", 3)]


def test_the_table_is_bounded() -> None:
    t = BrokerHeartbeatTable(max_entries=2)
    t.on_heartbeat("c", "b", "a", 1, 0)
    t.on_heartbeat("c", "b", "a", 2, 0)
    t.on_heartbeat("c", "b", "a", 1, 5)  # a known row is still refreshed
    with pytest.raises(HeartbeatTableFull, match="at most 2"):
        t.on_heartbeat("c", "b", "a", 3, 5)
    assert len(t) == 2
    assert t.active_brokers_num(5) == {"c": {"b": 2}}
