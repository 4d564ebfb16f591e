"""In-memory replicas and a byte pump for the sans-I/O AutoSwitch HA machines (tests only)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from broker.ha.autoswitch.epoch_file import EpochEntry, EpochFileCache
from broker.ha.autoswitch.protocol import (
    AppendData,
    AppendEpoch,
    Close,
    MasterMachine,
    Send,
    SetConfirmOffset,
    SlaveAcked,
    SlaveMachine,
    StartTransfer,
    Step,
    TruncateEpochs,
    TruncateLog,
)


@dataclass
class Replica:
    """A commitlog as ``base`` + bytes (files of ``file_size`` for get_data) and an epoch cache."""

    file_size: int = 700
    base: int = 0
    log: bytearray = field(default_factory=bytearray)
    epochs: EpochFileCache = field(default_factory=EpochFileCache)
    confirm: int = -1

    @classmethod
    def with_log(cls, data: bytes, entries: list[tuple[int, int]], base: int = 0, file_size: int = 700) -> "Replica":
        r = cls(file_size=file_size, base=base, log=bytearray(data))
        for epoch, start in entries:
            assert r.epochs.append_entry(EpochEntry(epoch, start))
        return r

    @property
    def max_offset(self) -> int:
        return self.base + len(self.log)

    @property
    def min_offset(self) -> int:
        return self.base if self.log else -1

    def get_data(self, offset: int) -> bytes:
        """Like CommitLog.get_data: from ``offset`` to the end of its file's written part."""
        if offset < self.base or offset >= self.max_offset:
            return b""
        file_end = offset - offset % self.file_size + self.file_size
        return bytes(self.log[offset - self.base:min(file_end, self.max_offset) - self.base])

    def append(self, offset: int, data: bytes) -> None:
        if not self.log and self.base == 0:
            self.base = offset
        assert offset == self.max_offset, (offset, self.max_offset)
        self.log += data

    def truncate(self, offset: int) -> None:
        del self.log[max(0, offset - self.base):]

    def bytes_from(self, offset: int) -> bytes:
        return bytes(self.log[offset - self.base:])


@dataclass
class Pump:
    """Wires one master machine and one slave machine through byte queues."""

    master: Replica
    slave: Replica
    m: MasterMachine
    s: SlaveMachine
    now: float = 1000.0
    to_master: bytearray = field(default_factory=bytearray)
    to_slave: bytearray = field(default_factory=bytearray)
    steps: list[Step] = field(default_factory=list)
    acked: list[SlaveAcked] = field(default_factory=list)
    closed: Optional[str] = None
    frames_sent: list[bytes] = field(default_factory=list)

    @classmethod
    def start(cls, master: Replica, slave: Replica, slave_id: int = 2, *, sync_from_last_file: bool = False,
              batch: int = 32 * 1024, file_size: int = 700) -> "Pump":
        m = MasterMachine(master.epochs, now_ms=1000.0, mapped_file_size=file_size, transfer_batch_size=batch)
        s = SlaveMachine(slave_id, sync_from_last_file=sync_from_last_file)
        p = cls(master, slave, m, s)
        p.apply_slave(s.connected(p.now, slave.max_offset))
        return p

    def apply_slave(self, step: Step) -> None:
        self.steps.append(step)
        for a in step.actions:
            if isinstance(a, Send):
                self.to_master += a.data
            elif isinstance(a, TruncateLog):
                self.slave.truncate(a.offset)
            elif isinstance(a, TruncateEpochs):
                self.slave.epochs.truncate_suffix_by_offset(a.offset)
            elif isinstance(a, AppendEpoch):
                self.slave.epochs.append_entry(a.entry)
            elif isinstance(a, AppendData):
                self.slave.append(a.offset, a.data)
            elif isinstance(a, SetConfirmOffset):
                self.slave.confirm = a.offset
            elif isinstance(a, Close):
                self.closed = a.reason

    def apply_master(self, step: Step) -> None:
        self.steps.append(step)
        for a in step.actions:
            if isinstance(a, Send):
                self.to_slave += a.data
            elif isinstance(a, SlaveAcked):
                self.acked.append(a)
            elif isinstance(a, StartTransfer):
                self.m.start_transfer(self.master.min_offset, self.master.max_offset)
            elif isinstance(a, Close):
                self.closed = a.reason

    def run(self, rounds: int = 10_000) -> None:
        for _ in range(rounds):
            if self.closed is not None:
                return
            moved = False
            if self.to_master:
                self.m.receive_data(bytes(self.to_master), self.now)
                self.to_master.clear()
                while self.closed is None and (st := self.m.next_step(self.now, self.master.max_offset)) is not None:
                    self.apply_master(st)
                moved = True
            if self.closed is None and self.m.transfer_from is not None:
                data = self.master.get_data(self.m.transfer_from)
                got = self.m.next_frame(data, now_ms=self.now, master_max_offset=self.master.max_offset,
                                        confirm_offset=self.master.max_offset)
                if isinstance(got, Close):
                    self.closed = got.reason
                elif got is not None:
                    frame = b"".join(got[0])
                    self.frames_sent.append(frame)
                    self.to_slave += frame
            if self.to_slave:
                self.s.receive_data(bytes(self.to_slave), self.now)
                self.to_slave.clear()
                while self.closed is None and (
                        st := self.s.next_step(self.now, self.slave.max_offset, self.slave.epochs.get_all_entries())) is not None:
                    self.apply_slave(st)
                moved = True
            if not moved:
                return
        raise AssertionError("the pump did not settle")

    def tick(self, ms: float) -> None:
        """Let ``ms`` pass: both sides' timers fire (heartbeats, re-acks, expiry), then settle."""
        self.now += ms
        self.fire_timers()
        self.run()

    def fire_timers(self) -> None:
        """Both sides' timers at ``now`` (heartbeats, re-acks, expiry), without settling."""
        step = self.m.poll(self.now, self.master.max_offset)
        if step is not None:
            self.apply_master(step)
        step = self.s.poll(self.now)
        if step is not None:
            self.apply_slave(step)
