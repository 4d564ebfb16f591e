"""Apache 4.9.8 mqadmin flags on our mqadmin's existing sub-commands (issue 25).

Before: our mqadmin refused (argparse exit 2) ``clusterList -m/-i``, ``topicList -c``,
``consumeMessage -s/-e``, ``updateTopic -o/-u/-s``, ``sendMessage -m`` and ``queryMsgById
-g/-d/-s/-u``; updateTopic went through HTTP POST /topics, which has no ``order``.

Rules: one name server and one broker (real processes) for the whole check, Apache's mqadmin run
against the same broker where its output can be compared (one warm JVM per test,
tests/remoting/mqadmin_jvm.py, its commands one at a time beside ours), an in-process
consumer (test_broker2client's FakeConsumer) answering CONSUME_MESSAGE_DIRECTLY; everything
stopped in ``finally``.
"""
from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from broker.cli.mqadmin_flags import UsageError, parse_time
from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from broker.remoting.client import RemotingClient
from tools.broker_confs import master_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import REPO, wait_until
from tools.nodes import NamesrvProc
from tests.remoting.test_broker2client import FakeConsumer, _encode
from tests.remoting import mqadmin_jvm
from tests.remoting.mqadmin_jvm import mqadmin_jvms  # noqa: F401 - autouse: the JVMs stop after each test
from tests.remoting.py_zygote import py_zygotes  # noqa: F401 - autouse: the zygote stops after the module
from tests.remoting.test_mqadmin_compat import HAVE_APACHE, apache, ours

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(180)]

TOPIC, ORDERED, GROUP = "FlTopic", "FlOrdered", "FlGroup"
DIRECT = {"order": False, "autoCommit": True, "consumeResult": "CR_SUCCESS", "spentTimeMills": 7}
DIRECT_LINE = ("ConsumeMessageDirectlyResult [order=false, autoCommit=true, consumeResult=CR_SUCCESS, "
               "remark=null, spentTimeMills=7]")


class DirectConsumer(FakeConsumer):
    """FakeConsumer answering CONSUME_MESSAGE_DIRECTLY with a ConsumeMessageDirectlyResult body."""

    def on_request(self, cmd: RemotingCommand) -> None:
        if cmd.code != RC.CONSUME_MESSAGE_DIRECTLY or self.cl is None:
            super().on_request(cmd)
            return
        self.seen.append(cmd)
        resp = cmd.response(R.SUCCESS, None)
        resp.body = json.dumps(DIRECT).encode()
        self.cl.send_raw(_encode(resp))


class ConsumerThread:
    """A DirectConsumer on its own event loop, connected while the mqadmin processes run."""

    def __init__(self, port: int, client_id: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.consumer = DirectConsumer(client_id)
        self.port = port

    def __enter__(self) -> DirectConsumer:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.consumer.connect(self.port), self.loop).result(15)
        return self.consumer

    def __exit__(self, *exc: Any) -> None:
        if self.consumer.cl is not None:
            asyncio.run_coroutine_threadsafe(self.consumer.cl.close(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def ok(*args: str) -> str:
    r = ours(*args, "--timeout", "15")
    assert r.returncode == 0, f"{args}: {r.stdout}{r.stderr}"
    return r.stdout


def usage(*args: str) -> str:
    r = ours(*args)
    assert r.returncode == 2 and "Traceback" not in r.stderr, f"{args}: {r.stdout}{r.stderr}"
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    return r.stderr


def bodies(text: str, pattern: str) -> list[str]:
    return sorted(re.findall(pattern, text))


async def _kv(ns: str, key: str) -> str:
    host, port = ns.split(":")
    cl = await RemotingClient.connect(host, int(port))
    try:
        r = await cl.request(RC.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": key})
        return f"{r.code}:{r.ext_fields.get('value')}"
    finally:
        await cl.close()


async def _order(addr: str, topic: str) -> Any:
    """The broker's stored ``order`` of the topic (GET_ALL_TOPIC_CONFIG)."""
    host, port = addr.split(":")
    cl = await RemotingClient.connect(host, int(port))
    try:
        r = await cl.request(RC.GET_ALL_TOPIC_CONFIG, {})
        return json.loads(r.body)["topicConfigTable"][topic].get("order")
    finally:
        await cl.close()


def test_time_formats() -> None:
    """consumeMessage -s/-e take ms or Apache's yyyy-MM-dd#HH:mm:ss:SSS (local time)."""
    assert parse_time("1700000000123", "-s") == 1700000000123
    want = int(time.mktime((2024, 5, 6, 7, 8, 9, 0, 0, -1))) * 1000 + 45
    assert parse_time("2024-05-06#07:08:09:045", "-s") == want
    with pytest.raises(UsageError, match="yyyy-MM-dd#HH:mm:ss:SSS"):
        parse_time("yesterday", "-e")


def test_apache_flags(tmp_path: Path) -> None:
    ns = NamesrvProc(tmp_path).start()
    conf, port = master_conf(tmp_path, role="ASYNC_MASTER", namesrvAddr=ns.address)
    b = BrokerProc(conf, port, "m", tmp_path)
    home = tmp_path / "java"
    try:
        if HAVE_APACHE:
            mqadmin_jvm.start(home)  # boots while the broker starts
        b.start()
        addr = b.address
        # updateTopic -o true: UPDATE_AND_CREATE_TOPIC with order, and the name server's orderConf
        out = ok("updateTopic", "-n", ns.address, "-b", addr, "-t", ORDERED, "-w", "2", "-r", "2", "-o", "true")
        assert "set broker orderConf. isOrder=true, orderConf=[broker-a:2]" in out, out
        assert (f"TopicConfig [topicName={ORDERED}, readQueueNums=2, writeQueueNums=2, perm=RW-, "
                "topicFilterType=SINGLE_TAG, topicSysFlag=0, order=true]") in out, out
        assert asyncio.run(_order(addr, ORDERED)) is True
        assert asyncio.run(_kv(ns.address, ORDERED)) == "0:broker-a:2"
        ok("updateTopic", "-b", addr, "-t", ORDERED, "-w", "2", "-r", "2", "-o", "false", "-u", "false", "-s", "false")
        assert asyncio.run(_order(addr, ORDERED)) is False
        assert "unit topics" in usage("updateTopic", "-b", addr, "-t", ORDERED, "-u", "true")
        assert "unit topics" in usage("updateTopic", "-b", addr, "-t", ORDERED, "-s", "true")
        ok("updateTopic", "-b", addr, "-t", TOPIC, "-w", "2", "-r", "2")
        # sendMessage -m: false accepted, true refused
        assert "message trace" in usage("sendMessage", "-b", addr, "-t", TOPIC, "-p", "x", "-m", "true")
        assert "SEND_OK" in ok("sendMessage", "-b", addr, "-t", TOPIC, "-p", "a0", "-m", "false", "-i", "0")

        # three phases of sends; -s/-e select the middle one by store time
        with b.client() as c:
            c.send(TOPIC, "a1", queue_id=1)
            time.sleep(0.05)
            t1 = int(time.time() * 1000)
            time.sleep(0.05)
            mids = [c.send(TOPIC, f"b{i}", queue_id=i % 2)["msgId"] for i in range(4)]
            time.sleep(0.05)
            t2 = int(time.time() * 1000)
            time.sleep(0.05)
            c.send(TOPIC, "c0", queue_id=0)
            c.send(TOPIC, "c1", queue_id=1)
            stored = [c.by_id(m)["storeTimestamp"] for m in mids]
        out = ok("consumeMessage", "-b", addr, "-t", TOPIC, "-s", str(t1), "-e", str(t2))
        assert bodies(out, r"body=(\S+)") == ["b0", "b1", "b2", "b3"], out
        stamp = time.strftime("%Y-%m-%d#%H:%M:%S", time.localtime(t1 / 1000)) + f":{t1 % 1000:03d}"
        out = ok("consumeMessage", "-n", ns.address, "-b", "broker-a", "-t", TOPIC, "-s", stamp, "-i", "1")
        assert bodies(out, r"body=(\S+)") == ["b1", "b3", "c1"], out
        assert "before now" in usage("consumeMessage", "-b", addr, "-t", TOPIC, "-s", str(t2 + 3_600_000))
        assert "less than or equal" in usage("consumeMessage", "-b", addr, "-t", TOPIC, "-s", str(t2), "-e", str(t1))
        # a group that consumed the topic, for topicList -c
        ok("consumeMessage", "-b", addr, "-t", TOPIC, "-g", GROUP)

        # queryMsgById -s true resends (a new message, same body); -s false alone does nothing; -u ignored
        def stored_count() -> int:
            with b.client() as c:
                return sum(q["maxOffset"] for q in c.topic_status(TOPIC)["queues"])
        before = stored_count()
        out = ok("queryMsgById", "-b", addr, "-i", mids[0], "-s", "true", "-u", "unitA")
        assert f"prepare resend msg. originalMsgId={mids[0]}" in out and "sendStatus=SEND_OK" in out, out
        assert ok("queryMsgById", "-b", addr, "-i", mids[0], "-s", "false") == ""
        assert stored_count() == before + 1
        out = ok("consumeMessage", "-b", addr, "-t", TOPIC, "-s", str(t2))
        assert bodies(out, r"body=(\S+)") == ["b0", "c0", "c1"], out

        with ConsumerThread(port, "127.0.0.1@flags") as consumer, ThreadPoolExecutor(2) as pool:
            wait_until(lambda: "broker-a" in ours("clusterList", "-n", ns.address).stdout, 20, "registered")
            jobs = {}
            if HAVE_APACHE:
                jobs = {
                    "consume": pool.submit(apache, home, "consumeMessage", "-n", ns.address, "-t", TOPIC,
                                           "-s", str(min(stored)), "-e", str(max(stored))),
                    "direct": pool.submit(apache, home, "queryMsgById", "-n", ns.address, "-i", mids[0],
                                          "-g", "CallGroup", "-d", consumer.client_id),
                }
            out = ok("queryMsgById", "-b", addr, "-i", mids[0], "-g", "CallGroup", "-d", consumer.client_id)
            assert out.strip() == DIRECT_LINE, out
            pushed = [c for c in consumer.seen if c.code == RC.CONSUME_MESSAGE_DIRECTLY]
            assert pushed and pushed[-1].ext_fields["msgId"] == mids[0], consumer.seen
            assert "go together" in usage("queryMsgById", "-b", addr, "-i", mids[0], "-g", "CallGroup")
            ours_topics = ok("topicList", "-n", ns.address, "-c")
            assert re.search(rf"^DefaultCluster\s+{TOPIC}\s+{GROUP}\s*$", ours_topics, re.M), ours_topics
            assert re.search(rf"^DefaultCluster\s+{ORDERED}\s*$", ours_topics, re.M), ours_topics
            assert re.search(rf"^DefaultCluster\s+{TOPIC}\s+{GROUP}\s*$", ok("topicList", "-b", addr, "-c"), re.M)
            got = {k: f.result() for k, f in jobs.items()}  # their gets done: the -m numbers hold still
            # clusterList -m: Apache's table and numbers (no put or get between the two)
            more = ok("clusterList", "-n", ns.address, "-m")
            lines = more.splitlines()
            assert lines[0].split() == ["#Cluster", "Name", "#Broker", "Name", "#InTotalYest", "#OutTotalYest",
                                        "#InTotalToday", "#OutTotalToday"], more
            row = lines[1].split()
            # the puts and gets of this test are today's, or yesterday's when the test ran across midnight (the
            # broker rolls "today" into "yesterday" then; a run at 23:59 failed with InTotalToday 0, Yest 9)
            puts, gets = int(row[2]) + int(row[4]), int(row[3]) + int(row[5])
            assert row[:2] == ["DefaultCluster", "broker-a"] and puts >= 9 and gets > 0, more
            assert ok("clusterList", "-b", addr, "-m") == more
            if HAVE_APACHE:
                jobs = {"topics": pool.submit(apache, home, "topicList", "-n", ns.address, "-c"),
                        "more": pool.submit(apache, home, "clusterList", "-n", ns.address, "-m")}
                got.update({k: f.result() for k, f in jobs.items()})
                if not got["more"].startswith("#Cluster Name"):  # a JVM's first request to the name server can fail under load
                    got["more"] = apache(home, "clusterList", "-n", ns.address, "-m")
                assert got["more"].splitlines()[:2] == lines[:2], got["more"] + more
                assert DIRECT_LINE in got["direct"], got["direct"]
                # Apache prints each queue up to the offset SEARCH_OFFSET_BY_TIMESTAMP(-e) names inclusive,
                # i.e. also a message stored after -e; ours stops at -e: the same messages up to -e
                theirs_msgs = re.findall(r"storeTimestamp=(\d+),.*? BODY: (\S+)", got["consume"])
                assert theirs_msgs, got["consume"]
                assert sorted(m for ts, m in theirs_msgs if int(ts) <= max(stored)) == ["b0", "b1", "b2", "b3"]
                assert all(m.startswith(("c", "b0")) for ts, m in theirs_msgs if int(ts) > max(stored)), got["consume"]
                theirs = sorted(ln.rstrip() for ln in got["topics"].splitlines() if ln.strip())
                assert sorted(ln.rstrip() for ln in ours_topics.splitlines() if ln.strip()) == theirs, \
                    ours_topics + "\n---\n" + got["topics"]

        # -i repeats (--count bounds it); Ctrl-C ends it with 130 and no traceback
        out = ok("clusterList", "-b", addr, "-m", "-i", "0", "--count", "3")
        assert out.count("#InTotalYest") == 3, out
        assert "--count needs -i" in usage("clusterList", "-b", addr, "--count", "2")
        p = subprocess.Popen([sys.executable, "-m", "broker.cli.mqadmin", "clusterList", "-b", addr, "-i", "1"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(REPO))
        try:
            assert p.stdout is not None
            first = p.stdout.readline()
            assert first.startswith("#Cluster"), first
            p.send_signal(signal.SIGINT)
            rest, err = p.communicate(timeout=15)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        assert p.returncode == 130 and "Traceback" not in err, err
    finally:
        kill_all([b])
        ns.kill9()
