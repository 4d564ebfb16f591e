"""mqadmin: RocketMQ-style admin commands against one or more brokers' HTTP APIs.

Usage (``-b`` takes ``host:port`` of a broker's ``listenPort``; default ``$RMQ_BROKER_ADDR`` or
``127.0.0.1:10911``; ``--json`` prints the raw JSON instead of the readable form)::

    mqadmin clusterList      -b 127.0.0.1:10911,127.0.0.1:10921   (or -n NAMESRV [-c CLUSTER]: all it lists)
                             [-m] [-i SECONDS [--count N]]   (-m: Apache's in/out totals; -i: repeat, Ctrl-C ends)
    mqadmin topicList        -b ADDR | -n NAMESRV [-c]      (-c: Apache's #Cluster Name #Topic #Consumer Group)
    mqadmin updateTopic      -b ADDR | -n NAMESRV -c CLUSTER -t TOPIC [-r READQ] [-w WRITEQ] [-p PERM]
                             [-o true|false] [-u false] [-s false]   (remoting 17; unit topics unsupported)
    mqadmin topicStatus      -b ADDR -t TOPIC
    mqadmin sendMessage      -b ADDR | -n NAMESRV [-b BROKERNAME] -t TOPIC -p BODY [-c TAGS] [-k KEYS] [-i QID]
                             [-m false]   (message trace is not supported)
    mqadmin consumeMessage   -b ADDR|BROKERNAME -t TOPIC [-i QUEUEID] [-o OFFSET] [-c COUNT] [-g GROUP]
                             [-s BEGIN] [-e END]   (store times: ms or yyyy-MM-dd#HH:mm:ss:SSS)
    mqadmin queryMsgByOffset -b ADDR -t TOPIC -i QUEUEID -o QUEUEOFFSET
    mqadmin queryMsgByPhyOffset -b ADDR -o COMMITLOGOFFSET
    mqadmin queryMsgById     -b ADDR -i MSGID [-g GROUP -d CLIENTID] [-s true|false] [-u UNIT]
                             (-g -d: the broker pushes it to that consumer; -s true: send it again; -u ignored)
    mqadmin queryMsgByKey    -b ADDR -t TOPIC -k KEY
    mqadmin consumerOffsets  -b ADDR [-g GROUP] [-t TOPIC]
    mqadmin dledgerStatus    -b ADDR[,ADDR...]          DLedger role, term, indexes, follower lag
    mqadmin transferLeader   -b ADDR --to n1           (ADDR may be any node: follows to the leader)
    mqadmin setPreferredLeader -b ADDR[,ADDR...] --id n1   (--id "" clears; runtime only)
    mqadmin getBrokerConfig  -b ADDR | -n NAMESRV [-c CLUSTER]   (remoting, as Apache's; see mqadmin_stats)
    mqadmin brokerStatus     -b ADDR | -n NAMESRV [-c CLUSTER]
    mqadmin consumerProgress -b ADDR | -n NAMESRV -g GROUP [-t TOPIC]
    mqadmin consumerConnection -b ADDR | -n NAMESRV -g GROUP
    mqadmin statsAll         -b ADDR | -n NAMESRV [-t TOPIC] [-a]

ACL (``aclEnable=true`` on the broker): every command signs its requests with an account of the
broker's ``plain_acl.yml`` given as ``--access-key AK --secret-key SK`` or, better (a secret on
the command line is visible in ``ps``), ``$RMQ_ACCESS_KEY`` / ``$RMQ_SECRET_KEY``; flags win over
the environment. A refusal prints ``UNAUTHORIZED: ...`` (401) or ``NO_PERMISSION: ...`` (403).

``-n NAMESRV`` is accepted by every command: ``-b`` may then name a broker (Apache's ``sendMessage
-n NS -b broker-a``), and without ``-b`` the topic's route (or the cluster's masters) is used
(``broker.cli.mqadmin_compat``).

Rules: names and flags follow Apache mqadmin where a command exists there (``queryMsgByOffset``
is by *queue* offset, as in RocketMQ). Exit code 0 on success, 1 when the broker answered an
error (printed as ``CODE: message``), 2 for usage errors (a bad ``-b`` address, one key without
the other: one line, no traceback), 3 when a broker is unreachable.
``consumeMessage -g GROUP`` without ``-o`` starts at the group's committed offset and commits
the next offset afterwards.
``sendMessage`` follows the leader (issue 24.8): it tries every ``-b`` address in turn, goes to
the ``masterAddress`` a ``NOT_MASTER`` answer names, and keeps trying (rounds 0.2 s apart) while
no node is master, for at most ``--timeout`` seconds; every try carries the same ``uniqKey``, so
a try whose outcome was unknown is not stored twice (``FLUSH_SLAVE_TIMEOUT`` is tried once more,
then printed: a classic master without its slave keeps answering it).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable

import time

from broker.api.client import (
    BrokerClientError, BrokerUnavailable, SyncBrokerClient, body_bytes, new_uniq_key, split_address,
)
from broker.api.signing import credentials_from
from broker.cli import mqadmin_compat, mqadmin_flags, mqadmin_stats
from broker.cli.mqadmin_flags import UsageError

DEFAULT_ADDR = os.environ.get("RMQ_BROKER_ADDR", "127.0.0.1:10911")


def _short_body(m: dict[str, Any], limit: int = 80) -> str:
    raw = body_bytes(m)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return f"<{len(raw)} bytes binary>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _print_message(m: dict[str, Any]) -> None:
    print(f"OffsetID:            {m['msgId']}")
    print(f"Topic:               {m['topic']}")
    print(f"Tags:                [{m.get('tags') or ''}]")
    print(f"Keys:                [{m.get('keys') or ''}]")
    print(f"Queue ID:            {m['queueId']}")
    print(f"Queue Offset:        {m['queueOffset']}")
    print(f"CommitLog Offset:    {m['commitLogOffset']}")
    print(f"Store Size:          {m['storeSize']}")
    print(f"Born Timestamp:      {m['bornTimestamp']}")
    print(f"Store Timestamp:     {m['storeTimestamp']}")
    print(f"Born Host:           {m['bornHost']}")
    print(f"Store Host:          {m['storeHost']}")
    print(f"Properties:          {m.get('properties')}")
    print(f"Message Body:        {_short_body(m, 2000)}")
    print()


def _table(rows: list[list[Any]], header: list[str]) -> None:
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for r in cells:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def cmd_cluster_list(args: argparse.Namespace) -> Any:
    """Our status table, or Apache's ``-m`` table (mqadmin_flags); ``-i`` repeats it."""
    once = mqadmin_flags.cluster_more_stats if args.more_stats else _cluster_list_once
    return mqadmin_flags.repeat(args, once)


def _cluster_list_once(args: argparse.Namespace) -> int:
    if args.namesrv and not args.broker_addrs:  # Apache's form: every broker the name server lists
        addrs = mqadmin_stats.resolve_all(args)
        if not addrs:
            return 3
    else:
        addrs = [a for part in args.broker_addrs for a in part.split(",") if a]
    rows: list[list[Any]] = []
    raw: list[Any] = []
    worst = 0
    for addr in addrs:
        try:
            st = _client_for(args, addr).status()
        except BrokerClientError as exc:
            worst = 3 if isinstance(exc, BrokerUnavailable) else 1
            raw.append({"address": addr, "error": exc.code, "message": exc.message})
            rows.append(["?", "?", "?", addr, "UNREACHABLE", "", "", "", ""])
            continue
        raw.append(st)
        ha = st.get("ha") or {}
        lag = ha.get("slaveLagBytes", "")
        rows.append([
            st.get("brokerClusterName"), st.get("brokerName"), st.get("brokerId"), addr, st.get("brokerRole"),
            st.get("commitLog", {}).get("maxOffset"), st.get("dispatchBehindBytes"),
            ha.get("connections", ha.get("connected", "")), lag,
        ])
    if args.json:
        print(json.dumps(raw, indent=2))
    else:
        _table(rows, ["#Cluster", "#Broker", "#BID", "#Addr", "#Role", "#MaxOffset", "#DispatchBehind", "#HA", "#SlaveLag"])
    return worst


def cmd_topic_list(args: argparse.Namespace) -> Any:
    if args.cluster_model:
        return mqadmin_flags.topic_list_clusters(args)
    data = _client(args).topics()
    if args.json:
        return data
    for t in sorted(data.get("topics", []), key=lambda t: t["topicName"]):
        print(t["topicName"])
    return 0


def cmd_update_topic(args: argparse.Namespace) -> Any:
    """Apache's ``-b ADDR`` (one broker) or ``-n NAMESRV -c CLUSTER`` (every master of it), by
    UPDATE_AND_CREATE_TOPIC with Apache's TopicConfig (mqadmin_flags: order, unit flags)."""
    tc = mqadmin_flags.topic_config(args)
    cluster = bool(args.cluster) and not args.user_broker
    targets = _addresses(args) if cluster else _addresses(args)[:1]
    done = []
    for addr in targets:
        mqadmin_flags.create_topic(args, addr, tc)
        done.append(addr)
        if not args.json and cluster:
            print(f"create topic to {addr} success.")
    conf = mqadmin_flags.order_conf(args, tc, done, cluster) if tc["order"] and args.namesrv and done else None
    if args.json:
        return {"created": done, "topicConfig": tc, **({"orderConf": conf} if conf is not None else {})}
    if conf is not None:
        print(f"set {'cluster' if cluster else 'broker'} orderConf. isOrder=true, orderConf=[{conf}]")
    if not cluster and done:
        print(f"create topic to {done[0]} success.")
    print(mqadmin_flags.topic_config_line(tc) if done else "no broker to create the topic on")
    return 0 if done else 1


def cmd_topic_status(args: argparse.Namespace) -> Any:
    data = _client(args).topic_status(args.topic)
    if args.json:
        return data
    _table([[args.topic, q["queueId"], q["minOffset"], q["maxOffset"]] for q in data.get("queues", [])],
           ["#Topic", "#QID", "#Min Offset", "#Max Offset"])
    return 0


FOLLOW_CODES = frozenset({"NOT_MASTER", "SERVICE_NOT_AVAILABLE", "CONNECT_FAILED", "FLUSH_SLAVE_TIMEOUT"})
UNKNOWN_OUTCOME_RETRIES = 1  # FLUSH_SLAVE_TIMEOUT: tried again once (a classic master without its slave keeps saying it)


def send_following(args: argparse.Namespace, send: Callable[[SyncBrokerClient], Any]) -> tuple[str, Any]:
    """(address that stored it, answer): every ``-b`` address in turn, a NOT_MASTER's
    ``masterAddress`` first, rounds until ``--timeout`` (module rules)."""
    seeds = _addresses(args)
    deadline = time.monotonic() + args.timeout
    last: BrokerClientError | None = None
    unknown_left = UNKNOWN_OUTCOME_RETRIES
    while True:
        queue, tried = list(seeds), set()
        while queue:
            addr = queue.pop(0)
            if addr in tried:
                continue
            tried.add(addr)
            try:
                return addr, send(_client_for(args, addr))
            except BrokerClientError as exc:
                if not isinstance(exc, BrokerUnavailable) and exc.code not in FOLLOW_CODES:
                    raise
                if exc.code == "FLUSH_SLAVE_TIMEOUT":
                    if unknown_left <= 0:
                        raise
                    unknown_left -= 1
                last = exc
                master = exc.body.get("masterAddress") if exc.code == "NOT_MASTER" else None
                if master and master not in tried:
                    queue.insert(0, master)
        if time.monotonic() + 0.2 >= deadline:
            assert last is not None
            raise last
        time.sleep(0.2)


def cmd_send(args: argparse.Namespace) -> Any:
    mqadmin_flags.refuse_true(args.msg_trace, "-m true: message trace is")
    uniq = new_uniq_key()  # one id for every try: a retried put is answered, not stored twice
    addr, data = send_following(args, lambda c: c.send(args.topic, args.body, tags=args.tags, keys=args.keys,
                                                       queue_id=args.queue_id, uniq_key=uniq))
    if args.json:
        return data
    _table([[addr, data.get("queueId"), data.get("status"), data.get("msgId"), data.get("queueOffset")]],
           ["#Broker", "#QID", "#Send Result", "#MsgId", "#QueueOffset"])
    return 0


def cmd_consume(args: argparse.Namespace) -> Any:
    window = mqadmin_flags.time_window(args)  # -s/-e: (begin, end) store times
    c = _client(args)
    addr = _addresses(args)[0]
    queues = [args.queue_id] if args.queue_id is not None else [
        q["queueId"] for q in c.topic_status(args.topic).get("queues", [])
    ]
    committed: dict[str, int] = {}
    if args.group and args.offset is None and (window is None or not window[0]):
        table = c.query_offsets(args.group, args.topic).get("offsets", {})
        committed = {str(k): int(v) for k, v in table.get(f"{args.topic}@{args.group}", {}).items()}
    out: list[dict[str, Any]] = []
    for qid in queues:
        offset = args.offset if args.offset is not None else committed.get(str(qid), 0)
        last: int | None = None  # -e: the last queue offset to read (inclusive)
        if window is not None:
            if window[0]:
                found = mqadmin_flags.search_offset(args, addr, args.topic, qid, window[0])
                offset = found if args.offset is None else max(found, args.offset)
            if window[1]:
                last = mqadmin_flags.search_offset(args, addr, args.topic, qid, window[1])
        remaining = args.count
        while remaining > 0 and (last is None or offset <= last):
            want = min(remaining, 256) if last is None else min(remaining, 256, last - offset + 1)
            res = c.pull(args.topic, qid, offset, want)
            msgs = res.get("messages", [])
            picked = msgs if window is None else [m for m in msgs if mqadmin_flags.in_window(m, window)]
            out.extend(picked)
            remaining -= len(picked)
            if not msgs:
                break
            offset = res["nextBeginOffset"]
        if args.group and offset > committed.get(str(qid), 0):
            c.commit_offset(args.group, args.topic, qid, offset)
    if args.json:
        return {"messages": out}
    for m in out:
        print(f"q{m['queueId']}@{m['queueOffset']} {m['msgId']} tags={m.get('tags') or ''} keys={m.get('keys') or ''} body={_short_body(m)}")
    print(f"consumed {len(out)} message(s)")
    return 0


def cmd_by_queue_offset(args: argparse.Namespace) -> Any:
    res = _client(args).pull(args.topic, args.queue_id, args.offset, 1)
    msgs = res.get("messages", [])
    if args.json:
        return msgs[0] if msgs else res
    if not msgs:
        print(f"no message at {args.topic} queue {args.queue_id} offset {args.offset} ({res.get('status')})")
        return 1
    _print_message(msgs[0])
    return 0


def cmd_by_phy_offset(args: argparse.Namespace) -> Any:
    m = _client(args).by_offset(args.offset)
    if args.json:
        return m
    _print_message(m)
    return 0


def cmd_by_id(args: argparse.Namespace) -> Any:
    if bool(args.consumer_group) != bool(args.client_id):
        raise UsageError("-g GROUP and -d CLIENTID go together (the consumer to push the message to)")
    ids = [i.strip() for i in args.msg_id.split(",") if i.strip()]
    if args.consumer_group:  # Apache's pushMsg: the broker that stored it calls the consumer
        for msg_id in ids:
            print(mqadmin_flags.consume_directly(args, msg_id))
        return 0
    if args.resend is not None:  # Apache's sendMsg; -s false alone does nothing, as Apache
        for msg_id in ids if args.resend else []:
            _resend(args, msg_id)
        return 0
    m = _client(args).by_id(args.msg_id, args.topic)
    if args.json:
        return m
    _print_message(m)
    return 0


def _resend(args: argparse.Namespace, msg_id: str) -> None:
    m = _client(args).by_id(msg_id, args.topic)
    print(f"prepare resend msg. originalMsgId={msg_id}")
    uniq = new_uniq_key()  # a new one: this broker answers a known UNIQ_KEY without storing it again
    fields = mqadmin_flags.resend_fields(m)
    addr, data = send_following(args, lambda c: c.send(m["topic"], body_bytes(m), uniq_key=uniq, **fields))
    print(mqadmin_flags.send_result_line(uniq, m["topic"], addr, data))


def cmd_by_key(args: argparse.Namespace) -> Any:
    data = _client(args).by_key(args.topic, args.key, args.max_num)
    if args.json:
        return data
    _table([[m["msgId"], m["queueId"], m["queueOffset"], m.get("keys") or ""] for m in data.get("messages", [])],
           ["#Message ID", "#QID", "#Offset", "#Keys"])
    return 0


def cmd_offsets(args: argparse.Namespace) -> Any:
    data = _client(args).query_offsets(args.group, args.topic)
    if args.json:
        return data
    rows = [[k, qid, off] for k, table in sorted(data.get("offsets", {}).items()) for qid, off in sorted(table.items())]
    _table(rows, ["#Topic@Group", "#QID", "#Committed Offset"])
    return 0


def _addresses(args: argparse.Namespace) -> list[str]:
    return [a for part in args.broker for a in part.split(",") if a]


def cmd_dledger_status(args: argparse.Namespace) -> Any:
    rows, raw = [], []
    for addr in _addresses(args):
        st = _client_for(args, addr).dledger_status()
        raw.append(st)
        lag = ",".join(f"{p}:{f.get('lag')}" for p, f in sorted((st.get("followers") or {}).items()))
        rows.append([st.get("group"), st.get("selfId"), addr, st.get("role"), st.get("term"), st.get("leaderId"),
                     st.get("beginIndex"), st.get("endIndex"), st.get("committedIndex"),
                     st.get("dividedCommitlogOffset"), lag])
    if args.json:
        return raw
    _table(rows, ["#Group", "#Self", "#Addr", "#Role", "#Term", "#Leader", "#Begin", "#End", "#Committed",
                  "#Divided", "#FollowerLag"])
    return 0


def cmd_transfer_leader(args: argparse.Namespace) -> Any:
    addr = _addresses(args)[0]
    try:
        data = _client_for(args, addr).transfer_leader(args.to)
    except BrokerClientError as exc:
        leader = exc.body.get("masterAddress") if exc.code == "NOT_MASTER" else None
        if not leader or leader == addr:
            raise
        addr = leader
        data = _client_for(args, addr).transfer_leader(args.to)
    if args.json:
        return data
    print(f"leadership of {addr} ({data.get('from')}) transferred to {data.get('to')}, term {data.get('term')}")
    return 0


def cmd_set_preferred_leader(args: argparse.Namespace) -> Any:
    ids = [i for i in args.id.split(";") if i]
    out = [_client_for(args, a).set_preferred_leader(ids) for a in _addresses(args)]
    if args.json:
        return out
    for r in out:
        print(f"{r['selfId']}: preferred leader {';'.join(r['preferredLeaders']) or '(none)'}")
    return 0


def _client_for(args: argparse.Namespace, address: str) -> SyncBrokerClient:
    ak, sk = args.credentials or (None, None)
    return SyncBrokerClient(address, timeout=args.timeout, access_key=ak, secret_key=sk)


def _client(args: argparse.Namespace) -> SyncBrokerClient:
    return _client_for(args, args.broker[0].split(",")[0])


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mqadmin", description="Admin commands for rocketmq-py brokers (HTTP API).")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-b", "--broker", "--brokerAddr", "--brokerName", action="append",
                        help=f"broker address host:port (default {DEFAULT_ADDR}), or a broker name with -n")
    common.add_argument("-n", "--namesrvAddr", dest="namesrv", help="name server(s) host:port[;host:port]")
    common.add_argument("--json", action="store_true", help="print JSON")
    common.add_argument("--timeout", type=float, default=10.0, help="seconds per request")
    common.add_argument("--access-key", help="ACL account to sign with (default $RMQ_ACCESS_KEY)")
    common.add_argument("--secret-key", help="its secret key (default $RMQ_SECRET_KEY; prefer the variable)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    by_name: dict[str, argparse.ArgumentParser] = {}

    def add(name: str, fn: Callable[[argparse.Namespace], Any], help_text: str, broker_flag: bool = False) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, parents=[common], help=help_text)
        sp.set_defaults(fn=fn)
        by_name[name] = sp
        return sp

    sp = add("clusterList", cmd_cluster_list, "status of one or more brokers (-b, or all of -n's)")
    sp.add_argument("-c", "--clusterName", dest="cluster")
    add("topicList", cmd_topic_list, "topics of a broker").set_defaults(cluster=None)
    sp = add("updateTopic", cmd_update_topic, "create or update a topic")
    sp.add_argument("-t", "--topic", required=True)
    sp.add_argument("-c", "--clusterName", dest="cluster", help="every master of the cluster (with -n)")
    sp.add_argument("-r", "--readQueueNums", "--read-queue-nums", dest="read_queue_nums", type=int)
    sp.add_argument("-w", "--writeQueueNums", "--write-queue-nums", dest="write_queue_nums", type=int)
    sp.add_argument("-p", "--perm", type=int)
    sp = add("topicStatus", cmd_topic_status, "min/max offset of each queue of a topic")
    sp.add_argument("-t", "--topic", required=True)
    sp = add("sendMessage", cmd_send, "send one message")
    sp.add_argument("-t", "--topic", required=True)
    sp.add_argument("-p", "--body", required=True)
    sp.add_argument("-c", "--tags")
    sp.add_argument("-k", "--key", "--keys", dest="keys")
    sp.add_argument("-i", "--qid", "--queue-id", dest="queue_id", type=int)
    sp = add("consumeMessage", cmd_consume, "pull messages (and commit with -g)")
    sp.add_argument("-t", "--topic", required=True)
    sp.add_argument("-i", "--queueId", "--queue-id", dest="queue_id", type=int)
    sp.add_argument("-o", "--offset", type=int)
    sp.add_argument("-c", "--MessageNumber", "--count", dest="count", type=int, default=32)
    sp.add_argument("-g", "--consumerGroup", "--group", dest="group")
    sp = add("queryMsgByOffset", cmd_by_queue_offset, "message at a queue offset")
    sp.add_argument("-t", "--topic", required=True)
    sp.add_argument("-i", "--queueId", "--queue-id", dest="queue_id", type=int, required=True)
    sp.add_argument("-o", "--offset", type=int, required=True)
    sp = add("queryMsgByPhyOffset", cmd_by_phy_offset, "message at a commitlog offset")
    sp.add_argument("-o", "--offset", type=int, required=True)
    sp = add("queryMsgById", cmd_by_id, "message by offset msgId (or uniq key with -t)")
    sp.add_argument("-i", "--msgId", "--msg-id", dest="msg_id", required=True)
    sp.add_argument("-t", "--topic")
    sp = add("queryMsgByKey", cmd_by_key, "messages by key")
    sp.add_argument("-t", "--topic", required=True)
    sp.add_argument("-k", "--msgKey", "--key", dest="key", required=True)
    sp.add_argument("-m", "--max-num", type=int, default=32)
    sp = add("consumerOffsets", cmd_offsets, "committed consumer offsets")
    sp.add_argument("-g", "--group")
    sp.add_argument("-t", "--topic")
    add("dledgerStatus", cmd_dledger_status, "DLedger role, term, indexes and follower lag of brokers")
    sp = add("transferLeader", cmd_transfer_leader, "hand DLedger leadership (and the master role) to a peer")
    sp.add_argument("--to", required=True, help="peer id, e.g. n1")
    sp = add("setPreferredLeader", cmd_set_preferred_leader, "set the preferred DLedger leader(s) on brokers")
    sp.add_argument("--id", required=True, help="peer id(s), ';'-separated; empty clears")
    mqadmin_stats.register(add)
    mqadmin_flags.add_flags(by_name)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        args.credentials = credentials_from(args.access_key, args.secret_key)
    except ValueError as exc:
        print(f"mqadmin: {exc}", file=sys.stderr)
        return 2
    args.broker_addrs = list(args.broker or [])
    args.user_broker = bool(args.broker)  # -b given (before -n fills it in)
    problem = mqadmin_compat.resolve(args)  # broker names with -n, -n without -b
    if problem:
        print(f"mqadmin: {problem}", file=sys.stderr)
        return 2
    if not args.broker_addrs and not args.namesrv:
        args.broker_addrs = [DEFAULT_ADDR]
    if not args.broker:
        args.broker = [DEFAULT_ADDR]
    try:
        for addr in _addresses(args) or [""]:
            split_address(addr)
    except ValueError as exc:
        print(f"mqadmin: {exc}", file=sys.stderr)
        return 2
    except BrokerClientError as exc:
        print(f"mqadmin: {exc.message}", file=sys.stderr)
        return 2
    try:
        result = args.fn(args)
    except KeyboardInterrupt:
        return 130
    except UsageError as exc:
        print(f"mqadmin: {exc}", file=sys.stderr)
        return 2
    except mqadmin_stats.RemoteError as exc:
        print(f"CODE: {exc.code}  DESC: {exc.remark}" if exc.code >= 0 else f"mqadmin: {exc.remark}", file=sys.stderr)
        return 3 if exc.unreachable else (2 if exc.code == -2 else 1)
    except BrokerUnavailable as exc:
        print(f"{exc.code}: {exc.message}", file=sys.stderr)
        return 3
    except BrokerClientError as exc:
        extra = {k: v for k, v in exc.body.items() if k not in ("code", "message")}
        print(f"{exc.code}: {exc.message}" + (f" {json.dumps(extra)}" if extra else ""), file=sys.stderr)
        return 1
    if isinstance(result, int):
        return result
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
