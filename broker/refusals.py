"""Refusals: a request the broker will not (or cannot) serve, raised below the doors.

Rules:
- A refusal is a :class:`Refusal`: a ``code`` from the vocabulary below (RocketMQ's name where
  RocketMQ has one), a ``message`` for a person, and ``extra`` fields a client needs to act
  (``masterAddress`` for ``NOT_MASTER``; the msgId and offsets of a stored put whose durability
  wait failed). ``str(refusal)`` is ``"<code>: <message>"``.
- Below the doors (send service, store access, offset checks, the HTTP back end, the remoting
  processors) a refusal is raised as one of the typed classes here, never as a door's error type;
  nothing here knows an HTTP status or a remoting response code.
- Each door has one translation: the HTTP API's ``broker.api.errors.http_error`` (code -> HTTP
  status and JSON body) and the remoting processors' ``processors.common.refusal_response``
  (code -> response code and RocketMQ's remark). A put that stored nothing is not a refusal
  here: it is the store's ``PutRefused`` (``broker.store.put_result``), with its own table per door.
- ``broker.api.errors.BrokerApiError`` is this module's :class:`Refusal` under the HTTP API's
  name: what ``broker/api`` raises for its own refusals (bad JSON, ACL). No module outside
  ``broker/api`` names it (``tests/remoting/test_refusal_errors.py``).

Theory of operation: exceptions as data. The typed classes fix the code (and the message where
there is only one), so a raise site says what happened (``TopicNotFound``), not how a door
answers it; the doors read ``code``, ``message`` and ``extra`` and nothing else.
"""
from __future__ import annotations

from typing import Final, Mapping, Optional

from broker.store.put_result import PutMessageStatus

# the vocabulary (the codes a door translates)
TOPIC_NOT_EXIST: Final = "TOPIC_NOT_EXIST"
SUBSCRIPTION_GROUP_NOT_EXIST: Final = "SUBSCRIPTION_GROUP_NOT_EXIST"
MESSAGE_ILLEGAL: Final = "MESSAGE_ILLEGAL"
PROPERTIES_SIZE_EXCEEDED: Final = "PROPERTIES_SIZE_EXCEEDED"
BAD_REQUEST: Final = "BAD_REQUEST"
NOT_MASTER: Final = "NOT_MASTER"
SERVICE_NOT_AVAILABLE: Final = "SERVICE_NOT_AVAILABLE"
SLAVE_NOT_AVAILABLE: Final = "SLAVE_NOT_AVAILABLE"
FLUSH_SLAVE_TIMEOUT: Final = "FLUSH_SLAVE_TIMEOUT"
FLUSH_DISK_TIMEOUT: Final = "FLUSH_DISK_TIMEOUT"
OS_PAGECACHE_BUSY: Final = "OS_PAGECACHE_BUSY"
MESSAGE_NOT_FOUND: Final = "MESSAGE_NOT_FOUND"
NO_PERMISSION: Final = "NO_PERMISSION"
UNAUTHORIZED: Final = "UNAUTHORIZED"  # ACL: no/unknown AccessKey, bad signature, stale or replayed request
SYSTEM_ERROR: Final = "SYSTEM_ERROR"
LEADERSHIP_TRANSFER_FAILED: Final = "LEADERSHIP_TRANSFER_FAILED"

STORE_NOT_OPEN_MESSAGE: Final = "the broker's store is not open"


class Refusal(Exception):
    """A refused request: its code, why, and what a client needs to act (module rules)."""

    def __init__(self, code: str, message: str, **extra: object) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.extra: dict[str, object] = extra


class TopicNotFound(Refusal):
    """The topic is not on this broker (and is not created here)."""

    def __init__(self, message: str) -> None:
        super().__init__(TOPIC_NOT_EXIST, message)


class NoPermission(Refusal):
    """The topic's or the broker's permission forbids it."""

    def __init__(self, message: str) -> None:
        super().__init__(NO_PERMISSION, message)


class BadRequest(Refusal):
    """An argument names something that is not there (a queue, an offset, a peer)."""

    def __init__(self, message: str) -> None:
        super().__init__(BAD_REQUEST, message)


class MessageIllegal(Refusal):
    """The message may not be stored as asked (e.g. a queue id beyond ``writeQueueNums``)."""

    def __init__(self, message: str) -> None:
        super().__init__(MESSAGE_ILLEGAL, message)


class MessageNotFound(Refusal):
    """No message at that offset or with that id."""

    def __init__(self, message: str) -> None:
        super().__init__(MESSAGE_NOT_FOUND, message)


class NotMaster(Refusal):
    """A write (or a leadership transfer) asked of a node that is not the master/leader."""

    def __init__(self, message: str, master_address: Optional[str]) -> None:
        super().__init__(NOT_MASTER, message, masterAddress=master_address)


class ServiceNotAvailable(Refusal):
    """The broker cannot serve it now (starting, stopping, busy): retry later or elsewhere."""

    def __init__(self, message: str) -> None:
        super().__init__(SERVICE_NOT_AVAILABLE, message)


class StoreNotOpen(ServiceNotAvailable):
    """A request racing the store's open or close."""

    def __init__(self) -> None:
        super().__init__(STORE_NOT_OPEN_MESSAGE)


class MemberStopped(ServiceNotAvailable):
    """The DLedger member stopped itself (``store_reads.MemberStoppedError``): the message names why."""


class CorruptRecord(Refusal):
    """A record failed its CRC check (``broker.store.verify``): never served; the message names
    node, file, offset and the fix."""

    def __init__(self, message: str) -> None:
        super().__init__(SYSTEM_ERROR, message)


class LeadershipTransferFailed(Refusal):
    """The DLedger leader could not hand over; ``extra`` is the transfer's result but its own
    ``code`` (the DLedger code, which the message names: the refusal's code stays this one).
    Before issue 26 the result's ``code`` collided with the error's and the answer was a 500."""

    def __init__(self, message: str, result: Mapping[str, object]) -> None:
        super().__init__(LEADERSHIP_TRANSFER_FAILED, message, **{k: v for k, v in result.items() if k != "code"})


#: why a stored put is not durable as asked, by status (the message when the store gave none)
NOT_DURABLE_MESSAGES: Final[dict[PutMessageStatus, str]] = {
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: "the message is stored on the master but the slave did not acknowledge it in time",
    PutMessageStatus.SLAVE_NOT_AVAILABLE: "the message is stored on the master but no slave is connected (or it is too far behind)",
    PutMessageStatus.FLUSH_DISK_TIMEOUT: "the message is written but the disk flush did not complete in time",
}


class NotDurable(Refusal):
    """A put that *is* stored but whose durability wait failed (``status``: FLUSH_DISK_TIMEOUT,
    FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE); ``extra`` is the put's answer (msgId, offsets),
    because the message is there (RocketMQ does not roll it back either). ``message`` is the
    store's detail or :data:`NOT_DURABLE_MESSAGES`, empty when neither says (a door then names
    the code). A door maps ``status`` with its put-status table."""

    def __init__(self, status: PutMessageStatus, detail: str, **result: object) -> None:
        super().__init__(status.value, detail or NOT_DURABLE_MESSAGES.get(status, ""), **result)
        self.status = status
