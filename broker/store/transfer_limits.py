"""How much one pull may carry: RocketMQ's per-pull transfer caps (issue 23.5).

Rules (apache/rocketmq 4.9.8 ``DefaultMessageStore.getMessage`` / ``isTheBatchFull`` and
``checkInDiskByCommitOffset``, ``MessageStoreConfig`` keys and defaults):
- A read stops *before* the next message when the batch is full; the first message is always
  served, however big (a pull that returns nothing for a message larger than the cap would stall
  its consumer for ever).
- The batch is full when it holds ``max_num`` messages, or when adding the next message's
  ``size`` would pass the byte cap, or when it holds the count cap. The caps depend on where the
  next message is: "in disk" when the commitlog's max offset is more than
  ``accessMessageInMemoryMaxRatio`` % (40) of the host's physical memory ahead of it, else "in
  memory": ``maxTransferBytesOnMessageInMemory`` (256 KiB) / ``maxTransferCountOnMessageInMemory``
  (32), ``maxTransferBytesOnMessageInDisk`` (64 KiB) / ``maxTransferCountOnMessageInDisk`` (8).
  This is Apache's test as written (our commitlog is mmap'd like Java's, so "in memory" means the
  same thing: likely still in the page cache).
- The remoting door (``PULL_MESSAGE``) uses exactly these caps. The HTTP door keeps its explicit
  ``maxCount`` (at most 1024) as its count cap and has one byte cap, ``httpPullMaxBytes`` (ours,
  4 MiB of stored records, wherever they are): its JSON answers stay a few MiB, and existing
  HTTP readers that page through a queue by ``nextBeginOffset`` see no change.

Theory of operation: a :class:`TransferLimits` is a frozen value built once from the broker's
conf (:meth:`TransferLimits.remoting` / :meth:`TransferLimits.http`); the store's read loop
(``broker.store.store_reads``) asks :meth:`TransferLimits.batch_full` before each message, so
both doors share one implementation.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

MAX_TRANSFER_BYTES_IN_MEMORY = 256 * 1024
MAX_TRANSFER_COUNT_IN_MEMORY = 32
MAX_TRANSFER_BYTES_IN_DISK = 64 * 1024
MAX_TRANSFER_COUNT_IN_DISK = 8
ACCESS_MESSAGE_IN_MEMORY_MAX_RATIO = 40
HTTP_PULL_MAX_BYTES = 4 * 1024 * 1024
UNLIMITED = 1 << 62


def total_physical_memory() -> int:
    """Bytes of physical memory (Java's ``StoreUtil.TOTAL_PHYSICAL_MEMORY_SIZE``); 24 GiB if unknown."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not a POSIX host
        return 24 << 30


TOTAL_PHYSICAL_MEMORY = total_physical_memory()


@dataclass(frozen=True, slots=True)
class TransferLimits:
    bytes_in_memory: int = MAX_TRANSFER_BYTES_IN_MEMORY
    count_in_memory: int = MAX_TRANSFER_COUNT_IN_MEMORY
    bytes_in_disk: int = MAX_TRANSFER_BYTES_IN_DISK
    count_in_disk: int = MAX_TRANSFER_COUNT_IN_DISK
    # physical bytes behind the commitlog's max offset that still count as "in memory"
    memory_window: int = TOTAL_PHYSICAL_MEMORY * ACCESS_MESSAGE_IN_MEMORY_MAX_RATIO // 100

    @classmethod
    def remoting(cls, conf: object = None) -> "TransferLimits":
        """Apache's caps from a conf object (BrokerConfig); missing keys take Apache's defaults."""
        ratio = _int(conf, "access_message_in_memory_max_ratio", ACCESS_MESSAGE_IN_MEMORY_MAX_RATIO)
        return cls(
            bytes_in_memory=_int(conf, "max_transfer_bytes_on_message_in_memory", MAX_TRANSFER_BYTES_IN_MEMORY),
            count_in_memory=_int(conf, "max_transfer_count_on_message_in_memory", MAX_TRANSFER_COUNT_IN_MEMORY),
            bytes_in_disk=_int(conf, "max_transfer_bytes_on_message_in_disk", MAX_TRANSFER_BYTES_IN_DISK),
            count_in_disk=_int(conf, "max_transfer_count_on_message_in_disk", MAX_TRANSFER_COUNT_IN_DISK),
            memory_window=TOTAL_PHYSICAL_MEMORY * max(0, ratio) // 100,
        )

    @classmethod
    def http(cls, conf: object = None) -> "TransferLimits":
        """The HTTP door: one byte cap (``httpPullMaxBytes``), the count is the request's ``maxCount``."""
        cap = _int(conf, "http_pull_max_bytes", HTTP_PULL_MAX_BYTES)
        return cls(bytes_in_memory=cap, count_in_memory=UNLIMITED, bytes_in_disk=cap, count_in_disk=UNLIMITED,
                   memory_window=UNLIMITED)

    def in_disk(self, phy_offset: int, max_phy_offset: int) -> bool:
        """``checkInDiskByCommitOffset``: is the record further behind the max offset than memory holds?"""
        return max_phy_offset - phy_offset > self.memory_window

    def batch_full(self, size: int, max_num: int, buffer_total: int, message_total: int, in_disk: bool) -> bool:
        """``isTheBatchFull``: must the read stop before a record of ``size`` bytes?"""
        if buffer_total == 0 or message_total == 0:
            return False  # the first message always goes
        if max_num <= message_total:
            return True
        if in_disk:
            return buffer_total + size > self.bytes_in_disk or message_total > self.count_in_disk - 1
        return buffer_total + size > self.bytes_in_memory or message_total > self.count_in_memory - 1


def _int(conf: object, name: str, default: int) -> int:
    value = getattr(conf, name, None) if conf is not None else None
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else default
