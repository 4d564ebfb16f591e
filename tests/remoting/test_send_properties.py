"""What a send stores, as Apache 4.9.8's broker stores it (issue 25: the survey's four differing commands).

4.9.8's ``SendMessageProcessor`` adds ``CLUSTER=<brokerClusterName>`` to every message and does not
store a single message's ``WAIT`` (it only says whether to wait for SYNC_FLUSH); a batch's own
properties (the Java client sends ``WAIT=true``) and ``CLUSTER`` are appended to each record
(``MessageExtBatchEncoder``). Before: ours stored ``WAIT=true`` and no ``CLUSTER``, so
queryMsgByUniqueKey, queryMsgByOffset, printMsg and printMsgByQueue printed other properties and
a storeSize 7 bytes off. Checked on a real broker over both doors (remoting and HTTP).
"""
from __future__ import annotations

import struct
import time
import zlib
from pathlib import Path

import pytest

from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from tools.broker_confs import master_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import wait_until
from tests.remoting.procs import request

pytestmark = pytest.mark.multiprocess
TOPIC = "PropsTopic"


def props(d: dict[str, str]) -> str:
    return "\x02".join(f"{k}\x01{v}" for k, v in d.items())


def batch_body(items: list[tuple[bytes, dict[str, str]]]) -> bytes:
    """MessageDecoder.encodeMessages: [total][magic][bodyCrc][flag][bodyLen][body][propLen:2][props] each."""
    out = b""
    for body, p in items:
        pb = props(p).encode()
        total = 20 + len(body) + 2 + len(pb)
        out += struct.pack(">iiiii", total, 0, zlib.crc32(body), 0, len(body)) + body + struct.pack(">h", len(pb)) + pb
    return out


def test_stored_properties_are_apaches(tmp_path: Path) -> None:
    conf, port = master_conf(tmp_path, role="ASYNC_MASTER", autoCreateTopicEnable="true",
                             brokerClusterName="PropsCluster")
    b = BrokerProc(conf, port, "m", tmp_path)
    try:
        b.start()
        head = {"a": "PG", "b": TOPIC, "c": "TBW102", "d": 4, "e": 0, "f": 0, "g": int(time.time() * 1000), "h": 0,
                "j": 0, "k": "false"}
        single = request(port, RC.SEND_MESSAGE_V2, {**head, "i": props({"TAGS": "A", "WAIT": "true", "UNIQ_KEY": "U1"})},
                         b"one")
        batch = request(port, RC.SEND_BATCH_MESSAGE, {**head, "i": props({"WAIT": "true"})},
                        batch_body([(b"two", {"UNIQ_KEY": "U2"}), (b"three", {"UNIQ_KEY": "U3", "TAGS": "B"})]))
        assert (single.code, batch.code) == (R.SUCCESS, R.SUCCESS), (single.remark, batch.remark)
        # a retry of the single send (same UNIQ_KEY) is answered from the dedup window, stored once;
        # the same send from Apache's `queryMsgById -s true` producer group is a resend: stored again
        retry = request(port, RC.SEND_MESSAGE_V2, {**head, "i": props({"TAGS": "A", "UNIQ_KEY": "U1"})}, b"one")
        resend = request(port, RC.SEND_MESSAGE_V2, {**head, "a": "ReSendMsgById", "i": props({"UNIQ_KEY": "U1"})},
                         b"again")
        assert (retry.code, resend.code) == (R.SUCCESS, R.SUCCESS), (retry.remark, resend.remark)
        assert retry.ext_fields["queueOffset"] == single.ext_fields["queueOffset"], (retry.ext_fields, single.ext_fields)
        assert int(resend.ext_fields["queueOffset"]) > int(single.ext_fields["queueOffset"]), resend.ext_fields
        with b.client() as c:
            c.send(TOPIC, "four", queue_id=0, keys=["k4"])
            wait_until(lambda: len(c.pull(TOPIC, 0, 0, 8)["messages"]) == 5 or None, 10.0, "5 messages dispatched")
            stored = {m["bodyText"]: m["properties"] for m in c.pull(TOPIC, 0, 0, 8)["messages"]}
    finally:
        kill_all([b])
    assert stored["one"] == {"TAGS": "A", "UNIQ_KEY": "U1", "CLUSTER": "PropsCluster"}
    assert stored["two"] == {"UNIQ_KEY": "U2", "WAIT": "true", "CLUSTER": "PropsCluster"}
    assert stored["three"] == {"UNIQ_KEY": "U3", "TAGS": "B", "WAIT": "true", "CLUSTER": "PropsCluster"}
    assert stored["four"]["CLUSTER"] == "PropsCluster" and "WAIT" not in stored["four"], stored["four"]
    assert stored["four"]["KEYS"] == "k4"
    assert stored["again"]["UNIQ_KEY"] == "U1"
