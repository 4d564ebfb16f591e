"""Name server: RouteInfoManager rules (pure), and mqnamesrv as a process (register, route,
crc check, cluster info, unregister, expiry of a silent broker, drop on connection close)."""
from __future__ import annotations

import asyncio
import json
import zlib
from pathlib import Path

import pytest

from namesrv.route_info import RouteInfoManager
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from tools.nodes import NamesrvProc
from tests.remoting.procs import request

TC = {"topicConfigTable": {"T": {"topicName": "T", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}},
      "dataVersion": {"counter": 1}}


@pytest.mark.timeout(30)
def test_route_info_manager_rules() -> None:
    m = RouteInfoManager(broker_channel_max_idle_ms=1000)
    m.register_broker("C", "h:1", "b", 0, "h:2", TC, "conn-m", 0)
    res = m.register_broker("C", "h:3", "b", 1, "h:4", TC, "conn-s", 0)
    assert res == {"haServerAddr": "h:2", "masterAddr": "h:1"}
    route = m.pickup_topic_route_data("T")
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": "h:1", "1": "h:3"}
    assert route["queueDatas"] == [{"brokerName": "b", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
                                    "topicSysFlag": 0}]
    # a slave's topic table never changes queue data
    m.register_broker("C", "h:3", "b", 1, "h:4", {"topicConfigTable": {"U": {"topicName": "U"}}, "dataVersion": 2},
                      "conn-s", 0)
    assert m.pickup_topic_route_data("U") is None
    # master dies (connection closed): slave stays, queue data stays (reads from the slave)
    assert m.on_channel_destroy("conn-m") == ["h:1"]
    assert m.pickup_topic_route_data("T")["brokerDatas"][0]["brokerAddrs"] == {"1": "h:3"}
    # the slave becomes master (DLedger role change): same address, id 0, old id 1 entry removed
    m.register_broker("C", "h:3", "b", 0, "h:4", TC, "conn-s", 10)
    assert m.pickup_topic_route_data("T")["brokerDatas"][0]["brokerAddrs"] == {"0": "h:3"}
    # silent for longer than the idle limit: dropped, and with the last address the topic goes
    assert m.scan_not_active_broker(500) == []
    assert m.scan_not_active_broker(2000) == ["h:3"]
    assert m.pickup_topic_route_data("T") is None and m.cluster_info()["clusterAddrTable"] == {}


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_mqnamesrv_process(tmp_path: Path) -> None:
    ns = NamesrvProc(tmp_path, expiry_ms=1500, scan_interval_ms=200)
    try:
        ns.start()
        body = json.dumps({"topicConfigSerializeWrapper": TC, "filterServerList": []}).encode()
        fields = {"brokerAddr": "127.0.0.1:1", "brokerId": 0, "brokerName": "b", "clusterName": "C",
                  "haServerAddr": "127.0.0.1:2", "compressed": False}
        r = request(ns.port, RC.REGISTER_BROKER, {**fields, "bodyCrc32": 12345}, body)
        assert (r.code, r.remark) == (R.SYSTEM_ERROR, "crc32 not match")
        r = request(ns.port, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
        assert r.code == R.TOPIC_NOT_EXIST and r.remark.startswith("No topic route info in name server for the topic: T")

        async def run() -> None:
            cl = await RemotingClient.connect("127.0.0.1", ns.port)
            r = await cl.request(RC.REGISTER_BROKER, {**fields, "bodyCrc32": zlib.crc32(body) & 0x7FFFFFFF}, body)
            assert r.code == R.SUCCESS
            r = await cl.request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
            assert json.loads(r.body)["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:1"}
            r = await cl.request(RC.GET_BROKER_CLUSTER_INFO)
            assert json.loads(r.body)["clusterAddrTable"] == {"C": ["b"]}
            r = await cl.request(RC.UNREGISTER_BROKER, {"brokerAddr": "127.0.0.1:1", "brokerId": 0, "brokerName": "b",
                                                        "clusterName": "C"})
            assert r.code == R.SUCCESS
            r = await cl.request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
            assert r.code == R.TOPIC_NOT_EXIST
            # registered again, then silent: dropped after the expiry, and its channel closed (as RocketMQ)
            await cl.request(RC.REGISTER_BROKER, {**fields, "bodyCrc32": 0}, body)
            await asyncio.wait_for(cl.closed.wait(), 10)
            cl = await RemotingClient.connect("127.0.0.1", ns.port)
            assert (await cl.request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})).code == R.TOPIC_NOT_EXIST
            # registered again, then the connection closes: dropped at once
            cl2 = await RemotingClient.connect("127.0.0.1", ns.port)
            await cl2.request(RC.REGISTER_BROKER, {**fields, "bodyCrc32": 0}, body)
            assert (await cl.request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})).code == R.SUCCESS
            await cl2.close()
            await asyncio.sleep(0.3)
            assert (await cl.request(RC.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})).code == R.TOPIC_NOT_EXIST
            r = await cl.request(RC.GET_KV_CONFIG, {"namespace": "N", "key": "k"})
            assert r.code == R.QUERY_NOT_FOUND
            await cl.close()

        asyncio.run(run())
    finally:
        ns.kill9()


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_mqnamesrv_bind_address_and_limits_from_properties(tmp_path: Path) -> None:
    """``-c`` properties: bindAddress (logged) and the listen limits; idle connections are closed."""
    import socket
    import time

    from tools.nodes import Child
    from tools.procs import free_port, wait_until
    from tests.security._listen_support import closed_by_peer, listening_hosts

    port = free_port()
    props = tmp_path / "namesrv.properties"
    props.write_text(f"listenPort={port}\nbindAddress=127.0.0.1\nserverChannelMaxIdleTimeSeconds=1\n"
                     "serverReadTimeoutMillis=300\nserverMaxConnections=5\n")
    log = tmp_path / "ns.log"
    proc = Child("mqnamesrv", ["namesrv", "-c", str(props)], log).start()  # the port and host from -c only
    try:
        wait_until(lambda: f"listening on 127.0.0.1:{port}" in log.read_text(), 20, "the name server to start",
                   check=lambda: None if proc.alive() else pytest.fail(log.read_text()))
        assert listening_hosts(port) == ["127.0.0.1"]
        with socket.create_connection(("127.0.0.1", port), 5) as partial, \
                socket.create_connection(("127.0.0.1", port), 5) as silent:
            partial.sendall(b"\x00\x00")
            t0 = time.monotonic()
            assert closed_by_peer(partial, 5) is not None  # read timeout
            assert closed_by_peer(silent, 5) is not None  # idle
            assert time.monotonic() - t0 < 4
        held = [socket.create_connection(("127.0.0.1", port), 5) for _ in range(5)]
        try:
            with socket.create_connection(("127.0.0.1", port), 5) as extra:
                assert closed_by_peer(extra, 0.8) is not None  # over serverMaxConnections: closed at once
        finally:
            for s in held:
                s.close()
    finally:
        proc.kill9()
