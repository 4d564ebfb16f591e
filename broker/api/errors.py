"""Error codes of the broker HTTP API and its one translation of a refusal into an answer.

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
- The codes shared with the rest of the broker are ``broker.refusals``' vocabulary (re-exported
  here); ``NOT_FOUND``, ``METHOD_NOT_ALLOWED`` and ``REQUEST_TOO_LARGE`` are the API's own.
- :class:`BrokerApiError` is raised only in ``broker/api``: it is ``broker.refusals.Refusal``
  under this door's name, so it catches every typed refusal raised below the API.

Theory of operation: below the API a refusal is raised as a ``broker.refusals`` type and a put
that stored nothing as ``PutRefused``; the API's error middleware turns either into an
:class:`HttpError` with :func:`http_error` (:data:`HTTP_STATUS` for the code,
:data:`PUT_STATUS_HTTP` for a put status) and renders anything else as ``SYSTEM_ERROR`` after
one log line with the traceback (server side only).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Union

from broker.refusals import BAD_REQUEST as BAD_REQUEST
from broker.refusals import FLUSH_DISK_TIMEOUT as FLUSH_DISK_TIMEOUT
from broker.refusals import FLUSH_SLAVE_TIMEOUT as FLUSH_SLAVE_TIMEOUT
from broker.refusals import LEADERSHIP_TRANSFER_FAILED as LEADERSHIP_TRANSFER_FAILED
from broker.refusals import MESSAGE_ILLEGAL as MESSAGE_ILLEGAL
from broker.refusals import MESSAGE_NOT_FOUND as MESSAGE_NOT_FOUND
from broker.refusals import NO_PERMISSION as NO_PERMISSION
from broker.refusals import NOT_MASTER as NOT_MASTER
from broker.refusals import OS_PAGECACHE_BUSY as OS_PAGECACHE_BUSY
from broker.refusals import PROPERTIES_SIZE_EXCEEDED as PROPERTIES_SIZE_EXCEEDED
from broker.refusals import SERVICE_NOT_AVAILABLE as SERVICE_NOT_AVAILABLE
from broker.refusals import SLAVE_NOT_AVAILABLE as SLAVE_NOT_AVAILABLE
from broker.refusals import SUBSCRIPTION_GROUP_NOT_EXIST as SUBSCRIPTION_GROUP_NOT_EXIST
from broker.refusals import SYSTEM_ERROR as SYSTEM_ERROR
from broker.refusals import TOPIC_NOT_EXIST as TOPIC_NOT_EXIST
from broker.refusals import UNAUTHORIZED as UNAUTHORIZED
from broker.refusals import NotDurable, Refusal
from broker.store.put_result import PutMessageStatus, PutRefused

NOT_FOUND: Final = "NOT_FOUND"
METHOD_NOT_ALLOWED: Final = "METHOD_NOT_ALLOWED"
REQUEST_TOO_LARGE: Final = "REQUEST_TOO_LARGE"

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


#: the HTTP API's refusal: ``broker.refusals.Refusal`` under this door's name (module rules)
BrokerApiError = Refusal


@dataclass(frozen=True, slots=True)
class HttpError:
    """The HTTP API's answer to a refusal: the JSON body's code, message and extra fields."""

    code: str
    message: str
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def http_status(self) -> int:
        return HTTP_STATUS.get(self.code, 500)

    def to_json(self) -> dict[str, object]:
        body: dict[str, object] = {"code": self.code, "message": self.message}
        body.update(self.extra)
        return body


def http_error(exc: Union[Refusal, PutRefused]) -> HttpError:
    """The HTTP door's one translation: a refusal keeps its code (a stored put that is not durable,
    and a put that stored nothing, are answered by :data:`PUT_STATUS_HTTP` of their status)."""
    if isinstance(exc, PutRefused):
        return HttpError(PUT_STATUS_HTTP.get(exc.status, SYSTEM_ERROR), exc.detail)
    if isinstance(exc, NotDurable):
        code = PUT_STATUS_HTTP.get(exc.status, SYSTEM_ERROR)
        return HttpError(code, exc.message or code, dict(exc.extra))
    return HttpError(exc.code, exc.message, dict(exc.extra))


def put_refused(exc: PutRefused) -> HttpError:
    """The HTTP API's error for a put that stored nothing (:data:`PUT_STATUS_HTTP`)."""
    return http_error(exc)
