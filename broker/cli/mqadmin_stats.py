"""mqadmin's remoting read commands: getBrokerConfig, brokerStatus, consumerProgress,
consumerConnection, statsAll (issue 25.6).

Rules:
- Names, flags and printed lines are Apache 4.9.8 mqadmin's (``GetBrokerConfigCommand``,
  ``BrokerStatusSubCommand``, ``ConsumerProgressSubCommand``, ``ConsumerConnectionSubCommand``,
  ``StatsAllSubCommand``): ``-b`` broker address(es), ``-c`` cluster and ``-n`` name server
  (``host:port[;host:port]``), ``-g`` group, ``-t`` topic, ``-a`` active topics only.
- Brokers asked: ``-b`` (comma-separated) when given, else every master (brokerId 0) the name
  server lists (of cluster ``-c`` if given); ``clusterList -n`` asks every broker it lists. Our brokers speak remoting on their listen port, so
  ``-b`` is the same address the HTTP commands take.
- consumerProgress without ``-g`` lists the groups of every ``%RETRY%<group>`` topic (name
  server's topic list, or the ``-b`` brokers'), as Apache. One difference, because the data is
  not kept here: ``-s`` (``#Client IP``) prints ``N/A`` (Apache asks each client for its
  running info).
- A broker that answers an error: ``CODE: remark`` on stderr, exit 1; unreachable: exit 3.

Theory of operation: one asyncio run per command over :class:`RemotingClient` connections
(signed with the ACL account when one is given); bodies are fastjson JSON, whose MessageQueue
map keys are objects, read with a pattern.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from typing import Any, Callable, Optional

from broker.remoting.client import RemotingClient
from broker.tasks import wait_for
from broker.remoting.codes import RequestCode as RC

RETRY_PREFIX, DLQ_PREFIX = "%RETRY%", "%DLQ%"
# MQVersion.Version ordinals (4.9.8's enum): regular from V3_9_1_SNAPSHOT (194) to V5_9_9 (611),
# a SNAPSHOT then a release per x.y.z; 612 and above HIGHER_VERSION; older 3.x names print as numbers
REGULAR_FROM, REGULAR_FROM_VERSION, HIGHER_VERSION = 194, 391, 612
_MQ_ENTRY = re.compile(rb'(\{"brokerName":[^{}]*\}):(\{[^{}]*\})')


class RemoteError(Exception):
    def __init__(self, code: int, remark: str, unreachable: bool = False) -> None:
        super().__init__(f"{code}: {remark}")
        self.code, self.remark, self.unreachable = code, remark, unreachable


def _split(addr: str) -> tuple[str, int]:
    host, _, port = addr.strip().rpartition(":")
    return host or "127.0.0.1", int(port)


async def call(args: argparse.Namespace, addr: str, code: int, fields: Optional[dict[str, Any]] = None) -> Any:
    """One request; the response command (code 0) or :class:`RemoteError`."""
    hook = None
    if getattr(args, "credentials", None):
        from broker.remoting.acl import signer  # noqa: WPS433

        hook = signer(*args.credentials)
    host, port = _split(addr)
    try:
        cl = await wait_for(RemotingClient.connect(host, port, rpc_hook=hook), args.timeout)
    except (OSError, asyncio.TimeoutError) as exc:
        raise RemoteError(-1, f"connect to {addr} failed: {exc}", unreachable=True) from exc
    try:
        r = await cl.request(code, {k: str(v) for k, v in (fields or {}).items()}, timeout=args.timeout)
    except (ConnectionError, asyncio.TimeoutError) as exc:
        raise RemoteError(-1, f"{addr}: {exc or type(exc).__name__}", unreachable=True) from exc
    finally:
        await cl.close()
    if r.code != 0:
        raise RemoteError(r.code, r.remark or "")
    return r


def _loads(body: bytes) -> Any:
    """fastjson JSON: integer map keys may be bare (``{0:"addr"}``)."""
    text = body.decode("utf-8")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return json.loads(re.sub(r'([{,])(-?\d+):', r'\1"\2":', text))


def mq_entries(body: bytes) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(json.loads(k), json.loads(v)) for k, v in _MQ_ENTRY.findall(body)]


async def brokers(args: argparse.Namespace, every_id: bool = False) -> list[str]:
    """``-b`` addresses, else the masters the name server lists (cluster ``-c`` only, if given;
    ``every_id``: slaves too, by broker name then id)."""
    if args.broker_addrs:
        return [a for part in args.broker_addrs for a in part.split(",") if a]
    info = await _cluster_info(args)
    names = None
    if getattr(args, "cluster", None):
        names = set(info.get("clusterAddrTable", {}).get(args.cluster, []))
    out: list[str] = []
    for name, data in sorted(info.get("brokerAddrTable", {}).items()):
        if names is not None and name not in names:
            continue
        addrs = data.get("brokerAddrs") or {}
        ids = sorted(addrs, key=int) if every_id else ["0"]
        out.extend(addrs[i] for i in ids if addrs.get(i))
    return out


async def _cluster_info(args: argparse.Namespace) -> dict[str, Any]:
    """GET_BROKER_CLUSTER_INFO of the first name server of ``-n`` that answers."""
    if not args.namesrv:
        raise RemoteError(-2, "give -b BROKER or -n NAMESRV")
    last: Optional[RemoteError] = None
    for ns in args.namesrv.split(";"):
        try:
            return dict(_loads((await call(args, ns, RC.GET_BROKER_CLUSTER_INFO)).body))
        except RemoteError as exc:
            last = exc
    raise last or RemoteError(-2, "no name server")


# ---------------------------------------------------------------------------- sub-commands
async def _print_config(args: argparse.Namespace, header: str, addr: str) -> None:
    r = await call(args, addr, RC.GET_BROKER_CONFIG)
    print(header)
    for line in r.body.decode("utf-8").splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            print(f"{k:<50s}=  {v}")
    print()


async def get_broker_config(args: argparse.Namespace) -> int:
    """``-b``: each broker; ``-c`` (with ``-n``): each master, then its slaves, Apache's headers."""
    if args.broker_addrs or not args.cluster:
        for addr in await brokers(args):
            await _print_config(args, f"============{addr}============", addr)
        return 0
    info = await _cluster_info(args)
    for name in sorted(info.get("clusterAddrTable", {}).get(args.cluster, [])):
        addrs = info.get("brokerAddrTable", {}).get(name, {}).get("brokerAddrs") or {}
        master = addrs.get("0")
        if not master:
            continue
        await _print_config(args, f"============Master: {master}============", master)
        for i in sorted((i for i in addrs if i != "0"), key=int):
            await _print_config(args, f"============My Master: {master}=====Slave: {addrs[i]}============", addrs[i])
    return 0


async def broker_status(args: argparse.Namespace) -> int:
    addrs = await brokers(args)
    for addr in addrs:
        table = _loads((await call(args, addr, RC.GET_BROKER_RUNTIME_INFO)).body).get("table", {})
        for k in sorted(table):
            if len(addrs) > 1 or not args.broker_addrs:
                print(f"{addr:<24s} {k:<32s}: {table[k]}")
            else:
                print(f"{k:<32s}: {table[k]}")
    return 0


def _fmt_time(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) if ms > 0 else "N/A"


async def _consume_stats(args: argparse.Namespace, addrs: list[str], group: str,
                         topic: str = "") -> tuple[list[tuple[dict[str, Any], dict[str, Any]]], float]:
    rows: list[tuple[dict[str, Any], dict[str, Any]]] = []
    tps = 0.0
    for addr in addrs:
        fields = {"consumerGroup": group, **({"topic": topic} if topic else {})}
        r = await call(args, addr, RC.GET_CONSUME_STATS, fields)
        rows.extend(mq_entries(r.body))
        m = re.search(rb'"consumeTps":([0-9.eE+-]+)', r.body)
        tps += float(m.group(1)) if m else 0.0
    rows.sort(key=lambda e: (e[0]["topic"], e[0]["brokerName"], e[0]["queueId"]))
    return rows, tps


async def _connection(args: argparse.Namespace, addrs: list[str], group: str) -> Optional[dict[str, Any]]:
    last: Optional[RemoteError] = None
    for addr in addrs:
        try:
            return _loads((await call(args, addr, RC.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group})).body)
        except RemoteError as exc:
            last = exc
    if last is not None and last.unreachable:
        raise last
    return None


async def _group_list(args: argparse.Namespace, addrs: list[str]) -> int:
    print(f"{'#Group':<64s}  {'#Count':<6s}  {'#Version':<24s} {'#Type':<5s}  {'#Model':<14s}  {'#TPS':<7s}  #Diff Total")
    for topic in await _topics(args, addrs):
        if not topic.startswith(RETRY_PREFIX):
            continue
        group = topic[len(RETRY_PREFIX):]
        try:
            rows, tps = await _consume_stats(args, addrs, group)
        except RemoteError as exc:
            if exc.unreachable:
                raise
            rows, tps = [], 0.0
        diff = sum(int(o["brokerOffset"]) - int(o["consumerOffset"]) for _mq, o in rows)
        cc = await _connection(args, addrs, group)
        conns = (cc or {}).get("connectionSet", [])
        if cc is not None and conns:
            version = _version_desc(min(int(c.get("version", 0)) for c in conns))
            passive = cc.get("consumeType") == "CONSUME_PASSIVELY"
            ctype, model = ("PUSH" if passive else "PULL"), (cc.get("messageModel") or "" if passive else "")
        else:
            version, ctype, model = "OFFLINE", "", ""
        print(f"{group:<64s}  {len(conns):<6d}  {version:<24s} {ctype:<5s}  {model:<14s}  {int(tps):<7d}  {diff}")
    return 0


async def consumer_progress(args: argparse.Namespace) -> int:
    addrs = await brokers(args)
    if not args.group:
        return await _group_list(args, addrs)
    rows, tps = await _consume_stats(args, addrs, args.group)
    if args.show_client_ip:
        print(f"{'#Topic':<64s}  {'#Broker Name':<32s}  {'#QID':<4s}  {'#Broker Offset':<20s}  "
              f"{'#Consumer Offset':<20s}  {'#Client IP':<20s} {'#Diff':<20s}  #LastTime")
    else:
        print(f"{'#Topic':<64s}  {'#Broker Name':<32s}  {'#QID':<4s}  {'#Broker Offset':<20s}  "
              f"{'#Consumer Offset':<20s}  {'#Diff':<20s}  #LastTime")
    diff_total = 0
    for mq, ow in rows:
        diff = int(ow.get("brokerOffset", 0)) - int(ow.get("consumerOffset", 0))
        diff_total += diff
        head = (f"{mq['topic']:<64s}  {mq['brokerName']:<32s}  {mq['queueId']:<4d}  {int(ow['brokerOffset']):<20d}  "
                f"{int(ow['consumerOffset']):<20d}  ")
        last = _fmt_time(int(ow.get("lastTimestamp", 0)))
        if args.show_client_ip:
            print(f"{head}{'N/A':<20s} {diff:<20d}  {last}")
        else:
            print(f"{head}{diff:<20d}  {last}")
    print()
    print(f"Consume TPS: {tps:.2f}")
    print(f"Diff Total: {diff_total}")
    return 0


def _version_desc(version: int) -> str:
    """``MQVersion.getVersionDesc``: 409 -> ``V4_9_8``, 408 -> ``V4_9_8_SNAPSHOT``."""
    if version >= HIGHER_VERSION:
        return "HIGHER_VERSION"
    if version < REGULAR_FROM:
        return str(version)
    k, release = divmod(version - REGULAR_FROM, 2)
    v = REGULAR_FROM_VERSION + k
    return f"V{v // 100}_{v // 10 % 10}_{v % 10}" + ("" if release else "_SNAPSHOT")


async def consumer_connection(args: argparse.Namespace) -> int:
    cc = await _connection(args, await brokers(args), args.group)
    if cc is None:
        raise RemoteError(206, f"the consumer group[{args.group}] not online")
    print(f"{'#ClientId':<36s} {'#ClientAddr':<22s} {'#Language':<10s} #Version")
    for c in cc.get("connectionSet", []):
        print(f"{c.get('clientId', ''):<36s} {c.get('clientAddr', ''):<22s} {c.get('language', ''):<10s} "
              f"{_version_desc(int(c.get('version', 0)))}")
    print()
    print("Below is subscription:")
    print(f"{'#Topic':<20s} #SubExpression")
    for sd in cc.get("subscriptionTable", {}).values():
        print(f"{sd.get('topic', ''):<20s} {sd.get('subString', '')}")
    print()
    print(f"ConsumeType: {cc.get('consumeType')}")
    print(f"MessageModel: {cc.get('messageModel')}")
    print(f"ConsumeFromWhere: {cc.get('consumeFromWhere')}")
    return 0


async def _stats(args: argparse.Namespace, addr: str, name: str, key: str) -> tuple[float, int]:
    """(minute tps, 24 h sum as Apache's compute24HourSum) or (0, 0) for a key never counted."""
    try:
        d = _loads((await call(args, addr, RC.VIEW_BROKER_STATS_DATA, {"statsName": name, "statsKey": key})).body)
    except RemoteError as exc:
        if exc.unreachable:
            raise
        return 0.0, 0
    day, hour, minute = (int(d.get(k, {}).get("sum", 0)) for k in ("statsDay", "statsHour", "statsMinute"))
    return float(d.get("statsMinute", {}).get("tps", 0.0)), day or hour or minute


async def _topics(args: argparse.Namespace, addrs: list[str]) -> list[str]:
    if args.namesrv and not args.broker_addrs:
        for ns in args.namesrv.split(";"):
            try:
                return sorted(_loads((await call(args, ns, RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)).body).get("topicList", []))
            except RemoteError:
                continue
    from broker.api.client import SyncBrokerClient  # noqa: WPS433 - the topic list of a -b broker

    out: set[str] = set()
    for addr in addrs:
        ak, sk = getattr(args, "credentials", None) or (None, None)
        with SyncBrokerClient(addr, timeout=args.timeout, access_key=ak, secret_key=sk) as c:
            out.update(t["topicName"] for t in c.topics().get("topics", []))
    return sorted(out)


async def stats_all(args: argparse.Namespace) -> int:
    addrs = await brokers(args)
    topics = [args.topic] if args.topic else await _topics(args, addrs)
    print(f"{'#Topic':<64s}  {'#Consumer Group':<64s} {'#Accumulation':>12s} {'#InTPS':>11s} {'#OutTPS':>11s} "
          f"{'#InMsg24Hour':>14s} {'#OutMsg24Hour':>14s}")
    for topic in topics:
        if topic.startswith((RETRY_PREFIX, DLQ_PREFIX)):
            continue
        in_tps, in_day = 0.0, 0
        groups: set[str] = set()
        for addr in addrs:
            tps, day = await _stats(args, addr, "TOPIC_PUT_NUMS", topic)
            in_tps, in_day = in_tps + tps, in_day + day
            try:
                groups |= set(_loads((await call(args, addr, RC.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic})).body)
                              .get("groupList", []))
            except RemoteError as exc:
                if exc.unreachable:
                    raise
        if not groups:
            if not args.active_topic or in_day > 0:
                print(f"{topic:<64s}  {'':<64s} {0:>12d} {in_tps:>11.2f} {'':>11s} {in_day:>14d} {'NO_CONSUMER':>14s}")
            continue
        for group in sorted(groups):
            acc, out_tps, out_day = 0, 0.0, 0
            for addr in addrs:
                try:
                    r = await call(args, addr, RC.GET_CONSUME_STATS, {"consumerGroup": group, "topic": topic})
                except RemoteError as exc:
                    if exc.unreachable:
                        raise
                    continue
                acc += sum(int(o["brokerOffset"]) - int(o["consumerOffset"]) for _mq, o in mq_entries(r.body))
                tps, day = await _stats(args, addr, "GROUP_GET_NUMS", f"{topic}@{group}")
                out_tps, out_day = out_tps + tps, out_day + day
            if not args.active_topic or out_day > 0:
                print(f"{topic:<64s}  {group:<64s} {acc:>12d} {in_tps:>11.2f} {out_tps:>11.2f} {in_day:>14d} {out_day:>14d}")
    return 0


# ---------------------------------------------------------------------------- wiring
def run(fn: Callable[[argparse.Namespace], Any]) -> Callable[[argparse.Namespace], int]:
    def runner(args: argparse.Namespace) -> int:
        try:
            return asyncio.run(fn(args))
        except RemoteError as exc:
            print(f"CODE: {exc.code}  DESC: {exc.remark}" if exc.code >= 0 else f"mqadmin: {exc.remark}", file=sys.stderr)
            return 3 if exc.unreachable else (2 if exc.code == -2 else 1)
    return runner


def resolve_all(args: argparse.Namespace) -> list[str]:
    """Every broker address of the name server ``-n`` (masters and slaves), for the HTTP commands."""
    try:
        return asyncio.run(brokers(args, every_id=True))
    except RemoteError as exc:
        print(f"mqadmin: {exc.remark}", file=sys.stderr)
        return []


def register(add: Callable[..., argparse.ArgumentParser]) -> None:
    """Add the sub-commands through mqadmin's ``add(name, fn, help)``."""
    def targets(sp: argparse.ArgumentParser, cluster: bool = True) -> None:
        if cluster:  # -n is mqadmin's common flag
            sp.add_argument("-c", "--clusterName", dest="cluster")

    sp = add("getBrokerConfig", run(get_broker_config), "a broker's config (Apache getBrokerConfig)", broker_flag=True)
    targets(sp)
    sp = add("brokerStatus", run(broker_status), "a broker's runtime table (Apache brokerStatus)", broker_flag=True)
    targets(sp)
    sp = add("consumerProgress", run(consumer_progress), "a group's offsets and lag per queue", broker_flag=True)
    targets(sp, cluster=False)
    sp.add_argument("-g", "--groupName", dest="group")
    # Apache's option takes a value (``-s true``); a bare ``-s`` still means true
    sp.add_argument("-s", "--showClientIP", dest="show_client_ip", nargs="?", const=True, default=False,
                    type=lambda v: v.strip().lower() == "true", metavar="true|false")
    sp = add("consumerConnection", run(consumer_connection), "a group's online clients and subscriptions", broker_flag=True)
    targets(sp, cluster=False)
    sp.add_argument("-g", "--consumerGroup", dest="group", required=True)
    sp = add("statsAll", run(stats_all), "put/get rates and lag of every topic and group", broker_flag=True)
    targets(sp, cluster=False)
    sp.add_argument("-t", "--topic")
    sp.add_argument("-a", "--activeTopic", dest="active_topic", action="store_true")
