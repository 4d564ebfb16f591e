"""Classic HA with haAuthToken, in-process: real sockets on 127.0.0.1, real DefaultMessageStores.

Each test fails against the open (token-less, unlimited) service of before issue 12: a raw peer
got commitlog bytes and counted as a slave, idle sockets were held without limit.
"""
from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from broker.ha.client import HAClient
from broker.ha.handshake import MAGIC, SlaveHandshake
from broker.ha.protocol import encode_report
from broker.store.put_result import PutMessageStatus
from tests.broker.ha.test_replication import (
    assert_identical_from,
    make_store,
    msg,
    pair,
    put_many,
    raw_connect,
    read_until_eof,
    wait_until,
)

SECRET = "in-process-ha-secret-42"


def auth(**kw: object) -> dict[str, object]:
    return dict(ha_auth_token=SECRET, broker_name="broker-a", **kw)


@pytest.mark.timeout(60)
async def test_token_pair_replicates_identical_and_sync_master_acks(tmp_path: Path) -> None:
    async with pair(tmp_path, "SYNC_MASTER", **auth()) as p:
        await put_many(p.master, 0, 50)
        slave, client = await p.add_slave()
        await wait_until(lambda: p.service.connection_count == 1, what="slave connection")
        res = await p.master.put_messages_async([msg(1000)])
        assert res.status == PutMessageStatus.PUT_OK
        await put_many(p.master, 50, 100)
        await p.caught_up(slave)
        assert_identical_from(p.master, slave, first_file="00000000000000000000")
        st = p.service.status()
        assert st["auth"] == "haAuthToken" and st["authenticated_slave_count"] == 1
        assert st["refused_connections"] == 0 and st["slaves"][0]["authenticated"]
        assert client.status()["auth"] == "haAuthToken"


@pytest.mark.timeout(60)
async def test_classic_raw_peer_gets_no_bytes_and_no_ack_counts(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.WARNING, "broker.ha")
    async with pair(tmp_path, "SYNC_MASTER", **auth()) as p:
        await put_many(p.master, 0, 20)
        reader, writer = await raw_connect(p.service.listen_port)
        try:
            writer.write(encode_report(0))  # RocketMQ's request offset...
            writer.write(encode_report(p.master.commitlog.max_offset))  # ...and a forged ack of everything
            assert await read_until_eof(reader, 10) == b""  # closed, not one commitlog byte
        finally:
            writer.close()
        assert p.service.connection_count == 0 and p.service.push2slave_max_offset == 0
        res = await p.master.put_messages_async([msg(99)])
        assert res.status == PutMessageStatus.SLAVE_NOT_AVAILABLE
        assert p.service.status()["refused_connections"] == 1
        lines = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
        assert len(lines) == 1 and "127.0.0.1:" in lines[0] and "classic unauthenticated" in lines[0]


@pytest.mark.timeout(60)
async def test_wrong_secret_slave_is_refused_and_says_why(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.WARNING, "broker.ha")
    async with pair(tmp_path, "SYNC_MASTER", **auth()) as p:
        await put_many(p.master, 0, 20)
        store = make_store(tmp_path / "bad-slave", "SLAVE", p.file_size)
        client = HAClient(store.commitlog, p.address, p.settings, auth_token="a-different-secret-xyz",
                          backoff_initial_ms=50, backoff_max_ms=100)
        await client.start()
        try:
            await wait_until(lambda: client.handshake_failures >= 3, what="repeated refusals")
            assert store.commitlog.max_offset == 0 and not client.connected
            assert p.service.connection_count == 0 and p.service.status()["refused_connections"] >= 3
            msgs = [r.getMessage() for r in caplog.records]
            assert any("refused: slave's proof does not match haAuthToken" in m for m in msgs)
            # the slave logs the reason once, not once per retry
            told = [m for m in msgs if "refusing master" in m]
            assert len(told) == 1 and "does not match the master's haAuthToken" in told[0]
        finally:
            await client.shutdown()
            store.shutdown()


@pytest.mark.timeout(60)
async def test_fake_master_cannot_feed_a_slave(tmp_path: Path) -> None:
    """A server that does not know the secret answers the HELLO and pushes data: nothing is appended."""
    got: list[bytes] = []

    async def fake_master(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        hello = await reader.read(512)
        got.append(hello)
        guess = SlaveHandshake("fake-master-guess-123", "broker-a", now_ms=0, timeout_ms=1000)
        # a CHALLENGE with a fresh nonce, then a WELCOME it cannot compute, then a frame
        writer.write(MAGIC + b"\x01\x02" + guess.nonce + b"\x08broker-a")
        await reader.read(512)
        writer.write(MAGIC + b"\x01\x04" + b"\x00" * 32 + b"\x00" * 12 + b"x" * 64)
        await asyncio.sleep(0.5)
        writer.close()

    server = await asyncio.start_server(fake_master, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    store = make_store(tmp_path / "slave", "SLAVE")
    client = HAClient(store.commitlog, f"127.0.0.1:{port}", dict(ha_auth_token=SECRET, broker_name="broker-a"),
                      backoff_initial_ms=50, backoff_max_ms=100)
    await client.start()
    try:
        await wait_until(lambda: client.handshake_failures >= 2, what="fake master refused")
        assert got[0].startswith(MAGIC)
        assert store.commitlog.max_offset == 0 and client.status()["frames_received"] == 0
        assert "could not prove haAuthToken" in client.status()["last_error"]
    finally:
        await client.shutdown()
        store.shutdown()
        server.close()
        await server.wait_closed()


@pytest.mark.timeout(60)
async def test_idle_sockets_do_not_lock_out_a_real_slave(tmp_path: Path) -> None:
    async with pair(tmp_path, "ASYNC_MASTER", **auth(ha_handshake_timeout=30_000)) as p:
        await put_many(p.master, 0, 20)
        idle = [await raw_connect(p.service.listen_port) for _ in range(50)]
        try:
            await wait_until(lambda: p.service.status()["refused_connections"] >= 34, what="evictions")
            assert len(p.service.pending) <= p.settings.ha_max_pending_connections
            slave, _client = await p.add_slave()
            await p.caught_up(slave, timeout=10)
            assert p.service.status()["authenticated_slave_count"] == 1
        finally:
            for _r, w in idle:
                w.close()


@pytest.mark.timeout(60)
async def test_idle_socket_is_dropped_at_the_handshake_deadline(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.WARNING, "broker.ha")
    async with pair(tmp_path, "ASYNC_MASTER", **auth(ha_handshake_timeout=300)) as p:
        reader, writer = await raw_connect(p.service.listen_port)
        try:
            writer.write(MAGIC[:2])  # slowloris: a few bytes, then silence
            assert await read_until_eof(reader, 5) == b""
        finally:
            writer.close()
        assert p.service.status()["refused_connections"] == 1 and not p.service.pending
        assert any("no complete HA handshake within 300 ms" in r.getMessage() for r in caplog.records)


@pytest.mark.timeout(60)
async def test_admitted_slaves_are_capped(tmp_path: Path) -> None:
    async with pair(tmp_path, "ASYNC_MASTER", **auth(ha_max_connections=1)) as p:
        await p.add_slave("s1")
        await wait_until(lambda: p.service.connection_count == 1, what="first slave")
        _s2, c2 = await p.add_slave("s2")
        await wait_until(lambda: c2.handshake_failures >= 1, what="second slave refused")
        assert "limit of connected slaves" in c2.status()["last_error"]
        assert p.service.connection_count == 1


@pytest.mark.timeout(60)
async def test_open_master_names_a_token_slave_clearly(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.WARNING, "broker.ha")
    async with pair(tmp_path, "ASYNC_MASTER") as p:
        store = make_store(tmp_path / "slave", "SLAVE", p.file_size)
        client = HAClient(store.commitlog, p.address, p.settings, auth_token=SECRET, broker_name="broker-a")
        await client.start()
        try:
            await wait_until(lambda: p.service.refused_count >= 1, what="refusal")
            assert any("this master has no haAuthToken" in r.getMessage() for r in caplog.records)
            assert store.commitlog.max_offset == 0
        finally:
            await client.shutdown()
            store.shutdown()
