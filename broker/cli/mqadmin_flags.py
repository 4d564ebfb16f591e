"""Apache 4.9.8 mqadmin flags of the sub-commands our mqadmin already had (issue 25).

Rules (each as Apache's ``*SubCommand`` of 4.9.8):
- ``clusterList -m``: ClusterListSubCommand.printClusterMoreStats: ``#Cluster Name #Broker Name
  #InTotalYest #OutTotalYest #InTotalToday #OutTotalToday``, from GET_BROKER_RUNTIME_INFO's
  ``msgPut/GetTotal{YesterdayMorning,TodayMorning,TodayNow}`` (yest = today morning - yesterday
  morning, today = now - today morning; a broker that does not answer prints zeros). With ``-n``
  (and no ``-b``) every broker of every cluster the name server lists, clusters and broker names
  sorted, ids ascending; with ``-b`` those brokers (cluster and name from GET_BROKER_CONFIG).
  ``-i SECONDS`` prints again every SECONDS until Ctrl-C (exit 130, no traceback); ``--count N``
  (ours) stops after N prints.
- ``topicList -c``: TopicListSubCommand's cluster model: every topic of the name server but
  ``%RETRY%``/``%DLQ%`` ones, its cluster (the one holding the first broker of its route) and each
  group QUERY_TOPIC_CONSUME_BY_WHO of that broker lists (a blank group when none); Apache's widths
  (header 20/48/48, rows 20/64/64, values cut to the width). Without ``-n``: the ``-b`` brokers'
  topics (GET_ALL_TOPIC_CONFIG), their cluster and groups.
- ``consumeMessage -s/-e``: times as ``currentTimeMillis`` or ``yyyy-MM-dd#HH:mm:ss:SSS`` (local);
  each queue is read from SEARCH_OFFSET_BY_TIMESTAMP(begin) (or ``-o`` when later) up to
  SEARCH_OFFSET_BY_TIMESTAMP(end) inclusive, and only messages whose store time is within
  [begin, end] are printed (Apache prints the message at the end offset even when it was stored
  after the end time). A time after now, or begin after end, is a usage error (Apache's messages).
- ``updateTopic`` sends UPDATE_AND_CREATE_TOPIC (17) as Apache's client: read/write queues 8 and
  perm 6 unless given, ``order`` from ``-o``, ``topicSysFlag`` 0; it prints Apache's
  ``TopicConfig [...]``. ``-o true`` with ``-n`` also writes the name server's ORDER_TOPIC_CONFIG
  ``brokerName:writeQueueNums`` (merged for ``-b``, replaced for ``-c``) as Apache; without ``-n``
  only the broker's topic is ordered. ``-u true`` / ``-s true``: unit topics are not supported.
- ``sendMessage -m true``: message trace is not supported (``false`` accepted).
- ``queryMsgById -g G -d CLIENT``: CONSUME_MESSAGE_DIRECTLY (309, ``consumerGroup, clientId,
  msgId``) to the msgId's store host; prints ``ConsumeMessageDirectlyResult [...]`` as Apache.
  ``-s true`` resends each message (its topic, tags, keys, body and user properties) to ``-b``
  and prints ``prepare resend msg. originalMsgId=...`` and the send result; it gets a NEW
  UNIQ_KEY (Apache keeps the old one, which this broker's retry dedup would answer without
  storing). ``-s false`` alone does nothing, as Apache. ``-u`` is accepted and ignored.
- ``-i``/``-m``/``-c`` commas: ``queryMsgById -i`` takes ``id,id`` for ``-g -d`` and ``-s``.

Theory of operation: helpers called from :mod:`broker.cli.mqadmin`'s commands; remoting through
:func:`mqadmin_stats.call` (the broker's listen port serves remoting and HTTP). A usage mistake
found after parsing raises :class:`UsageError` (one line, exit 2).
"""
from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import sys
import time
from typing import Any, Callable, Optional

from broker.cli import mqadmin_stats
from broker.cli.mqadmin_stats import RemoteError, _loads, call
from broker.remoting.codes import RequestCode as RC

ORDER_NAMESPACE = "ORDER_TOPIC_CONFIG"
QUERY_NOT_FOUND = 22
SYSTEM_PROPERTIES = frozenset({"UNIQ_KEY", "CLUSTER", "KEYS", "TAGS", "WAIT", "MSG_REGION", "TRACE_ON", "REAL_TOPIC",
                               "REAL_QID", "DELAY", "MIN_OFFSET", "MAX_OFFSET", "RETRY_TOPIC", "ORIGIN_MESSAGE_ID",
                               "RECONSUME_TIME", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME", "TRAN_MSG",
                               "PGROUP", "__STARTDELIVERTIME"})


class UsageError(Exception):
    """A mistake in the command line found after parsing: one line, exit 2."""


def true_false(value: str) -> bool:
    v = value.strip().lower()
    if v not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, not {value!r}")
    return v == "true"


def refuse_true(flag: bool, what: str) -> None:
    if flag:
        raise UsageError(f"{what} not supported by this broker")


# ---------------------------------------------------------------------------- clusterList -m / -i
def repeat(args: argparse.Namespace, once: Callable[[argparse.Namespace], int]) -> int:
    """``once`` and, with ``-i``, again every interval (``--count`` times at most); Ctrl-C is 130."""
    if args.interval is None and args.count is not None:
        raise UsageError("--count needs -i SECONDS")
    if args.interval is not None and args.interval < 0:
        raise UsageError(f"-i {args.interval}: the interval must be >= 0 seconds")
    if args.count is not None and args.count < 1:
        raise UsageError(f"--count {args.count}: must be >= 1")
    done, rc = 0, 0
    try:
        while True:
            if done:
                time.sleep(args.interval)
            rc = once(args)
            sys.stdout.flush()
            done += 1
            if args.interval is None or (args.count is not None and done >= args.count):
                return rc
    except KeyboardInterrupt:
        return 130


def _more_row(cluster: str, name: str, table: Optional[dict[str, Any]]) -> str:
    vals = [0, 0, 0, 0]
    if table is not None:
        try:  # as Apache: each total in turn, the rest 0 once a key is missing
            g = {k: int(str(table[k])) for k in ("msgPutTotalYesterdayMorning", "msgPutTotalTodayMorning")}
            vals[0] = g["msgPutTotalTodayMorning"] - g["msgPutTotalYesterdayMorning"]
            g.update({k: int(str(table[k])) for k in ("msgGetTotalYesterdayMorning", "msgGetTotalTodayMorning")})
            vals[1] = g["msgGetTotalTodayMorning"] - g["msgGetTotalYesterdayMorning"]
            vals[2] = int(str(table["msgPutTotalTodayNow"])) - g["msgPutTotalTodayMorning"]
            vals[3] = int(str(table["msgGetTotalTodayNow"])) - g["msgGetTotalTodayMorning"]
        except (KeyError, ValueError):
            pass
    return f"{cluster:<16s}  {name:<32s} {vals[0]:>14d} {vals[1]:>14d} {vals[2]:>14d} {vals[3]:>14d}"


async def _runtime(args: argparse.Namespace, addr: str) -> Optional[dict[str, Any]]:
    try:
        return dict(_loads((await call(args, addr, RC.GET_BROKER_RUNTIME_INFO)).body).get("table", {}))
    except (RemoteError, ValueError, AttributeError):
        return None


async def _names(args: argparse.Namespace, addr: str) -> tuple[str, str]:
    """(brokerClusterName, brokerName) from GET_BROKER_CONFIG."""
    cfg: dict[str, str] = {}
    for line in (await call(args, addr, RC.GET_BROKER_CONFIG)).body.decode("utf-8").splitlines():
        k, _, v = line.partition("=")
        cfg[k.strip()] = v.strip()
    return cfg.get("brokerClusterName", "?"), cfg.get("brokerName", "?")


async def _cluster_more_stats(args: argparse.Namespace) -> int:
    print(f"{'#Cluster Name':<16s}  {'#Broker Name':<32s} {'#InTotalYest':>14s} {'#OutTotalYest':>14s} "
          f"{'#InTotalToday':>14s} {'#OutTotalToday':>14s}")
    addrs = [a for part in (args.broker_addrs or []) for a in part.split(",") if a]
    if addrs:
        worst = 0
        for addr in addrs:
            try:
                cluster, name = await _names(args, addr)
            except RemoteError as exc:
                print(f"mqadmin: {addr}: {exc.remark}", file=sys.stderr)
                worst = 3 if exc.unreachable else max(worst, 1)
                continue
            print(_more_row(cluster, name, await _runtime(args, addr)))
        return worst
    info = await mqadmin_stats._cluster_info(args)  # noqa: SLF001
    for cluster in sorted(info.get("clusterAddrTable") or {}):
        for name in sorted(set(info["clusterAddrTable"][cluster] or [])):
            bd = (info.get("brokerAddrTable") or {}).get(name)
            if bd is None:
                continue
            brokers = bd.get("brokerAddrs") or {}
            for bid in sorted(brokers, key=int):
                print(_more_row(cluster, name, await _runtime(args, brokers[bid])))
    return 0


def cluster_more_stats(args: argparse.Namespace) -> int:
    return asyncio.run(_cluster_more_stats(args))


# ---------------------------------------------------------------------------- topicList -c
def _cut(value: Optional[str], size: int) -> str:
    return "null" if value is None else value[:size]


async def _namesrv(args: argparse.Namespace, code: int, fields: Optional[dict[str, Any]] = None) -> Any:
    last: Optional[RemoteError] = None
    for ns in args.namesrv.split(";"):
        try:
            return await call(args, ns, code, fields)
        except RemoteError as exc:
            last = exc
            if not exc.unreachable:
                raise
    raise last or RemoteError(-2, "no name server")


async def _topic_cluster_rows(args: argparse.Namespace) -> list[tuple[Optional[str], str, str]]:
    rows: list[tuple[Optional[str], str, str]] = []
    if args.namesrv and not args.user_broker:
        info = await mqadmin_stats._cluster_info(args)  # noqa: SLF001
        topics = _loads((await _namesrv(args, RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)).body).get("topicList", [])
        for topic in sorted(topics):
            if topic.startswith((mqadmin_stats.RETRY_PREFIX, mqadmin_stats.DLQ_PREFIX)):
                continue
            cluster: Optional[str] = ""
            groups: list[str] = []
            try:
                route = _loads((await _namesrv(args, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})).body)
                bd = (route.get("brokerDatas") or [])[0]
                cluster = next((c for c, names in (info.get("clusterAddrTable") or {}).items()
                                if bd.get("brokerName") in (names or [])), None)
                addrs = {str(k): v for k, v in (bd.get("brokerAddrs") or {}).items()}
                addr = addrs.get("0") or next(iter(addrs.values()), None)
                if addr:
                    body = (await call(args, addr, RC.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic})).body
                    groups = sorted(_loads(body).get("groupList", []))
            except (RemoteError, IndexError, ValueError, AttributeError):
                pass
            rows.extend((cluster, topic, g) for g in (groups or [""]))
        return rows
    seen: dict[str, tuple[str, set[str]]] = {}
    for addr in [a for part in args.broker_addrs for a in part.split(",") if a]:
        cluster_name, _name = await _names(args, addr)
        table = _loads((await call(args, addr, RC.GET_ALL_TOPIC_CONFIG)).body).get("topicConfigTable", {})
        for topic in table:
            if topic.startswith((mqadmin_stats.RETRY_PREFIX, mqadmin_stats.DLQ_PREFIX)):
                continue
            body = (await call(args, addr, RC.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic})).body
            entry = seen.setdefault(topic, (cluster_name, set()))
            entry[1].update(_loads(body).get("groupList", []))
    for topic in sorted(seen):
        cluster_name, group_set = seen[topic]
        rows.extend((cluster_name, topic, g) for g in (sorted(group_set) or [""]))
    return rows


def topic_list_clusters(args: argparse.Namespace) -> int:
    rows = asyncio.run(_topic_cluster_rows(args))
    if args.json:
        print(json.dumps([{"cluster": c, "topic": t, "group": g} for c, t, g in rows], indent=2))
        return 0
    print(f"{'#Cluster Name':<20s}  {'#Topic':<48s}  {'#Consumer Group':<48s}")
    for c, t, g in rows:
        print(f"{_cut(c, 20):<20s}  {_cut(t, 64):<64s}  {_cut(g, 64):<64s}")
    return 0


# ---------------------------------------------------------------------------- consumeMessage -s / -e
def parse_time(value: str, flag: str) -> int:
    """``currentTimeMillis`` or ``yyyy-MM-dd#HH:mm:ss:SSS`` (local time) -> ms."""
    v = value.strip()
    try:
        return int(v)
    except ValueError:
        pass
    try:
        dt = datetime.datetime.strptime(v, "%Y-%m-%d#%H:%M:%S:%f")
    except ValueError:
        raise UsageError(f"{flag} {value}: expected currentTimeMillis or yyyy-MM-dd#HH:mm:ss:SSS") from None
    return int(time.mktime(dt.timetuple())) * 1000 + dt.microsecond // 1000


def time_window(args: argparse.Namespace) -> Optional[tuple[int, int]]:
    """(begin, end) in ms (0 = not given), or None without ``-s``/``-e``; Apache's checks."""
    if args.begin is None and args.end is None:
        return None
    now = int(time.time() * 1000)
    begin = parse_time(args.begin, "-s") if args.begin is not None else 0
    end = parse_time(args.end, "-e") if args.end is not None else 0
    if begin > now:
        raise UsageError("Please set the beginTimestamp before now!")
    if end > now:
        raise UsageError("Please set the endTimestamp before now!")
    if args.end is not None and begin > end:
        raise UsageError("Please make sure that the beginTimestamp is less than or equal to the endTimestamp")
    return begin, end


def search_offset(args: argparse.Namespace, addr: str, topic: str, queue_id: int, ts: int) -> int:
    r = asyncio.run(call(args, addr, RC.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": topic, "queueId": queue_id, "timestamp": ts}))
    return int(r.ext_fields.get("offset", 0))


def in_window(m: dict[str, Any], window: tuple[int, int]) -> bool:
    ts = int(m.get("storeTimestamp", 0))
    begin, end = window
    return ts >= begin and (not end or ts <= end)


# ---------------------------------------------------------------------------- updateTopic
def _perm_string(perm: int) -> str:
    return ("R" if perm & 4 else "-") + ("W" if perm & 2 else "-") + ("X" if perm & 1 else "-")


def topic_config(args: argparse.Namespace) -> dict[str, Any]:
    refuse_true(args.unit, "-u true: unit topics are")
    refuse_true(args.has_unit_sub, "-s true: unit topics (hasUnitSub) are")
    return {"topicName": args.topic.strip(),
            "readQueueNums": 8 if args.read_queue_nums is None else args.read_queue_nums,
            "writeQueueNums": 8 if args.write_queue_nums is None else args.write_queue_nums,
            "perm": 6 if args.perm is None else args.perm, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0,
            "order": bool(args.order)}


def topic_config_line(tc: dict[str, Any]) -> str:
    return (f"TopicConfig [topicName={tc['topicName']}, readQueueNums={tc['readQueueNums']}, writeQueueNums="
            f"{tc['writeQueueNums']}, perm={_perm_string(int(tc['perm']))}, topicFilterType={tc['topicFilterType']}, "
            f"topicSysFlag={tc['topicSysFlag']}, order={str(tc['order']).lower()}]")


def create_topic(args: argparse.Namespace, addr: str, tc: dict[str, Any]) -> None:
    fields = {"topic": tc["topicName"], "defaultTopic": "TBW102", "readQueueNums": tc["readQueueNums"],
              "writeQueueNums": tc["writeQueueNums"], "perm": tc["perm"], "topicFilterType": tc["topicFilterType"],
              "topicSysFlag": tc["topicSysFlag"], "order": str(tc["order"]).lower()}
    asyncio.run(call(args, addr, RC.UPDATE_AND_CREATE_TOPIC, fields))


async def _order_conf(args: argparse.Namespace, tc: dict[str, Any], addrs: list[str], cluster: bool) -> str:
    info = await mqadmin_stats._cluster_info(args)  # noqa: SLF001
    table = info.get("brokerAddrTable") or {}
    if cluster:
        names = sorted(set((info.get("clusterAddrTable") or {}).get(args.cluster) or []))
    else:
        names = [n for n, bd in sorted(table.items()) if set((bd.get("brokerAddrs") or {}).values()) & set(addrs)][:1]
    confs: dict[str, str] = {}
    if not cluster:  # one broker: merged into what the name server holds
        try:
            old = (await _namesrv(args, RC.GET_KV_CONFIG, {"namespace": ORDER_NAMESPACE, "key": tc["topicName"]}))
            for item in (old.ext_fields.get("value") or "").split(";"):
                if ":" in item:
                    confs[item.split(":", 1)[0]] = item.split(":", 1)[1]
        except RemoteError as exc:
            if exc.unreachable or exc.code != QUERY_NOT_FOUND:
                raise
    for n in names:
        confs[n] = str(tc["writeQueueNums"])
    value = ";".join(f"{k}:{v}" for k, v in confs.items())
    await _namesrv(args, RC.PUT_KV_CONFIG, {"namespace": ORDER_NAMESPACE, "key": tc["topicName"], "value": value})
    return value if cluster else ";".join(f"{n}:{tc['writeQueueNums']}" for n in names)


def order_conf(args: argparse.Namespace, tc: dict[str, Any], addrs: list[str], cluster: bool) -> str:
    """Write the name server's ORDER_TOPIC_CONFIG for the topic; the orderConf Apache prints."""
    return asyncio.run(_order_conf(args, tc, addrs, cluster))


# ---------------------------------------------------------------------------- queryMsgById -g -d / -s
def store_host(msg_id: str) -> str:
    from broker.store.message_id import decode_message_id  # noqa: WPS433 - the msgId layout

    try:
        (host, port), _offset = decode_message_id(msg_id)
    except ValueError as exc:
        raise UsageError(f"-i {msg_id}: not an offset message id ({exc})") from None
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _java(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def consume_directly(args: argparse.Namespace, msg_id: str) -> str:
    """CONSUME_MESSAGE_DIRECTLY at the msgId's store host; Apache's ``ConsumeMessageDirectlyResult`` line."""
    addr = store_host(msg_id)
    r = asyncio.run(call(args, addr, RC.CONSUME_MESSAGE_DIRECTLY,
                         {"consumerGroup": args.consumer_group.strip(), "clientId": args.client_id.strip(), "msgId": msg_id}))
    if not r.body:
        raise RemoteError(r.code, f"{addr} answered no ConsumeMessageDirectlyResult body")
    d = _loads(r.body)
    return (f"ConsumeMessageDirectlyResult [order={_java(d.get('order', False))}, autoCommit="
            f"{_java(d.get('autoCommit', True))}, consumeResult={_java(d.get('consumeResult'))}, remark="
            f"{_java(d.get('remark'))}, spentTimeMills={_java(d.get('spentTimeMills', 0))}]")


def resend_fields(m: dict[str, Any]) -> dict[str, Any]:
    """What a resend carries: tags, keys and the user properties of the stored message."""
    props = {k: str(v) for k, v in (m.get("properties") or {}).items() if k not in SYSTEM_PROPERTIES}
    return {"tags": m.get("tags") or None, "keys": m.get("keys") or None, "properties": props or None}


def send_result_line(uniq: str, topic: str, addr: str, data: dict[str, Any]) -> str:
    return (f"SendResult [sendStatus={data.get('status')}, msgId={uniq}, offsetMsgId={data.get('msgId')}, "
            f"messageQueue=MessageQueue [topic={topic}, brokerName={data.get('brokerName', addr)}, queueId="
            f"{data.get('queueId')}], queueOffset={data.get('queueOffset')}]")


def add_flags(sub: dict[str, argparse.ArgumentParser]) -> None:
    """The flags of this module on mqadmin's sub-parsers (by command name)."""
    sp = sub["clusterList"]
    sp.add_argument("-m", "--moreStats", dest="more_stats", action="store_true",
                    help="Apache's #InTotalYest #OutTotalYest #InTotalToday #OutTotalToday table")
    sp.add_argument("-i", "--interval", type=int, help="print again every SECONDS until Ctrl-C (exit 130)")
    sp.add_argument("--count", type=int, help="(ours) with -i: stop after N prints")
    sub["topicList"].add_argument("-c", "--clusterModel", dest="cluster_model", action="store_true",
                                  help="Apache's #Cluster Name #Topic #Consumer Group table")
    sp = sub["consumeMessage"]
    sp.add_argument("-s", "--beginTimestamp", dest="begin", metavar="TIME",
                    help="first store time: currentTimeMillis or yyyy-MM-dd#HH:mm:ss:SSS")
    sp.add_argument("-e", "--endTimestamp", dest="end", metavar="TIME", help="last store time (inclusive), same forms")
    sp = sub["updateTopic"]
    sp.add_argument("-o", "--order", type=true_false, default=False, metavar="true|false", help="an ordered topic")
    sp.add_argument("-u", "--unit", type=true_false, default=False, metavar="false",
                    help="unit topic: only false (unit topics are not supported)")
    sp.add_argument("-s", "--hasUnitSub", dest="has_unit_sub", type=true_false, default=False, metavar="false",
                    help="has unit sub: only false (unit topics are not supported)")
    sub["sendMessage"].add_argument("-m", "--msgTraceEnable", dest="msg_trace", type=true_false, default=False,
                                    metavar="false", help="only false (message trace is not supported)")
    sp = sub["queryMsgById"]
    sp.add_argument("-g", "--consumerGroup", dest="consumer_group",
                    help="with -d: have the broker push the message to that consumer (CONSUME_MESSAGE_DIRECTLY)")
    sp.add_argument("-d", "--clientId", dest="client_id", help="the consumer's client id (with -g)")
    sp.add_argument("-s", "--sendMessage", dest="resend", type=true_false, metavar="true|false",
                    help="true: send the message again (new UNIQ_KEY) to -b; false alone does nothing, as Apache")
    sp.add_argument("-u", "--unitName", dest="unit_name",
                    help="accepted and ignored: unit topics are not supported by this broker")
