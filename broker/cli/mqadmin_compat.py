"""Apache mqadmin's argument forms for our mqadmin: broker NAMES with ``-n``, and the brokers a
name server knows when no ``-b`` is given (issue 25).

Rules:
- ``-b`` (and ``-a``/``--brokerName`` where Apache has it) takes ``host:port`` addresses, as
  before, or broker NAMES as Apache's ``sendMessage -b``, ``queryMsgByOffset -b``,
  ``consumeMessage -b`` and ``wipeWritePerm -b`` do. A value without ``:port`` is a name: with
  ``-n NAMESRV`` it becomes that broker's addresses from the name server's cluster info, master
  (id 0) first, then the others by id (so ``sendMessage`` can follow a DLedger leader among
  them); a name the name server does not list, or a name without ``-n``, is a usage error naming it.
- ``-n`` without ``-b``, for the commands that act on one topic (:data:`TOPIC_COMMANDS`): the
  brokers of the topic's route (GET_ROUTEINFO_BY_TOPIC), masters first; for ``updateTopic -c
  CLUSTER`` and ``topicList``: the cluster's (or every) master. The remoting commands of
  :mod:`mqadmin_stats` resolve ``-n`` themselves and are left alone.

Theory of operation: :func:`resolve` runs in ``mqadmin.main`` before the addresses are checked;
it rewrites ``args.broker`` / ``args.broker_addrs`` and returns an error line or None.
"""
from __future__ import annotations

import argparse
import asyncio
import re
from typing import Optional

from broker.cli import mqadmin_stats
from broker.remoting.codes import RequestCode as RC

_ADDRESS = re.compile(r"^\[?[^\s\[\]]*\]?:\d+$")
TOPIC_COMMANDS = frozenset({"sendMessage", "topicStatus", "consumeMessage", "queryMsgByOffset", "queryMsgById",
                            "queryMsgByKey", "queryMsgByPhyOffset"})
MASTER_COMMANDS = frozenset({"updateTopic", "topicList", "consumerOffsets"})
#: the commands mqadmin_stats serves over remoting: they read -n themselves
REMOTING_COMMANDS = frozenset({"clusterList", "getBrokerConfig", "brokerStatus", "consumerProgress",
                               "consumerConnection", "statsAll"})


def is_address(value: str) -> bool:
    return bool(_ADDRESS.match(value.strip()))


def _ordered(addrs: dict[str, str]) -> list[str]:
    return [addrs[i] for i in sorted(addrs, key=int) if addrs.get(i)]


async def _route_brokers(args: argparse.Namespace, topic: str) -> list[str]:
    for ns in args.namesrv.split(";"):
        try:
            route = mqadmin_stats._loads((await mqadmin_stats.call(args, ns, RC.GET_ROUTEINFO_BY_TOPIC,  # noqa: SLF001
                                                                   {"topic": topic})).body)
        except mqadmin_stats.RemoteError:
            continue
        out: list[str] = []
        for bd in sorted(route.get("brokerDatas") or [], key=lambda b: str(b.get("brokerName"))):
            out.extend(_ordered({str(k): v for k, v in (bd.get("brokerAddrs") or {}).items()}))
        return out
    return []


async def _resolve(args: argparse.Namespace) -> Optional[str]:
    values = [v.strip() for part in (args.broker or []) for v in part.split(",") if v.strip()]
    names = [v for v in values if not is_address(v)]
    if names:
        if not args.namesrv:
            return f"-b {names[0]}: a broker name needs -n NAMESRV (or give host:port)"
        table = (await mqadmin_stats._cluster_info(args)).get("brokerAddrTable", {})  # noqa: SLF001
        out: list[str] = []
        for v in values:
            if is_address(v):
                out.append(v)
                continue
            data = table.get(v)
            if not data or not data.get("brokerAddrs"):
                return f"-b {v}: the name server lists no broker of that name"
            out.extend(_ordered({str(k): a for k, a in data["brokerAddrs"].items()}))
        args.broker = args.broker_addrs = [",".join(out)]
        return None
    if values or not args.namesrv or args.command in REMOTING_COMMANDS:
        return None
    found: list[str] = []
    topic = getattr(args, "topic", None)
    if args.command in TOPIC_COMMANDS and topic:
        found = await _route_brokers(args, topic)
        if not found:
            return f"no route for topic {topic} on name server {args.namesrv}"
    elif args.command in MASTER_COMMANDS or args.command in TOPIC_COMMANDS:
        found = await mqadmin_stats.brokers(args)
    if found:
        args.broker = args.broker_addrs = [",".join(found)]
    return None


def resolve(args: argparse.Namespace) -> Optional[str]:
    """Rewrite ``-b`` names / an absent ``-b`` into addresses (module rules); an error line or None."""
    try:
        return asyncio.run(_resolve(args))
    except mqadmin_stats.RemoteError as exc:
        return str(getattr(exc, "remark", exc))

