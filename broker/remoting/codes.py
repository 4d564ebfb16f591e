"""RocketMQ 4.9.x request and response codes (``RequestCode``, ``ResponseCode``,
``RemotingSysResponseCode``), plus the language and serialize-type codes of the header.

Rules:
- Values are exactly Apache RocketMQ 4.9.8's; names keep the Java spelling, including its typos
  (``TRANSACTION_STATE_UNKNOW``), so a grep for the Java name finds the Python one.
- :func:`request_name` / :func:`response_name` give the name of a number for log lines and remarks.

Theory of operation: plain int constants on two classes (not enums): the wire carries ints and
unknown codes must pass through untouched.
"""
from __future__ import annotations

from typing import Final


class RequestCode:
    SEND_MESSAGE: Final = 10
    PULL_MESSAGE: Final = 11
    QUERY_MESSAGE: Final = 12
    QUERY_BROKER_OFFSET: Final = 13
    QUERY_CONSUMER_OFFSET: Final = 14
    UPDATE_CONSUMER_OFFSET: Final = 15
    UPDATE_AND_CREATE_TOPIC: Final = 17
    GET_ALL_TOPIC_CONFIG: Final = 21
    GET_TOPIC_CONFIG_LIST: Final = 22
    GET_TOPIC_NAME_LIST: Final = 23
    UPDATE_BROKER_CONFIG: Final = 25
    GET_BROKER_CONFIG: Final = 26
    TRIGGER_DELETE_FILES: Final = 27
    GET_BROKER_RUNTIME_INFO: Final = 28
    SEARCH_OFFSET_BY_TIMESTAMP: Final = 29
    GET_MAX_OFFSET: Final = 30
    GET_MIN_OFFSET: Final = 31
    GET_EARLIEST_MSG_STORETIME: Final = 32
    VIEW_MESSAGE_BY_ID: Final = 33
    HEART_BEAT: Final = 34
    UNREGISTER_CLIENT: Final = 35
    CONSUMER_SEND_MSG_BACK: Final = 36
    END_TRANSACTION: Final = 37
    GET_CONSUMER_LIST_BY_GROUP: Final = 38
    CHECK_TRANSACTION_STATE: Final = 39
    NOTIFY_CONSUMER_IDS_CHANGED: Final = 40
    NOTIFY_BROKER_ROLE_CHANGED: Final = 1008  # 5.x: a controller's push to a Controller-mode broker
    LOCK_BATCH_MQ: Final = 41
    UNLOCK_BATCH_MQ: Final = 42
    GET_ALL_CONSUMER_OFFSET: Final = 43
    GET_ALL_DELAY_OFFSET: Final = 45
    CHECK_CLIENT_CONFIG: Final = 46
    UPDATE_AND_CREATE_ACL_CONFIG: Final = 50
    DELETE_ACL_CONFIG: Final = 51
    GET_BROKER_CLUSTER_ACL_INFO: Final = 52
    UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: Final = 53
    PUT_KV_CONFIG: Final = 100
    GET_KV_CONFIG: Final = 101
    DELETE_KV_CONFIG: Final = 102
    REGISTER_BROKER: Final = 103
    UNREGISTER_BROKER: Final = 104
    GET_ROUTEINFO_BY_TOPIC: Final = 105
    GET_BROKER_CLUSTER_INFO: Final = 106
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: Final = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG: Final = 201
    GET_TOPIC_STATS_INFO: Final = 202
    GET_CONSUMER_CONNECTION_LIST: Final = 203
    GET_PRODUCER_CONNECTION_LIST: Final = 204
    WIPE_WRITE_PERM_OF_BROKER: Final = 205
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER: Final = 206
    DELETE_SUBSCRIPTIONGROUP: Final = 207
    GET_CONSUME_STATS: Final = 208
    SUSPEND_CONSUMER: Final = 209
    RESUME_CONSUMER: Final = 210
    RESET_CONSUMER_OFFSET_IN_CONSUMER: Final = 211
    RESET_CONSUMER_OFFSET_IN_BROKER: Final = 212
    ADJUST_CONSUMER_THREAD_POOL: Final = 213
    WHO_CONSUME_THE_MESSAGE: Final = 214
    DELETE_TOPIC_IN_BROKER: Final = 215
    DELETE_TOPIC_IN_NAMESRV: Final = 216
    GET_KVLIST_BY_NAMESPACE: Final = 219
    RESET_CONSUMER_CLIENT_OFFSET: Final = 220
    GET_CONSUMER_STATUS_FROM_CLIENT: Final = 221
    INVOKE_BROKER_TO_RESET_OFFSET: Final = 222
    INVOKE_BROKER_TO_GET_CONSUMER_STATUS: Final = 223
    GET_TOPICS_BY_CLUSTER: Final = 224
    QUERY_TOPIC_CONSUME_BY_WHO: Final = 300
    REGISTER_FILTER_SERVER: Final = 301
    REGISTER_MESSAGE_FILTER_CLASS: Final = 302
    QUERY_CONSUME_TIME_SPAN: Final = 303
    GET_SYSTEM_TOPIC_LIST_FROM_NS: Final = 304
    GET_SYSTEM_TOPIC_LIST_FROM_BROKER: Final = 305
    CLEAN_EXPIRED_CONSUMEQUEUE: Final = 306
    GET_CONSUMER_RUNNING_INFO: Final = 307
    QUERY_CORRECTION_OFFSET: Final = 308
    CONSUME_MESSAGE_DIRECTLY: Final = 309
    SEND_MESSAGE_V2: Final = 310
    GET_UNIT_TOPIC_LIST: Final = 311
    GET_HAS_UNIT_SUB_TOPIC_LIST: Final = 312
    GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: Final = 313
    CLONE_GROUP_OFFSET: Final = 314
    VIEW_BROKER_STATS_DATA: Final = 315
    CLEAN_UNUSED_TOPIC: Final = 316
    GET_BROKER_CONSUME_STATS: Final = 317
    UPDATE_NAMESRV_CONFIG: Final = 318
    GET_NAMESRV_CONFIG: Final = 319
    SEND_BATCH_MESSAGE: Final = 320
    QUERY_CONSUME_QUEUE: Final = 321
    QUERY_DATA_VERSION: Final = 322
    RESUME_CHECK_HALF_MESSAGE: Final = 323
    SEND_REPLY_MESSAGE: Final = 324
    SEND_REPLY_MESSAGE_V2: Final = 325
    PUSH_REPLY_MESSAGE_TO_CLIENT: Final = 326
    ADD_WRITE_PERM_OF_BROKER: Final = 327
    GET_ALL_PRODUCER_INFO: Final = 328
    DELETE_EXPIRED_COMMITLOG: Final = 329


class ResponseCode:
    # RemotingSysResponseCode
    SUCCESS: Final = 0
    SYSTEM_ERROR: Final = 1
    SYSTEM_BUSY: Final = 2
    REQUEST_CODE_NOT_SUPPORTED: Final = 3
    TRANSACTION_FAILED: Final = 4
    # ResponseCode
    FLUSH_DISK_TIMEOUT: Final = 10
    SLAVE_NOT_AVAILABLE: Final = 11
    FLUSH_SLAVE_TIMEOUT: Final = 12
    MESSAGE_ILLEGAL: Final = 13
    SERVICE_NOT_AVAILABLE: Final = 14
    VERSION_NOT_SUPPORTED: Final = 15
    NO_PERMISSION: Final = 16
    TOPIC_NOT_EXIST: Final = 17
    TOPIC_EXIST_ALREADY: Final = 18
    PULL_NOT_FOUND: Final = 19
    PULL_RETRY_IMMEDIATELY: Final = 20
    PULL_OFFSET_MOVED: Final = 21
    QUERY_NOT_FOUND: Final = 22
    SUBSCRIPTION_PARSE_FAILED: Final = 23
    SUBSCRIPTION_NOT_EXIST: Final = 24
    SUBSCRIPTION_NOT_LATEST: Final = 25
    SUBSCRIPTION_GROUP_NOT_EXIST: Final = 26
    FILTER_DATA_NOT_EXIST: Final = 27
    FILTER_DATA_NOT_LATEST: Final = 28
    TRANSACTION_SHOULD_COMMIT: Final = 200
    TRANSACTION_SHOULD_ROLLBACK: Final = 201
    TRANSACTION_STATE_UNKNOW: Final = 202
    TRANSACTION_STATE_GROUP_WRONG: Final = 203
    NO_BUYER_ID: Final = 204
    NOT_IN_CURRENT_UNIT: Final = 205
    CONSUMER_NOT_ONLINE: Final = 206
    CONSUME_MSG_TIMEOUT: Final = 207
    NO_MESSAGE: Final = 208
    UPDATE_AND_CREATE_ACL_CONFIG_FAILED: Final = 209
    DELETE_ACL_CONFIG_FAILED: Final = 210
    UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED: Final = 211
    FLOW_CONTROL: Final = 215


class LanguageCode:
    JAVA: Final = 0
    CPP: Final = 1
    DOTNET: Final = 2
    PYTHON: Final = 3
    DELPHI: Final = 4
    ERLANG: Final = 5
    RUBY: Final = 6
    OTHER: Final = 7
    HTTP: Final = 8
    GO: Final = 9
    PHP: Final = 10
    OMS: Final = 11
    RUST: Final = 12
    NAMES: Final = ("JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP",
             "OMS", "RUST")


class SerializeType:
    JSON: Final = 0
    ROCKETMQ: Final = 1


def _names(cls: type) -> dict[int, str]:
    return {v: k for k, v in vars(cls).items() if k.isupper() and isinstance(v, int)}


_REQUEST_NAMES: Final = _names(RequestCode)
_RESPONSE_NAMES: Final = _names(ResponseCode)


def request_name(code: int) -> str:
    return _REQUEST_NAMES.get(code, str(code))


def response_name(code: int) -> str:
    return _RESPONSE_NAMES.get(code, str(code))
