"""Apache's mqadmin 4.9.8 and ours against our brokers (issue 25.3, 25.6, 24.8 mqadmin part).

Before: in DLedger mode ``earliestMessageTimeStamp`` was -1 (the commitlog's min offset is an
entry offset, not a record's), so Apache's ``clusterList`` showed ``#Hour 498819.07``;
``getBrokerConfig`` said ``brokerRole=ASYNC_MASTER brokerId=0`` on every member; ``brokerStatus``
lacked Apache's StoreStatsService keys; our mqadmin had no consumerProgress /
consumerConnection / getBrokerConfig / statsAll and ``sendMessage -b follower`` answered
NOT_MASTER (and used only the first ``-b`` address).
"""
from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tools.procs import free_port
from broker.remoting.client import RemotingClient
from tools.broker_confs import master_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import REPO, wait_until
from tests.broker.test_dledger_group import IDS, DLedgerGroup
from tools.nodes import NamesrvProc
from tests.remoting import mqadmin_jvm
from tests.remoting import py_zygote
from tests.remoting.py_zygote import py_zygotes  # noqa: F401 - autouse: the zygote stops after the module
from tests.remoting.mqadmin_jvm import mqadmin_jvms  # noqa: F401 - autouse: the JVMs stop after each test

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(240)]

APACHE = Path(os.environ.get("APACHE_ROCKETMQ", REPO.parent / "shared" / "apache-rocketmq-4.9.8"))
HAVE_APACHE = (APACHE / "bin" / "mqadmin").exists() and shutil.which("java") is not None
needs_apache = pytest.mark.skipif(not HAVE_APACHE, reason="needs Apache RocketMQ 4.9.8 (APACHE_ROCKETMQ) and java")

# every key Apache 4.9.8's brokerStatus printed for a fresh broker of its own (commitLogDiskRatio_<path> aside)
APACHE_STATUS_KEYS = frozenset("""
EndTransactionQueueSize EndTransactionThreadPoolQueueCapacity bootTimestamp brokerVersion brokerVersionDesc
commitLogDirCapacity commitLogDiskRatio commitLogMaxOffset commitLogMinOffset consumeQueueDiskRatio
dispatchBehindBytes dispatchMaxBuffer earliestMessageTimeStamp getFoundTps getMessageEntireTimeMax getMissTps
getTotalTps getTransferedTps msgGetTotalTodayMorning msgGetTotalTodayNow msgGetTotalYesterdayMorning
msgPutTotalTodayMorning msgPutTotalTodayNow msgPutTotalYesterdayMorning pageCacheLockTimeMills
pullThreadPoolQueueCapacity pullThreadPoolQueueHeadWaitTimeMills pullThreadPoolQueueSize putLatency99
putLatency999 putMessageAverageSize putMessageDistributeTime putMessageEntireTimeMax putMessageFailedTimes
putMessageSizeTotal putMessageTimesTotal putTps queryThreadPoolQueueCapacity queryThreadPoolQueueHeadWaitTimeMills
queryThreadPoolQueueSize remainHowManyDataToFlush remainTransientStoreBufferNumbs runtime
sendThreadPoolQueueCapacity sendThreadPoolQueueHeadWaitTimeMills sendThreadPoolQueueSize
startAcceptSendRequestTimeStamp
""".split())


def apache(home: Path, *args: str) -> str:
    """``bin/mqadmin ARGS`` (stdout then stderr), run in the test's one warm JVM (tests/remoting/mqadmin_jvm.py)."""
    return mqadmin_jvm.run(home, *args, rocketmq_home=APACHE, timeout=90)


def ours(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """``python -m broker.cli.mqadmin ARGS`` (cwd REPO, captured): a fresh process forked from a warm
    interpreter (tests/remoting/py_zygote.py), the same result as subprocess.run gave."""
    return py_zygote.run("broker.cli.mqadmin", *args, timeout=timeout)


def status_table(text: str) -> dict[str, str]:
    """``brokerStatus`` lines ``key<pad>: value`` (Apache's ``%-32s: %s``)."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(\S+)\s*: (.*)$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def config_table(text: str) -> dict[str, str]:
    """``getBrokerConfig`` lines ``key<pad>=  value``."""
    return {m.group(1): m.group(2) for m in re.finditer(r"^(\S+)\s*=  (.*)$", text, re.M)}


@needs_apache
def test_dledger_earliest_time_live_role_and_sends_that_follow_the_leader(tmp_path: Path) -> None:
    mqadmin_jvm.start(tmp_path / "java")  # boots while the group starts
    ns = NamesrvProc(tmp_path).start()
    g = DLedgerGroup(tmp_path, namesrvAddr=ns.address)
    try:
        g.start()
        leader = g.wait_master(60)
        followers = [n for n in IDS if n != leader]
        t0 = int(time.time() * 1000)
        # 24.8: our sendMessage to a follower only, and with a dead first address, lands on the leader
        dead = f"127.0.0.1:{free_port()}"
        for target in (g.address(followers[0]), f"{dead},{g.address(followers[1])}"):
            r = ours("sendMessage", "-b", target, "-t", "TopicTest", "-p", "hello", "--timeout", "15")
            assert r.returncode == 0 and "SEND_OK" in r.stdout, r.stdout + r.stderr
            assert g.address(leader) in r.stdout, r.stdout
        wait_until(lambda: all((g.status(n) or {}).get("commitLog", {}).get("maxOffset", 0) > 0 for n in IDS),
                   20.0, "replicated")

        home = tmp_path / "java"
        st = status_table(apache(home, "brokerStatus", "-n", ns.address, "-b", g.address(leader)))
        assert t0 - 2000 <= int(st["earliestMessageTimeStamp"]) <= int(time.time() * 1000), st
        for n in followers:  # a follower's store holds the same first entry
            f = status_table(ours("brokerStatus", "-b", g.address(n)).stdout)
            assert int(f["earliestMessageTimeStamp"]) == int(st["earliestMessageTimeStamp"]), f

        roles = {}
        for n in IDS:
            cfg = config_table(apache(home, "getBrokerConfig", "-n", ns.address, "-b", g.address(n)))
            roles[n] = (cfg.get("brokerRole"), cfg.get("brokerId"))
            assert config_table(ours("getBrokerConfig", "-b", g.address(n)).stdout)["brokerRole"] == roles[n][0]
        assert roles[leader] == ("SYNC_MASTER", "0"), roles
        for n in followers:
            assert roles[n][0] == "SLAVE" and roles[n][1] not in ("0", None), roles

        def hour_column() -> float | None:
            for line in apache(home, "clusterList", "-n", ns.address).splitlines():
                if g.address(leader) in line:
                    return float(line.split()[-2])  # ... #PCWait(ms) #Hour #SPACE
            return None
        wait_until(lambda: hour_column() is not None, 30.0, "the leader registered with the name server")
        hours = hour_column()
        assert hours is not None and 0 <= hours < 1, hours

        # -c: the master, then each slave, with Apache's headers, once all three are registered
        wait_until(lambda: all(g.address(n) in ours("clusterList", "-n", ns.address).stdout for n in IDS), 30.0,
                   "all three registered")
        cluster = "RaftCluster"
        heads = [ln for ln in apache(home, "getBrokerConfig", "-n", ns.address, "-c", cluster).splitlines()
                 if ln.startswith("====")]
        assert len(heads) == 3 and f"Master: {g.address(leader)}" in heads[0], heads
        ours_cfg = ours("getBrokerConfig", "-n", ns.address, "-c", cluster).stdout
        assert [ln for ln in ours_cfg.splitlines() if ln.startswith("====")] == heads, ours_cfg[:2000]
    finally:
        kill_all(g.procs.values())
        ns.kill9()


@needs_apache
def test_broker_status_has_apache_keys_with_measured_put_stats(tmp_path: Path) -> None:
    conf, port = master_conf(tmp_path, role="ASYNC_MASTER", autoCreateTopicEnable="true")
    b = BrokerProc(conf, port, "m", tmp_path)
    try:
        mqadmin_jvm.start(tmp_path / "java")  # boots while the broker starts
        b.start()
        with b.client() as c:
            for i in range(7):
                c.send("StatsTopic", "x" * (10 + i))
        st = status_table(apache(tmp_path / "java", "brokerStatus", "-n", f"127.0.0.1:{free_port()}", "-b", b.address))
        missing = APACHE_STATUS_KEYS - set(st)
        assert not missing, (missing, st)
        assert st["brokerVersion"] == "409" and st["putMessageTimesTotal"] == "7"
        assert st["putMessageSizeTotal"] == str(sum(10 + i for i in range(7)))
        assert float(st["putMessageAverageSize"]) == pytest.approx(sum(10 + i for i in range(7)) / 7)
        buckets = re.findall(r"\[[^\]]+\]:(\d+)", st["putMessageDistributeTime"])
        assert len(buckets) == 13 and sum(map(int, buckets)) == 7, st["putMessageDistributeTime"]
        assert float(st["putLatency99"]) >= 1.0 and float(st["putLatency999"]) >= float(st["putLatency99"])
        assert int(st["putMessageEntireTimeMax"]) >= 0 and st["putMessageFailedTimes"] == "0"
        assert re.fullmatch(r"Total : [\d.]+ [KMGTPE]iB, Free : [\d.]+ [KMGTPE]iB\.", st["commitLogDirCapacity"])
        assert st["remainHowManyDataToFlush"].endswith("B")
        assert status_table(ours("brokerStatus", "-b", b.address).stdout).keys() == st.keys()
    finally:
        kill_all([b])


async def _hold_consumer(port: int, group: str, topic: str, ready: asyncio.Event, done: asyncio.Event) -> None:
    cl = await RemotingClient.connect("127.0.0.1", port)
    try:
        hb = {"clientID": "127.0.0.1@4242", "producerDataSet": [], "consumerDataSet": [{
            "groupName": group, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
            "subscriptionDataSet": [{"topic": topic, "subString": "*", "tagsSet": [], "codeSet": [], "subVersion": 1,
                                     "expressionType": "TAG", "classFilterMode": False}]}]}
        assert (await cl.request(34, {"language": "JAVA", "version": "409"}, json.dumps(hb).encode())).code == 0
        for q in range(2):
            assert (await cl.request(15, {"consumerGroup": group, "topic": topic, "queueId": q,
                                          "commitOffset": 1})).code == 0
        ready.set()
        await done.wait()
    finally:
        await cl.close()


@needs_apache
def test_our_consumer_commands_print_what_apache_prints(tmp_path: Path) -> None:
    ns = NamesrvProc(tmp_path).start()
    conf, port = master_conf(tmp_path, role="ASYNC_MASTER", autoCreateTopicEnable="true", namesrvAddr=ns.address)
    b = BrokerProc(conf, port, "m", tmp_path)
    home = tmp_path / "java"
    try:
        mqadmin_jvm.start(home)  # boots while the broker starts
        b.start()
        with b.client() as c:
            c.create_topic("ProgTopic", read_queue_nums=2, write_queue_nums=2)
            for i in range(6):
                c.send("ProgTopic", f"m{i}", queue_id=i % 2)

        async def run() -> dict[str, tuple[str, str]]:
            ready, done = asyncio.Event(), asyncio.Event()
            holder = asyncio.create_task(_hold_consumer(port, "ProgGroup", "ProgTopic", ready, done))
            await asyncio.wait_for(ready.wait(), 15)
            # the heartbeat created %RETRY%ProgGroup and was answered only after registering it (Apache's
            # order): a client's next route lookup finds it (a CI run raced here: consumerProgress failed)
            host, nport = ns.address.split(":")
            route = await RemotingClient.connect(host, int(nport))
            try:
                got = await route.request(105, {"topic": "%RETRY%ProgGroup"})
                assert got.code == 0, (got.code, got.remark)
            finally:
                await route.close()
            out = {}
            try:
                for cmd in (["consumerProgress", "-g", "ProgGroup"], ["consumerConnection", "-g", "ProgGroup"],
                            ["statsAll", "-t", "ProgTopic"], ["consumerProgress"]):
                    a = await asyncio.to_thread(apache, home, cmd[0], "-n", ns.address, *cmd[1:])
                    o = await asyncio.to_thread(ours, cmd[0], "-n", ns.address, *cmd[1:])
                    assert o.returncode == 0, o.stderr
                    out[" ".join(cmd[:2])] = (a, o.stdout)
            finally:
                done.set()
                await holder
            return out

        wait_until(lambda: "ProgTopic" in apache(home, "topicList", "-n", ns.address), 30.0, "route registered")
        out = asyncio.run(run())

        def lines(text: str) -> list[str]:
            return [ln.rstrip() for ln in text.splitlines() if ln.strip()]

        # the same lines, character for character (widths, headers, version names, times)
        for key in ("consumerProgress -g", "consumerConnection -g", "consumerProgress"):
            a, o = out[key]
            assert any(ln.startswith(("ProgTopic", "ProgGroup", "127.0.0.1@4242")) for ln in lines(a)), f"{key}: {a}"  # a string: shown whole, never cut
            assert lines(a) == lines(o), (key, a, o)
        cl = ours("clusterList", "-n", ns.address)  # Apache's flag: every broker the name server lists
        assert cl.returncode == 0 and b.address in cl.stdout and "ASYNC_MASTER" in cl.stdout, cl.stdout + cl.stderr
        a, o = out["statsAll -t"]  # #InTPS is a one-minute rate: the runs are seconds apart
        assert [ln.split()[:3] for ln in lines(a) if ln.startswith("ProgTopic")] == \
               [ln.split()[:3] for ln in lines(o) if ln.startswith("ProgTopic")] != [], (a, o)
    finally:
        kill_all([b])
        ns.kill9()
