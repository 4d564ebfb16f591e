"""DLedgerRoleChangeHandler in process: real BrokerControllers (store, DLedger server, HTTP API,
sockets on 127.0.0.1) on one event loop, each with its DLedger loop thread.

Covers what the three-process tests do not pin down: the role mapping (brokerId -1 before any
role, selfId+1 as slave, 0 as master), a candidate without quorum refusing writes with no
master address, a follower naming the leader's API address from ``dLegerPeersHttp``, the
candidate-after-leader-loss path, queue offsets continuing after a restart, and the admin
endpoints' error answers.
"""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Awaitable, Callable

import aiohttp
import pytest

from broker.api.client import BrokerClient, BrokerClientError
from broker.config.conf_file import parse_conf
from broker.controller import BrokerController
from tools.procs import free_ports
from broker.role import slave_broker_id
from tools.broker_confs import master_conf


def _controllers(tmp: Path, ids: list[str]) -> list[BrokerController]:
    ports = free_ports(2 * len(ids))
    http = {n: ports[i] for i, n in enumerate(ids)}
    peers = ";".join(f"{n}-127.0.0.1:{ports[len(ids) + i]}" for i, n in enumerate(ids))
    http_peers = ";".join(f"{n}-127.0.0.1:{http[n]}" for n in ids)
    out = []
    for n in ids:
        text = "\n".join([
            "brokerName=RaftRole", "brokerIP1=127.0.0.1", f"listenPort={http[n]}",
            f"storePathRootDir={tmp / n}", "mappedFileSizeCommitLog=1048576", "enableDLegerCommitLog=true",
            "dLegerGroup=RaftRole", f"dLegerPeers={peers}", f"dLegerPeersHttp={http_peers}", f"dLegerSelfId={n}",
            "dLegerHeartbeatIntervalMs=50", "dLegerElectionTimeoutMs=200-400", "slaveSyncIntervalMs=300",
            "dLegerAuthToken=role-test-secret-0123", "",
        ])
        conf = parse_conf(text, f"{n}.conf")
        out.append(BrokerController(conf.broker, conf.store))
    return out


async def _until(pred: Callable[[], Any], timeout: float, what: str) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        value = pred()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        await asyncio.sleep(0.02)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def test_slave_broker_id_is_self_id_number_plus_one() -> None:
    assert [slave_broker_id(i) for i in ("n0", "n1", "n2", "n12")] == [1, 2, 3, 13]


@pytest.mark.timeout(60)
async def test_single_node_group_becomes_master_and_keeps_queue_offsets(tmp_path: Path) -> None:
    (c,) = _controllers(tmp_path, ["n0"])
    assert (c.broker_id, c.is_master()) == (-1, False)  # RocketMQ BrokerStartup: -1 until a role
    await c.start()
    try:
        await _until(c.is_master, 10, "n0 master")
        assert (c.broker_role, c.broker_id) == ("SYNC_MASTER", 0)
        async with BrokerClient(c.api_address) as api:
            r = [await api.send("TopicRole", f"m{i}", queue_id=1) for i in range(3)]
            assert [x["queueOffset"] for x in r] == [0, 1, 2]
            st = await api.status()
            d = st["dledger"]
            assert (d["role"], d["selfId"], d["leaderId"], d["leaderApiAddress"]) == ("LEADER", "n0", "n0", c.api_address)
            assert d["committedIndex"] == d["endIndex"] >= 2 and d["leaderReady"] and d["followers"] == {}
            assert st["ha"] == {"mode": "dledger"} and d["lastLeaderCatchUpMs"] is not None
            assert (await api.transfer_leader("n0"))["ok"]  # to itself: nothing to do
            for call, code in ((api.transfer_leader("n7"), "BAD_REQUEST"), (api.set_preferred_leader(["n7"]), "BAD_REQUEST")):
                with pytest.raises(BrokerClientError) as exc:
                    await call
                assert exc.value.code == code
            assert (await api.set_preferred_leader(["n0"]))["preferredLeaders"] == ["n0"]
            text = await api.metrics()
            assert 'rocketmq_dledger_is_leader{self_id="n0",leader_id="n0"} 1' in text
            assert f"rocketmq_dledger_committed_index {d['committedIndex']}" in text
    finally:
        await c.shutdown()
    # restart: the rebuilt queue offsets continue where the committed log ended
    (c2,) = [BrokerController(c.broker_config, c.store_config)]
    await c2.start()
    try:
        await _until(c2.is_master, 10, "n0 master again")
        async with BrokerClient(c2.api_address) as api:
            assert (await api.send("TopicRole", "after restart", queue_id=1))["queueOffset"] == 3
    finally:
        await c2.shutdown()


@pytest.mark.timeout(90)
async def test_candidate_follower_and_leader_loss(tmp_path: Path) -> None:
    a, b = _controllers(tmp_path, ["n0", "n1"])
    started: list[BrokerController] = []
    try:
        await a.start()
        started.append(a)
        # alone in a group of two: no quorum, a candidate -> slave with no master to name
        await _until(lambda: a.broker_role == "SLAVE", 10, "n0 slave while candidate")
        assert a.broker_id == 1 and a.master_api_address is None
        async with BrokerClient(a.api_address) as api:
            with pytest.raises(BrokerClientError) as exc:
                await api.send("TopicRole", "no leader yet")
            assert exc.value.code == "NOT_MASTER" and exc.value.body["masterAddress"] is None
        await b.start()
        started.append(b)
        leader = await _until(lambda: next((x for x in (a, b) if x.is_master()), None), 15, "a master")
        follower = b if leader is a else a
        await _until(lambda: follower.master_api_address == leader.api_address, 10, "follower names the leader")
        assert follower.broker_id == slave_broker_id(follower.role_handler.self_id)
        async with BrokerClient(follower.api_address) as api:
            with pytest.raises(BrokerClientError) as exc:
                await api.send("TopicRole", "to the follower")
            assert exc.value.body["masterAddress"] == leader.api_address
            with pytest.raises(BrokerClientError) as exc:  # only the leader transfers
                await api.transfer_leader(follower.role_handler.self_id)
            assert exc.value.code == "NOT_MASTER" and exc.value.body["masterAddress"] == leader.api_address
        async with BrokerClient(leader.api_address) as api:
            await api.create_topic("TopicRoleMeta", read_queue_nums=2, write_queue_nums=2)
            sent = await api.send("TopicRoleMeta", "replicated", queue_id=0)
        await _until(lambda: follower.metadata.topic("TopicRoleMeta") is not None, 10, "topic synced to the follower")
        # metadata sync runs over the remoting admin requests (GET_ALL_*), not the HTTP API
        assert follower.slave_sync is not None and follower.slave_sync.protocol == "remoting"
        assert follower.slave_sync.remoting_requests > 0 and follower.slave_sync.http_requests == 0
        async with BrokerClient(follower.api_address) as api:
            got = await _until(lambda: _pulled(api), 10, "message dispatched on the follower")
            assert got[0]["commitLogOffset"] == sent["commitLogOffset"]
        # the leader goes away: the survivor becomes a candidate, stays a slave, names nobody
        await leader.shutdown()
        started.remove(leader)
        await _until(lambda: follower.master_api_address is None, 10, "survivor forgets the old master")
        assert follower.broker_role == "SLAVE" and not follower.is_master()
        assert follower.broker_id == slave_broker_id(follower.role_handler.self_id)
    finally:
        for x in started:
            await x.shutdown()


async def _pulled(api: BrokerClient) -> list[dict[str, Any]]:
    return (await api.pull("TopicRoleMeta", 0, 0, 4))["messages"]


@pytest.mark.timeout(60)
async def test_classic_broker_has_no_dledger_admin(tmp_path: Path) -> None:
    from broker.config.conf_file import load_conf

    conf, _ = master_conf(tmp_path, "ASYNC_MASTER")
    parsed = load_conf(conf)
    c = BrokerController(parsed.broker, parsed.store)
    await c.start()
    try:
        async with BrokerClient(c.api_address) as api:
            assert "dledger" not in await api.status()
            calls: list[Awaitable[Any]] = [api.dledger_status(), api.transfer_leader("n1"), api.set_preferred_leader(["n1"])]
            for call in calls:
                with pytest.raises(BrokerClientError) as exc:
                    await call
                assert exc.value.code == "BAD_REQUEST" and "DLedger mode" in exc.value.message
    finally:
        await c.shutdown()


@pytest.mark.timeout(60)
async def test_member_that_stopped_itself_makes_the_broker_unhealthy_and_refuse_reads(tmp_path: Path) -> None:
    """Issue 13.1 in process: once the DLedger member stops itself (here its real ``_fatal`` path,
    the one a failed flush takes), /health is 503 with cause and fix, /status and /metrics say
    so, and reads/writes are SERVICE_NOT_AVAILABLE (never MESSAGE_WAS_REMOVING / not found)."""
    (c,) = _controllers(tmp_path, ["n0"])
    await c.start()
    try:
        await _until(c.is_master, 10, "n0 master")
        async with BrokerClient(c.api_address) as api:
            sent = [await api.send("TopicRole", f"m{i}", queue_id=0) for i in range(3)]
            await _until(lambda: _pulled_role(api), 10, "dispatched")
            server = c.role_handler.server
            c.role_handler.commitlog._run_on_loop(lambda: server._fatal("flush failed: [Errno 5] Input/output error"))
            await _until(lambda: c.member_failure is not None, 5, "the controller notices")
            async with aiohttp.ClientSession() as http, http.get(f"http://{c.api_address}/health") as resp:
                status, text = resp.status, await resp.text()
            assert status == 503 and "stopped itself" in text and "Input/output error" in text
            assert "restart mqbroker" in text, text
            st = await api.status()
            assert st["healthy"] is False and "Input/output error" in st["memberStopped"]
            assert "memberStopped" in st["dledger"] and st["writable"] is False
            assert "rocketmq_broker_dledger_member_stopped 1" in await api.metrics()
            reads = [api.pull("TopicRole", 0, 0, 32), api.by_offset(sent[1]["commitLogOffset"]),
                     api.send("TopicRole", "after the member stopped", queue_id=0)]
            for call in reads:
                with pytest.raises(BrokerClientError) as exc:
                    await call
                assert exc.value.code == "SERVICE_NOT_AVAILABLE" and "stopped itself" in exc.value.message
    finally:
        await c.shutdown()


async def _pulled_role(api: BrokerClient) -> list[dict[str, Any]]:
    return (await api.pull("TopicRole", 0, 0, 4))["messages"]
