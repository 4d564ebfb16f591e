"""Apache's mqadmin 4.9.8 against both our modes: the sub-commands the survey found missing or
different (docs/mqadmin-survey.md, issue 25).

Before: our broker answered "request type N not supported" to producerConnection (204), exportMetrics
(305; exportConfigs died on config keys it reads that we lacked),
producer (328), brokerConsumeStats (317), updateBrokerConfig (25), queryCq (321), cleanExpiredCQ
(306), deleteExpiredCommitLog (329), cleanUnusedTopic (316) and the ACL commands (50-53); our
name server to wipeWritePerm (205), addWritePerm (327), getNamesrvConfig (319) and
updateNamesrvConfig (318); our
mqadmin refused Apache's ``sendMessage -n NAMESRV -b BROKERNAME``.

Rules: real processes (our brokers and name server, Apache's mqadmin from ../shared); a test's
Apache commands run one after the other in one warm JVM (tests/remoting/mqadmin_jvm.py: a JVM
start per command was most of these tests' time); every process is stopped in ``finally``, the
JVMs after each test.
"""
from __future__ import annotations

import asyncio
import json
import re
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

import pytest

from broker.remoting.acl import signer
from broker.remoting.client import RemotingClient
from tools.broker_confs import master_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import wait_until
from tests.broker.test_dledger_group import IDS, DLedgerGroup
from tests.remoting import mqadmin_jvm
from tests.remoting.mqadmin_jvm import mqadmin_jvms  # noqa: F401 - autouse: the JVMs stop after each test
from tests.remoting.py_zygote import py_zygotes  # noqa: F401 - autouse: the zygote stops after the module
from tools.nodes import NamesrvProc
from tests.remoting.test_mqadmin_compat import APACHE, HAVE_APACHE, apache, config_table, ours

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(300),
              pytest.mark.skipif(not HAVE_APACHE, reason="needs Apache RocketMQ 4.9.8 (APACHE_ROCKETMQ) and java")]

TOPIC, GROUP, PRODUCER, CLIENT = "SvTopic", "SvGroup", "SvProducer", "127.0.0.1@4242"


def batch(home: Path, cmds: dict[str, list[str]]) -> dict[str, str]:
    """Apache's mqadmin for each named command line, in order, in the test's warm JVM."""
    return {k: apache(home, *v) for k, v in cmds.items()}


class Client:
    """A consumer of GROUP on TOPIC and a producer of PRODUCER, as one heartbeating connection."""

    def __init__(self, addr: str, committed: dict[int, int]) -> None:
        self.addr, self.committed = addr, committed
        self.ready, self.stop = threading.Event(), threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Client":
        self.thread.start()
        assert self.ready.wait(20), self.error
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.thread.join(10)

    def _run(self) -> None:
        try:
            asyncio.run(self._hold())
        except BaseException as exc:  # noqa: BLE001 - reported by __enter__
            self.error = exc
            self.ready.set()

    async def _hold(self) -> None:
        host, port = self.addr.split(":")
        cl = await RemotingClient.connect(host, int(port))
        try:
            hb = {"clientID": CLIENT, "producerDataSet": [{"groupName": PRODUCER}], "consumerDataSet": [{
                "groupName": GROUP, "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
                "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET", "unitMode": False,
                "subscriptionDataSet": [{"topic": TOPIC, "subString": "*", "tagsSet": [], "codeSet": [],
                                         "subVersion": 1, "expressionType": "TAG", "classFilterMode": False}]}]}
            r = await cl.request(34, {"language": "JAVA", "version": "409"}, json.dumps(hb).encode())
            assert r.code == 0, r.remark
            for q, off in self.committed.items():
                r = await cl.request(15, {"consumerGroup": GROUP, "topic": TOPIC, "queueId": q, "commitOffset": off})
                assert r.code == 0, r.remark
            self.ready.set()
            while not self.stop.is_set():
                await asyncio.sleep(0.1)
        finally:
            await cl.close()


def lines_of(text: str, start: str) -> list[list[str]]:
    return [ln.split() for ln in text.splitlines() if ln.startswith(start)]


def common_checks(out: dict[str, str], addr: str, name: str, ns: str) -> None:
    """What both modes must print for the commands of :func:`common_commands`."""
    conn = lines_of(out["producerConnection"], "0001")  # #index #ClientId #ClientAddr #Language #Version
    assert len(conn) == 1 and conn[0][1] == CLIENT and len(conn[0]) == 5, out["producerConnection"]
    rows = lines_of(out["brokerConsumeStats"], TOPIC)
    # #Topic #Group #Broker Name #QID #Broker Offset #Consumer Offset #Diff #LastTime; Apache prints no row
    # whose lastTimestamp is 0 (queue 1: consumer offset 0), but counts its diff in the total
    assert [(r[1], r[2], r[3], r[4], r[5], r[6]) for r in rows] == [(GROUP, name, "0", "2", "1", "1")], \
        out["brokerConsumeStats"]
    assert "Diff Total: 2" in out["brokerConsumeStats"], out["brokerConsumeStats"]
    assert f"update broker config success, {addr}" in out["updateBrokerConfig"], out["updateBrokerConfig"]
    assert "brokerName: read once at start" in out["updateBrokerName"], out["updateBrokerName"]
    assert f"update broker config success, {addr}" in out["updateBrokerPermission"], out["updateBrokerPermission"]
    assert re.search(r"max: 2, min: 0", out["queryCq"]) and out["queryCq"].count("physicOffset=") == 2, out["queryCq"]
    for key in ("cleanExpiredCQ", "deleteExpiredCommitLog", "cleanUnusedTopic"):
        assert out[key].strip().splitlines()[-1] == "success", (key, out[key])
    assert re.search(rf"wipe write perm of broker\[{name}\] in name server\[{ns}\] OK, [1-9]\d*", out["wipeWritePerm"]), \
        out["wipeWritePerm"]
    assert "listenPort" in out["getNamesrvConfig"] and f"============{ns}============" in out["getNamesrvConfig"]
    for what in ("configs", "metrics"):  # exportConfigs needs Apache's config keys, exportMetrics request 305
        key = f"export{what.capitalize()}"
        assert re.search(rf"export \S+/{what}\.json success", out[key]), (key, out[key])


def common_commands(ns: str, addr: str, name: str, cluster: str, export: Path) -> dict[str, list[str]]:
    n = ["-n", ns]
    return {
        "exportConfigs": [*n, "-c", cluster, "-f", str(export)],
        "exportMetrics": [*n, "-c", cluster, "-f", str(export)],
        "producerConnection": [*n, "-g", PRODUCER, "-t", TOPIC],
        "brokerConsumeStats": [*n, "-b", addr],
        "updateBrokerConfig": [*n, "-b", addr, "-k", "flushIntervalCommitLog", "-v", "777"],
        "updateBrokerName": ["updateBrokerConfig", *n, "-b", addr, "-k", "brokerName", "-v", "other"],
        # 6 (read and write) is the default: it changes nothing here (test_broker_permission drains a broker)
        "updateBrokerPermission": ["updateBrokerConfig", *n, "-b", addr, "-k", "brokerPermission", "-v", "6"],
        "queryCq": [*n, "-t", TOPIC, "-q", "0", "-i", "0", "-c", "5", "-b", addr],
        "cleanExpiredCQ": [*n, "-b", addr],
        "deleteExpiredCommitLog": [*n, "-b", addr],
        "cleanUnusedTopic": [*n, "-b", addr],
        "wipeWritePerm": [*n, "-b", name],
        "getNamesrvConfig": n,
    }


def run_commands(home: Path, cmds: dict[str, list[str]]) -> dict[str, str]:
    """``cmds`` maps a key to its arguments; a key that is not a sub-command name gives its own first."""
    return batch(home, {k: ([k, *v] if not v or v[0].startswith("-") else v) for k, v in cmds.items()})


def perm_of(home: Path, ns: str) -> int:
    route = apache(home, "topicRoute", "-n", ns, "-t", TOPIC)
    m = re.search(r'"perm":(\d+)', route)
    return int(m.group(1)) if m else -1


def after_checks(home: Path, ns: str, addr: str, name: str) -> None:
    """getBrokerConfig shows the update; the route's perm follows wipe/addWritePerm; updateNamesrvConfig."""
    assert perm_of(home, ns) == 4
    out = run_commands(home, {"getBrokerConfig": ["-n", ns, "-b", addr], "addWritePerm": ["-n", ns, "-b", name],
                              "updateNamesrvConfig": ["-n", ns, "-k", "productEnvName", "-v", "survey"]})
    assert config_table(out["getBrokerConfig"]).get("flushIntervalCommitLog") == "777", out["getBrokerConfig"][:3000]
    assert re.search(rf"add write perm of broker\[{name}\] in name server\[{ns}\] OK, [1-9]", out["addWritePerm"])
    assert f"update name server config success![{ns}]" in out["updateNamesrvConfig"], out["updateNamesrvConfig"]
    assert perm_of(home, ns) == 6
    assert re.search(r"productEnvName\s*=  survey", apache(home, "getNamesrvConfig", "-n", ns))


def send_by_name(ns: str, name: str, cluster: str, want_addr: str) -> None:
    """Our mqadmin takes Apache's ``-n NAMESRV -b BROKERNAME`` (and still an address), and Apache's flags."""
    r = ours("sendMessage", "-n", ns, "-b", name, "-t", TOPIC, "-p", "by-name", "--timeout", "15")
    assert r.returncode == 0 and "SEND_OK" in r.stdout and want_addr in r.stdout, r.stdout + r.stderr
    r = ours("sendMessage", "-n", ns, "-b", "no-such-broker", "-t", TOPIC, "-p", "x")
    assert r.returncode == 2 and "no-such-broker" in r.stderr, r.stdout + r.stderr
    # Apache's long flag names and -n forms on the other commands our mqadmin has
    for value, column in (("true", True), ("false", False)):  # Apache's -s takes a value
        r = ours("consumerProgress", "-n", ns, "-g", GROUP, "-s", value)
        assert r.returncode == 0 and ("#Client IP" in r.stdout) == column, r.stdout + r.stderr
    r = ours("queryMsgByOffset", "-n", ns, "-b", name, "--topic", TOPIC, "--queueId", "0", "--offset", "0")
    assert r.returncode == 0 and "Queue Offset:        0" in r.stdout, r.stdout + r.stderr
    r = ours("updateTopic", "-n", ns, "--clusterName", cluster, "--topic", "SvFlags", "--readQueueNums", "3",
             "--writeQueueNums", "3", "--perm", "6")
    assert r.returncode == 0 and f"create topic to {want_addr} success." in r.stdout, r.stdout + r.stderr
    r = ours("topicStatus", "-n", ns, "--topic", TOPIC)
    assert r.returncode == 0 and len([ln for ln in r.stdout.splitlines() if ln.startswith(TOPIC)]) == 2, r.stdout
    r = ours("consumeMessage", "-n", ns, "--topic", TOPIC, "--queueId", "1", "--MessageNumber", "1",
             "--consumerGroup", "SvFlagsGroup")
    assert r.returncode == 0 and "consumed 1 message(s)" in r.stdout, r.stdout + r.stderr


def fill(c: Any) -> None:
    c.create_topic(TOPIC, read_queue_nums=2, write_queue_nums=2)
    for i in range(3):
        c.send(TOPIC, f"m{i}", queue_id=i % 2)


def test_classic_group(tmp_path: Path) -> None:
    ns = NamesrvProc(tmp_path).start()
    conf, port = master_conf(tmp_path, role="ASYNC_MASTER", autoCreateTopicEnable="true", namesrvAddr=ns.address)
    b = BrokerProc(conf, port, "m", tmp_path)
    home = tmp_path / "java"
    try:
        mqadmin_jvm.start(home)  # boots while the broker starts
        b.start()
        with b.client() as c:
            fill(c)
        wait_until(lambda: TOPIC in ours("topicList", "-n", ns.address).stdout, 30.0, "route registered")
        with Client(b.address, {0: 1, 1: 0}):
            out = run_commands(home, common_commands(ns.address, b.address, "broker-a", "DefaultCluster",
                                                     tmp_path / "export"))
        common_checks(out, b.address, "broker-a", ns.address)
        after_checks(home, ns.address, b.address, "broker-a")
        send_by_name(ns.address, "broker-a", "DefaultCluster", b.address)
    finally:
        kill_all([b])
        ns.kill9()


def test_dledger_group(tmp_path: Path) -> None:
    ns = NamesrvProc(tmp_path).start()
    g = DLedgerGroup(tmp_path, namesrvAddr=ns.address)
    home = tmp_path / "java"
    try:
        mqadmin_jvm.start(home)  # boots while the group starts
        g.start()
        leader = g.wait_master(60)
        addr = g.address(leader)
        with g.procs[leader].client() as c:
            fill(c)
        wait_until(lambda: all(g.address(n) in ours("clusterList", "-n", ns.address).stdout for n in IDS), 30.0,
                   "all three registered")
        with Client(addr, {0: 1, 1: 0}):
            out = run_commands(home, common_commands(ns.address, addr, "RaftNode00", "RaftCluster", tmp_path / "export"))
        common_checks(out, addr, "RaftNode00", ns.address)
        after_checks(home, ns.address, addr, "RaftNode00")
        send_by_name(ns.address, "RaftNode00", "RaftCluster", addr)  # names every member: the send lands on the leader
    finally:
        kill_all(g.procs.values())
        ns.kill9()


ACL = """accounts:
  - accessKey: rocketmq2
    secretKey: 12345678-admin
    admin: true
  - accessKey: survey-plain
    secretKey: plain-secret-1
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
"""


def refused_to_non_admin(port: int) -> dict[int, int]:
    """Response codes of the admin-only new requests for a signed non-admin account."""
    async def run() -> dict[int, int]:
        cl = await RemotingClient.connect("127.0.0.1", port, rpc_hook=signer("survey-plain", "plain-secret-1"))
        try:
            out = {}
            for code, fields in ((50, {"accessKey": "survey-evil", "secretKey": "evil-secret-1", "admin": "true"}),
                                 (51, {"accessKey": "rocketmq2"}), (53, {"globalWhiteAddrs": "*"}), (317, {}),
                                 (328, {}), (306, {}), (316, {}), (329, {}),
                                 (314, {"srcGroup": "a", "destGroup": "b", "topic": "t"})):
                out[code] = (await cl.request(code, fields)).code
            return out
        finally:
            await cl.close()
    return asyncio.run(run())


def test_acl_commands_edit_the_broker_acl_file(tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    conf, port = master_conf(tmp_path, role="ASYNC_MASTER", aclEnable="true", plainAclFile=acl)
    b = BrokerProc(conf, port, "acl", tmp_path)
    home = tmp_path / "java-home"  # Apache's mqadmin signs with $ROCKETMQ_HOME/conf/tools.yml
    (home / "conf").mkdir(parents=True)
    shutil.copy(APACHE / "conf" / "logback_tools.xml", home / "conf")
    (home / "conf" / "tools.yml").write_text("accessKey: rocketmq2\nsecretKey: 12345678-admin\n")

    def signed(*args: str) -> str:  # ROCKETMQ_HOME=home and -Duser.home=home, as bin/mqadmin was given
        return mqadmin_jvm.run(home, *args, rocketmq_home=home, timeout=90)

    try:
        mqadmin_jvm.start(home, home)  # boots while the broker starts
        b.start()
        assert refused_to_non_admin(port) == dict.fromkeys((50, 51, 53, 317, 328, 306, 316, 329, 314), 16)
        n = ["-n", "127.0.0.1:1", "-b", b.address]
        with ThreadPoolExecutor(2) as pool:
            first: list[Callable[[], str]] = [
                lambda: signed("updateAclConfig", *n, "-a", "survey-user", "-s", "survey-secret",
                               "-t", "TopicA=PUB|SUB", "-u", "SUB"),
                lambda: signed("updateGlobalWhiteAddr", *n, "-g", "10.10.103.*")]
            created, white = [f.result() for f in [pool.submit(fn) for fn in first]]
        assert f"create or update plain access config to {b.address} success." in created, created
        assert f"update global white remote addresses to {b.address} success." in white, white
        text = acl.read_text()
        assert "survey-user" in text and "TopicA=PUB|SUB" in text and "10.10.103.*" in text, text
        version = signed("clusterAclConfigVersion", *n)
        assert re.search(rf"DefaultCluster\s+broker-a\s+{b.address}\s+{acl}\s+2\s", version), version
        deleted = signed("deleteAclConfig", *n, "-a", "survey-user")
        assert f"delete plain access config account from {b.address} success." in deleted, deleted
        assert "survey-user" not in acl.read_text()
    finally:
        kill_all([b])


def test_without_acl_the_acl_commands_say_why(tmp_path: Path) -> None:
    conf, port = master_conf(tmp_path, role="ASYNC_MASTER")
    b = BrokerProc(conf, port, "noacl", tmp_path)
    try:
        mqadmin_jvm.start(tmp_path / "java")  # boots while the broker starts
        b.start()
        t0 = time.monotonic()
        out = apache(tmp_path / "java", "updateAclConfig", "-n", "127.0.0.1:1", "-b", b.address, "-a", "survey-user",
                     "-s", "survey-secret")
        assert "aclEnable=false on this broker" in out, (out, time.monotonic() - t0)
    finally:
        kill_all([b])
