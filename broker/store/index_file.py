"""IndexFile and IndexService: the on-disk hash index from message keys to commitlog offsets.

Rules (RocketMQ 4.9.8 ``IndexFile`` / ``IndexHeader`` / ``IndexService``; reference §2.2):

- File ``<storePathRootDir>/index/<yyyyMMddHHmmssSSS>`` (local wall-clock time at creation), size
  ``40 + maxHashSlotNum*4 + maxIndexNum*20``, preallocated sparse and mmapped: a ``MappedFile``
  (``from_offset=0``: the name is a time, not an offset). A new file is made whole, header
  included, under the hidden ``.<name>.creating`` and renamed into place; load removes such a
  leftover (and an older version's ``<name>.creating``). A file of another size is an
  IndexFileError naming the file and the geometry. The pages a ``put_key`` touches get their
  blocks first (page-sized ``BlockReserve`` granules): on a full disk it raises
  ``DiskFullError`` naming the file and offset, having written nothing (a store through the
  mapping into an unbackable hole would kill the process with SIGBUS). Dispatch retries.
- Header ``>qqqqii``: beginTimestamp, endTimestamp, beginPhyOffset, endPhyOffset,
  hashSlotCount (slots ever taken), indexCount (next entry number; starts at **1** so that a
  slot value of 0 means "empty"). Header fields are written through to the page on every change
  (the C path below: once per record, after its entries; nothing reads the mapped header
  between keys, queries read the attributes).
- Slot *s* at ``40 + s*4`` holds the newest entry number whose key hashes to *s*
  (``keyHash % maxHashSlotNum``, ``keyHash = abs(Java hashCode)``, MIN_VALUE -> 0).
- Entry *k* at ``40 + slots*4 + k*20`` is ``>iqii``: keyHash, phyOffset, timeDiff (seconds since
  beginTimestamp, clamped to [0, Integer.MAX_VALUE]; 0 while beginTimestamp is unset), prevIndex
  (the previous entry of the same slot: a newest-first chain).
- Keys indexed per message: ``topic#UNIQ_KEY`` then ``topic#<each space-separated KEYS token>``;
  ROLLBACK transactions are skipped; a message below the file's endPhyOffset is skipped (so a
  re-dispatch after restart is idempotent). Unlike Java we also skip the message *at*
  endPhyOffset (the last one indexed), which Java would index a second time on re-dispatch.
- A full file rolls over to a new one whose begin/end phy offset and timestamps start at the old
  file's end values; the full file is flushed and its endTimestamp becomes the checkpoint's
  ``indexMsgTimestamp``. After an abnormal exit, files whose endTimestamp is newer than that are
  deleted at load (their tail cannot be trusted); the commitlog recovery re-dispatches.
- Lookups compare the 32-bit hash only (as Java); callers must check the message's real keys.

Theory of operation: the ReputMessageService calls :meth:`IndexService.dispatch` with each
committed DispatchRequest; the service appends to the newest :class:`IndexFile`. Queries walk
files newest to oldest and each slot chain newest to oldest, so results come newest first.
Compiled builds write a record's keys in one C call (``_index_write.put_keys``:
:meth:`IndexFile.put_record_keys`) when they are ASCII, fit in the file and lie within blocks
already reserved; anything else declines to the Python loop (:meth:`IndexFile.reserve_keys`,
:meth:`IndexFile.put_key`), which is the definition and gives the same bytes.
"""
from __future__ import annotations

import logging
import mmap
import os
import re
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Final, Optional, Protocol

from broker.native import c_extension
from broker.store.dispatch import DispatchRequest
from broker.store.errors import StoreError
from broker.store.mapped_file import FileSizeError, MappedFile
from broker.store.java_hash import index_key_hash

log = logging.getLogger(__name__)

INDEX_HEADER_SIZE: Final = 40
HASH_SLOT_SIZE: Final = 4
INDEX_SIZE: Final = 20
INVALID_INDEX: Final = 0
DEFAULT_MAX_HASH_SLOT_NUM: Final = 5_000_000
DEFAULT_MAX_INDEX_NUM: Final = 5_000_000 * 4
_HEADER: Final = struct.Struct(">qqqqii")
_ENTRY: Final = struct.Struct(">iqii")
_SLOT: Final = struct.Struct(">i")
_INT_MAX: Final = 0x7FFFFFFF
_NAME_RE: Final = re.compile(r"^\d{17}$")
_TRANSACTION_ROLLBACK: Final = 0xC

_index_write = c_extension("broker.store._index_write")
#: one record's keys in C (compiled builds), else None: see broker/store/_index_write.c. Arguments:
#: view, topic, uniq_key, keys, phy_offset, store_timestamp, index_count, index_num,
#: hash_slot_num, hash_slot_count, begin_timestamp, begin_phy_offset, ready_end; the answer is
#: (index_count, hash_slot_count) after the record, or None: the Python loop decides
_c_put_keys: Final[Optional[Callable[[memoryview, str, str, str, int, int, int, int, int, int, int, int, int],
                                     Optional[tuple[int, int]]]]] = (
    _index_write.put_keys if _index_write is not None else None)


TMP_SUFFIX: Final = ".creating"


def _is_creating(name: str) -> bool:
    """A file whose creation a crash interrupted: ``.<name>.creating`` (MappedFile), or
    ``<name>.creating`` (written by an older version)."""
    return name.endswith(TMP_SUFFIX) and _NAME_RE.fullmatch(name[:-len(TMP_SUFFIX)].removeprefix(".")) is not None


class IndexFileError(StoreError):
    """An index file on disk does not fit the configured geometry (names the file)."""


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    return INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_SIZE


def time_millis_to_human_string(millis: int) -> str:
    """UtilAll.timeMillisToHumanString: ``yyyyMMddHHmmssSSS`` in local time."""
    secs, ms = divmod(millis, 1000)
    return time.strftime("%Y%m%d%H%M%S", time.localtime(secs)) + f"{ms:03d}"


class IndexFile:
    """One mmapped index file."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        hash_slot_num: int,
        index_num: int,
        end_phy_offset: int = 0,
        end_timestamp: int = 0,
        *,
        read_only: bool = False,
    ) -> None:
        self.path = Path(path)
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.file_size = index_file_size(hash_slot_num, index_num)
        self.read_only = read_only
        self._entries_base = INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE
        self._slots_reserved = False
        #: entries below this byte have blocks (reserve_keys), so the C path writes them unchecked
        self._entries_ready = 0
        self.begin_timestamp = 0
        self.end_timestamp = 0
        self.begin_phy_offset = 0
        self.end_phy_offset = 0
        self.hash_slot_count = 0
        self.index_count = 1
        exists = self.path.exists()
        if not exists:
            if end_phy_offset > 0:
                self.begin_phy_offset = self.end_phy_offset = end_phy_offset
            if end_timestamp > 0:
                self.begin_timestamp = self.end_timestamp = end_timestamp
        try:
            # a new file is made whole (header included) under a hidden name and renamed into
            # place, so a crash never leaves a 0-byte or headerless index file behind (issue
            # 13.4); page-sized granules for the entries (appended in order), the slot table is
            # reserved whole at the first key (reserve_keys)
            self._file = MappedFile(self.path, self.file_size, read_only=read_only, from_offset=0,
                                    granule=mmap.PAGESIZE, head=b"" if exists else self._header())
        except FileSizeError as exc:
            raise IndexFileError(
                f"{self.path}: index file is {exc.actual} bytes, but maxHashSlotNum={hash_slot_num} and "
                f"maxIndexNum={index_num} give {self.file_size}; configure the values it was written with"
            ) from None
        self._view = self._file.whole()
        if exists:
            self.load()

    @property
    def file_name(self) -> str:
        return self.path.name

    def load(self) -> None:
        (
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        ) = _HEADER.unpack_from(self._view, 0)
        if self.index_count <= 0:
            self.index_count = 1
        if self.index_count > self.index_num + 1:
            raise IndexFileError(
                f"{self.path}: header indexCount {self.index_count} exceeds maxIndexNum {self.index_num}"
            )

    def _header(self) -> bytes:
        return _HEADER.pack(
            self.begin_timestamp, self.end_timestamp, self.begin_phy_offset, self.end_phy_offset,
            self.hash_slot_count, self.index_count,
        )

    def _write_header(self) -> None:
        # (callers reserve the header's block first: flush, and put_key itself or, for a reserved
        # key, reserve_keys' slot table, which starts at byte 0)
        _HEADER.pack_into(
            self._view, 0,
            self.begin_timestamp, self.end_timestamp, self.begin_phy_offset, self.end_phy_offset,
            self.hash_slot_count, self.index_count,
        )

    def is_write_full(self) -> bool:
        return self.index_count >= self.index_num

    def reserve_keys(self, keys: list[str]) -> list[int]:
        """Blocks for the slots and entries of ``keys`` (DiskFullError if the disk is full);
        returns their hashes."""
        hashes = [index_key_hash(key) for key in keys]
        if self.read_only or not keys:
            return hashes
        reserve = self._file.reserve
        if not self._slots_reserved:
            # slots are written at random: blocks for the whole slot table in one call (20 MB at
            # the default 5M slots) rather than one fallocate per page touched (issue 22: that
            # was 30 us per message while the table filled)
            self._file.reserve_bulk(0, self._entries_base)
            self._slots_reserved = True
        first = self._entries_base + self.index_count * INDEX_SIZE
        end = min(first + len(keys) * INDEX_SIZE, self.file_size)
        reserve(first, end)
        # the rest of the granule holding the last entry has blocks too (BlockReserve allocates
        # whole granules): the C path may fill it (put_record_keys) before the next reservation
        self._entries_ready = max(self._entries_ready, self._file.reserved_end(end))
        return hashes

    def put_record_keys(self, topic: str, uniq_key: str, keys: str, phy_offset: int, store_timestamp: int) -> bool:
        """One record's keys (``topic#uniq_key``, then ``topic#<token>`` for each token of
        ``keys``) in one C call (compiled builds): True when they are in, with the same bytes and
        attributes as :meth:`reserve_keys` and :meth:`put_key` would give. False (nothing
        written) when C declines: not compiled, a non-ASCII key, a key that would fill the file
        (a roll), entries past the blocks reserved so far, ...; the caller then runs those."""
        put = _c_put_keys
        if put is None or self.read_only:
            return False
        r = put(self._view, topic, uniq_key, keys, phy_offset, store_timestamp, self.index_count, self.index_num,
                self.hash_slot_num, self.hash_slot_count, self.begin_timestamp, self.begin_phy_offset,
                self._entries_ready)
        if r is None:
            return False
        count, slot_count = r
        if count != self.index_count:  # (no keys: nothing changes)
            if self.index_count <= 1:
                self.begin_phy_offset = phy_offset
                self.begin_timestamp = store_timestamp
            self.index_count = count
            self.hash_slot_count = slot_count
            self.end_phy_offset = phy_offset
            self.end_timestamp = store_timestamp
        return True

    def put_key(self, key: str, phy_offset: int, store_timestamp: int, key_hash: int | None = None,
                reserved: bool = False) -> bool:
        """Append one entry; False when the file is full (the caller rolls to a new file).
        ``reserved``: :meth:`reserve_keys` of this file covered this key (the header, the whole
        slot table and the entries of the keys it was given), so no block is checked again."""
        if self.index_count >= self.index_num:
            return False
        if self.read_only:
            raise IndexFileError(f"{self.path}: index file opened read-only")
        if key_hash is None:
            key_hash = index_key_hash(key)
        abs_slot = INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
        abs_index = self._entries_base + self.index_count * INDEX_SIZE
        if not reserved:
            reserve = self._file.reserve  # blocks first (DiskFullError names file and offset), then stores
            reserve(abs_slot, abs_slot + HASH_SLOT_SIZE)  # (on tmpfs even reading a hole needs a page)
            reserve(abs_index, abs_index + INDEX_SIZE)
            reserve(0, INDEX_HEADER_SIZE)
        mm = self._view
        (slot_value,) = _SLOT.unpack_from(mm, abs_slot)
        if slot_value <= INVALID_INDEX or slot_value > self.index_count:
            slot_value = INVALID_INDEX
        if self.begin_timestamp <= 0:
            time_diff = 0
        else:
            delta = store_timestamp - self.begin_timestamp  # negative clamps to 0 either way
            time_diff = min(delta // 1000, _INT_MAX) if delta > 0 else 0
        _ENTRY.pack_into(mm, abs_index, key_hash, phy_offset, time_diff, slot_value)
        _SLOT.pack_into(mm, abs_slot, self.index_count)
        if self.index_count <= 1:
            self.begin_phy_offset = phy_offset
            self.begin_timestamp = store_timestamp
        if slot_value == INVALID_INDEX:
            self.hash_slot_count += 1
        self.index_count += 1
        self.end_phy_offset = phy_offset
        self.end_timestamp = store_timestamp
        self._write_header()
        return True

    def is_time_matched(self, begin: int, end: int) -> bool:
        b, e = self.begin_timestamp, self.end_timestamp
        return (begin < b and end > e) or (b <= begin <= e) or (b <= end <= e)

    def select_phy_offset(self, out: list[int], key: str, max_num: int, begin: int, end: int) -> None:
        """Append to ``out`` the offsets of entries whose hash matches ``key``, newest first."""
        key_hash = index_key_hash(key)
        abs_slot = INDEX_HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
        mm = self._view
        # pread, not the mapping: the slot may be a hole, and on a full tmpfs a read fault on a
        # hole of a shared mapping is SIGBUS (pread returns zeros); entries below the count exist
        (slot_value,) = _SLOT.unpack(self._file.read_at(abs_slot, HASH_SLOT_SIZE))
        count = self.index_count
        if slot_value <= INVALID_INDEX or slot_value > count or count <= 1:
            return
        nxt = slot_value
        while len(out) < max_num:
            h, phy, time_diff, prev = _ENTRY.unpack_from(mm, self._entries_base + nxt * INDEX_SIZE)
            if time_diff < 0:
                break
            time_read = self.begin_timestamp + time_diff * 1000
            if h == key_hash and begin <= time_read <= end:
                out.append(phy)
            if prev <= INVALID_INDEX or prev > count or prev == nxt or time_read < begin:
                break
            nxt = prev

    def flush(self) -> None:
        """Header through to the page, then ``fdatasync`` (every page written, slots included)."""
        if self.read_only or self._file.closed:
            return
        self._file.reserve(0, INDEX_HEADER_SIZE)
        self._write_header()
        self._file.force()

    def close(self) -> None:
        if not self._file.closed:
            try:
                self.flush()
            finally:
                self._file.close()

    def destroy(self) -> None:
        self._file.destroy()

    def __repr__(self) -> str:
        return (
            f"IndexFile({self.path.name}, count={self.index_count}, slots={self.hash_slot_count}, "
            f"phy=[{self.begin_phy_offset},{self.end_phy_offset}], ts=[{self.begin_timestamp},{self.end_timestamp}])"
        )


class _IndexCheckpoint(Protocol):
    index_msg_timestamp: int

    def flush(self) -> None: ...


@dataclass
class QueryOffsetResult:
    phy_offsets: list[int] = field(default_factory=list)
    index_last_update_timestamp: int = 0
    index_last_update_phyoffset: int = 0


def build_key(topic: str, key: str) -> str:
    return f"{topic}#{key}"


class IndexService:
    """Every IndexFile of a store; the CommitLogDispatcher that builds the key index."""

    def __init__(
        self,
        store_root: str | os.PathLike[str],
        max_hash_slot_num: int = DEFAULT_MAX_HASH_SLOT_NUM,
        max_index_num: int = DEFAULT_MAX_INDEX_NUM,
        *,
        checkpoint: Optional[_IndexCheckpoint] = None,
        max_msgs_num_batch: int = 64,
        store_path: str | os.PathLike[str] | None = None,
        read_only: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store_path = Path(store_path) if store_path is not None else Path(store_root) / "index"
        self.hash_slot_num = max_hash_slot_num
        self.index_num = max_index_num
        self.checkpoint = checkpoint
        self.max_msgs_num_batch = max_msgs_num_batch
        self.read_only = read_only
        self._clock = clock
        self._files: list[IndexFile] = []
        self._lock = threading.RLock()
        #: records go through IndexFile.put_record_keys (C, compiled builds) first; False: always
        #: the Python loop (tests compare the two)
        self.c_path = True

    @property
    def index_files(self) -> list[IndexFile]:
        with self._lock:
            return list(self._files)

    def load(self, last_exit_ok: bool = True) -> None:
        """Open every index file, oldest first; after a crash drop those newer than the checkpoint."""
        if not self.store_path.is_dir():
            return
        index_ts = self.checkpoint.index_msg_timestamp if self.checkpoint is not None else 0
        paths = sorted(self.store_path.iterdir())
        for path in paths:
            if _is_creating(path.name) and not self.read_only:
                log.warning("index dir: removing %s, an index file whose creation a crash interrupted", path)
                path.unlink(missing_ok=True)
                continue
            if path.is_file() and path == paths[-1] and path.stat().st_size == 0 and not self.read_only:
                # written by an older version that created, then sized, its files: nothing was indexed in it
                log.warning("index dir: removing %s, an empty index file left by a crash", path)
                path.unlink(missing_ok=True)
                continue
            if not path.is_file() or not _NAME_RE.fullmatch(path.name):
                log.warning("index dir: %s is not an index file name (yyyyMMddHHmmssSSS), ignored", path)
                continue
            f = IndexFile(path, self.hash_slot_num, self.index_num, read_only=self.read_only)
            if not last_exit_ok and f.end_timestamp > index_ts:
                log.warning(
                    "index file %s ends at %d, after the checkpoint's indexMsgTimestamp %d: deleted after abnormal exit",
                    path, f.end_timestamp, index_ts,
                )
                if self.read_only:
                    f.close()
                else:
                    f.destroy()
                continue
            self._files.append(f)

    def dispatch(self, request: DispatchRequest) -> None:
        """IndexService.buildIndex."""
        f = self._get_and_create_last_index_file()
        end = f.end_phy_offset
        if request.commitlog_offset < end:
            return
        if request.commitlog_offset == end and (end > 0 or f.index_count > 1):
            return  # Java re-indexes the message at endPhyOffset; it is already in (see rules)
        if request.sys_flag & 0xC == _TRANSACTION_ROLLBACK:
            return
        topic = request.topic
        if self.c_path and f.put_record_keys(topic, request.uniq_key, request.keys, request.commitlog_offset,
                                             request.store_timestamp):
            return
        keys = [build_key(topic, request.uniq_key)] if request.uniq_key else []
        if request.keys:
            keys += [build_key(topic, key) for key in request.keys.split(" ") if key]
        hashes = f.reserve_keys(keys)  # all keys or none: a retry would skip a half-indexed message
        reserved = f
        for key, key_hash in zip(keys, hashes):
            f = self._put_key(f, request, key, key_hash, f is reserved)

    def _put_key(self, f: IndexFile, request: DispatchRequest, key: str, key_hash: int, reserved: bool) -> IndexFile:
        """``reserved``: ``f`` is the file whose :meth:`IndexFile.reserve_keys` covered ``key``
        (a file rolled to meanwhile checks its blocks per key)."""
        while not f.put_key(key, request.commitlog_offset, request.store_timestamp, key_hash, reserved):
            log.warning("Index file [%s] is full, trying to create another one", f.file_name)
            f = self._get_and_create_last_index_file()
            reserved = False
        return f

    def _get_and_create_last_index_file(self) -> IndexFile:
        with self._lock:
            prev: Optional[IndexFile] = None
            if self._files:
                last = self._files[-1]
                if not last.is_write_full():
                    return last
                prev = last
            if self.read_only:
                raise IndexFileError(f"{self.store_path}: index opened read-only")
            self.store_path.mkdir(parents=True, exist_ok=True)
            millis = int(self._clock() * 1000)
            path = self.store_path / time_millis_to_human_string(millis)
            while path.exists():  # two rolls within one millisecond
                millis += 1
                path = self.store_path / time_millis_to_human_string(millis)
            f = IndexFile(
                path, self.hash_slot_num, self.index_num,
                prev.end_phy_offset if prev else 0, prev.end_timestamp if prev else 0,
            )
            self._files.append(f)
        if prev is not None:
            self._flush_file(prev)
        return f

    def _flush_file(self, f: IndexFile) -> None:
        """Flush one file; a full one moves the checkpoint's indexMsgTimestamp to its end."""
        index_ts = f.end_timestamp if f.is_write_full() else 0
        f.flush()
        if index_ts > 0 and self.checkpoint is not None:
            self.checkpoint.index_msg_timestamp = index_ts
            self.checkpoint.flush()

    def query(self, topic: str, key: str, max_num: int, begin: int, end: int) -> QueryOffsetResult:
        """IndexService.queryOffset: offsets newest first, plus the index's freshness."""
        result = QueryOffsetResult()
        max_num = min(max_num, self.max_msgs_num_batch)
        full_key = build_key(topic, key)
        with self._lock:
            files = list(self._files)
        for i in range(len(files) - 1, -1, -1):
            f = files[i]
            if i == len(files) - 1:
                result.index_last_update_timestamp = f.end_timestamp
                result.index_last_update_phyoffset = f.end_phy_offset
            if f.is_time_matched(begin, end):
                f.select_phy_offset(result.phy_offsets, full_key, max_num, begin, end)
            if f.begin_timestamp < begin or len(result.phy_offsets) >= max_num:
                break
        return result

    def query_offset(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[int]:
        return self.query(topic, key, max_num, begin, end).phy_offsets

    def delete_expired_file(self, min_phy_offset: int) -> int:
        """Delete leading files wholly below ``min_phy_offset`` (never the newest)."""
        deleted = 0
        with self._lock:
            while len(self._files) > 1 and self._files[0].end_phy_offset < min_phy_offset:
                self._files.pop(0).destroy()
                deleted += 1
        return deleted

    def flush(self) -> None:
        for f in self.index_files:
            self._flush_file(f)

    def shutdown(self) -> None:
        """Flush and unmap every file."""
        with self._lock:
            files, self._files = self._files, []
        for f in files:
            if not self.read_only:
                self._flush_file(f)
            f.close()

    def destroy(self) -> None:
        with self._lock:
            files, self._files = self._files, []
        for f in files:
            f.destroy()
