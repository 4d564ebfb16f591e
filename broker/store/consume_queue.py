"""ConsumeQueue: the per-(topic, queueId) logical queue of 20-byte position units.

Rules (RocketMQ 4.9.8 ``ConsumeQueue`` / ``DefaultMessageStore``; reference §2.1):

- A unit is ``>qiq``: commitLogOffset (offset of the *message*; ``entry.pos + 48`` in DLedger
  mode), size (message TOTALSIZE), tagsCode (Java hash of the tags, or the delivery timestamp for
  ``SCHEDULE_TOPIC_XXXX``). Unit for queue offset *q* lives at byte ``q * 20`` of the queue's
  byte space.
- Files: ``<root>/consumequeue/<topic>/<queueId>/<20-digit start byte offset>``, each exactly
  ``mappedFileSizeConsumeQueue`` bytes (default 6,000,000), preallocated sparse, mmapped: a
  ``MappedFile``. Blocks are reserved (``mapped_file.BlockReserve``) before bytes are stored
  through the mapping: a full disk raises ``DiskFullError`` naming the file and offset, never
  SIGBUS. A file of another length, or not named by a 20-digit offset, is a ConsumeQueueError
  naming it ("check it manually"), as is any write to a queue opened ``read_only``.
- A unit is valid iff ``offset >= 0 and size > 0``; the first invalid unit ends the queue.
- A queue whose first file is created at a non-zero queue offset is pre-filled with
  ``(0, 0x7FFFFFFF, 0)`` units up to that offset (``fillPreBlank``) and its min offset starts
  there.
- Writes are idempotent by physical offset: a unit ending at or below ``max_physic_offset`` is
  ignored, as is a unit whose queue offset is already written. A unit whose queue offset is
  *beyond* the write position is still appended at the write position, exactly as RocketMQ
  does, with the ``[BUG]logic queue order maybe wrong`` warning (the symptom of an offset gap).
- Transactional PREPARED/ROLLBACK records and DLedger barriers (DESIGN §4.1) never reach a
  ConsumeQueue.
- A queue's directory is built only from a valid topic and queue id (``names.check_topic`` /
  ``check_queue_id``): :class:`ConsumeQueue` raises ``InvalidNameError`` otherwise, so no
  caller can make a path outside ``consumequeue/``; ``load`` skips (with a warning) a directory
  whose name is not valid, and a lookup without ``create`` finds nothing for such a name.

Theory of operation: :class:`ConsumeQueueStore` owns every queue under ``consumequeue/``.
At start-up the facade calls :meth:`ConsumeQueueStore.load` (map every file, positions at file
end), :meth:`ConsumeQueueStore.recover` (each queue scans from its 3rd-last file to the first
invalid unit, truncates beyond it, and learns ``max_physic_offset``; the maximum over queues
tells the commitlog where dispatch had got to), then, after commitlog recovery,
:meth:`truncate_dirty` drops units pointing past the recovered commitlog end. While running,
ReputMessageService calls :meth:`dispatch` for every committed record. Each file is a
:class:`~broker.store.mapped_file.MappedFile` (the commitlog's file abstraction: hidden-name
creation, block reservation, size check, ``read_only`` opening for the upgrade tools and the
validator); its wrote position is the queue's write position within it (committed follows it).
"""
from __future__ import annotations

import logging
import os
import struct
import threading
from pathlib import Path
from typing import Final, Iterator, Optional, Protocol

from broker.store.dispatch import DispatchRequest
from broker.store.errors import StoreError
from broker.store.mapped_file import FileSizeError, MappedFile
from broker.store.names import InvalidNameError, check_queue_id, check_topic

log = logging.getLogger(__name__)

CQ_STORE_UNIT_SIZE: Final = 20
DEFAULT_MAPPED_FILE_SIZE_CONSUME_QUEUE: Final = 300_000 * CQ_STORE_UNIT_SIZE
_UNIT: Final = struct.Struct(">qiq")
_BLANK_UNIT: Final = _UNIT.pack(0, 0x7FFFFFFF, 0)

#: Reserved topic of DLedger barrier messages; never dispatched into a ConsumeQueue.
BARRIER_TOPIC: Final = "RMQ_SYS_DLEDGER_BARRIER"
_TRANSACTION_MASK: Final = 0xC
_TRANSACTION_PREPARED: Final = 0x4
_TRANSACTION_ROLLBACK: Final = 0xC

CqUnit = tuple[int, int, int]  # (commitlog offset, size, tags code)


class ConsumeQueueError(StoreError):
    """A ConsumeQueue file on disk is not what RocketMQ would have written."""


def _open_file(path: Path, file_size: int, read_only: bool) -> MappedFile:
    """An existing ConsumeQueue file as a MappedFile, positions at its end (recover() moves them);
    a bad name or length is a ConsumeQueueError naming the file."""
    if len(path.name) != 20 or not path.name.isdigit():
        raise ConsumeQueueError(f"{path}: file name is not a 20-digit start offset")
    try:
        f = MappedFile(path, file_size, read_only=read_only)
    except FileSizeError as exc:
        raise ConsumeQueueError(
            f"{path}: file size {exc.actual} does not match mappedFileSizeConsumeQueue "
            f"{file_size}; check it manually"
        ) from None
    f.set_positions(file_size)
    return f


def _create_file(path: Path, file_size: int) -> MappedFile:
    """A new, empty ConsumeQueue file (sparse, like RandomAccessFile.setLength; its first granule
    reserved). A leftover of the same name (never expected) is replaced, not reused."""
    if path.exists():
        log.warning("ConsumeQueue: replacing leftover file %s", path)
        path.unlink()
    return MappedFile(path, file_size)


def _unit(f: MappedFile, pos: int) -> CqUnit:
    return _UNIT.unpack_from(f.whole(), pos)


def _truncate_to(f: MappedFile, pos: int) -> None:
    """Wrote/committed position to ``pos``; flushed no further than it."""
    flushed = min(f.flushed_position, pos)
    f.set_positions(pos)
    f.flushed_position = flushed


def _is_pre_blank(offset: int, size: int) -> bool:
    """Pre-blank filler units carry no commitlog position; they must not move max_physic_offset."""
    return offset == 0 and size == 0x7FFFFFFF


def _first_invalid(view: memoryview, start: int, end: int) -> int:
    """Byte position of the first invalid unit in ``[start, end)`` (``end`` if all are valid)."""
    pos = start
    for offset, size, _tags in _UNIT.iter_unpack(view[start:end]):
        if offset < 0 or size <= 0:
            return pos
        pos += CQ_STORE_UNIT_SIZE
    return end


class ConsumeQueue:
    """One logical queue: units for ``topic``/``queue_id`` across its files."""

    def __init__(
        self,
        topic: str,
        queue_id: int,
        store_path: str | os.PathLike[str],
        mapped_file_size: int = DEFAULT_MAPPED_FILE_SIZE_CONSUME_QUEUE,
        *,
        read_only: bool = False,
    ) -> None:
        if mapped_file_size <= 0 or mapped_file_size % CQ_STORE_UNIT_SIZE:
            raise ValueError(f"mappedFileSizeConsumeQueue must be a positive multiple of 20, got {mapped_file_size}")
        self.topic = check_topic(topic)  # it becomes a directory name: never ``..`` or ``/``
        self.queue_id = check_queue_id(queue_id)
        self.mapped_file_size = mapped_file_size
        self.read_only = read_only
        self.queue_dir = Path(store_path) / topic / str(queue_id)
        self._files: list[MappedFile] = []
        self.max_physic_offset = -1
        self.min_logic_offset = 0
        self._lock = threading.Lock()

    # ---- life cycle -------------------------------------------------------------------------
    def load(self) -> None:
        """Map every file of the queue, positions at file end (recover() fixes them)."""
        if not self.queue_dir.is_dir():
            return
        names = []
        for p in self.queue_dir.iterdir():
            if p.name.startswith(".") and p.name.endswith(".creating"):
                if not self.read_only:
                    p.unlink(missing_ok=True)  # a file whose creation a crash interrupted
                continue
            if p.is_file():
                names.append(p.name)
        names.sort()
        for name in names:
            self._files.append(_open_file(self.queue_dir / name, self.mapped_file_size, self.read_only))
        for prev, nxt in zip(self._files, self._files[1:]):
            if nxt.from_offset != prev.from_offset + self.mapped_file_size:
                raise ConsumeQueueError(
                    f"{nxt.path}: expected start offset {prev.from_offset + self.mapped_file_size} after {prev.path.name}"
                )

    def recover(self) -> None:
        """Scan from the 3rd-last file to the first invalid unit and truncate the rest."""
        if not self._files:
            return
        index = max(0, len(self._files) - 3)
        process_offset = self._files[index].from_offset
        while True:
            f = self._files[index]
            end = _first_invalid(f.whole(), 0, self.mapped_file_size)
            if end > 0:
                offset, size, _ = _unit(f, end - CQ_STORE_UNIT_SIZE)
                if not _is_pre_blank(offset, size):
                    self.max_physic_offset = offset + size
            process_offset = f.from_offset + end
            if end == self.mapped_file_size and index + 1 < len(self._files):
                index += 1
                continue
            break
        self._truncate_files(process_offset)

    def _truncate_files(self, offset: int) -> None:
        """MappedFileQueue.truncateDirtyFiles: positions at ``offset``, later files deleted."""
        keep: list[MappedFile] = []
        for f in self._files:
            if f.from_offset + self.mapped_file_size <= offset:
                keep.append(f)
            elif offset >= f.from_offset:
                f.set_positions(offset - f.from_offset)
                keep.append(f)
            elif self.read_only:
                f.close()
            else:
                log.info("ConsumeQueue %s-%d: deleting dirty file %s", self.topic, self.queue_id, f.path)
                f.destroy()
        self._files = keep

    def flush(self) -> None:
        if self.read_only:
            return
        with self._lock:
            for f in self._files:
                f.flush()

    def close(self) -> None:
        """Flush and unmap (files stay on disk)."""
        self.flush()
        with self._lock:
            for f in self._files:
                f.close()
            self._files = []

    def destroy(self) -> None:
        """Delete every file of this queue (and the empty queue directory)."""
        with self._lock:
            for f in self._files:
                f.destroy()
            self._files = []
            self.max_physic_offset = -1
            self.min_logic_offset = 0
        try:
            self.queue_dir.rmdir()
        except OSError:
            pass

    # ---- writing ----------------------------------------------------------------------------
    def put_message_position_info(self, offset: int, size: int, tags_code: int, cq_offset: int) -> bool:
        """RocketMQ's putMessagePositionInfo; True when the unit is (or already was) stored."""
        if self.read_only:
            raise ConsumeQueueError(f"{self.queue_dir}: ConsumeQueue opened read-only")
        if offset + size <= self.max_physic_offset:
            return True
        expect = cq_offset * CQ_STORE_UNIT_SIZE
        with self._lock:
            f = self._last_file_for(expect)
            if f.first_create_in_queue and cq_offset != 0 and f.wrote_position == 0:
                self.min_logic_offset = expect
                until = expect % self.mapped_file_size
                f.append(_BLANK_UNIT * (until // CQ_STORE_UNIT_SIZE))
                log.info("ConsumeQueue %s-%d: pre-blank filled to %d", self.topic, self.queue_id, expect)
            if cq_offset != 0:
                current = f.from_offset + f.wrote_position
                if expect < current:
                    log.warning(
                        "ConsumeQueue %s-%d: build cq repeatedly, expect %d < current %d",
                        self.topic, self.queue_id, expect, current,
                    )
                    return True
                if expect != current:
                    log.warning(
                        "[BUG]logic queue order maybe wrong, expectLogicOffset: %d currentLogicOffset: %d "
                        "Topic: %s QID: %d Diff: %d",
                        expect, current, self.topic, self.queue_id, expect - current,
                    )
            f.append(_UNIT.pack(offset, size, tags_code))  # DiskFullError: nothing moved, dispatch retries
            self.max_physic_offset = offset + size
            return True

    def _last_file_for(self, start_offset: int) -> MappedFile:
        """MappedFileQueue.getLastMappedFile(startOffset, true)."""
        last = self._files[-1] if self._files else None
        if last is not None and not last.is_full():
            return last
        if last is None:
            create_offset = start_offset - start_offset % self.mapped_file_size
        else:
            create_offset = last.from_offset + self.mapped_file_size
        self.queue_dir.mkdir(parents=True, exist_ok=True)
        f = _create_file(self.queue_dir / f"{create_offset:020d}", self.mapped_file_size)
        f.first_create_in_queue = last is None
        self._files.append(f)
        return f

    def truncate_dirty_logic_files(self, phy_offset: int) -> None:
        """Drop every unit whose commitlog offset is >= ``phy_offset`` (whole files if needed).

        Unlike 4.9.8 the dropped units are zeroed, so a crash before they are overwritten cannot
        bring them back at the next recover().
        """
        if self.read_only:
            raise ConsumeQueueError(f"{self.queue_dir}: ConsumeQueue opened read-only")
        with self._lock:
            self.max_physic_offset = -1
            while self._files:
                f = self._files[-1]
                wrote = f.wrote_position
                pos = 0
                while pos < wrote:
                    offset, size, _ = _unit(f, pos)
                    if not (offset >= 0 and size > 0) or offset >= phy_offset:
                        break
                    pos += CQ_STORE_UNIT_SIZE
                if pos == 0:
                    log.info("ConsumeQueue %s-%d: truncating whole file %s", self.topic, self.queue_id, f.path)
                    f.destroy()
                    self._files.pop()
                    continue
                if pos < wrote:
                    f.write_at(pos, bytes(wrote - pos))
                _truncate_to(f, pos)
                offset, size, _ = _unit(f, pos - CQ_STORE_UNIT_SIZE)
                if not _is_pre_blank(offset, size):
                    self.max_physic_offset = offset + size
                return

    def correct_min_offset(self, phy_min_offset: int) -> None:
        """Move the min queue offset to the first unit pointing at or after ``phy_min_offset``."""
        with self._lock:
            if not self._files:
                return
            f = self._files[0]
            for pos in range(0, f.wrote_position, CQ_STORE_UNIT_SIZE):
                offset, size, _ = _unit(f, pos)
                if offset >= phy_min_offset and not _is_pre_blank(offset, size):
                    self.min_logic_offset = f.from_offset + pos
                    return

    def delete_expired_file(self, phy_min_offset: int) -> int:
        """Delete leading files whose last unit points below ``phy_min_offset`` (never the last file)."""
        deleted = 0
        with self._lock:
            while len(self._files) > 1:
                f = self._files[0]
                last_offset = _unit(f, self.mapped_file_size - CQ_STORE_UNIT_SIZE)[0]
                if last_offset >= phy_min_offset:
                    break
                f.destroy()
                self._files.pop(0)
                deleted += 1
        self.correct_min_offset(phy_min_offset)
        return deleted

    # ---- reading ----------------------------------------------------------------------------
    @property
    def min_offset_in_queue(self) -> int:
        return self.min_logic_offset // CQ_STORE_UNIT_SIZE

    @property
    def max_offset_in_queue(self) -> int:
        """Next queue offset to be written (MappedFileQueue.getMaxOffset / 20)."""
        if not self._files:
            return 0
        last = self._files[-1]
        return (last.from_offset + last.wrote_position) // CQ_STORE_UNIT_SIZE

    @property
    def message_total_in_queue(self) -> int:
        return self.max_offset_in_queue - self.min_offset_in_queue

    def get(self, queue_offset: int) -> Optional[CqUnit]:
        """``(commitlog offset, size, tags code)`` of one unit, None outside [min, max)."""
        units = self.get_units(queue_offset, 1)
        return units[0] if units else None

    def get_units(self, queue_offset: int, max_num: int) -> list[CqUnit]:
        """Up to ``max_num`` consecutive units from ``queue_offset`` (stops at a file end)."""
        byte_offset = queue_offset * CQ_STORE_UNIT_SIZE
        if queue_offset < 0 or byte_offset < self.min_logic_offset or max_num <= 0:
            return []
        with self._lock:
            if not self._files:
                return []
            first = self._files[0].from_offset
            idx = (byte_offset - first) // self.mapped_file_size
            if idx < 0 or idx >= len(self._files):
                return []
            f = self._files[idx]
            pos = byte_offset - f.from_offset
            end = min(f.wrote_position, pos + max_num * CQ_STORE_UNIT_SIZE)
            if pos >= end:
                return []
            return list(_UNIT.iter_unpack(f.whole()[pos:end]))

    def iter_units(self, start: int = 0) -> Iterator[tuple[int, CqUnit]]:
        """``(queue offset, unit)`` for every unit from ``start`` to the end, across files."""
        q = max(start, self.min_offset_in_queue)
        while True:
            batch = self.get_units(q, 4096)
            if not batch:
                return
            for unit in batch:
                yield q, unit
                q += 1

    def get_last_offset(self) -> int:
        """End (offset + size) of the last valid unit, -1 if none (ConsumeQueue.getLastOffset)."""
        if not self._files:
            return -1
        f = self._files[-1]
        if f.wrote_position == 0:
            return -1
        offset, size, _ = _unit(f, f.wrote_position - CQ_STORE_UNIT_SIZE)
        return offset + size if offset >= 0 and size > 0 else -1

    def roll_next_file(self, index: int) -> int:
        """First queue offset of the file after the one holding ``index``."""
        units = self.mapped_file_size // CQ_STORE_UNIT_SIZE
        return index + units - index % units

    @property
    def file_paths(self) -> list[Path]:
        return [f.path for f in self._files]

    def __repr__(self) -> str:
        return (
            f"ConsumeQueue({self.topic!r}, {self.queue_id}, min={self.min_offset_in_queue}, "
            f"max={self.max_offset_in_queue}, maxPhy={self.max_physic_offset})"
        )


def is_consume_queue_dispatchable(request: DispatchRequest) -> bool:
    """PREPARED/ROLLBACK transactions and DLedger barriers never get a ConsumeQueue unit."""
    if request.sys_flag & _TRANSACTION_MASK in (_TRANSACTION_PREPARED, _TRANSACTION_ROLLBACK):
        return False
    return request.topic != BARRIER_TOPIC


class StoreCheckpointLike(Protocol):
    """What dispatch needs of broker.store.checkpoint.StoreCheckpoint."""

    physic_msg_timestamp: int
    logics_msg_timestamp: int


class ConsumeQueueStore:
    """Every ConsumeQueue under ``<store_root>/consumequeue``; the CommitLogDispatcher for CQs."""

    def __init__(
        self,
        store_root: str | os.PathLike[str],
        mapped_file_size: int = DEFAULT_MAPPED_FILE_SIZE_CONSUME_QUEUE,
        *,
        store_path: str | os.PathLike[str] | None = None,
        read_only: bool = False,
        checkpoint: Optional[StoreCheckpointLike] = None,
    ) -> None:
        self.store_path = Path(store_path) if store_path is not None else Path(store_root) / "consumequeue"
        self.mapped_file_size = mapped_file_size
        self.read_only = read_only
        self.checkpoint = checkpoint
        #: RocketMQ also advances physicMsgTimestamp on dispatch when the store is a SLAVE or in
        #: DLedger mode (there the commitlog itself never updates it); the facade sets this.
        self.update_physic_timestamp_on_dispatch = False
        self._table: dict[str, dict[int, ConsumeQueue]] = {}
        self._lock = threading.Lock()

    def load(self) -> None:
        """Map every ``<topic>/<queueId>`` directory (non-numeric queue dirs are skipped, as Java)."""
        if not self.store_path.is_dir():
            return
        for topic_dir in sorted(self.store_path.iterdir()):
            if not topic_dir.is_dir():
                continue
            for qdir in sorted(topic_dir.iterdir()):
                try:
                    queue_id = int(qdir.name)
                    if str(queue_id) != qdir.name:
                        raise InvalidNameError(f"queue dir name {qdir.name!r} is not a plain number")
                    cq = ConsumeQueue(
                        topic_dir.name, queue_id, self.store_path, self.mapped_file_size, read_only=self.read_only
                    )
                except ValueError as exc:  # InvalidNameError too
                    log.warning("ConsumeQueue dir %s skipped: %s", qdir, exc)
                    continue
                cq.load()
                self._table.setdefault(topic_dir.name, {})[queue_id] = cq

    def recover(self) -> int:
        """Recover every queue; returns :meth:`max_physical_offset`."""
        for cq in self.consume_queues():
            cq.recover()
        return self.max_physical_offset()

    def consume_queues(self) -> list[ConsumeQueue]:
        with self._lock:
            return [cq for queues in self._table.values() for cq in queues.values()]

    @property
    def topics(self) -> list[str]:
        with self._lock:
            return sorted(self._table)

    def find_consume_queue(self, topic: str, queue_id: int, create: bool = True) -> Optional[ConsumeQueue]:
        with self._lock:
            queues = self._table.get(topic)
            cq = queues.get(queue_id) if queues else None
            if cq is None and create:  # ConsumeQueue refuses an invalid name (module rules)
                cq = ConsumeQueue(topic, queue_id, self.store_path, self.mapped_file_size, read_only=self.read_only)
                self._table.setdefault(topic, {})[queue_id] = cq
            return cq

    def dispatch(self, request: DispatchRequest) -> None:
        """CommitLogDispatcherBuildConsumeQueue + putMessagePositionInfoWrapper."""
        if not is_consume_queue_dispatchable(request):
            return
        cq = self.find_consume_queue(request.topic, request.queue_id)
        assert cq is not None
        cq.put_message_position_info(
            request.commitlog_offset, request.msg_size, request.tags_code, request.consume_queue_offset
        )
        if self.checkpoint is not None:
            if self.update_physic_timestamp_on_dispatch:
                self.checkpoint.physic_msg_timestamp = request.store_timestamp
            self.checkpoint.logics_msg_timestamp = request.store_timestamp

    def max_physical_offset(self) -> int:
        """Max over queues of the last unit's offset+size (-1 if no unit): where dispatch got to."""
        return max((cq.max_physic_offset for cq in self.consume_queues()), default=-1)

    def truncate_dirty(self, phy_offset: int) -> None:
        """Drop units at or beyond ``phy_offset`` in every queue (after commitlog truncation)."""
        for cq in self.consume_queues():
            cq.truncate_dirty_logic_files(phy_offset)

    def queue_offset_table(self) -> dict[str, int]:
        """``{"topic-queueId": next queue offset}`` for CommitLog.topicQueueTable."""
        return {f"{cq.topic}-{cq.queue_id}": cq.max_offset_in_queue for cq in self.consume_queues()}

    def correct_min_offset(self, phy_min_offset: int) -> None:
        for cq in self.consume_queues():
            cq.correct_min_offset(phy_min_offset)

    def delete_expired_files(self, phy_min_offset: int) -> int:
        return sum(cq.delete_expired_file(phy_min_offset) for cq in self.consume_queues())

    def flush(self) -> None:
        for cq in self.consume_queues():
            cq.flush()

    def shutdown(self) -> None:
        """Flush and unmap every queue; the store object is unusable afterwards."""
        for cq in self.consume_queues():
            cq.close()
        with self._lock:
            self._table.clear()

    def destroy(self) -> None:
        """Delete every ConsumeQueue file (RocketMQ's destroyLogics)."""
        for cq in self.consume_queues():
            cq.destroy()
        with self._lock:
            self._table.clear()
        for topic_dir in self.store_path.glob("*"):
            try:
                topic_dir.rmdir()
            except OSError:
                pass

