"""What ``mqadmin`` reads: broker config, runtime info, topic and consume stats, connections.

Rules (RocketMQ 4.9.8 ``AdminBrokerProcessor``; field names checked against its sources and the
``tools`` sub-commands that read them, issue 14.4):
- GET_BROKER_CONFIG (26): body = every config key as ``key=value`` lines (``getAllConfigsFormatString``),
  header ``version`` = the DataVersion JSON. Secrets (auth tokens, secret keys) are ``******``.
- GET_BROKER_RUNTIME_INFO (28): ``{"table":{...}}`` with every key ``clusterList``/``brokerStatus``
  read, values strings as in Java: ``putTps``/``getTransferedTps``/``getFoundTps``/... are three
  rates "10s 60s 600s" (from :class:`RuntimeStats`), ``msgPutTotal*``/``msgGetTotal*`` counts
  since this process started and at the last local midnight it saw (Apache counts from its
  stats manager's day boundaries; a broker started today has 0 for the earlier mornings),
  ``commitLogDiskRatio`` the used ratio of the commitlog's filesystem, ``earliestMessageTimeStamp``
  the store timestamp of the first message.
- GET_TOPIC_STATS_INFO (202) ``topic``: TopicStatsTable ``{"offsetTable":{<MessageQueue>:<TopicOffset>}}``
  with fastjson's object keys (``{"brokerName","queueId","topic"}``); unknown topic:
  TOPIC_NOT_EXIST.
- GET_CONSUME_STATS (208) ``consumerGroup`` [``topic``]: ConsumeStats ``offsetTable`` of
  ``OffsetWrapper{brokerOffset, consumerOffset, lastTimestamp}`` per readable queue of each topic the
  group has offsets for (or the one asked); ``consumeTps`` is 0.0 (per-group pull rates are not
  kept; ``getTransferedTps`` in the runtime info has the broker's).
- GET_CONSUMER_CONNECTION_LIST (203) ``consumerGroup``: ConsumerConnection (connections with
  clientId/clientAddr/language/version, the subscriptions as the clients sent them, consume
  type, message model, consumeFromWhere); no live consumer: CONSUMER_NOT_ONLINE (206).
- QUERY_TOPIC_CONSUME_BY_WHO (300) ``topic``: GroupList ``{"groupSet":[...]}``: groups online
  subscribing it and groups with committed offsets on it.
- TRIGGER_DELETE_FILES (27, admin-only under ACL): retention deletes expired files at its next
  rounds whatever the hour (``broker.store.clean``).

Theory of operation: read-only views over the controller's store, metadata and consumer
manager; :class:`RuntimeStats` samples the put/get counters once a second (a bounded deque)
so rates need no per-message work.
"""
from __future__ import annotations

import asyncio
import collections
import json
import os
import time
from typing import Any, Optional

from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import RequestCode as RC, ResponseCode as R
from broker.remoting.processors.common import HeaderError, Processor, field_str
from broker.remoting.server import RemotingConnection

SECRET_KEYS = frozenset({"dLegerAuthToken", "haAuthToken", "innerSecretKey", "metricsBearerToken", "secretKey"})
WINDOWS_S = (10, 60, 600)


def _json(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _mq_key(broker: str, topic: str, queue_id: int) -> str:
    return _json({"brokerName": broker, "queueId": queue_id, "topic": topic})


class RuntimeStats:
    """Counter samples once a second: rates over 10 s / 60 s / 600 s, totals at midnights."""

    def __init__(self, counters: dict[str, Any]) -> None:
        self.counters = counters  # name -> callable returning the running total
        self.samples: collections.deque[tuple[float, dict[str, float]]] = collections.deque(maxlen=max(WINDOWS_S) + 2)
        self.mornings: list[dict[str, float]] = []  # totals at the last midnights seen (newest last)
        self._day = time.localtime().tm_yday
        self._task: Optional[asyncio.Task[None]] = None
        self.hooks: list[Any] = []  # also sampled each second (broker_stats.KeyedCounts.sample)
        self.sample()

    def totals(self) -> dict[str, float]:
        return {k: float(f()) for k, f in self.counters.items()}

    def sample(self) -> None:
        now = self.totals()
        self.samples.append((time.monotonic(), now))
        for hook in self.hooks:
            hook()
        day = time.localtime().tm_yday
        if day != self._day:
            self._day = day
            self.mornings = (self.mornings + [now])[-2:]

    def start(self) -> None:
        async def run() -> None:
            while True:
                await asyncio.sleep(1.0)
                self.sample()

        self._task = asyncio.get_running_loop().create_task(run(), name="runtime-stats")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    def rate(self, name: str, window_s: int) -> float:
        t1, now = time.monotonic(), self.totals()[name]
        old = None
        for t, values in reversed(self.samples):
            old = (t, values[name])
            if t1 - t >= window_s:
                break
        if old is None or t1 - old[0] <= 0:
            return 0.0
        return max(0.0, (now - old[1]) / (t1 - old[0]))

    def rates(self, name: str) -> str:
        return " ".join(f"{self.rate(name, w):.2f}" for w in WINDOWS_S)

    def morning(self, name: str, days_ago: int) -> int:
        """Total at the midnight ``days_ago`` days back (0 = today's), 0 if this process did not see it."""
        i = len(self.mornings) - 1 - days_ago
        return int(self.mornings[i][name]) if i >= 0 else 0


class AdminStatsProcessor(Processor):
    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        m = self.c.metrics
        self.stats = RuntimeStats({
            "put": lambda: sum(v for (_t, status), v in m.put_messages.values.items() if status == "PUT_OK"),
            "get": lambda: sum(m.get_messages.values.values()),
        })

    def register(self, server: Any) -> None:
        server.register(RC.GET_BROKER_CONFIG, self.get_broker_config)
        server.register(RC.GET_BROKER_RUNTIME_INFO, self.get_broker_runtime_info)
        server.register(RC.GET_TOPIC_STATS_INFO, self.get_topic_stats_info)
        server.register(RC.GET_CONSUME_STATS, self.get_consume_stats)
        server.register(RC.GET_CONSUMER_CONNECTION_LIST, self.get_consumer_connection_list)
        server.register(RC.QUERY_TOPIC_CONSUME_BY_WHO, self.query_topic_consume_by_who)
        server.register(RC.TRIGGER_DELETE_FILES, self.trigger_delete_files)

    # ------------------------------------------------------------------ config and runtime
    async def get_broker_config(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        from broker.conf_file import to_properties  # noqa: WPS433

        props = to_properties(self.c.broker_config, self.c.store_config, only_changed=False)
        lines = [f"{k}={'******' if k in SECRET_KEYS and v else v}" for k, v in props.items()]
        version = _json({"counter": 1, "timestamp": self.c.started_ms})
        return cmd.response(R.SUCCESS, None, {"version": version}, ("\n".join(lines) + "\n").encode("utf-8"))

    def runtime_table(self) -> dict[str, str]:
        c, sa, st = self.c, self.c.store_access, self.stats
        store = sa.store
        totals = st.totals()
        put_total, get_total = totals["put"], totals["get"]
        table = {
            "brokerVersionDesc": "V4_9_8", "brokerVersion": "413", "brokerRole": c.broker_role,
            "brokerId": str(c.broker_id), "bootTimestamp": str(c.started_ms),
            "msgPutTotalYesterdayMorning": str(st.morning("put", 1)), "msgPutTotalTodayMorning": str(st.morning("put", 0)),
            "msgPutTotalTodayNow": str(int(put_total)),
            "msgGetTotalYesterdayMorning": str(st.morning("get", 1)), "msgGetTotalTodayMorning": str(st.morning("get", 0)),
            "msgGetTotalTodayNow": str(int(get_total)),
            "sendThreadPoolQueueSize": "0", "sendThreadPoolQueueCapacity": "10000",
            "pullThreadPoolQueueSize": "0", "pullThreadPoolQueueCapacity": "100000",
            "queryThreadPoolQueueSize": "0", "queryThreadPoolQueueCapacity": "20000",
            "EndTransactionQueueSize": "0", "EndTransactionThreadPoolQueueCapacity": "100000",
            "dispatchBehindBytes": str(sa.dispatch_behind_bytes()), "pageCacheLockTimeMills": "0",
            "sendThreadPoolQueueHeadWaitTimeMills": "0", "pullThreadPoolQueueHeadWaitTimeMills": "0",
            "queryThreadPoolQueueHeadWaitTimeMills": "0",
            "earliestMessageTimeStamp": str(self._earliest_timestamp(store)),
            "startAcceptSendRequestTimeStamp": "0",
            "remainHowManyDataToFlush": str(max(0, sa.max_phy_offset() - int(store.get_flushed_where() or 0))),
            "commitLogMaxOffset": str(sa.max_phy_offset()), "commitLogMinOffset": str(sa.min_phy_offset()),
            "putTps": st.rates("put"), "getTransferedTps": st.rates("get"), "getFoundTps": st.rates("get"),
            "getMissTps": "0.00 0.00 0.00", "getTotalTps": st.rates("get"),
            "putMessageTimesTotal": str(int(put_total)),
            "runtime": f"[ {int((time.time() * 1000 - c.started_ms) / 1000)} seconds ]",
        }
        table.update(self._disk(store))
        return table

    @staticmethod
    def _earliest_timestamp(store: Any) -> int:
        try:
            cl = store.commitlog
            offset = cl.min_offset
            msg = store.look_message_by_offset(offset) if offset < cl.max_offset else None
            return msg.store_timestamp if msg is not None else -1
        except Exception:  # noqa: BLE001 - a statistic: never fail the request over it
            return -1

    @staticmethod
    def _disk(store: Any) -> dict[str, str]:
        out = {}
        for key, path in (("commitLogDiskRatio", store.store_path_commitlog), ("consumeQueueDiskRatio", store.root)):
            try:
                s = os.statvfs(path)
                total = s.f_blocks * s.f_frsize
                out[key] = f"{(total - s.f_bavail * s.f_frsize) / total:.4f}" if total else "0"
                if key == "commitLogDiskRatio":
                    out["commitLogDirCapacity"] = f"Total : {total} Free : {s.f_bavail * s.f_frsize}"
            except OSError:
                out[key] = "-1"
        return out

    async def get_broker_runtime_info(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        return cmd.response(R.SUCCESS, None, body=_json({"table": self.runtime_table()}).encode())

    # ------------------------------------------------------------------ topics and consumers
    def _queue_stats(self, topic: str, queue_id: int) -> tuple[int, int, int]:
        sa = self.c.store_access
        lo, hi = sa.min_offset_in_queue(topic, queue_id), sa.max_offset_in_queue(topic, queue_id)
        return max(lo, 0), max(hi, 0), self._store_ts(topic, queue_id, hi - 1)

    def _store_ts(self, topic: str, queue_id: int, queue_offset: int) -> int:
        if queue_offset < 0:
            return 0
        store = self.c.store_access.store
        cq = store.find_consume_queue(topic, queue_id)
        unit = cq.get(queue_offset) if cq is not None else None
        if unit is None:
            return 0
        try:
            return max(0, store.commitlog.pickup_store_timestamp(unit[0], unit[1]))
        except Exception:  # noqa: BLE001 - a damaged record has no timestamp to report
            return 0

    async def get_topic_stats_info(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        try:
            topic = field_str(cmd, "topic", required=True) or ""
        except HeaderError as exc:
            return cmd.response(R.SYSTEM_ERROR, str(exc))
        tc = self.c.metadata.topic(topic)
        if tc is None:
            return cmd.response(R.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        parts = []
        for q in range(tc.write_queue_nums):
            lo, hi, ts = self._queue_stats(topic, q)
            parts.append(f"{_mq_key(self.c.broker_name, topic, q)}:"
                         + _json({"lastUpdateTimestamp": ts, "maxOffset": hi, "minOffset": lo}))
        return cmd.response(R.SUCCESS, None, body=('{"offsetTable":{' + ",".join(parts) + "}}").encode())

    async def get_consume_stats(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        try:
            group = field_str(cmd, "consumerGroup", required=True) or ""
            topic = field_str(cmd, "topic") or ""
        except HeaderError as exc:
            return cmd.response(R.SYSTEM_ERROR, str(exc))
        offsets = self.c.metadata.managers["consumerOffset"]
        topics = [topic] if topic else sorted(offsets.which_topic_by_consumer(group))
        parts = []
        for t in topics:
            tc = self.c.metadata.topic(t)
            if tc is None:
                continue
            for q in range(tc.read_queue_nums):
                broker_offset = max(0, self.c.store_access.max_offset_in_queue(t, q))
                consumer_offset = max(0, offsets.query_offset(group, t, q))
                last = self._store_ts(t, q, consumer_offset - 1)
                parts.append(f"{_mq_key(self.c.broker_name, t, q)}:" + _json(
                    {"brokerOffset": broker_offset, "consumerOffset": consumer_offset, "lastTimestamp": last}))
        body = '{"consumeTps":0.0,"offsetTable":{' + ",".join(parts) + "}}"
        return cmd.response(R.SUCCESS, None, body=body.encode())

    async def get_consumer_connection_list(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        group = cmd.ext_fields.get("consumerGroup", "")
        clients = self.ctx.consumers.groups.get(group) or {}
        if not clients:
            return cmd.response(R.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        first = next(iter(clients.values()))
        subs: dict[str, Any] = {}
        for info in clients.values():
            for topic, sub in info.subscription_data.items():
                subs.setdefault(topic, sub)
        body = {
            "connectionSet": [{"clientAddr": i.client_addr, "clientId": i.client_id, "language": i.language,
                               "version": i.version} for i in clients.values()],
            "consumeFromWhere": first.consume_from_where, "consumeType": first.consume_type,
            "messageModel": first.message_model, "subscriptionTable": subs,
        }
        return cmd.response(R.SUCCESS, None, body=_json(body).encode())

    async def query_topic_consume_by_who(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        try:
            topic = field_str(cmd, "topic", required=True) or ""
        except HeaderError as exc:
            return cmd.response(R.SYSTEM_ERROR, str(exc))
        groups = {g for g, clients in self.ctx.consumers.groups.items()
                  if any(topic in i.subscriptions for i in clients.values())}
        offsets = self.c.metadata.managers["consumerOffset"]
        groups |= {k.rsplit("@", 1)[1] for k in list(offsets.offset_table) if k.rsplit("@", 1)[0] == topic}
        return cmd.response(R.SUCCESS, None, body=_json({"groupSet": sorted(groups)}).encode())

    async def trigger_delete_files(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """TRIGGER_DELETE_FILES (27, admin): the next retention rounds delete expired files now."""
        cleaner = getattr(self.c.store_access.store, "cleaner", None)
        if cleaner is None:
            return cmd.response(R.SYSTEM_ERROR, "retention is not running on this store")
        cleaner.trigger_manual()
        return cmd.response(R.SUCCESS)
