"""What ``mqadmin`` reads: broker config, runtime info, topic and consume stats, connections.

Rules (RocketMQ 4.9.8 ``AdminBrokerProcessor``; field names checked against its sources and the
``tools`` sub-commands that read them, issue 14.4):
- GET_BROKER_CONFIG (26): body = every config key as ``key=value`` lines (``getAllConfigsFormatString``),
  header ``version`` = the DataVersion JSON. Secrets (auth tokens, secret keys) are ``******``. Apache
  keys ``exportConfigs`` reads that we have no setting for (:data:`APACHE_ONLY_KEYS`) say what we do.
- GET_BROKER_RUNTIME_INFO (28): ``{"table":{...}}`` with every key ``clusterList``/``brokerStatus``
  read, values strings as in Java: ``putTps``/``getTransferedTps``/``getFoundTps``/... are three
  rates "10s 60s 600s" (from :class:`RuntimeStats`), ``msgPutTotal*``/``msgGetTotal*`` counts
  since this process started and at the last local midnight it saw (Apache counts from its
  stats manager's day boundaries; a broker started today has 0 for the earlier mornings),
  ``commitLogDiskRatio`` (and ``commitLogDiskRatio_<path>``) the used ratio of the commitlog's
  filesystem as a Java double, ``commitLogDirCapacity`` ``Total : 252.0 GiB, Free : 70.5 GiB.`` and
  ``remainHowManyDataToFlush`` in Java's ``humanReadableByteCount`` (binary units), and
  ``earliestMessageTimeStamp`` the store timestamp of the first message: in DLedger mode the
  commitlog's min offset is an *entry* offset (its record starts ``DLEDGER_BODY_OFFSET`` later,
  and an entry may hold no message), so the first few entries are walked (issue 25.3).
  ``brokerVersion`` is 409 (what Apache 4.9.8's broker answers); ``runtime`` is
  ``[ 0 days, 1 hours, 2 minutes, 3 seconds ]``.
- The StoreStatsService keys (issue 25.6, 4.9.8's ``getRuntimeInfo``): ``putMessageEntireTimeMax``
  (ms), ``putMessageFailedTimes``, ``putMessageSizeTotal`` (body bytes put OK; Apache counts whole
  records), ``putMessageAverageSize`` (Java double), ``putMessageDistributeTime`` (Apache's 13
  buckets ``[<=0ms]:n [0~10ms]:n ... [10s~]:n `` since start; Apache prints the last minute's, or
  ``null`` in its first minute), ``putLatency99``/``putLatency999`` (``%.2f`` ms, the smallest
  whole ms under which that share of puts finished), ``dispatchMaxBuffer`` and
  ``getMessageEntireTimeMax`` (0: not measured), ``remainTransientStoreBufferNumbs``
  (``2147483647``: no transient store pool). Put times are the ones the put paths already observe
  by ``metrics.observe_put`` (HTTP and remoting), which keeps a max and a per-millisecond count in
  ``metrics.put_times`` (``broker.stats_manager.PutTimes``; bounded: 10,001 keys at most).
- GET_BROKER_CONFIG's ``brokerRole``/``brokerId`` are the live ones (a DLedger leader
  ``SYNC_MASTER``/0, a follower ``SLAVE``/its id), as Apache's role change handler sets them.
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
- GET_BROKER_CONSUME_STATS (317) ``isOrder``: ConsumeStatsList ``{"brokerAddr", "consumeStatsList":
  [{group: [ConsumeStats]}], "totalDiff"}``: for every subscription group, a ConsumeStats per topic
  it has offsets on (write queues; an online group only for topics it subscribes; with ``isOrder``
  only order topics), as Java's ``fetchAllConsumeStatsInBroker`` (``brokerConsumeStats``). Under ACL it
  needs an admin account (every group's offsets), checked here.
- QUERY_TOPIC_CONSUME_BY_WHO (300) is served by ``topic_group_admin`` (GroupList ``groupList``).
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
import math
import os
import time
from typing import Any, Optional

from broker.remoting.acl import require_found
from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import RequestCode as RC, ResponseCode as R
from broker.remoting.processors.common import HandlerRegistry, HeaderError, Processor, RemotingContext, field_str
from broker.remoting.server import RemotingConnection

from broker.store.dledger_dispatch import DLEDGER_BODY_OFFSET
from broker.stats_manager import DISTRIBUTE_BUCKETS, MS_CAP, PutTimes  # noqa: F401 - re-exported

#: Apache BrokerConfig keys ``exportConfigs`` reads that have no setting here: what this broker does
#: (no filter servers, no message trace topic of its own, no TLS on the remoting port)
APACHE_ONLY_KEYS = {"filterServerNums": "0", "msgTraceTopicName": "RMQ_SYS_TRACE_TOPIC", "traceOn": "false",
                    "traceTopicEnable": "false", "useTLS": "false"}
SECRET_KEYS = frozenset({"dLegerAuthToken", "haAuthToken", "innerSecretKey", "metricsBearerToken", "secretKey"})
WINDOWS_S = (10, 60, 600)
EARLIEST_SCAN_ENTRIES = 64  # DLedger entries walked for the first message (non-message entries are rare)
JAVA_INT_MAX = 2147483647


def _json(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _mq_key(broker: str, topic: str, queue_id: int) -> str:
    return _json({"brokerName": broker, "queueId": queue_id, "topic": topic})


def java_double(value: float) -> str:
    """``String.valueOf(double)`` for the plain values these tables hold (``175.0``, ``0.31``)."""
    text = repr(float(value))
    return text if "e" not in text else f"{value:.17g}"


def human_bytes(n: int) -> str:
    """Java ``MixAll.humanReadableByteCount(bytes, false)``: ``0 B``, ``1.5 KiB``, ``252.0 GiB``."""
    if n < 1024:
        return f"{n} B"
    exp = min(int(math.log(n) / math.log(1024)), 6)
    return f"{n / 1024 ** exp:.1f} {'KMGTPE'[exp - 1]}iB"


def format_runtime(ms: int) -> str:
    """StoreStatsService's ``[ 0 days, 1 hours, 2 minutes, 3 seconds ]``."""
    secs = max(0, ms) // 1000
    return f"[ {secs // 86400} days, {secs % 86400 // 3600} hours, {secs % 3600 // 60} minutes, {secs % 60} seconds ]"


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
        """Three windows as Java's ``StoreStatsService`` prints them (``String.valueOf(double)``)."""
        return " ".join(java_double(self.rate(name, w)) for w in WINDOWS_S)

    def morning(self, name: str, days_ago: int) -> int:
        """Total at the midnight ``days_ago`` days back (0 = today's), 0 if this process did not see it."""
        i = len(self.mornings) - 1 - days_ago
        return int(self.mornings[i][name]) if i >= 0 else 0


def _dledger_entry_size(cl: Any, offset: int) -> int:
    """Size of the DLedger entry at ``offset`` (-1: not one, or a classic commitlog)."""
    entry_size_at = getattr(cl, "entry_size_at", None)
    if entry_size_at is None:
        return -1
    data = cl.get_data(offset)
    return int(entry_size_at(data.buffer, 0, offset)) if data is not None else -1


class AdminStatsProcessor(Processor):
    def __init__(self, ctx: RemotingContext) -> None:
        super().__init__(ctx)
        m = self.c.metrics
        self.stats = RuntimeStats({
            "put": lambda: sum(v for (_t, status), v in m.put_messages.values.items() if status == "PUT_OK"),
            "get": lambda: sum(m.get_messages.values.values()),
        })
        self.put_times: PutTimes = m.put_times

    def register(self, server: HandlerRegistry) -> None:
        server.register(RC.GET_BROKER_CONFIG, self.get_broker_config)
        server.register(RC.GET_BROKER_RUNTIME_INFO, self.get_broker_runtime_info)
        server.register(RC.GET_TOPIC_STATS_INFO, self.get_topic_stats_info)
        server.register(RC.GET_CONSUME_STATS, self.get_consume_stats)
        server.register(RC.GET_CONSUMER_CONNECTION_LIST, self.get_consumer_connection_list)
        server.register(RC.TRIGGER_DELETE_FILES, self.trigger_delete_files)
        server.register(RC.GET_BROKER_CONSUME_STATS, self.get_broker_consume_stats)

    # ------------------------------------------------------------------ config and runtime
    async def get_broker_config(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        from broker.config.conf_file import to_properties  # noqa: WPS433

        props = to_properties(self.c.broker_config, self.c.store_config, only_changed=False)
        props["brokerRole"], props["brokerId"] = str(self.c.broker_role), str(self.c.broker_id)  # live (issue 25.3)
        for key, value in APACHE_ONLY_KEYS.items():
            props.setdefault(key, value)
        lines = [f"{k}={'******' if k in SECRET_KEYS and v else v}" for k, v in props.items()]
        version = _json({"counter": 1, "timestamp": self.c.started_ms})
        return cmd.response(R.SUCCESS, None, {"version": version}, ("\n".join(lines) + "\n").encode("utf-8"))

    def runtime_table(self) -> dict[str, str]:
        c, sa, st = self.c, self.store, self.stats
        store = sa.store
        totals = st.totals()
        put_total, get_total = totals["put"], totals["get"]
        table = {
            "brokerVersionDesc": "V4_9_8", "brokerVersion": "409", "bootTimestamp": str(c.started_ms),
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
            "remainHowManyDataToFlush": human_bytes(max(0, sa.max_phy_offset() - int(store.get_flushed_where() or 0))),
            "remainTransientStoreBufferNumbs": str(JAVA_INT_MAX),
            "commitLogMaxOffset": str(sa.max_phy_offset()), "commitLogMinOffset": str(sa.min_phy_offset()),
            "putTps": st.rates("put"), "getTransferedTps": st.rates("get"), "getFoundTps": st.rates("get"),
            "getMissTps": "0.0 0.0 0.0", "getTotalTps": st.rates("get"),
            "putMessageTimesTotal": str(max(1, int(put_total))),  # Apache: 1 when nothing was put
            "runtime": format_runtime(int(time.time() * 1000 - c.started_ms)),
        }
        table.update(self._put_stats(max(1, int(put_total))))
        table.update(self._disk(store))
        return table

    def _put_stats(self, put_times_total: int) -> dict[str, str]:
        m, pt = self.c.metrics, self.put_times
        size_total = int(sum(m.put_bytes.values.values()))
        failed = int(sum(v for (_t, status), v in m.put_messages.values.items() if status != "PUT_OK"))
        return {
            "putMessageEntireTimeMax": str(pt.max_ms), "putMessageFailedTimes": str(failed),
            "putMessageSizeTotal": str(size_total),
            "putMessageAverageSize": java_double(size_total / put_times_total),
            "putMessageDistributeTime": pt.distribution(),
            "putLatency99": f"{pt.percentile(0.99):.2f}", "putLatency999": f"{pt.percentile(0.999):.2f}",
            "dispatchMaxBuffer": "0", "getMessageEntireTimeMax": "0",
        }

    @staticmethod
    def _earliest_timestamp(store: Any) -> int:
        """Store timestamp of the first message at or after the commitlog's min offset, or -1."""
        try:
            cl = store.commitlog
            offset, end = cl.min_offset, cl.max_offset
            for _ in range(EARLIEST_SCAN_ENTRIES):
                if offset >= end:
                    return -1
                msg = store.look_message_by_offset(offset)  # a record offset: classic, old region
                if msg is not None:
                    return int(msg.store_timestamp)
                size = _dledger_entry_size(cl, offset)
                if size <= 0:
                    return -1
                msg = store.look_message_by_offset(offset + DLEDGER_BODY_OFFSET)
                if msg is not None:
                    return int(msg.store_timestamp)
                offset += size  # an entry without a message: the next one
            return -1
        except Exception:  # noqa: BLE001 - a statistic: never fail the request over it
            return -1

    @staticmethod
    def _disk(store: Any) -> dict[str, str]:
        out = {}
        cl_path = str(store.store_path_commitlog)
        for key, path in (("commitLogDiskRatio", cl_path), ("consumeQueueDiskRatio", store.root)):
            try:
                s = os.statvfs(path)
                total = s.f_blocks * s.f_frsize
                out[key] = java_double((total - s.f_bavail * s.f_frsize) / total) if total else "0.0"
                if key == "commitLogDiskRatio":
                    out[f"commitLogDiskRatio_{cl_path}"] = out[key]
                    out["commitLogDirCapacity"] = (f"Total : {human_bytes(total)}, "
                                                   f"Free : {human_bytes(s.f_bavail * s.f_frsize)}.")
            except OSError:
                out[key] = "-1.0"
        return out

    async def get_broker_runtime_info(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        return cmd.response(R.SUCCESS, None, body=_json({"table": self.runtime_table()}).encode())

    # ------------------------------------------------------------------ topics and consumers
    def _queue_stats(self, topic: str, queue_id: int) -> tuple[int, int, int]:
        sa = self.store
        lo, hi = sa.min_offset_in_queue(topic, queue_id), sa.max_offset_in_queue(topic, queue_id)
        return max(lo, 0), max(hi, 0), self._store_ts(topic, queue_id, hi - 1)

    def _store_ts(self, topic: str, queue_id: int, queue_offset: int) -> int:
        if queue_offset < 0:
            return 0
        cq = self.store.store.find_consume_queue(topic, queue_id)
        unit = cq.get(queue_offset) if cq is not None else None
        if unit is None:
            return 0
        try:
            return max(0, self.store.commitlog.pickup_store_timestamp(unit[0], unit[1]))
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
                broker_offset = max(0, self.store.max_offset_in_queue(t, q))
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

    async def trigger_delete_files(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        """TRIGGER_DELETE_FILES (27, admin): the next retention rounds delete expired files now."""
        cleaner = getattr(self.store.store, "cleaner", None)
        if cleaner is None:
            return cmd.response(R.SYSTEM_ERROR, "retention is not running on this store")
        cleaner.trigger_manual()
        return cmd.response(R.SUCCESS)

    async def get_broker_consume_stats(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        require_found({}, admin_for="every group's offsets")  # as query-all-offsets (broker.remoting.permissions)
        is_order = str(cmd.ext_fields.get("isOrder", "false")).lower() == "true"
        md, sa = self.c.metadata, self.store
        offsets = md.managers["consumerOffset"]
        groups = sorted(md.managers["subscriptionGroup"].subscription_group_table)
        total_diff = 0
        parts = []
        for group in groups:
            online = self.ctx.consumers.groups.get(group, {})
            stats = []
            for topic in sorted(offsets.which_topic_by_consumer(group)):
                tc = md.topic(topic)
                if tc is None or (is_order and not getattr(tc.raw, "order", False)):
                    continue
                if online and not any(topic in i.subscriptions for i in online.values()):
                    continue
                rows = []
                for q in range(tc.write_queue_nums):
                    broker_offset = max(0, sa.max_offset_in_queue(topic, q))
                    consumer_offset = max(0, offsets.query_offset(group, topic, q))
                    total_diff += broker_offset - consumer_offset
                    wrapper = {"brokerOffset": broker_offset, "consumerOffset": consumer_offset,
                               "lastTimestamp": self._store_ts(topic, q, consumer_offset - 1)}
                    rows.append(f"{_mq_key(self.c.broker_name, topic, q)}:{_json(wrapper)}")
                stats.append('{"consumeTps":0.0,"offsetTable":{' + ",".join(rows) + "}}")
            parts.append("{" + _json(group) + ":[" + ",".join(stats) + "]}")
        addr = f"{self.c.broker_ip}:{self.c.listen_port}"
        body = '{"brokerAddr":' + _json(addr) + ',"consumeStatsList":[' + ",".join(parts) + '],"totalDiff":' \
            + str(total_diff) + "}"
        return cmd.response(R.SUCCESS, None, body=body.encode())
