"""The actions the AutoSwitch HA state machines (:mod:`broker.ha.autoswitch.protocol`) ask
their driver to carry out, in the order given; each names its :class:`Act` kind (the tables of
``protocol`` are written in kinds). Plain frozen values, no behaviour.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Optional, Union

from broker.ha.autoswitch.epoch_file import EpochEntry


class Act(enum.Enum):
    SEND = "send"
    TRUNCATE_LOG = "truncate_log"
    TRUNCATE_EPOCHS = "truncate_epochs"
    APPEND_EPOCH = "append_epoch"
    APPEND_DATA = "append_data"
    SET_CONFIRM_OFFSET = "set_confirm_offset"
    SLAVE_ACKED = "slave_acked"
    START_TRANSFER = "start_transfer"
    CLOSE = "close"


@dataclass(frozen=True)
class Send:
    data: bytes
    kind: Act = Act.SEND


@dataclass(frozen=True)
class TruncateLog:
    """Slave: truncate the commitlog to ``offset`` (``truncateFiles``)."""

    offset: int
    kind: Act = Act.TRUNCATE_LOG


@dataclass(frozen=True)
class TruncateEpochs:
    """Slave: ``epochCache.truncateSuffixByOffset(offset)``."""

    offset: int
    kind: Act = Act.TRUNCATE_EPOCHS


@dataclass(frozen=True)
class AppendEpoch:
    entry: EpochEntry
    kind: Act = Act.APPEND_EPOCH


@dataclass(frozen=True)
class AppendData:
    offset: int
    data: bytes
    kind: Act = Act.APPEND_DATA


@dataclass(frozen=True)
class SetConfirmOffset:
    offset: int
    kind: Act = Act.SET_CONFIRM_OFFSET


@dataclass(frozen=True)
class SlaveAcked:
    """Master: slave ``slave_id`` acked ``offset``. ``caught_up_ms`` is set when Apache's
    connection-level rule holds (not an async learner, ack >= the master's max offset at the last
    transfer); the service then updates the caught-up time and tries to expand the set."""

    slave_id: int
    offset: int
    caught_up_ms: Optional[float]
    kind: Act = Act.SLAVE_ACKED


@dataclass(frozen=True)
class StartTransfer:
    """Master: the first ack arrived; call :meth:`MasterMachine.start_transfer`."""

    request_offset: int
    kind: Act = Act.START_TRANSFER


@dataclass(frozen=True)
class Close:
    reason: str
    kind: Act = Act.CLOSE


Action = Union[Send, TruncateLog, TruncateEpochs, AppendEpoch, AppendData, SetConfirmOffset,
               SlaveAcked, StartTransfer, Close]
