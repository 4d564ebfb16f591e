"""Issue 12, item 3: the classic HA port, attacked with real ``mqbroker`` processes on 127.0.0.1.

Before the fix a raw socket speaking RocketMQ's HA protocol received the commitlog and its acks
made a SYNC_MASTER answer SEND_OK; a fake master could feed a slave. Now master and slaves share
``haAuthToken`` and prove it to each other (``broker/ha/handshake.py``) before a byte of the
commitlog moves; everything else is refused with one log line, and the master keeps serving.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from broker.api.client import BrokerClientError
from broker.ha.handshake import MAGIC, REFUSE_BAD_PROOF, encode_refused
from tests.support.store_reads import commitlog_bytes
from tools.broker_confs import master_conf, slave_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import wait_until
from tests.security._ha_support import (
    FakeClassicSlave,
    FakeMaster,
    close_all,
    first_line,
    idle_sockets,
    wrong_secret_handshake,
)
from tests.security._listen_support import listening_hosts

pytestmark = pytest.mark.multiprocess

SECRET = "ha-doors-test-secret-0123"
WRONG = "not-the-ha-secret-4567"


def _ha(p: BrokerProc) -> dict:
    with p.client() as c:
        return c.status()["ha"]


def _max_offset(p: BrokerProc) -> int:
    with p.client() as c:
        return c.status()["commitLog"]["maxOffset"]


def _full_log(p: BrokerProc) -> str:
    return p.log_path.read_text(errors="replace") if p.log_path.exists() else ""


@pytest.mark.timeout(120)
def test_ha_port_serves_only_slaves_that_prove_the_secret(tmp_path: Path) -> None:
    mconf, mport = master_conf(tmp_path, "SYNC_MASTER", haAuthToken=SECRET, syncFlushTimeout=2000)
    good_dir, bad_dir = tmp_path / "good", tmp_path / "bad"
    good_dir.mkdir()
    bad_dir.mkdir()
    sconf, sport = slave_conf(good_dir, mport, haAuthToken=SECRET)
    bconf, bport = slave_conf(bad_dir, mport, haAuthToken=WRONG)
    master = BrokerProc(mconf, mport, "master", tmp_path)
    slave = BrokerProc(sconf, sport, "slave", good_dir)
    bad = BrokerProc(bconf, bport, "bad-slave", bad_dir)
    ha_port = mport + 1
    fake: FakeClassicSlave | None = None
    idle: list = []
    try:
        master.start()
        assert listening_hosts(ha_port) == ["127.0.0.1"]  # bindAddress of conf/classic, not 0.0.0.0
        # 1. A fake slave speaking the classic protocol (request offset 0, then acks what it gets).
        fake = FakeClassicSlave(ha_port)
        fake.start()
        wait_until(lambda: _ha(master)["connections"] >= 1 or (_ha(master).get("refusedConnections") or 0) >= 1,
                   10, "fake slave admitted or refused")
        with master.client() as c:
            with pytest.raises(BrokerClientError) as exc:  # its acks must not make this SEND_OK
                c.send("TopicHaDoors", b"no real slave yet")
            assert exc.value.code in ("SLAVE_NOT_AVAILABLE", "FLUSH_SLAVE_TIMEOUT")
        assert fake.closed_by_master.wait(10)
        assert fake.received == 0  # not one commitlog byte
        # 2. A fake slave that speaks the handshake but not the secret: a CHALLENGE, then REFUSED.
        got = wrong_secret_handshake(ha_port, WRONG, "broker-a")
        assert got.startswith(MAGIC) and got.endswith(encode_refused(REFUSE_BAD_PROOF))
        assert len(got) == 6 + 32 + 1 + len("broker-a") + 7
        # 3. Fifty idle sockets on the HA port, then a real slave and a slave with the wrong secret.
        idle = idle_sockets(ha_port, 50)
        slave.start(wait=False)
        bad.start(wait=False)
        slave.wait_ready()
        bad.wait_ready()
        wait_until(lambda: _ha(master)["connections"] == 1, 20, "real slave admitted despite idle sockets")
        sent = []
        with master.client() as c:
            for i in range(20):
                body = os.urandom(32) + b"x" * (i * 53 % 700)
                r = c.send("TopicHaDoors", body)
                assert r["status"] == "SEND_OK"
                sent.append(r)
        top = _max_offset(master)
        wait_until(lambda: _max_offset(slave) >= top, 20, "slave caught up")
        # nothing acknowledged is lost: the slave holds the master's bytes exactly
        assert commitlog_bytes(tmp_path / "broker-a", top) == commitlog_bytes(good_dir / "broker-a-s", top)
        assert top >= sent[-1]["commitLogOffset"] + sent[-1]["storeSize"]
        # the wrong-secret slave got nothing and says why, once
        wait_until(lambda: first_line(_full_log(bad), "refusing master"), 15, "bad slave's log line")
        line = first_line(_full_log(bad), "refusing master")
        assert line and "does not match the master's haAuthToken" in line
        assert _max_offset(bad) == 0 and not _ha(bad)["connected"]
        mlog = _full_log(master)
        assert first_line(mlog, "refused: slave's proof does not match haAuthToken")
        assert first_line(mlog, "refused: first bytes 0000000000000000 are not an authenticated HA handshake")
        st = _ha(master)
        assert st["auth"] == "haAuthToken" and st["authenticatedSlaves"] == 1
        assert st["refusedConnections"] >= 2 + 34  # fake slave, raw handshake, evicted idle sockets
        assert master.alive() and slave.alive() and bad.alive()
    finally:
        close_all(idle)
        if fake is not None:
            fake.stop()
        kill_all([master, slave, bad])


@pytest.mark.timeout(60)
def test_fake_master_cannot_feed_a_slave(tmp_path: Path) -> None:
    fm = FakeMaster(payload=b"\x00" * 96 + b"evil")
    fm.start()
    sconf, sport = slave_conf(tmp_path, fm.port - 1, haAuthToken=SECRET)  # haMasterAddress = fake's port
    slave = BrokerProc(sconf, sport, "slave", tmp_path)
    try:
        slave.start()
        wait_until(lambda: first_line(_full_log(slave), "refusing master"), 20, "slave refuses the fake master")
        assert fm.first_bytes and fm.first_bytes[0].startswith(MAGIC)  # it only ever sent a HELLO
        assert _max_offset(slave) == 0 and not _ha(slave)["connected"]
        assert "not an authenticated HA handshake" in (_ha(slave)["lastError"] or "")
        assert slave.alive()
    finally:
        kill_all([slave])
        fm.stop()


@pytest.mark.timeout(60)
def test_ha_bind_address_is_honoured(tmp_path: Path) -> None:
    mconf, mport = master_conf(tmp_path, "ASYNC_MASTER", haAuthToken=SECRET, haBindAddress="127.0.0.2")
    master = BrokerProc(mconf, mport, "master", tmp_path)
    try:
        master.start()
        assert listening_hosts(mport + 1) == ["127.0.0.2"]
        assert listening_hosts(mport) == ["127.0.0.1"]
        assert first_line(_full_log(master), "HA listening on 127.0.0.2:")
    finally:
        kill_all([master])
