"""The brokers' heartbeats as data: Apache RocketMQ 5.3.3's ``DefaultBrokerHeartbeatManager`` and
``BrokerHousekeepingService``, with the clock passed in.

Rules (Apache's, with the divergences named):
- The table is keyed ``(clusterName, brokerName, brokerId)`` (``BrokerIdentityInfo``). A heartbeat
  of a new key adds a row (its address, ``epoch``/``maxOffset``/``confirmOffset``/``electionPriority``
  with Apache's defaults -1/-1/-1/``Integer.MAX_VALUE``, its timeout, default
  :data:`DEFAULT_BROKER_CHANNEL_EXPIRED_TIME` 10 s, and the channel it came on). A heartbeat of a
  known key refreshes the time, the timeout and the priority, and takes the epoch, maxOffset and
  confirmOffset only when they are newer (a higher epoch, or the same epoch and a larger
  maxOffset), as Apache does; the address of a known row is kept (Apache's too).
- A broker is alive while ``last + timeout >= now`` (``isBrokerActive``); :meth:`snapshot` gives
  the live rows as the :class:`controller.elect_policy.LiveBrokers` every handler takes.
- :meth:`expired` is ``scanNotActiveBroker``: it removes and returns the rows past their timeout.
  Divergence: Apache also closes the expired broker's channel; here the connection is left to the
  port's idle timeout (a broker that comes back on it is simply recorded again).
- :meth:`on_channel_close` removes every row that came on that channel. Divergence: Apache removes
  only the first row it finds for the channel; a channel that carried several brokers' heartbeats
  (a test client, a proxy) ends all of them here.
- Bounded: at most ``max_entries`` rows; a heartbeat that would add one more raises
  :class:`HeartbeatTableFull` (the door answers ``SYSTEM_BUSY``); a timeout is clamped to
  [1 ms, :data:`MAX_TIMEOUT_MS`].

Theory of operation: one dict; every method takes ``now`` in epoch milliseconds; nothing here
reads a clock, opens a socket or logs.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Hashable, Optional

from controller.elect_policy import INTEGER_MAX_VALUE, BrokerLiveInfo, LiveBrokers

DEFAULT_BROKER_CHANNEL_EXPIRED_TIME = 10_000
MAX_TIMEOUT_MS = 24 * 3600 * 1000
DEFAULT_MAX_ENTRIES = 100_000

Key = tuple[str, str, int]


class HeartbeatTableFull(Exception):
    """A heartbeat of a new broker while the table holds ``max_entries`` rows."""


@dataclass
class HeartbeatRow:
    info: BrokerLiveInfo
    last_update_ms: int
    timeout_ms: int
    channel: Optional[Hashable]

    def alive(self, now_ms: int) -> bool:
        return self.last_update_ms + self.timeout_ms >= now_ms


class BrokerHeartbeatTable:
    """The heartbeat table (see the module rules)."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self.rows: dict[Key, HeartbeatRow] = {}

    def __len__(self) -> int:
        return len(self.rows)

    def on_heartbeat(self, cluster_name: str, broker_name: str, broker_addr: str, broker_id: int, now_ms: int, *,
                     timeout_ms: Optional[int] = None, channel: Optional[Hashable] = None,
                     epoch: Optional[int] = None, max_offset: Optional[int] = None,
                     confirm_offset: Optional[int] = None, election_priority: Optional[int] = None) -> bool:
        """Record a heartbeat; True when it added a row (a broker not seen before)."""
        key = (cluster_name, broker_name, broker_id)
        timeout = DEFAULT_BROKER_CHANNEL_EXPIRED_TIME if timeout_ms is None else timeout_ms
        timeout = min(max(timeout, 1), MAX_TIMEOUT_MS)
        real_epoch = -1 if epoch is None else epoch
        real_max = -1 if max_offset is None else max_offset
        real_confirm = -1 if confirm_offset is None else confirm_offset
        priority = INTEGER_MAX_VALUE if election_priority is None else election_priority
        row = self.rows.get(key)
        if row is None:
            if len(self.rows) >= self.max_entries:
                raise HeartbeatTableFull(f"the heartbeat table holds {len(self.rows)} brokers (at most "
                                         f"{self.max_entries}); broker {broker_name}/{broker_id} of {cluster_name} "
                                         "is not recorded")
            self.rows[key] = HeartbeatRow(
                BrokerLiveInfo(broker_name, broker_addr, broker_id, real_epoch, real_max, priority, real_confirm),
                now_ms, timeout, channel)
            return True
        info = replace(row.info, election_priority=priority)
        if real_epoch > info.epoch or (real_epoch == info.epoch and real_max > info.max_offset):
            info = replace(info, epoch=real_epoch, max_offset=real_max, confirm_offset=real_confirm)
        row.info = info
        row.last_update_ms = now_ms
        row.timeout_ms = timeout
        if channel is not None:
            row.channel = channel
        return False

    def is_broker_active(self, cluster_name: Optional[str], broker_name: Optional[str], broker_id: Optional[int],
                         now_ms: int) -> bool:
        if cluster_name is None or broker_name is None or broker_id is None:
            return False
        row = self.rows.get((cluster_name, broker_name, broker_id))
        return row is not None and row.alive(now_ms)

    def snapshot(self, now_ms: int) -> LiveBrokers:
        """The live rows at ``now_ms``."""
        return LiveBrokers({k: r.info for k, r in self.rows.items() if r.alive(now_ms)})

    def expired(self, now_ms: int) -> list[Key]:
        """``scanNotActiveBroker``: remove and return the rows past their timeout."""
        gone = [k for k, r in self.rows.items() if not r.alive(now_ms)]
        for k in gone:
            del self.rows[k]
        return gone

    def on_channel_close(self, channel: Hashable) -> list[Key]:
        """``onBrokerChannelClose``: remove and return the rows that came on ``channel``."""
        gone = [k for k, r in self.rows.items() if r.channel is channel]
        for k in gone:
            del self.rows[k]
        return gone

    def active_brokers_num(self, now_ms: int) -> dict[str, dict[str, int]]:
        """``getActiveBrokersNum``: cluster -> brokerName -> live brokers."""
        out: dict[str, dict[str, int]] = {}
        for (cluster, name, _), r in self.rows.items():
            if r.alive(now_ms):
                out.setdefault(cluster, {})
                out[cluster][name] = out[cluster].get(name, 0) + 1
        return out
