"""brokerPermission as Apache 4.9.8 applies it (issue 25): the operator's way to drain a broker.

``mqadmin updateBrokerConfig -k brokerPermission -v 4`` (read only) makes the broker register every
topic with perm 4 at once, so routes send producers elsewhere; an ordered topic's sends are refused
at once (4.9.8's ``msgCheck``); ``-v 2`` (write only) refuses pulls ("the broker[ip] pulling message
is forbidden"); ``-v 6`` restores it. Before, updateBrokerConfig refused the key (nothing applied it).
A real broker and our name server, over remoting.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from tools.broker_confs import master_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import wait_until
from tools.nodes import NamesrvProc
from tests.remoting.procs import request

pytestmark = pytest.mark.multiprocess


def route_perms(ns_port: int, topic: str) -> set[int]:
    r = request(ns_port, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    if r.code == R.TOPIC_NOT_EXIST:  # not registered yet
        return set()
    assert r.code == R.SUCCESS, r.remark
    return {int(m) for m in re.findall(rb'"perm":(\d+)', r.body or b"")}


def set_permission(port: int, perm: int) -> None:
    r = request(port, RC.UPDATE_BROKER_CONFIG, {}, f"brokerPermission={perm}\n".encode())
    assert r.code == R.SUCCESS, r.remark


def send_v1(port: int, topic: str) -> int:
    return request(port, RC.SEND_MESSAGE, {"producerGroup": "PG", "topic": topic, "defaultTopic": "TBW102",
                                            "defaultTopicQueueNums": 4, "queueId": 0, "sysFlag": 0,
                                            "bornTimestamp": 1, "flag": 0, "properties": "", "reconsumeTimes": 0},
                   b"x").code


def test_broker_permission_drains_routes_pulls_and_ordered_sends(tmp_path: Path) -> None:
    ns = NamesrvProc(tmp_path).start()
    conf, port = master_conf(tmp_path, role="ASYNC_MASTER", namesrvAddr=ns.address)
    b = BrokerProc(conf, port, "m", tmp_path)
    try:
        b.start()
        for topic, queues, order in (("PermTopic", 2, "false"), ("PermOrdered", 1, "true")):
            r = request(port, RC.UPDATE_AND_CREATE_TOPIC, {"topic": topic, "defaultTopic": "TBW102", "perm": 6,
                                                           "readQueueNums": queues, "writeQueueNums": queues,
                                                           "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0,
                                                           "order": order})
            assert r.code == R.SUCCESS, r.remark
        wait_until(lambda: route_perms(ns.port, "PermTopic") == {6} or None, 15, "the route with perm 6")

        set_permission(port, 4)  # read only: routes change at once, ordered sends stop, plain sends go on
        assert wait_until(lambda: route_perms(ns.port, "PermTopic") == {4} or None, 10, "the route with perm 4")
        assert route_perms(ns.port, "PermOrdered") == {4}
        refused = request(port, RC.SEND_MESSAGE, {"producerGroup": "PG", "topic": "PermOrdered", "queueId": 0,
                                                  "bornTimestamp": 1, "properties": ""}, b"x")
        assert (refused.code, refused.remark) == (R.NO_PERMISSION, "the broker[127.0.0.1] sending message is forbidden")
        assert send_v1(port, "PermTopic") == R.SUCCESS
        pull = {"consumerGroup": "PermGroup", "topic": "PermTopic", "queueId": 0, "queueOffset": 0,
                "maxMsgNums": 4, "sysFlag": 0, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": "*",
                "subVersion": 0}
        # an acknowledged send is dispatched to its ConsumeQueue a moment later (as Apache's reput): poll, bounded
        assert wait_until(lambda: request(port, RC.PULL_MESSAGE, pull).code == R.SUCCESS or None, 5, "the pull")

        set_permission(port, 2)  # write only: pulls refused
        r = request(port, RC.PULL_MESSAGE, pull)
        assert (r.code, r.remark) == (R.NO_PERMISSION, "the broker[127.0.0.1] pulling message is forbidden")

        set_permission(port, 6)
        assert wait_until(lambda: route_perms(ns.port, "PermTopic") == {6} or None, 10, "the route back to perm 6")
        assert request(port, RC.PULL_MESSAGE, pull).code == R.SUCCESS
        with b.client() as c:
            assert json.loads(json.dumps(c.send("PermOrdered", "back", queue_id=0)))["queueOffset"] == 0
    finally:
        kill_all([b])
        ns.kill9()
