"""One permission table for both doors: what each remoting request and each HTTP route needs.

Rules (``aclEnable=true``; with ACL off nothing here is consulted):
- Every operation a client can ask a broker for is named once in :data:`OPERATIONS`, with the
  kind of proof it needs (:class:`Need`):

  ``OPEN``       nothing: liveness (``GET /health``) and a controller's role-change push
                 (``NOTIFY_BROKER_ROLE_CHANGED``), a wake-up with no authority (the broker
                 asks its controller and acts on that answer only). An open request proves
                 nothing about its connection (no trust for the port guard);
  ``ACCOUNT``    any authenticated account: counters and names, never message data or
                 metadata dumps (RocketMQ's runtime-info requests need no admin either);
  ``RESOURCES``  RocketMQ's PUB / SUB on the topics and groups the request names
                 (``PlainAccessValidator.parse``; groups as ``%RETRY%group``);
  ``FOUND``      the permission on a resource only known after a lookup: reading a message by
                 its offset needs SUB on that message's topic, ending a transaction needs PUB on
                 the half message's real topic. The handler checks it before answering;
  ``ADMIN``      an account with ``admin: true``.

- :data:`REMOTING` maps each request code to an operation, :data:`HTTP` each (method, route).
  The two doors therefore cannot disagree: reading a message by offset is one operation
  whether it arrives as ``VIEW_MESSAGE_BY_ID`` or ``GET /messages/by-offset/{offset}``.
  A code or route missing from the maps needs an account (``ACCOUNT``), so nothing new is
  open by accident; ``tests/remoting/test_permissions.py`` checks that every code a broker
  registers and every route the HTTP API serves is in the table.
- Stricter than RocketMQ 4.9.8, on purpose (and said in the README): the metadata dumps
  (``GET_ALL_TOPIC_CONFIG``, ``GET_ALL_CONSUMER_OFFSET``, ``GET_ALL_DELAY_OFFSET``,
  ``GET_ALL_SUBSCRIPTIONGROUP_CONFIG``) need admin, as ``GET /admin/config/*`` does (a slave's
  ``innerAccessKey`` account must be admin); offset and stats reads need a permission on the
  topic or group they name; ``VIEW_MESSAGE_BY_ID`` and ``END_TRANSACTION`` are checked against
  the message's topic. Moving a committed offset back is a reset: admin, on both doors, except
  when the stored offset lies past the queue's end (a consumer correcting it, as a Java
  consumer does after ``OFFSET_ILLEGAL``).

Theory of operation: data only. ``broker.remoting.acl`` reads :func:`remoting_needs_admin`;
``broker.api.http_acl`` builds its route policies from :data:`HTTP`; the handlers of ``FOUND``
operations call the doors' ``require`` helpers after their lookup.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from broker.remoting.codes import RequestCode as RC


class Need(Enum):
    OPEN = "open"
    ACCOUNT = "account"
    RESOURCES = "resources"
    FOUND = "found"
    ADMIN = "admin"


@dataclass(frozen=True)
class Operation:
    name: str
    need: Need
    what: str  # what the need means for this operation, for docs and refusals


_OPS = (
    Operation("health", Need.OPEN, "liveness only"),
    Operation("role-change-hint", Need.OPEN, "nothing: a wake-up with no authority (Controller mode)"),
    Operation("send", Need.RESOURCES, "PUB on the topic"),
    Operation("send-back", Need.RESOURCES, "SUB on the group"),
    Operation("pull", Need.RESOURCES, "SUB on the topic and the group"),
    Operation("read-by-key", Need.RESOURCES, "SUB on the topic"),
    Operation("read-by-offset", Need.FOUND, "SUB on the topic of the message found"),
    Operation("queue-offsets", Need.RESOURCES, "PUB or SUB on the topic"),
    Operation("topic-status", Need.RESOURCES, "PUB or SUB on the topic"),
    Operation("list-topics", Need.ACCOUNT, "any account (names only)"),
    Operation("heartbeat", Need.RESOURCES, "SUB on each consumer group and topic it names"),
    Operation("unregister-client", Need.RESOURCES, "SUB on the group"),
    Operation("consumer-list", Need.RESOURCES, "SUB on the group"),
    Operation("queue-lock", Need.RESOURCES, "SUB on the group and on the topic of each queue"),
    Operation("query-offset", Need.RESOURCES, "SUB on the group (and the topic)"),
    Operation("query-all-offsets", Need.ADMIN, "admin (every group's offsets)"),
    Operation("commit-offset", Need.RESOURCES, "SUB on the group and the topic; moving back is a reset: admin"),
    Operation("consume-stats", Need.RESOURCES, "SUB on the group (and the topic)"),
    Operation("consumer-connections", Need.RESOURCES, "SUB on the group"),
    Operation("consumer-status", Need.RESOURCES, "SUB on the group (and the topic): asks its clients"),
    Operation("consume-directly", Need.FOUND, "SUB on the group and on the topic of the message found"),
    Operation("consumers-of-topic", Need.RESOURCES, "SUB on the topic"),
    Operation("end-transaction", Need.FOUND, "PUB on the half message's real topic"),
    Operation("runtime-info", Need.ACCOUNT, "any account (counters, no message data)"),
    Operation("metrics", Need.ACCOUNT, "any account, or the metrics bearer token"),
    Operation("dledger-status", Need.ACCOUNT, "any account"),
    Operation("config-dump", Need.ADMIN, "admin (topics, offsets, groups, delay offsets, broker config)"),
    Operation("create-topic", Need.ADMIN, "admin"),
    Operation("delete-topic", Need.ADMIN, "admin"),
    Operation("update-group", Need.ADMIN, "admin"),
    Operation("delete-group", Need.ADMIN, "admin"),
    Operation("reset-offsets", Need.ADMIN, "admin"),
    Operation("update-broker-config", Need.ADMIN, "admin"),
    Operation("delete-files", Need.ADMIN, "admin"),
    Operation("leadership", Need.ADMIN, "admin"),
    Operation("acl-config", Need.ADMIN, "admin (plain_acl.yml: accounts, global white addresses)"),
    Operation("producer-connections", Need.ACCOUNT, "any account (one producer group's client addresses)"),
    Operation("all-producers", Need.ADMIN, "admin (every producer group's clients)"),
    Operation("read-consume-queue", Need.FOUND, "SUB on the topic (checked by the handler)"),
    Operation("cannot-apply", Need.ACCOUNT, "any account: answered with the reason it cannot apply here"),
)
OPERATIONS: dict[str, Operation] = {op.name: op for op in _OPS}

REMOTING: dict[int, str] = {
    RC.SEND_MESSAGE: "send", RC.SEND_MESSAGE_V2: "send", RC.SEND_BATCH_MESSAGE: "send",
    RC.CONSUMER_SEND_MSG_BACK: "send-back",
    RC.PULL_MESSAGE: "pull",
    RC.QUERY_MESSAGE: "read-by-key",
    RC.VIEW_MESSAGE_BY_ID: "read-by-offset",
    RC.GET_MAX_OFFSET: "queue-offsets", RC.GET_MIN_OFFSET: "queue-offsets", RC.SEARCH_OFFSET_BY_TIMESTAMP: "queue-offsets",
    RC.GET_TOPIC_STATS_INFO: "topic-status",
    RC.HEART_BEAT: "heartbeat",
    RC.UNREGISTER_CLIENT: "unregister-client",
    RC.GET_CONSUMER_LIST_BY_GROUP: "consumer-list",
    RC.LOCK_BATCH_MQ: "queue-lock", RC.UNLOCK_BATCH_MQ: "queue-lock",
    RC.QUERY_CONSUMER_OFFSET: "query-offset",
    RC.UPDATE_CONSUMER_OFFSET: "commit-offset",
    RC.GET_CONSUME_STATS: "consume-stats",
    RC.GET_CONSUMER_CONNECTION_LIST: "consumer-connections",
    RC.QUERY_TOPIC_CONSUME_BY_WHO: "consumers-of-topic",
    RC.END_TRANSACTION: "end-transaction",
    RC.GET_BROKER_RUNTIME_INFO: "runtime-info", RC.VIEW_BROKER_STATS_DATA: "runtime-info",
    RC.GET_ALL_TOPIC_CONFIG: "config-dump", RC.GET_ALL_CONSUMER_OFFSET: "config-dump",
    RC.GET_ALL_DELAY_OFFSET: "config-dump", RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: "config-dump",
    RC.GET_BROKER_CONFIG: "config-dump",
    RC.UPDATE_AND_CREATE_TOPIC: "create-topic",
    RC.DELETE_TOPIC_IN_BROKER: "delete-topic",
    RC.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: "update-group",
    RC.DELETE_SUBSCRIPTIONGROUP: "delete-group",
    RC.INVOKE_BROKER_TO_RESET_OFFSET: "reset-offsets",
    RC.UPDATE_BROKER_CONFIG: "update-broker-config",
    RC.TRIGGER_DELETE_FILES: "delete-files",
    RC.CLEAN_EXPIRED_CONSUMEQUEUE: "delete-files", RC.CLEAN_UNUSED_TOPIC: "delete-files",
    RC.DELETE_EXPIRED_COMMITLOG: "delete-files",
    RC.CLONE_GROUP_OFFSET: "reset-offsets",
    RC.GET_BROKER_CONSUME_STATS: "query-all-offsets",
    RC.UPDATE_AND_CREATE_ACL_CONFIG: "acl-config", RC.DELETE_ACL_CONFIG: "acl-config",
    RC.GET_BROKER_CLUSTER_ACL_INFO: "acl-config", RC.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: "acl-config",
    RC.GET_PRODUCER_CONNECTION_LIST: "producer-connections",
    RC.GET_ALL_PRODUCER_INFO: "all-producers",
    RC.QUERY_CONSUME_QUEUE: "read-consume-queue",
    RC.NOTIFY_BROKER_ROLE_CHANGED: "role-change-hint",
    RC.GET_SYSTEM_TOPIC_LIST_FROM_BROKER: "list-topics",
    RC.INVOKE_BROKER_TO_GET_CONSUMER_STATUS: "consumer-status", RC.GET_CONSUMER_RUNNING_INFO: "consumer-status",
    RC.CONSUME_MESSAGE_DIRECTLY: "consume-directly",
    RC.REGISTER_FILTER_SERVER: "cannot-apply", RC.REGISTER_MESSAGE_FILTER_CLASS: "cannot-apply",
    RC.QUERY_CORRECTION_OFFSET: "cannot-apply",
    RC.RESUME_CHECK_HALF_MESSAGE: "cannot-apply",
}

HTTP: dict[tuple[str, str], str] = {
    ("GET", "/health"): "health",
    ("POST", "/messages"): "send",
    ("POST", "/messages/batch"): "send",
    ("GET", "/topics/{topic}/queues/{queueId}/messages"): "pull",
    ("GET", "/messages/by-id/{msgId}"): "read-by-offset",
    ("GET", "/messages/by-offset/{offset}"): "read-by-offset",
    ("GET", "/messages/by-key"): "read-by-key",
    ("GET", "/topics"): "list-topics",
    ("POST", "/topics"): "create-topic",
    ("GET", "/topics/{topic}"): "topic-status",
    ("GET", "/consumer-offsets"): "query-offset",  # without ?group=: query-all-offsets (http_acl)
    ("POST", "/consumer-offsets"): "commit-offset",
    ("GET", "/status"): "runtime-info",
    ("GET", "/admin/config/{name}"): "config-dump",
    ("GET", "/admin/dledger"): "dledger-status",
    ("POST", "/admin/dledger/transfer-leader"): "leadership",
    ("POST", "/admin/dledger/preferred-leader"): "leadership",
    ("GET", "/metrics"): "metrics",
}


def remoting_operation(code: int) -> Operation | None:
    name = REMOTING.get(code)
    return OPERATIONS[name] if name is not None else None


def remoting_is_open(code: int) -> bool:
    op = remoting_operation(code)
    return op is not None and op.need is Need.OPEN


def remoting_needs_admin(code: int) -> bool:
    op = remoting_operation(code)
    return op is not None and op.need is Need.ADMIN


def http_need(method: str, route: str) -> Need:
    """The need of an HTTP route; an unknown route needs an account (a stranger learns nothing)."""
    name = HTTP.get((method, route))
    return OPERATIONS[name].need if name is not None else Need.ACCOUNT
