"""Classic HA end to end, in-process: real sockets on 127.0.0.1, real DefaultMessageStores.

Every server and client is stopped in a ``finally``; every test has a timeout.
"""
from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from pathlib import Path
from typing import AsyncIterator

import pytest

from broker.ha.client import HAClient
from broker.ha.protocol import encode_frame_header, encode_report
from broker.ha.service import HAService
from broker.ha.settings import HASettings
from broker.store.message import MessageExt
from broker.store.message_store import DefaultMessageStore, open_store
from broker.store.put_result import PutMessageStatus

FS = 64 * 1024  # small commitlog files, so a few hundred messages span several of them
BODY = 1024


def settings(role: str = "ASYNC_MASTER", **kw: object) -> HASettings:
    base = dict(
        ha_listen_port=0,
        broker_role=role,
        mapped_file_size_commit_log=FS,
        sync_flush_timeout=2000,
        ha_send_heartbeat_interval=5000,
        ha_housekeeping_interval=20000,
    )
    base.update(kw)
    return HASettings(**base)  # type: ignore[arg-type]


def make_store(root: Path, role: str, file_size: int = FS) -> DefaultMessageStore:
    return open_store(
        root,
        mapped_file_size_commit_log=file_size,
        warm_mapped_file_enable=False,
        message_index_enable=False,
        broker_role=role,
    )


def msg(i: int, topic: str = "HaTopic") -> MessageExt:
    return MessageExt(
        topic=topic,
        body=(b"%08d" % i) * (BODY // 8),
        queue_id=i % 4,
        properties={"KEYS": f"k{i}", "TAGS": "t"},
        born_timestamp=1_700_000_000_000 + i,
    )


async def put_many(store: DefaultMessageStore, start: int, n: int, batch: int = 10) -> None:
    for i in range(start, start + n, batch):
        res = await store.put_messages_async([msg(j) for j in range(i, min(i + batch, start + n))])
        assert res.status.stored, res


async def wait_until(pred, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


async def wait_dispatched(store: DefaultMessageStore) -> None:
    await wait_until(lambda: store.dispatch_behind_bytes() == 0, 10, "slave dispatch")


def commitlog_files(store: DefaultMessageStore) -> dict[str, bytes]:
    path = Path(store.commitlog.store_path)
    # Only real commitlog files (20 digits); the allocator's temporaries are named otherwise.
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if len(p.name) == 20 and p.name.isdigit()}


def assert_identical_from(master: DefaultMessageStore, slave: DefaultMessageStore, first_file: str | None = None) -> None:
    """Every commitlog file holding data is byte-identical (whole file, zero tail included).

    Files starting at or beyond the max offset are empty pre-allocations (AllocateMappedFileService
    creates the next file ahead of need) and are left out on both sides.
    """
    end = master.commitlog.max_offset
    assert slave.commitlog.max_offset == end
    m = {k: v for k, v in commitlog_files(master).items() if int(k) < end}
    s = {k: v for k, v in commitlog_files(slave).items() if int(k) < end}
    if first_file is not None:
        m = {k: v for k, v in m.items() if k >= first_file}
    assert sorted(s) == sorted(m)
    for name in m:
        assert s[name] == m[name], f"commitlog file {name} differs"


class Pair:
    """A master store + HAService, and slave stores + HAClients created on demand."""

    def __init__(self, tmp: Path, role: str = "ASYNC_MASTER", **kw: object) -> None:
        self.tmp = tmp
        self.settings = settings(role, **kw)
        self.file_size = self.settings.mapped_file_size_commit_log
        self.master = make_store(tmp / "master", role, self.file_size)
        self.service = HAService(self.master.commitlog, self.settings, host="127.0.0.1")
        self.slaves: list[tuple[DefaultMessageStore, HAClient]] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.service.listen_port}"

    async def add_slave(self, name: str = "slave") -> tuple[DefaultMessageStore, HAClient]:
        store = make_store(self.tmp / name, "SLAVE", self.file_size)
        client = HAClient(
            store.commitlog, self.address, self.settings, on_append=lambda _o: store.wake_dispatch()
        )
        await client.start()
        self.slaves.append((store, client))
        return store, client

    async def stop_slave(self, store: DefaultMessageStore) -> None:
        for i, (s, c) in enumerate(self.slaves):
            if s is store:
                await c.shutdown()
                s.shutdown()
                del self.slaves[i]
                return

    async def caught_up(self, store: DefaultMessageStore, timeout: float = 15.0) -> None:
        await wait_until(
            lambda: store.commitlog.max_offset == self.master.commitlog.max_offset, timeout, "slave catch-up"
        )

    async def close(self) -> None:
        for store, client in self.slaves:
            await client.shutdown()
            store.shutdown()
        self.slaves.clear()
        await self.service.shutdown()
        self.master.shutdown()


@contextlib.asynccontextmanager
async def pair(tmp: Path, role: str = "ASYNC_MASTER", **kw: object) -> AsyncIterator[Pair]:
    p = Pair(tmp, role, **kw)
    try:
        await p.service.start()
        yield p
    finally:
        await p.close()


async def raw_connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def read_until_eof(reader: asyncio.StreamReader, timeout: float) -> bytes:
    data = bytearray()
    deadline = time.monotonic() + timeout
    while True:
        chunk = await asyncio.wait_for(reader.read(65536), max(0.01, deadline - time.monotonic()))
        if not chunk:
            return bytes(data)
        data += chunk


# ----------------------------------------------------------------------------------- catch-up


@pytest.mark.timeout(60)
async def test_slave_catches_up_byte_identical_with_its_own_consume_queues(tmp_path: Path) -> None:
    async with pair(tmp_path) as p:
        slave, client = await p.add_slave()
        await wait_until(lambda: p.service.connection_count == 1, what="slave connection")
        await put_many(p.master, 0, 300)  # ~ 330 KiB: six 64 KiB files
        await p.caught_up(slave)
        assert len(commitlog_files(p.master)) >= 5
        assert_identical_from(p.master, slave)
        # The slave's ConsumeQueues come from its own dispatch of the replicated bytes.
        await wait_dispatched(slave)
        for q in range(4):
            assert slave.get_max_offset_in_queue("HaTopic", q) == p.master.get_max_offset_in_queue("HaTopic", q) == 75
        got = slave.get_message("HaTopic", 1, 0, 32)
        assert [m.body[:8] for m in got.messages][:3] == [b"%08d" % i for i in (1, 5, 9)]
        end = p.master.commitlog.max_offset
        await wait_until(lambda: p.service.push2slave_max_offset == end, what="final ack")
        st = p.service.status()
        assert st["connection_count"] == 1
        (row,) = st["slaves"]
        assert row["acked_offset"] == p.master.commitlog.max_offset and row["lag_bytes"] == 0
        cs = client.status()
        assert cs["connected"] and cs["last_reported_offset"] == p.master.commitlog.max_offset
        assert cs["bytes_received"] >= p.master.commitlog.max_offset


@pytest.mark.timeout(60)
async def test_restarted_slave_resumes_from_its_own_offset(tmp_path: Path) -> None:
    async with pair(tmp_path) as p:
        slave, _ = await p.add_slave()
        await wait_until(lambda: p.service.connection_count == 1, what="slave connection")
        await put_many(p.master, 0, 100)
        await p.caught_up(slave)
        resume_at = slave.commitlog.max_offset
        await p.stop_slave(slave)
        await wait_until(lambda: p.service.connection_count == 0, what="disconnect")
        await put_many(p.master, 100, 150)
        slave, client = await p.add_slave()  # same directory: recovers, then reports its offset
        await p.caught_up(slave)
        (row,) = p.service.status()["slaves"]
        assert row["request_offset"] == resume_at > 0
        assert client.status()["connect_count"] == 1
        assert_identical_from(p.master, slave)
        await wait_dispatched(slave)
        assert slave.get_max_offset_in_queue("HaTopic", 0) == p.master.get_max_offset_in_queue("HaTopic", 0)


@pytest.mark.timeout(60)
async def test_fresh_slave_on_a_master_with_several_files_starts_at_the_last_file(tmp_path: Path) -> None:
    async with pair(tmp_path) as p:
        await put_many(p.master, 0, 250)
        end = p.master.commitlog.max_offset
        names = [n for n in sorted(commitlog_files(p.master)) if int(n) < end]
        assert len(names) >= 4
        last = names[-1]
        assert last == f"{end - end % FS:020d}"
        slave, _ = await p.add_slave()
        await p.caught_up(slave)
        assert [n for n in sorted(commitlog_files(slave)) if int(n) < end] == [last]
        assert slave.commitlog.min_offset == int(last)
        assert_identical_from(p.master, slave, first_file=last)
        (row,) = p.service.status()["slaves"]
        assert row["request_offset"] == 0
        # Dispatch on the slave starts at its first file and the messages there are readable.
        await wait_dispatched(slave)
        phy = int(last)
        m = slave.look_message_by_offset(phy)
        assert m is not None and m.commitlog_offset == phy
        # New puts keep flowing.
        await put_many(p.master, 250, 20)
        await p.caught_up(slave)
        assert_identical_from(p.master, slave, first_file=last)


# ----------------------------------------------------------------------------------- SYNC_MASTER


@pytest.mark.timeout(60)
async def test_sync_master_without_slave_is_slave_not_available(tmp_path: Path) -> None:
    async with pair(tmp_path, "SYNC_MASTER") as p:
        t0 = time.monotonic()
        res = await p.master.put_message_async(msg(0))
        assert res.status is PutMessageStatus.SLAVE_NOT_AVAILABLE
        assert time.monotonic() - t0 < 0.5  # immediately, not after a timeout
        assert res.append_result is not None  # stored anyway, as RocketMQ


@pytest.mark.timeout(60)
async def test_sync_master_put_ok_only_after_the_slave_has_the_bytes(tmp_path: Path) -> None:
    async with pair(tmp_path, "SYNC_MASTER") as p:
        slave, _ = await p.add_slave()
        await wait_until(lambda: p.service.connection_count == 1, what="slave connection")
        for i in range(50):
            res = await p.master.put_message_async(msg(i))
            assert res.status is PutMessageStatus.PUT_OK, res
            # The ack means the slave's commitlog already holds the message.
            assert slave.commitlog.max_offset >= res.append_result.end_offset
            assert p.service.push2slave_max_offset >= res.append_result.end_offset
        # The blocking put path from a worker thread goes through the same hook.
        res = await asyncio.to_thread(p.master.put_message, msg(50))
        assert res.status is PutMessageStatus.PUT_OK
        assert slave.commitlog.max_offset >= res.append_result.end_offset
        # Stop the slave: SLAVE_NOT_AVAILABLE (no slave connected), as RocketMQ.
        await p.stop_slave(slave)
        await wait_until(lambda: p.service.connection_count == 0, what="disconnect")
        res = await p.master.put_message_async(msg(51))
        assert res.status is PutMessageStatus.SLAVE_NOT_AVAILABLE


async def stalled_slave(p: Pair) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Five messages on the master, then a "slave" that reports once and never reads nor acks again."""
    await put_many(p.master, 0, 5)
    reader, writer = await raw_connect(p.service.listen_port)
    writer.write(encode_report(p.master.commitlog.max_offset))
    await wait_until(lambda: p.service.connection_count == 1, what="stalled slave")
    return reader, writer


@pytest.mark.timeout(60)
async def test_shutdown_answers_puts_waiting_for_a_stalled_slave_at_once(tmp_path: Path) -> None:
    """Issue 21: a master asked to stop does not hold puts for syncFlushTimeout: the ones waiting
    for a slave ack, and any later one, are answered FLUSH_SLAVE_TIMEOUT (stored, not confirmed)."""
    async with pair(tmp_path, "SYNC_MASTER", sync_flush_timeout=30_000) as p:
        reader, writer = await stalled_slave(p)
        try:
            waiting = asyncio.ensure_future(p.master.put_message_async(msg(5)))
            await wait_until(lambda: p.service.status().get("master_max_offset", 0) > 0 and not waiting.done(),
                             what="a put waiting for the slave")
            await asyncio.sleep(0.05)
            t0 = time.monotonic()
            assert p.service.stop_waiting() == 1
            res = await asyncio.wait_for(waiting, 2)
            assert res.status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT and time.monotonic() - t0 < 1.0
            assert res.append_result is not None  # stored on the master
            later = await asyncio.wait_for(p.master.put_message_async(msg(6)), 2)
            assert later.status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
        finally:
            writer.close()


@pytest.mark.timeout(60)
async def test_sync_master_flush_slave_timeout_when_the_slave_stalls(tmp_path: Path) -> None:
    async with pair(tmp_path, "SYNC_MASTER", sync_flush_timeout=300) as p:
        reader, writer = await stalled_slave(p)
        try:
            t0 = time.monotonic()
            res = await p.master.put_message_async(msg(5))
            elapsed = time.monotonic() - t0
            assert res.status is PutMessageStatus.FLUSH_SLAVE_TIMEOUT
            assert 0.25 <= elapsed < 2.0
            # The stalled slave does get the data pushed: a frame at the reported offset.
            header = await asyncio.wait_for(reader.readexactly(12), 5)
            off, size = struct.unpack(">qi", header)
            assert off == res.append_result.wrote_offset and size == res.append_result.wrote_bytes
        finally:
            writer.close()


@pytest.mark.timeout(60)
async def test_sync_master_slave_too_far_behind_is_not_available(tmp_path: Path) -> None:
    async with pair(tmp_path, "SYNC_MASTER", ha_slave_fallbehind_max=4096) as p:
        await put_many(p.master, 0, 10)
        reader, writer = await raw_connect(p.service.listen_port)
        try:
            writer.write(encode_report(0))  # connected, but 10 KiB behind
            await wait_until(lambda: p.service.connection_count == 1, what="lagging slave")
            assert not p.service.is_slave_ok(p.master.commitlog.max_offset)
            res = await p.master.put_message_async(msg(10))
            assert res.status is PutMessageStatus.SLAVE_NOT_AVAILABLE
        finally:
            writer.close()


# ----------------------------------------------------------------------------------- topology


@pytest.mark.timeout(60)
async def test_two_slaves_both_replicate_and_either_acks(tmp_path: Path) -> None:
    async with pair(tmp_path, "SYNC_MASTER") as p:
        s1, _ = await p.add_slave("slave1")
        s2, _ = await p.add_slave("slave2")
        await wait_until(lambda: p.service.connection_count == 2, what="two slaves")
        for i in range(0, 120, 10):
            res = await p.master.put_messages_async([msg(j) for j in range(i, i + 10)])
            assert res.status is PutMessageStatus.PUT_OK
        await p.caught_up(s1)
        await p.caught_up(s2)
        assert_identical_from(p.master, s1)
        assert_identical_from(p.master, s2)
        rows = p.service.status()["slaves"]
        assert len(rows) == 2 and all(r["lag_bytes"] == 0 for r in rows)
        # One slave gone: the other still acknowledges.
        await p.stop_slave(s1)
        await wait_until(lambda: p.service.connection_count == 1, what="one slave left")
        res = await p.master.put_message_async(msg(200))
        assert res.status is PutMessageStatus.PUT_OK
        assert s2.commitlog.max_offset >= res.append_result.end_offset


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "garbage",
    [
        b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        struct.pack(">q", -1),
        struct.pack(">q", 1 << 50),  # beyond the master's max offset
    ],
    ids=["http", "negative", "beyond-max"],
)
async def test_garbage_peer_is_dropped_without_disturbing_a_real_slave(tmp_path: Path, garbage: bytes) -> None:
    async with pair(tmp_path, "SYNC_MASTER") as p:
        slave, _ = await p.add_slave()
        await wait_until(lambda: p.service.connection_count == 1, what="slave connection")
        await put_many(p.master, 0, 30)
        reader, writer = await raw_connect(p.service.listen_port)
        try:
            writer.write(garbage)
            await writer.drain()
            leftover = await read_until_eof(reader, 5)  # the master closes it
            assert leftover == b""
        finally:
            writer.close()
        assert p.service.connection_count == 1
        res = await p.master.put_message_async(msg(30))
        assert res.status is PutMessageStatus.PUT_OK
        await put_many(p.master, 31, 30)
        await p.caught_up(slave)
        assert_identical_from(p.master, slave)


@pytest.mark.timeout(60)
async def test_silent_peer_is_expired_by_housekeeping(tmp_path: Path) -> None:
    async with pair(tmp_path, ha_housekeeping_interval=1000, ha_send_heartbeat_interval=100) as p:
        reader, writer = await raw_connect(p.service.listen_port)
        try:
            t0 = time.monotonic()
            await read_until_eof(reader, 10)
            assert 0.95 <= time.monotonic() - t0 < 8
        finally:
            writer.close()
        # A real, idle pair keeps itself alive with heartbeats well past the housekeeping interval.
        slave, client = await p.add_slave()
        await wait_until(lambda: p.service.connection_count == 1, what="slave connection")
        await asyncio.sleep(2.5)
        assert client.status()["connect_count"] == 1 and client.connected
        assert p.service.connection_count == 1


@pytest.mark.timeout(60)
async def test_slave_that_stops_reading_is_expired_while_the_master_is_blocked_writing(tmp_path: Path) -> None:
    async with pair(tmp_path, ha_housekeeping_interval=1000, mapped_file_size_commit_log=16 << 20) as p:
        reader, writer = await raw_connect(p.service.listen_port)
        try:
            writer.write(encode_report(0))
            await wait_until(lambda: p.service.connection_count == 1, what="connection")
            for i in range(0, 12_000, 200):  # ~13 MB: more than the loopback socket buffers hold
                res = await p.master.put_messages_async([msg(j) for j in range(i, i + 200)])
                assert res.status.stored
            t0 = time.monotonic()
            await wait_until(lambda: p.service.connection_count == 0, 10, "expiry of the stuck slave")
            assert time.monotonic() - t0 < 5
            assert p.service.status()["slaves"] == []
        finally:
            writer.close()


# ----------------------------------------------------------------------------------- slave errors


@pytest.mark.timeout(60)
async def test_slave_drops_a_master_sending_the_wrong_offset_and_reconnects(tmp_path: Path) -> None:
    """A bad master (raw server) pushes data at an offset other than the slave's max offset."""
    slave = make_store(tmp_path / "slave", "SLAVE")
    slave.commitlog.append_data(0, bytes(100))  # the slave holds 100 bytes
    reports: list[int] = []
    connections = 0

    async def bad_master(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        reports.append(struct.unpack(">q", await reader.readexactly(8))[0])
        writer.write(encode_frame_header(60, 4) + b"evil")
        await writer.drain()
        await reader.read()  # until the slave hangs up
        writer.close()

    server = await asyncio.start_server(bad_master, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = HAClient(slave.commitlog, f"127.0.0.1:{port}", settings("SLAVE"), backoff_initial_ms=50)
    try:
        await client.start()
        # wait for the second report itself: ``connections`` counts the accept, before the report is read
        await wait_until(lambda: connections >= 2 and len(reports) >= 2, what="reconnect and its report")
        assert reports[:2] == [100, 100]
        err = client.status()["last_error"] or ""
        assert "60" in err and "100" in err
        assert slave.commitlog.max_offset == 100  # nothing appended
    finally:
        await client.shutdown()
        server.close()
        await server.wait_closed()
        slave.shutdown()


@pytest.mark.timeout(60)
async def test_slave_reconnects_with_backoff_when_the_master_comes_back(tmp_path: Path) -> None:
    async with pair(tmp_path) as p:
        port = p.service.listen_port
        await p.service.shutdown()
        slave, client = await p.add_slave()
        await asyncio.sleep(0.3)
        assert not client.connected and "connect" in (client.status()["last_error"] or "")
        await put_many(p.master, 0, 20)
        p.service = HAService(p.master.commitlog, p.settings, host="127.0.0.1", port=port)
        await p.service.start()
        await p.caught_up(slave)
        assert_identical_from(p.master, slave)


@pytest.mark.timeout(60)
async def test_slave_shutdown_is_clean_after_a_frame_cut_mid_record(tmp_path: Path) -> None:
    """A frame boundary inside a record leaves half a record at the slave's end for a while.

    The slave's dispatch must wait for the rest (RocketMQ: doNext=false on a slave), not record
    a sticky error that makes the next start an abnormal recovery (store fix dd6b63a).
    """
    master = make_store(tmp_path / "master", "ASYNC_MASTER")
    try:
        assert master.put_message(msg(0)).ok
        record = bytes(master.commitlog.get_data(0).buffer)
    finally:
        master.shutdown()
    assert len(record) > 1000
    second_half = asyncio.Event()

    async def master_in_two_halves(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert struct.unpack(">q", await reader.readexactly(8))[0] == 0
        writer.write(encode_frame_header(0, 500) + record[:500])
        await second_half.wait()
        writer.write(encode_frame_header(500, len(record) - 500) + record[500:])
        await reader.read()
        writer.close()

    server = await asyncio.start_server(master_in_two_halves, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    slave = make_store(tmp_path / "slave", "SLAVE")
    client = HAClient(slave.commitlog, f"127.0.0.1:{port}", settings("SLAVE"), on_append=lambda _o: slave.wake_dispatch())
    try:
        await client.start()
        await wait_until(lambda: slave.commitlog.max_offset == 500, what="first half")
        await asyncio.sleep(0.2)  # the slave's dispatcher sees half a record at the end
        second_half.set()
        await wait_until(lambda: slave.commitlog.max_offset == len(record), what="second half")
        await wait_dispatched(slave)
        assert slave.get_max_offset_in_queue("HaTopic", 0) == 1
    finally:
        await client.shutdown()
        slave.shutdown()
        server.close()
        await server.wait_closed()
    assert not (tmp_path / "slave" / "abort").exists(), "slave shutdown was not clean"


@pytest.mark.timeout(60)
async def test_update_master_address_stops_and_resumes_replication(tmp_path: Path) -> None:
    async with pair(tmp_path) as p:
        slave, client = await p.add_slave()
        await wait_until(lambda: p.service.connection_count == 1, what="slave connection")
        client.update_master_address(None)
        await wait_until(lambda: p.service.connection_count == 0 and not client.connected, what="stop")
        await put_many(p.master, 0, 30)
        await asyncio.sleep(0.2)
        assert slave.commitlog.max_offset == 0  # nothing replicated while stopped
        with pytest.raises(ValueError):
            client.update_master_address("no-port-here")
        client.update_master_address(p.address)
        await p.caught_up(slave)
        assert client.status()["connect_count"] == 2
