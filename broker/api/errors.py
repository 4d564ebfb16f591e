"""Error codes of the broker HTTP API and the one exception type that carries them.

Rules:
- Every failure leaving the broker is JSON ``{"code": <CODE>, "message": <text>, ...extra}``;
  never a traceback, never HTML. ``code`` is a RocketMQ name where RocketMQ has one
  (``TOPIC_NOT_EXIST``, ``MESSAGE_ILLEGAL``, ``SERVICE_NOT_AVAILABLE``, ``SLAVE_NOT_AVAILABLE``,
  ``FLUSH_SLAVE_TIMEOUT``, ``FLUSH_DISK_TIMEOUT``, ...), otherwise a short upper-case name of our
  own (``BAD_REQUEST``, ``NOT_MASTER``, ``REQUEST_TOO_LARGE``, ``UNAUTHORIZED``).
- ``extra`` fields carry what a client needs to act: ``masterAddress`` for ``NOT_MASTER`` (the
  DLedger follower answer of DESIGN §5), and for the replication statuses the ``msgId`` and
  offsets of the message, which *is* stored on the master (RocketMQ returns a SendResult with
  status FLUSH_SLAVE_TIMEOUT; it does not roll the write back).

Theory of operation: handlers and the controller raise :class:`BrokerApiError`; the API's error
middleware renders it with :data:`HTTP_STATUS` and renders anything else as ``SYSTEM_ERROR``
after one log line with the traceback (server side only).
"""
from __future__ import annotations

from typing import Any

from broker.store.put_result import PutMessageStatus, PutRefused

TOPIC_NOT_EXIST = "TOPIC_NOT_EXIST"
SUBSCRIPTION_GROUP_NOT_EXIST = "SUBSCRIPTION_GROUP_NOT_EXIST"
MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
BAD_REQUEST = "BAD_REQUEST"
NOT_FOUND = "NOT_FOUND"
METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
REQUEST_TOO_LARGE = "REQUEST_TOO_LARGE"
NOT_MASTER = "NOT_MASTER"
SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
OS_PAGECACHE_BUSY = "OS_PAGECACHE_BUSY"
MESSAGE_NOT_FOUND = "MESSAGE_NOT_FOUND"
NO_PERMISSION = "NO_PERMISSION"
UNAUTHORIZED = "UNAUTHORIZED"  # ACL: no/unknown AccessKey, bad signature, stale or replayed request
SYSTEM_ERROR = "SYSTEM_ERROR"
LEADERSHIP_TRANSFER_FAILED = "LEADERSHIP_TRANSFER_FAILED"

HTTP_STATUS: dict[str, int] = {
    TOPIC_NOT_EXIST: 404,
    SUBSCRIPTION_GROUP_NOT_EXIST: 404,
    MESSAGE_NOT_FOUND: 404,
    NOT_FOUND: 404,
    MESSAGE_ILLEGAL: 400,
    PROPERTIES_SIZE_EXCEEDED: 400,
    BAD_REQUEST: 400,
    METHOD_NOT_ALLOWED: 405,
    REQUEST_TOO_LARGE: 413,
    NO_PERMISSION: 403,
    UNAUTHORIZED: 401,
    NOT_MASTER: 421,  # "Misdirected Request": ask masterAddress instead
    SERVICE_NOT_AVAILABLE: 503,
    SLAVE_NOT_AVAILABLE: 503,
    OS_PAGECACHE_BUSY: 503,
    FLUSH_SLAVE_TIMEOUT: 504,
    FLUSH_DISK_TIMEOUT: 504,
    SYSTEM_ERROR: 500,
    LEADERSHIP_TRANSFER_FAILED: 409,
}


#: the HTTP API's code for each put status: a refused put (nothing stored) and a stored put whose
#: durability wait failed alike; the HTTP status is then :data:`HTTP_STATUS` of that code
PUT_STATUS_HTTP: dict[PutMessageStatus, str] = {
    PutMessageStatus.FLUSH_DISK_TIMEOUT: FLUSH_DISK_TIMEOUT,
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: FLUSH_SLAVE_TIMEOUT,
    PutMessageStatus.SLAVE_NOT_AVAILABLE: SLAVE_NOT_AVAILABLE,
    PutMessageStatus.SERVICE_NOT_AVAILABLE: SERVICE_NOT_AVAILABLE,
    PutMessageStatus.CREATE_MAPPED_FILE_FAILED: SERVICE_NOT_AVAILABLE,
    PutMessageStatus.MESSAGE_ILLEGAL: MESSAGE_ILLEGAL,
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: PROPERTIES_SIZE_EXCEEDED,
    PutMessageStatus.OS_PAGECACHE_BUSY: OS_PAGECACHE_BUSY,
    PutMessageStatus.UNKNOWN_ERROR: SYSTEM_ERROR,
}


class BrokerApiError(Exception):
    """A failure with a RocketMQ-style code; rendered as JSON by the API."""

    def __init__(self, code: str, message: str, **extra: Any) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.extra = extra

    @property
    def http_status(self) -> int:
        return HTTP_STATUS.get(self.code, 500)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        body.update(self.extra)
        return body


def put_refused(exc: PutRefused) -> BrokerApiError:
    """The HTTP API's error for a put that stored nothing (:data:`PUT_STATUS_HTTP`)."""
    return BrokerApiError(PUT_STATUS_HTTP.get(exc.status, SYSTEM_ERROR), exc.detail)
