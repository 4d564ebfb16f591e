"""Issue 23.4: every remoting request is checked against the permission of its HTTP route.

Before: VIEW_MESSAGE_BY_ID had no topic check (an account denied everything read a message that
HTTP refused it); a deny-all account read the topic, offset, group and delay dumps and consume
stats; a consumer account moved offsets back (HTTP wants admin), with queue ids and offsets
nobody has; END_TRANSACTION needed no permission. One real ACL broker (``mqbroker`` on
127.0.0.1, the accounts of ``_http_support``) is asked over remoting by each account; where the
HTTP door has the same operation, it is asked too and must agree.
"""
from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, Iterator

import pytest

from broker.api.client import SyncBrokerClient
from broker.remoting.acl import signer
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from broker.store.message_id import decode_message_id
from tools.nodes import kill_all
from tests.security._http_support import ADMIN, CONSUMER, NOBODY, PRODUCER, raw_request, start_acl_master

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("remoting-reads")
    b = start_acl_master(tmp)
    try:
        with SyncBrokerClient(b.address, access_key=ADMIN[0], secret_key=ADMIN[1]) as admin:
            admin.create_topic("TopicA", read_queue_nums=1, write_queue_nums=1)
        with SyncBrokerClient(b.address, access_key=PRODUCER[0], secret_key=PRODUCER[1]) as prod:
            sent = [prod.send("TopicA", f"m{i}", keys=f"k{i}", queue_id=0) for i in range(3)]
        yield {"broker": b, "port": b.api_port, "address": b.address, "sent": sent}
    finally:
        kill_all([b])


async def _ask(port: int, account: tuple[str, str], code: int, fields: dict[str, Any], body: bytes = b"") -> Any:
    client = await RemotingClient.connect("127.0.0.1", port, rpc_hook=signer(*account))
    try:
        return await client.request(code, fields, body)
    finally:
        await client.close()


def ask(port: int, account: tuple[str, str], code: int, fields: dict[str, Any], body: bytes = b"") -> Any:
    return asyncio.run(_ask(port, account, code, fields, body))


def test_view_message_by_id_needs_sub_on_the_message_topic(broker: dict[str, Any]) -> None:
    port, offset = broker["port"], broker["sent"][0]["commitLogOffset"]
    for account in (NOBODY, PRODUCER):  # deny-all, and PUB without SUB
        r = ask(port, account, RC.VIEW_MESSAGE_BY_ID, {"offset": offset})
        assert r.code == R.NO_PERMISSION and not r.body, (account[0], r.code, r.remark)
        assert "topic=TopicA" in (r.remark or "")
        status, _data, _ = raw_request(broker["address"], "GET", f"/messages/by-offset/{offset}", account=account)
        assert status == 403  # the HTTP door agrees
    r = ask(port, CONSUMER, RC.VIEW_MESSAGE_BY_ID, {"offset": offset})
    assert r.code == R.SUCCESS and b"m0" in r.body
    # QUERY_MESSAGE: the topic named in the request (SUB), as GET /messages/by-key
    assert ask(port, NOBODY, RC.QUERY_MESSAGE, {"topic": "TopicA", "key": "k1", "maxNum": 4}).code == R.NO_PERMISSION
    r = ask(port, CONSUMER, RC.QUERY_MESSAGE, {"topic": "TopicA", "key": "k1", "maxNum": 4})
    assert r.code == R.SUCCESS and b"m1" in r.body


@pytest.mark.parametrize("code", [RC.GET_ALL_TOPIC_CONFIG, RC.GET_ALL_CONSUMER_OFFSET, RC.GET_ALL_DELAY_OFFSET,
                                  RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, RC.GET_BROKER_CONFIG])
def test_metadata_dumps_need_admin(broker: dict[str, Any], code: int) -> None:
    for account in (NOBODY, CONSUMER, PRODUCER):
        r = ask(broker["port"], account, code, {})
        assert r.code == R.NO_PERMISSION and not r.body, (code, account[0], r.remark)
    r = ask(broker["port"], ADMIN, code, {})
    assert r.code == R.SUCCESS and r.body, (code, r.remark)
    status, _data, _ = raw_request(broker["address"], "GET", "/admin/config/topics", account=CONSUMER)
    assert status == 403  # GET /admin/config/*: the same "config-dump" operation


def test_stats_and_queue_offsets_need_a_permission_on_what_they_name(broker: dict[str, Any]) -> None:
    port = broker["port"]
    stats = {"consumerGroup": "GroupA", "topic": "TopicA"}
    assert ask(port, NOBODY, RC.GET_CONSUME_STATS, stats).code == R.NO_PERMISSION
    assert ask(port, CONSUMER, RC.GET_CONSUME_STATS, stats).code != R.NO_PERMISSION
    assert ask(port, NOBODY, RC.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "GroupA"}).code == R.NO_PERMISSION
    assert ask(port, NOBODY, RC.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "TopicA"}).code == R.NO_PERMISSION
    assert ask(port, NOBODY, RC.GET_TOPIC_STATS_INFO, {"topic": "TopicA"}).code == R.NO_PERMISSION
    for code in (RC.GET_MAX_OFFSET, RC.GET_MIN_OFFSET):
        q = {"topic": "TopicA", "queueId": 0}
        assert ask(port, NOBODY, code, q).code == R.NO_PERMISSION
        for account in (CONSUMER, PRODUCER):  # PUB or SUB, as GET /topics/{topic}
            r = ask(port, account, code, q)
            assert r.code == R.SUCCESS, (code, account[0], r.remark)
    assert ask(port, CONSUMER, RC.GET_MAX_OFFSET, {"topic": "TopicA", "queueId": 0}).ext_fields["offset"] == "3"


def test_offset_commits_reset_needs_admin_and_ranges_are_checked(broker: dict[str, Any]) -> None:
    port = broker["port"]

    def commit(account: tuple[str, str], offset: int, queue_id: int = 0) -> Any:
        return ask(port, account, RC.UPDATE_CONSUMER_OFFSET,
                   {"consumerGroup": "GroupA", "topic": "TopicA", "queueId": queue_id, "commitOffset": offset})

    def stored() -> int:
        r = ask(port, ADMIN, RC.QUERY_CONSUMER_OFFSET, {"consumerGroup": "GroupA", "topic": "TopicA", "queueId": 0})
        return int(r.ext_fields["offset"])

    assert commit(CONSUMER, 2).code == R.SUCCESS and stored() == 2
    r = commit(CONSUMER, 0)  # back: a reset
    assert r.code == R.NO_PERMISSION and "admin" in (r.remark or "") and stored() == 2
    status, _d, _ = raw_request(broker["address"], "POST", "/consumer-offsets", account=CONSUMER,
                                body=b'{"group":"GroupA","topic":"TopicA","queueId":0,"offset":0}')
    assert status == 403 and stored() == 2  # the HTTP door agrees
    r = commit(CONSUMER, 10**12)  # past the queue's end (3)
    assert r.code == R.SYSTEM_ERROR and "0..3" in (r.remark or "") and stored() == 2
    r = commit(CONSUMER, 1, queue_id=4096)
    assert r.code == R.SYSTEM_ERROR and "queueId 4096" in (r.remark or "")
    assert commit(NOBODY, 3).code == R.NO_PERMISSION and stored() == 2
    assert commit(ADMIN, 0).code == R.SUCCESS and stored() == 0  # an admin may reset
    assert commit(CONSUMER, 3).code == R.SUCCESS and stored() == 3  # forward to the end


def test_end_transaction_needs_pub_on_the_real_topic(broker: dict[str, Any]) -> None:
    port = broker["port"]
    props = f"TRAN_MSG\x01true\x02PGROUP\x01PG\x02UNIQ_KEY\x01{uuid.uuid4().hex.upper()}\x02"
    r = ask(port, PRODUCER, RC.SEND_MESSAGE, {
        "producerGroup": "PG", "topic": "TopicA", "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
        "queueId": 0, "sysFlag": 4, "bornTimestamp": int(time.time() * 1000), "flag": 0, "properties": props,
        "reconsumeTimes": 0, "unitMode": "false", "batch": "false"}, b"half-body")
    assert r.code == R.SUCCESS, r.remark
    phy, queue_offset = decode_message_id(r.ext_fields["msgId"])[1], int(r.ext_fields["queueOffset"])
    end = {"producerGroup": "PG", "tranStateTableOffset": queue_offset, "commitLogOffset": phy,
           "commitOrRollback": 8, "fromTransactionCheck": "false"}
    for account in (NOBODY, CONSUMER):
        r = ask(port, account, RC.END_TRANSACTION, end)
        assert r.code == R.NO_PERMISSION and "topic=TopicA" in (r.remark or ""), (account[0], r.remark)
    r = ask(port, CONSUMER, RC.GET_MAX_OFFSET, {"topic": "TopicA", "queueId": 0})
    assert r.ext_fields["offset"] == "3"  # nothing was committed by the refused requests
    r = ask(port, PRODUCER, RC.END_TRANSACTION, end)
    assert r.code == R.SUCCESS, r.remark
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if ask(port, CONSUMER, RC.GET_MAX_OFFSET, {"topic": "TopicA", "queueId": 0}).ext_fields["offset"] == "4":
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the committed half message never became visible")
