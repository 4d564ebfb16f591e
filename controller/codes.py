"""Apache RocketMQ 5.3.3's controller request and response codes (``RequestCode`` and
``ResponseCode`` of rocketmq-remoting), numbers exact.

Rules:
- Java names, Java numbers; a grep for the Java name finds the Python one.
- Only the codes Controller mode uses (requests between broker, admin and controller, and the
  controller-to-controller ones of the JRaft mode for completeness); the 4.9.x codes of the
  broker live in ``broker/remoting/codes.py``, which this module does not import (``SUCCESS`` and
  ``SYSTEM_ERROR`` are the same numbers there: ``RemotingSysResponseCode``).
- :func:`response_name` / :func:`request_name` name a number for log lines.

Theory of operation: plain int constants on two classes, as the wire carries ints.
"""
from __future__ import annotations


class ControllerRequestCode:
    BROKER_HEARTBEAT = 904
    NOTIFY_MIN_BROKER_ID_CHANGE = 905
    EXCHANGE_BROKER_HA_INFO = 906
    GET_BROKER_HA_STATUS = 907
    RESET_MASTER_FLUSH_OFFSET = 908
    CONTROLLER_ALTER_SYNC_STATE_SET = 1001
    CONTROLLER_ELECT_MASTER = 1002
    CONTROLLER_REGISTER_BROKER = 1003
    CONTROLLER_GET_REPLICA_INFO = 1004
    CONTROLLER_GET_METADATA_INFO = 1005
    CONTROLLER_GET_SYNC_STATE_DATA = 1006
    GET_BROKER_EPOCH_CACHE = 1007
    NOTIFY_BROKER_ROLE_CHANGED = 1008
    UPDATE_CONTROLLER_CONFIG = 1009
    GET_CONTROLLER_CONFIG = 1010
    CLEAN_BROKER_DATA = 1011
    CONTROLLER_GET_NEXT_BROKER_ID = 1012
    CONTROLLER_APPLY_BROKER_ID = 1013
    BROKER_CLOSE_CHANNEL_REQUEST = 1014
    CHECK_NOT_ACTIVE_BROKER_REQUEST = 1015
    GET_BROKER_LIVE_INFO_REQUEST = 1016
    GET_SYNC_STATE_DATA_REQUEST = 1017
    RAFT_BROKER_HEART_BEAT_EVENT_REQUEST = 1018


class ControllerResponseCode:
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    CONTROLLER_FENCED_MASTER_EPOCH = 2000
    CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH = 2001
    CONTROLLER_INVALID_MASTER = 2002
    CONTROLLER_INVALID_REPLICAS = 2003
    CONTROLLER_MASTER_NOT_AVAILABLE = 2004
    CONTROLLER_INVALID_REQUEST = 2005
    CONTROLLER_BROKER_NOT_ALIVE = 2006
    CONTROLLER_NOT_LEADER = 2007
    CONTROLLER_BROKER_METADATA_NOT_EXIST = 2008
    CONTROLLER_INVALID_CLEAN_BROKER_METADATA = 2009
    CONTROLLER_BROKER_NEED_TO_BE_REGISTERED = 2010
    CONTROLLER_MASTER_STILL_EXIST = 2011
    CONTROLLER_ELECT_MASTER_FAILED = 2012
    CONTROLLER_ALTER_SYNC_STATE_SET_FAILED = 2013
    CONTROLLER_BROKER_ID_INVALID = 2014
    CONTROLLER_JRAFT_INTERNAL_ERROR = 2015
    CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS = 2016


def _names(cls: type) -> dict[int, str]:
    return {v: k for k, v in vars(cls).items() if k.isupper() and isinstance(v, int)}


_REQUEST_NAMES = _names(ControllerRequestCode)
_RESPONSE_NAMES = _names(ControllerResponseCode)


def request_name(code: int) -> str:
    return _REQUEST_NAMES.get(code, f"REQUEST_{code}")


def response_name(code: int) -> str:
    return _RESPONSE_NAMES.get(code, f"RESPONSE_{code}")
