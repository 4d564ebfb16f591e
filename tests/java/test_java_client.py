"""Apache RocketMQ 4.9.8's Java client against our brokers, both modes (issue 25).

Rules: ``tests/java/ClientE2E.java`` is compiled with ``javac`` against the client jars of
``../shared/apache-rocketmq-4.9.8`` and run with its ``bin/jrun`` (the Debian jars it needs come
from its ``install-deps.sh``, which ``scripts/setup.sh`` runs). It finds the brokers through our
name server and sends every kind of message a 4.9.8 producer can (sync, async, oneway, batch,
ordered, delayed, transactional: commit, rollback, check-back), then consumes with a push
consumer (tag filter, one message retried into the DLQ) and a lite pull consumer. Checked here,
for our classic SYNC_MASTER + SLAVE pair and our three-node DLedger group:
- every acknowledged TagA/TagB message is delivered, nothing else (no TagOrder, no rolled-back
  transaction), no send failed;
- the never-acknowledged message is delivered twice (``maxReconsumeTimes=1``), then lands in
  ``%DLQ%E2EGroup`` (read back through our HTTP API);
- the UNKNOW transaction is checked back and committed; the delayed message is stored on its
  topic at least its delay (1 s) after it was born; the ordered queue pulls in send order, and an
  orderly push consumer (``MessageListenerOrderly``, which consumes only queues the broker locked
  for it with LOCK_BATCH_MQ) consumes it in send order.
Then Apache's mqadmin asks our broker about a live Java consumer (``ConsumerHold.java``):
``consumerStatus -i`` prints the running info the broker fetched from the client, and
``queryMsgById -g -d`` has the broker hand a stored message to that client, which consumes it
(CR_SUCCESS). Skipped only where Apache's tools or java/javac are absent (as test_mqadmin_compat).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tools.procs import wait_until
from tools.broker_confs import master_conf, slave_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import REPO
from tests.broker.test_dledger_group import IDS, DLedgerGroup
from tests.java.lines import ProcessLines
from tools.nodes import NamesrvProc
from tests.remoting import mqadmin_jvm
from tests.remoting.mqadmin_jvm import mqadmin_jvms  # noqa: F401 - autouse: the JVMs stop after each test
from tests.remoting.test_mqadmin_compat import apache

APACHE = Path(os.environ.get("APACHE_ROCKETMQ", REPO.parent / "shared" / "apache-rocketmq-4.9.8"))
HAVE_JAVA = (APACHE / "bin" / "jrun").exists() and shutil.which("java") is not None and shutil.which("javac") is not None
pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(300),
              pytest.mark.skipif(not HAVE_JAVA, reason="needs Apache RocketMQ 4.9.8 (APACHE_ROCKETMQ), java and javac")]

FAST = {  # retries and check-backs within the test's time: every delay level 1 s, check-back after 1 s
    "messageDelayLevel": " ".join(["1s"] * 18), "transactionTimeOut": 1000, "transactionCheckInterval": 1000,
    "autoCreateTopicEnable": "true", "autoCreateSubscriptionGroup": "true",
}
TOPIC = "JavaE2ETopic"


@pytest.fixture(scope="module")
def client_classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("java-classes")
    cp = ":".join(str(j) for j in sorted((APACHE / "lib").glob("*.jar")))
    r = subprocess.run(["javac", "-d", str(out), "-cp", cp, str(REPO / "tests" / "java" / "ClientE2E.java"),
                        str(REPO / "tests" / "java" / "ConsumerHold.java")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return out


def run_client(classes: Path, home: Path, namesrv: str) -> dict[str, Any]:
    env = dict(os.environ, EXTRA_CP=str(classes), JAVA_OPT=f"-Xms64m -Xmx256m -Duser.home={home}")
    r = subprocess.run([str(APACHE / "bin" / "jrun"), "ClientE2E", namesrv, TOPIC], capture_output=True, text=True,
                       env=env, timeout=240)
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert r.returncode == 0 and lines, (r.returncode, r.stdout[-3000:], r.stderr[-3000:])
    return json.loads(lines[-1])


def check(seen: dict[str, Any]) -> None:
    print(json.dumps(seen))
    assert seen["errors"] == [], seen
    assert seen["missing"] == [] and seen["unexpected"] == [] and seen["wrongTag"] == [], seen
    assert seen["got"] == seen["wanted"] == 47, seen  # 20 sync - 1 never acked + 10 async + 5 oneway + 10 batch + delay + 2 tx
    assert seen["retried"] == 2, seen
    assert seen["txChecks"] >= 1, seen
    assert seen["delayMs"] >= 1000, seen
    assert seen["orderedPulled"] == seen["orderedSent"], seen
    assert seen["orderlyConsumed"] == seen["orderedSent"], seen  # needs LOCK_BATCH_MQ


HOLD_GROUP = "E2EHoldGroup"


def ask_about_a_live_consumer(classes: Path, home: Path, namesrv: str, b: BrokerProc) -> None:
    """Apache's mqadmin asks our broker about a live Java consumer: ``consumerStatus -i`` (the broker
    calls the client: GET_CONSUMER_RUNNING_INFO) and ``queryMsgById -g -d`` (CONSUME_MESSAGE_DIRECTLY:
    the broker hands the stored message to that client, which consumes it again)."""
    with b.client() as c:
        msg_id = c.send(TOPIC, "direct", keys=["direct-1"])["msgId"]
    mqadmin_jvm.start(home, APACHE)  # boots beside ConsumerHold
    env = dict(os.environ, EXTRA_CP=str(classes), JAVA_OPT=f"-Xms64m -Xmx128m -Duser.home={home}")
    p = subprocess.Popen([str(APACHE / "bin" / "jrun"), "ConsumerHold", namesrv, TOPIC, HOLD_GROUP], env=env,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert p.stdout is not None
    lines = ProcessLines(p.stdout)

    def line_with(word: str, timeout: float) -> str:
        ln = lines.wait_for(lambda ln: word in ln, timeout)
        if ln is None:
            raise AssertionError(f"no {word!r} from ConsumerHold in {timeout} s: {lines.seen[-20:]}")
        return ln

    try:
        client_id = json.loads(line_with('"clientId"', 60))["clientId"]
        line_with('"consumed":"direct-1"', 60)  # it consumes, so its heartbeat reached the broker
        status = apache(home, "consumerStatus", "-n", namesrv, "-g", HOLD_GROUP, "-i", client_id)
        assert "#Consumer Subscription#" in status and TOPIC in status and "CONSUME_FROM_FIRST_OFFSET" in status, status
        pushed = apache(home, "queryMsgById", "-n", namesrv, "-i", msg_id, "-g", HOLD_GROUP, "-d", client_id)
        assert "consumeResult=CR_SUCCESS" in pushed, pushed
        line_with('"consumed":"direct-1"', 30)  # consumed again, directly
    finally:
        if p.stdin is not None:
            p.stdin.close()
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


def dead_letters(b: BrokerProc) -> list[str]:
    with b.client() as c:
        msgs = c.pull("%DLQ%E2EGroup", 0, 0, 8).get("messages", [])
    return [m.get("keys") or m.get("properties", {}).get("KEYS") for m in msgs]


def test_java_client_against_the_classic_pair(tmp_path: Path, client_classes: Path) -> None:
    ns = NamesrvProc(tmp_path).start()
    mconf, mport = master_conf(tmp_path, role="SYNC_MASTER", namesrvAddr=ns.address, **FAST)
    sconf, sport = slave_conf(tmp_path, mport, namesrvAddr=ns.address, **FAST)
    master, slave = BrokerProc(mconf, mport, "m", tmp_path), BrokerProc(sconf, sport, "s", tmp_path)
    try:
        master.start()
        slave.start()
        check(run_client(client_classes, tmp_path / "java", ns.address))
        assert wait_until(lambda: "sync-3" in dead_letters(master) or None, 20, "sync-3 in the DLQ")
        ask_about_a_live_consumer(client_classes, tmp_path / "java", ns.address, master)
    finally:
        kill_all([slave, master])
        ns.kill9()


def test_java_client_against_the_dledger_group(tmp_path: Path, client_classes: Path) -> None:
    ns = NamesrvProc(tmp_path).start()
    g = DLedgerGroup(tmp_path, namesrvAddr=ns.address, **FAST)
    try:
        g.start()
        leader = g.wait_master(60)
        check(run_client(client_classes, tmp_path / "java", ns.address))
        assert wait_until(lambda: "sync-3" in dead_letters(g.procs[leader]) or None, 20, "sync-3 in the DLQ")
        ask_about_a_live_consumer(client_classes, tmp_path / "java", ns.address, g.procs[leader])
        assert len(IDS) == 3
    finally:
        kill_all(g.procs.values())
        ns.kill9()
