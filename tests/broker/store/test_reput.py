"""ReputMessageService: dispatch of committed bytes, file rolls, pluggable parser, stalls."""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from broker.store.commitlog import CommitLog, SelectMappedBufferResult
from broker.store.dispatch import DispatchRequest
from broker.store.message import MessageExt, check_message_and_return_size, encode_message
from broker.store.reput import ReputMessageService


class Recorder:
    def __init__(self) -> None:
        self.requests: list[DispatchRequest] = []

    def dispatch(self, request: DispatchRequest) -> None:
        self.requests.append(request)


def msg(i: int) -> MessageExt:
    return MessageExt(topic=f"T{i % 2}", body=b"b" * (40 + i), queue_id=i % 3,
                      properties={"KEYS": f"key{i}", "TAGS": f"t{i % 4}"})


def test_reput_dispatches_every_record_across_file_rolls(tmp_path: Path) -> None:
    cl = CommitLog(tmp_path / "cl", 2048, warm_mapped_file=False)
    cl.load()
    ar = cl.put_messages([msg(i) for i in range(80)]).append_result
    rec = Recorder()
    reput = ReputMessageService(cl, [rec], 0)
    assert reput.dispatch_behind_bytes() == cl.max_offset > 2048 * 3
    assert reput.do_reput() == 80
    assert [r.commitlog_offset for r in rec.requests] == list(ar.physical_offsets)
    assert [r.consume_queue_offset for r in rec.requests] == list(ar.queue_offsets)
    assert rec.requests[5].keys == "key5" and reput.dispatch_behind_bytes() == 0
    assert reput.do_reput() == 0  # nothing new
    cl.put_message(msg(80))
    assert reput.do_reput() == 1 and rec.requests[-1].keys == "key80"
    cl.shutdown()


def test_reput_thread_follows_puts_and_listeners_see_batches(tmp_path: Path) -> None:
    cl = CommitLog(tmp_path / "cl", 1 << 16, warm_mapped_file=False)
    cl.load()
    rec = Recorder()
    batches: list[int] = []
    reput = ReputMessageService(cl, [rec], 0, listeners=[lambda b: batches.append(len(b))])
    reput.start()
    for i in range(0, 300, 30):
        cl.put_messages([msg(j) for j in range(i, i + 30)])
        reput.wakeup()
    assert reput.wait_dispatched(5.0)
    reput.shutdown()
    assert len(rec.requests) == 300 and sum(batches) == 300
    cl.shutdown()


def test_reput_stops_at_bytes_it_cannot_parse(tmp_path: Path) -> None:
    cl = CommitLog(tmp_path / "cl", 1 << 16, warm_mapped_file=False)
    cl.load()
    ar = cl.put_messages([msg(i) for i in range(3)]).append_result
    mf = cl.mapped_file_queue.last()
    mf.write_at(ar.physical_offsets[1] + 4, b"\xde\xad\xbe\xef")  # break the second magic
    rec = Recorder()
    reput = ReputMessageService(cl, [rec], 0)
    assert reput.do_reput() == 1
    assert reput.reput_from_offset == ar.physical_offsets[1]
    assert reput.error is not None and f"offset {ar.physical_offsets[1]}" in reput.error
    assert "magic" in reput.error and reput.dispatch_behind_bytes() > 0
    cl.shutdown()


@dataclass
class EntryLog:
    """A DLedger-like log: [48-byte header][message] entries, committed up to ``committed``."""

    data: bytearray
    committed: int

    @property
    def max_offset(self) -> int:
        return self.committed

    def get_data(self, offset: int, return_first_on_not_found: bool | None = None):
        if offset >= self.committed:
            return None
        return SelectMappedBufferResult(offset, memoryview(self.data)[offset:self.committed], None)

    def parse_record(self, buf: memoryview, pos: int, check_crc: bool) -> DispatchRequest:
        req = check_message_and_return_size(buf, pos + 48, check_crc)
        if req.success and req.msg_size > 0:
            req.buffer_size = req.msg_size + 48
        return req

    def entry_size_at(self, buf: memoryview, pos: int, offset: int) -> int:  # pragma: no cover - no bad entries
        return -1

    def explain_record(self, buf: memoryview, pos: int) -> str:  # pragma: no cover - no bad entries
        return "not a record"

    def roll_next_file(self, offset: int) -> int:  # pragma: no cover - single file
        raise AssertionError("no blanks here")


def test_pluggable_parser_advances_by_entry_size_and_respects_commit() -> None:
    data = bytearray()
    ends = []
    for i in range(5):
        pos = len(data)
        body = encode_message(msg(i), 0, pos + 48)  # PHYSICALOFFSET = entry pos + 48
        data += struct.pack(">iiqqqiiii", 1, 48 + len(body), i, 1, pos, 0, 0, 0, len(body)) + body
        ends.append(len(data))
    log = EntryLog(data, committed=ends[2])
    rec = Recorder()
    reput = ReputMessageService(log, [rec], 0)
    assert reput.do_reput() == 3 and reput.reput_from_offset == ends[2]
    log.committed = ends[4]
    assert reput.do_reput() == 2
    assert [r.commitlog_offset for r in rec.requests] == [e - len(encode_message(msg(i))) for i, e in enumerate(ends)]


def test_half_record_at_the_end_waits_instead_of_failing(tmp_path: Path) -> None:
    """An HA slave may hold half a record until the next frame arrives."""
    master = CommitLog(tmp_path / "m", 1 << 16, warm_mapped_file=False)
    slave = CommitLog(tmp_path / "s", 1 << 16, warm_mapped_file=False)
    master.load()
    slave.load()
    ar = master.put_messages([msg(i) for i in range(3)]).append_result
    data = bytes(master.get_data(0).buffer)
    cut = ar.physical_offsets[2] + 30
    assert slave.append_data(0, data[:cut])
    rec = Recorder()
    reput = ReputMessageService(slave, [rec], 0)
    assert reput.do_reput() == 2 and reput.error is None
    assert reput.reput_from_offset == ar.physical_offsets[2]
    assert slave.append_data(cut, data[cut:])
    assert reput.do_reput() == 1 and reput.dispatch_behind_bytes() == 0
    master.shutdown()
    slave.shutdown()
