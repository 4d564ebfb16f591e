"""The name server's admin requests beyond routing: what ``mqadmin wipeWritePerm / addWritePerm /
getNamesrvConfig / updateNamesrvConfig / topicList -c`` and the unit-topic lists ask (issue 25).

Rules (apache/rocketmq 4.9.8 ``DefaultRequestProcessor``, ``RouteInfoManager``):
- WIPE_WRITE_PERM_OF_BROKER (205) / ADD_WRITE_PERM_OF_BROKER (327) ``brokerName``: every topic's
  queue data of that broker loses PERM_WRITE (``perm &= ~2``) / becomes ``PERM_READ|PERM_WRITE``
  (6); the response header is ``wipeTopicCount`` / ``addTopicCount`` (topics touched). As in
  Apache the change lives in the route table until the broker's next registration that carries a
  new topic dataVersion rewrites the queue data.
- GET_KVLIST_BY_NAMESPACE (219) ``namespace``: body ``{"table": {...}}`` (KVTable), none is
  ``QUERY_NOT_FOUND`` "No config item, Namespace: N".
- GET_TOPICS_BY_CLUSTER (224) ``cluster``: TopicList of the topics on the cluster's brokers;
  GET_SYSTEM_TOPIC_LIST_FROM_NS (304): cluster names and broker names, ``brokerAddr`` = the
  first broker's first address; GET_UNIT_TOPIC_LIST (311) / GET_HAS_UNIT_SUB_TOPIC_LIST (312) /
  GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST (313): topics by their ``topicSysFlag`` bits (1 unit,
  2 has-unit-sub).
- GET_NAMESRV_CONFIG (319): body = ``key=value`` lines of this name server's settings (Apache's
  NamesrvConfig + NettyServerConfig key names where we have the setting; our own keys as read
  from ``-c``). UPDATE_NAMESRV_CONFIG (318): body = properties; a key of the black list
  (``configBlackList;configStorePath;kvConfigPath``) is ``NO_PERMISSION`` "Can not update config in
  black list."; a key this name server reads only at start (listen address, limits, ACL) is
  ``SYSTEM_ERROR`` naming the key and saying to restart with it in the ``-c`` file; other keys are
  kept in memory and shown by GET (Apache persists them to ``configStorePath``; we do not).

Theory of operation: :func:`register` adds these handlers to the controller's RemotingServer;
they read and write the controller's RouteInfoManager, KvConfigStore and ``config`` dict.
"""
from __future__ import annotations

import json
import logging
from typing import Any

from broker.config.java_properties import ConfigError, parse_properties
from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from broker.remoting.server import RemotingConnection

log = logging.getLogger("namesrv")

PERM_READ, PERM_WRITE = 4, 2
UNIT_FLAG, UNIT_SUB_FLAG = 1, 2
BLACK_LIST = frozenset({"configBlackList", "configStorePath", "kvConfigPath"})
#: read once at start by ``main`` (listen address, limits, ACL, KV limits): changing them needs a restart
START_ONLY = frozenset({"listenPort", "bindAddress", "aclEnable", "plainAclFile", "namesrvBrokerAccessKeys",
                        "namesrvSignedReads", "namesrvAllowInsecure", "serverChannelMaxIdleTimeSeconds",
                        "serverReadTimeoutMillis", "serverMaxConnections", "serverMaxPendingBytes"})
#: Apache's NamesrvConfig keys we accept and show (no behaviour of ours depends on them)
DEFAULTS = {"productEnvName": "center", "clusterTest": "false", "orderMessageEnable": "false"}


def _body(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def config_text(config: dict[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in sorted(config.items()))


class NamesrvAdmin:
    def __init__(self, controller: Any) -> None:
        self.ctl = controller

    def register(self, server: Any) -> None:
        for code, handler in {
            RC.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm, RC.ADD_WRITE_PERM_OF_BROKER: self.add_write_perm,
            RC.GET_KVLIST_BY_NAMESPACE: self.kv_list, RC.GET_TOPICS_BY_CLUSTER: self.topics_by_cluster,
            RC.GET_SYSTEM_TOPIC_LIST_FROM_NS: self.system_topics, RC.GET_UNIT_TOPIC_LIST: self.unit_topics,
            RC.GET_HAS_UNIT_SUB_TOPIC_LIST: self.has_unit_sub_topics,
            RC.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: self.has_unit_sub_ununit_topics,
            RC.GET_NAMESRV_CONFIG: self.get_config, RC.UPDATE_NAMESRV_CONFIG: self.update_config,
        }.items():
            server.register(code, handler)

    # ------------------------------------------------------------------ write perm
    def _operate_write_perm(self, broker_name: str, add: bool) -> int:
        count = 0
        for per_broker in self.ctl.route.topic_queue_table.values():
            qd = per_broker.get(broker_name)
            if qd is not None:
                qd["perm"] = PERM_READ | PERM_WRITE if add else int(qd.get("perm", 6)) & ~PERM_WRITE
                count += 1
        return count

    async def wipe_write_perm(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        name = cmd.ext_fields.get("brokerName", "")
        n = self._operate_write_perm(name, add=False)
        log.info("wipe write perm of broker[%s], client: %s, %d", name, conn.remote_addr, n)
        return cmd.response(R.SUCCESS, None, {"wipeTopicCount": n})

    async def add_write_perm(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        name = cmd.ext_fields.get("brokerName", "")
        n = self._operate_write_perm(name, add=True)
        log.info("add write perm of broker[%s], client: %s, %d", name, conn.remote_addr, n)
        return cmd.response(R.SUCCESS, None, {"addTopicCount": n})

    # ------------------------------------------------------------------ lists
    async def kv_list(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        ns = cmd.ext_fields.get("namespace", "")
        table = self.ctl.kv.table(ns)
        if not table:
            return cmd.response(R.QUERY_NOT_FOUND, f"No config item, Namespace: {ns}")
        return cmd.response(R.SUCCESS, None, body=_body({"table": table}))

    async def topics_by_cluster(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        route = self.ctl.route
        names = route.cluster_addr_table.get(cmd.ext_fields.get("cluster", ""), set())
        topics = sorted(t for t, per_broker in route.topic_queue_table.items() if names & set(per_broker))
        return cmd.response(R.SUCCESS, None, body=_body({"topicList": topics}))

    async def system_topics(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        route = self.ctl.route
        topics: list[str] = []
        for cluster, names in sorted(route.cluster_addr_table.items()):
            topics.append(cluster)
            topics.extend(sorted(names))
        body: dict[str, Any] = {"topicList": sorted(set(topics))}
        for _name, bd in sorted(route.broker_addr_table.items()):
            addrs = bd.get("brokerAddrs") or {}
            if addrs:
                body["brokerAddr"] = addrs[sorted(addrs)[0]]
                break
        return cmd.response(R.SUCCESS, None, body=_body(body))

    def _by_flag(self, keep: Any) -> bytes:
        topics = sorted(t for t, per_broker in self.ctl.route.topic_queue_table.items()
                        if any(keep(int(qd.get("topicSysFlag", 0))) for qd in per_broker.values()))
        return _body({"topicList": topics})

    async def unit_topics(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        return cmd.response(R.SUCCESS, None, body=self._by_flag(lambda f: f & UNIT_FLAG))

    async def has_unit_sub_topics(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        return cmd.response(R.SUCCESS, None, body=self._by_flag(lambda f: f & UNIT_SUB_FLAG))

    async def has_unit_sub_ununit_topics(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        return cmd.response(R.SUCCESS, None, body=self._by_flag(lambda f: not f & UNIT_FLAG and f & UNIT_SUB_FLAG))

    # ------------------------------------------------------------------ config
    async def get_config(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        return cmd.response(R.SUCCESS, None, body=config_text(self.ctl.config).encode("utf-8"))

    async def update_config(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        if not cmd.body:
            return cmd.response(R.SUCCESS)
        try:
            props = {k: v for k, v, _line in parse_properties(cmd.body.decode("utf-8"))}
        except (UnicodeDecodeError, ConfigError) as exc:
            return cmd.response(R.SYSTEM_ERROR, f"string2Properties error: {exc}")
        if BLACK_LIST & set(props):
            return cmd.response(R.NO_PERMISSION, "Can not update config in black list.")
        fixed = sorted(START_ONLY & set(props))
        if fixed:
            return cmd.response(R.SYSTEM_ERROR, f"{', '.join(fixed)}: read once at start by this name server; "
                                                "set it in the -c properties file and restart")
        log.info("updateConfig called by %s: %s", conn.remote_addr, props)
        self.ctl.config.update(props)
        return cmd.response(R.SUCCESS)
