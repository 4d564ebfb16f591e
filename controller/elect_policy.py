"""Who becomes master: Apache RocketMQ 5.3.3's ``DefaultElectPolicy``, with the brokers' liveness
and replication progress passed in as data (:class:`LiveBrokers`), never looked up.

Rules (``DefaultElectPolicy.elect``, the design doc's "Elect Master"):
- Candidates are tried in two rounds: the SyncStateSet, then (only when
  ``enableElectUncleanMaster`` gave it) every registered replica. A round first keeps only the
  live brokers (``BrokerValidPredicate``: a heartbeat within its timeout).
- In a round with live candidates: the old master, if it is one of them and no other broker is
  preferred (or the preferred one is the old master), stays; a preferred broker (an admin's
  designated election) is chosen if it is a live candidate, otherwise nobody (no fallback);
  otherwise the best by ``(epoch desc, maxOffset desc, electionPriority asc)`` of its last
  heartbeat.
- A round with no live candidate elects nobody; the next round is tried.
- Ties (same epoch, offset and priority) go to the first in Java's ``HashSet`` order of the ids
  (a Java ``TreeSet`` keeps the first of equal elements), which for ids below 16 is the smallest.

Divergence, named: Apache's comparator compares offsets as ``(int) (o2.maxOffset -
o1.maxOffset)``, which truncates a long to an int: two replicas 2 GiB or more apart can be
ordered the wrong way round (the one with less data first). We order by the offsets themselves.

Theory of operation: :class:`LiveBrokers` is a snapshot of the heartbeat table at one instant,
taken by the I/O layer; :class:`DefaultElectPolicy` is a pure function of it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Collection, Mapping, Optional, Protocol

from controller.fastjson import long_set

INTEGER_MAX_VALUE = 2 ** 31 - 1


@dataclass(frozen=True)
class BrokerLiveInfo:
    """What a broker's last heartbeat said (Apache's ``BrokerLiveInfo``, without the channel and
    the clock: the snapshot holds only brokers that are alive)."""

    broker_name: str
    broker_addr: str
    broker_id: int
    epoch: int = 0
    max_offset: int = 0
    election_priority: int = INTEGER_MAX_VALUE
    confirm_offset: int = 0


@dataclass(frozen=True)
class LiveBrokers:
    """The brokers alive at one instant, keyed ``(clusterName, brokerName, brokerId)`` (Apache's
    ``BrokerIdentityInfo``)."""

    infos: Mapping[tuple[str, str, int], BrokerLiveInfo] = field(default_factory=dict)

    @classmethod
    def of(cls, cluster_name: str, *infos: BrokerLiveInfo) -> "LiveBrokers":
        return cls({(cluster_name, i.broker_name, i.broker_id): i for i in infos})

    def check(self, cluster_name: Optional[str], broker_name: Optional[str], broker_id: Optional[int]) -> bool:
        """``BrokerValidPredicate.check`` / ``isBrokerActive``."""
        if cluster_name is None or broker_name is None or broker_id is None:
            return False
        return (cluster_name, broker_name, broker_id) in self.infos

    def get(self, cluster_name: str, broker_name: str, broker_id: int) -> Optional[BrokerLiveInfo]:
        return self.infos.get((cluster_name, broker_name, broker_id))


class ElectPolicy(Protocol):
    def elect(self, cluster_name: str, broker_name: str, sync_state_brokers: Optional[Collection[int]],
              all_replica_brokers: Optional[Collection[int]], old_master: Optional[int],
              prefer_broker_id: Optional[int]) -> Optional[int]: ...


class DefaultElectPolicy:
    """``DefaultElectPolicy`` over a :class:`LiveBrokers` snapshot."""

    def __init__(self, live: LiveBrokers) -> None:
        self.live = live

    def elect(self, cluster_name: str, broker_name: str, sync_state_brokers: Optional[Collection[int]],
              all_replica_brokers: Optional[Collection[int]], old_master: Optional[int],
              prefer_broker_id: Optional[int]) -> Optional[int]:
        new_master: Optional[int] = None
        if sync_state_brokers is not None:
            new_master = self._try_elect(cluster_name, broker_name, sync_state_brokers, old_master, prefer_broker_id)
        if new_master is not None:
            return new_master
        if all_replica_brokers is not None:
            new_master = self._try_elect(cluster_name, broker_name, all_replica_brokers, old_master, prefer_broker_id)
        return new_master

    def _try_elect(self, cluster_name: str, broker_name: str, brokers: Collection[int],
                   old_master: Optional[int], prefer_broker_id: Optional[int]) -> Optional[int]:
        alive = [b for b in long_set(brokers) if self.live.check(cluster_name, broker_name, b)]
        if not alive:
            return None
        if old_master in alive and (prefer_broker_id is None or prefer_broker_id == old_master):
            return old_master
        if prefer_broker_id is not None:
            return prefer_broker_id if prefer_broker_id in alive else None
        best: Optional[BrokerLiveInfo] = None
        for b in alive:
            info = self.live.get(cluster_name, broker_name, b)
            if info is None:
                continue
            if best is None or _better(info, best):
                best = info
        return best.broker_id if best is not None else alive[0]


def _better(a: BrokerLiveInfo, b: BrokerLiveInfo) -> bool:
    """``a`` strictly before ``b``: higher epoch, then more data, then a lower priority number."""
    return (-a.epoch, -a.max_offset, a.election_priority) < (-b.epoch, -b.max_offset, b.election_priority)
