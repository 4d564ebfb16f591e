"""RocketMQ's record constants (``MessageDecoder``, ``CommitLog``, ``MessageSysFlag``,
``MessageConst``): magics, field positions, sysFlag bits and well-known property names.

Kept apart from the codec (``broker.store.message``, which re-exports every name) so that readers
that only need a position or a flag, such as the validator's vectorised scans, import no codec.
"""
from __future__ import annotations

from typing import Final

MESSAGE_MAGIC_CODE: Final = -626843481  # 0xDAA320A7, v1: 1-byte topic length
MESSAGE_MAGIC_CODE_V2: Final = -626843477  # 0xDAA320AB, v2: 2-byte topic length
BLANK_MAGIC_CODE: Final = -875286124  # 0xCBD43194, classic end-of-file filler
END_FILE_MIN_BLANK_LENGTH: Final = 8

MESSAGE_MAGIC_CODE_POSITION: Final = 4
MESSAGE_FLAG_POSITION: Final = 16
QUEUE_OFFSET_POSITION: Final = 20
PHY_POS_POSITION: Final = 28
MESSAGE_PHYSIC_OFFSET_POSITION: Final = 28
SYSFLAG_POSITION: Final = 36
BORN_TIMESTAMP_POSITION: Final = 40
BORN_HOST_POSITION: Final = 48
MESSAGE_STORE_TIMESTAMP_POSITION: Final = 56  # only with an IPv4 born host; +12 for IPv6

NAME_VALUE_SEPARATOR: Final = "\x01"
PROPERTY_SEPARATOR: Final = "\x02"
MAX_PROPERTIES_LENGTH: Final = 32767  # Short.MAX_VALUE
MAX_TOPIC_LENGTH_V1: Final = 127

COMPRESSED_FLAG: Final = 0x1
MULTI_TAGS_FLAG: Final = 0x2
TRANSACTION_NOT_TYPE: Final = 0x0
TRANSACTION_PREPARED_TYPE: Final = 0x4
TRANSACTION_COMMIT_TYPE: Final = 0x8
TRANSACTION_ROLLBACK_TYPE: Final = 0xC
BORNHOST_V6_FLAG: Final = 0x10
STOREHOSTADDRESS_V6_FLAG: Final = 0x20
NEED_UNWRAP_FLAG: Final = 0x40
INNER_BATCH_FLAG: Final = 0x80

PROPERTY_KEYS: Final = "KEYS"
PROPERTY_TAGS: Final = "TAGS"
PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: Final = "UNIQ_KEY"
PROPERTY_WAIT_STORE_MSG_OK: Final = "WAIT"
PROPERTY_DELAY_TIME_LEVEL: Final = "DELAY"
PROPERTY_REAL_TOPIC: Final = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID: Final = "REAL_QID"
PROPERTY_TRANSACTION_PREPARED: Final = "TRAN_MSG"
RMQ_SYS_SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"

DEFAULT_MESSAGE_DELAY_LEVEL: Final = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

