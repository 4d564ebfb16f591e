"""Issue 23, item 3: the name server's doors, attacked with real processes and sockets.

- Unsigned REGISTER_BROKER / UNREGISTER_BROKER / PUT_KV_CONFIG are refused and the route stands; a
  non-admin account cannot PUT_KV; the broker account registers; route reads stay open (or need a
  signature with ``namesrvSignedReads=true``).
- KV config is bounded: a 1,500 x 60 KB flood is refused with the limit named, and RSS stays bounded.
- With no bind flag mqnamesrv listens on 127.0.0.1; off loopback without ACL it refuses to start
  unless ``--allow-insecure``.
- A real broker of ours registers signed (innerAccessKey) and a client gets its route; a broker
  without credentials is refused and says why. Apache's mqadmin signs KV writes as we check them.
- The shipped sample conf starts ACL'd on loopback and its public secrets are refused elsewhere.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Optional

import pytest

from tools.procs import free_port, wait_until
from broker.remoting.acl import signer
from broker.remoting.client import RemotingClient
from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from tools.broker_confs import master_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import REPO
from tests.remoting import mqadmin_jvm
from tests.remoting.mqadmin_jvm import mqadmin_jvms  # noqa: F401 - autouse: the JVMs stop after each test
from tools.nodes import Child, NamesrvProc
from tests.security._listen_support import listening_hosts, proc_status_kb

BROKER_AK, BROKER_SK = "broker-account", "broker-secret-1234"
ADMIN_AK, ADMIN_SK = "ns-admin-account", "admin-secret-5678"
READER_AK, READER_SK = "reader-account", "reader-secret-9012"
ACL = f"""
accounts:
  - accessKey: {BROKER_AK}
    secretKey: {BROKER_SK}
    admin: false
  - accessKey: {ADMIN_AK}
    secretKey: {ADMIN_SK}
    admin: true
  - accessKey: {READER_AK}
    secretKey: {READER_SK}
    admin: false
    defaultTopicPerm: DENY
"""
TOPIC = "TopicRouted"


def start_acl_namesrv(tmp: Path, **props: Any) -> NamesrvProc:
    (tmp / "ns_acl.yml").write_text(ACL)
    conf = tmp / "namesrv.properties"
    lines = {"aclEnable": "true", "plainAclFile": str(tmp / "ns_acl.yml"), "namesrvBrokerAccessKeys": BROKER_AK,
             **props}
    conf.write_text("".join(f"{k}={v}\n" for k, v in lines.items()))
    ns = NamesrvProc(tmp)
    ns.args += ["-c", str(conf)]
    return ns.start()


def register_fields(addr: str, name: str = "broker-real") -> dict[str, Any]:
    return {"brokerAddr": addr, "brokerId": 0, "brokerName": name, "clusterName": "C",
            "haServerAddr": "127.0.0.1:2", "compressed": False, "bodyCrc32": 0}


def register_body(topic: str = TOPIC) -> bytes:
    tc = {"topicConfigTable": {topic: {"topicName": topic, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}},
          "dataVersion": {"counter": 1, "timestamp": int(time.time() * 1000)}}
    return json.dumps({"topicConfigSerializeWrapper": tc, "filterServerList": []}).encode()


async def call(port: int, code: int, fields: dict[str, Any], body: bytes = b"",
               creds: Optional[tuple[str, str]] = None) -> RemotingCommand:
    cl = await RemotingClient.connect("127.0.0.1", port, rpc_hook=signer(*creds) if creds else None)
    try:
        return await cl.request(code, fields, body, timeout=5.0)
    finally:
        await cl.close()


async def route_of(port: int, topic: str = TOPIC, creds: Optional[tuple[str, str]] = None) -> list[str]:
    r = await call(port, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, creds=creds)
    if r.code != R.SUCCESS:
        return []
    return sorted(a for bd in json.loads(r.body)["brokerDatas"] for a in bd["brokerAddrs"].values())


def route_addrs(port: int, topic: str = TOPIC) -> list[str]:
    return asyncio.run(route_of(port, topic))


async def register_held(port: int, addr: str) -> RemotingClient:
    """Register ``addr`` signed by the broker account on a connection that stays open (a name
    server drops a broker whose registering connection closes)."""
    cl = await RemotingClient.connect("127.0.0.1", port, rpc_hook=signer(BROKER_AK, BROKER_SK))
    r = await cl.request(RC.REGISTER_BROKER, register_fields(addr), register_body(), timeout=5.0)
    assert r.code == R.SUCCESS, r.remark  # the broker account registers
    return cl


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_unsigned_and_non_admin_writes_are_refused_and_the_route_stands(tmp_path: Path) -> None:
    ns = start_acl_namesrv(tmp_path)
    try:
        asyncio.run(_refusals(ns.port))
        assert BROKER_SK not in ns.log() and ADMIN_SK not in ns.log()
    finally:
        ns.kill9()


async def _refusals(port: int) -> None:
    real = "127.0.0.1:10911"
    held = await register_held(port, real)
    assert await route_of(port) == [real]  # route reads are open to unsigned clients

    evil = register_fields("127.0.0.1:6666")
    for creds in (None, (BROKER_AK, "wrong-secret-000"), ("nobody-account", "whatever-1234")):
        r = await call(port, RC.REGISTER_BROKER, evil, register_body(), creds)
        assert r.code == R.NO_PERMISSION, (creds, r.code, r.remark)
    r = await call(port, RC.REGISTER_BROKER, evil, register_body(), (READER_AK, READER_SK))
    assert r.code == R.NO_PERMISSION and "namesrvBrokerAccessKeys" in r.remark
    unreg = {k: v for k, v in register_fields(real).items()
             if k in ("brokerAddr", "brokerId", "brokerName", "clusterName")}
    r = await call(port, RC.UNREGISTER_BROKER, unreg)
    assert r.code == R.NO_PERMISSION
    assert await route_of(port) == [real]  # neither redirected nor removed

    kv = {"namespace": "ORDER_TOPIC_CONFIG", "key": TOPIC, "value": "evil-broker:1"}
    for creds in (None, (BROKER_AK, BROKER_SK), (READER_AK, READER_SK)):
        r = await call(port, RC.PUT_KV_CONFIG, kv, creds=creds)
        assert r.code == R.NO_PERMISSION, (creds, r.code, r.remark)
    r = await call(port, RC.DELETE_KV_CONFIG, {"namespace": "x", "key": "y"})
    assert r.code == R.NO_PERMISSION
    r = await call(port, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
    assert r.code == R.SUCCESS and "orderTopicConf" not in json.loads(r.body)
    r = await call(port, RC.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": TOPIC})
    assert r.code == R.QUERY_NOT_FOUND

    r = await call(port, RC.PUT_KV_CONFIG, {**kv, "value": "broker-real:4"}, creds=(ADMIN_AK, ADMIN_SK))
    assert r.code == R.SUCCESS, r.remark  # the admin account writes KV
    r = await call(port, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
    assert json.loads(r.body)["orderTopicConf"] == "broker-real:4"
    r = await call(port, RC.GET_BROKER_CLUSTER_INFO, {})
    assert r.code == R.SUCCESS and list(json.loads(r.body)["brokerAddrTable"]) == ["broker-real"]
    r = await call(port, RC.UNREGISTER_BROKER, unreg, creds=(BROKER_AK, BROKER_SK))
    assert r.code == R.SUCCESS and await route_of(port) == []  # the broker account unregisters
    await held.close()


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_signed_reads_when_the_acl_says_so(tmp_path: Path) -> None:
    ns = start_acl_namesrv(tmp_path, namesrvSignedReads="true")

    async def run() -> None:
        held = await register_held(ns.port, "127.0.0.1:10911")
        r = await call(ns.port, RC.GET_ROUTEINFO_BY_TOPIC, {"topic": TOPIC})
        assert r.code == R.NO_PERMISSION
        assert await route_of(ns.port, creds=(READER_AK, READER_SK)) == ["127.0.0.1:10911"]
        await held.close()

    try:
        asyncio.run(run())
    finally:
        ns.kill9()


def test_kv_store_limits_are_exact() -> None:
    from namesrv.kv_config import KvConfigStore, KvLimitError, KvLimits

    kv = KvConfigStore(KvLimits(max_entries=3, max_key_bytes=8, max_value_bytes=10, max_total_bytes=40))
    kv.put("ns", "a", "0123456789")
    with pytest.raises(KvLimitError, match="kvConfigMaxValueBytes=10"):
        kv.put("ns", "b", "0123456789x")
    with pytest.raises(KvLimitError, match="kvConfigMaxKeyBytes=8"):
        kv.put("ns", "k" * 9, "v")
    kv.put("ns", "b", "0123456789")
    with pytest.raises(KvLimitError, match="kvConfigMaxTotalBytes=40"):  # 13 + 13 held, 15 more > 40
        kv.put("ns", "ccc", "0123456789")
    kv.put("ns", "c", "v")
    with pytest.raises(KvLimitError, match="kvConfigMaxEntries=3"):
        kv.put("ns", "d", "v")
    kv.put("ns", "c", "w")  # replacing is no new entry
    kv.delete("ns", "a")
    kv.put("ns", "d", "v")
    assert (kv.entries, kv.bytes, kv.get("ns", "a")) == (3, 13 + 4 + 4, None)


@pytest.mark.multiprocess
@pytest.mark.timeout(120)
def test_kv_flood_is_refused_and_memory_bounded(tmp_path: Path) -> None:
    ns = start_acl_namesrv(tmp_path)
    try:
        assert ns.proc is not None
        before = proc_status_kb(ns.proc.pid, "VmRSS")

        async def flood(size: int, n: int) -> list[RemotingCommand]:
            cl = await RemotingClient.connect("127.0.0.1", ns.port, rpc_hook=signer(ADMIN_AK, ADMIN_SK))
            out: list[RemotingCommand] = []
            try:
                for start in range(0, n, 100):
                    out += await asyncio.gather(*(cl.request(RC.PUT_KV_CONFIG, {
                        "namespace": "flood", "key": f"k{size}-{i}", "value": "v" * size}, timeout=30.0)
                        for i in range(start, min(n, start + 100))))
            finally:
                await cl.close()
            return out

        big = asyncio.run(flood(60 * 1024, 1500))  # the attack of issue 23: 23 -> 109 MB unbounded
        assert all(r.code == R.SYSTEM_ERROR and "kvConfigMaxValueBytes=16384" in (r.remark or "") for r in big)
        small = asyncio.run(flood(15 * 1024, 1500))  # under the value cap: the total cap stops it
        ok = sum(r.code == R.SUCCESS for r in small)
        assert 200 < ok < 300, ok  # 4 MiB / ~15 KiB
        assert all("kvConfigMaxTotalBytes" in (r.remark or "") for r in small if r.code != R.SUCCESS)
        after = proc_status_kb(ns.proc.pid, "VmRSS")
        print(f"namesrv RSS before the flood {before / 1024:.1f} MB, after {after / 1024:.1f} MB")
        assert after - before < 30 * 1024, (before, after)
        r = asyncio.run(call(ns.port, RC.GET_KV_CONFIG, {"namespace": "flood", "key": "k15360-0"}))
        assert r.code == R.SUCCESS and len(r.ext_fields["value"]) == 15 * 1024
    finally:
        ns.kill9()


def _start_bare(tmp: Path, *args: str) -> tuple[Child, Path, int]:
    """``mqnamesrv -p <port> *args`` and nothing else (no --host: the defaults are under test)."""
    port = free_port()
    log = tmp / f"ns-{port}.log"
    return Child("mqnamesrv", ["namesrv", "-p", str(port), *args], log).start(), log, port


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_default_bind_is_loopback_and_open_off_loopback_needs_a_flag(tmp_path: Path) -> None:
    proc, log, port = _start_bare(tmp_path)
    try:
        wait_until(lambda: "boot success" in log.read_text(), 20, "the name server to start",
                   check=lambda: None if proc.alive() else pytest.fail(log.read_text()))
        assert listening_hosts(port) == ["127.0.0.1"]
        assert "OPEN on loopback" in log.read_text()
    finally:
        proc.kill9()
    proc, log, port = _start_bare(tmp_path, "--host", "0.0.0.0")
    try:
        assert proc.wait_exit(20) == 2
        assert "refusing to start" in log.read_text() and "--allow-insecure" in log.read_text()
        assert listening_hosts(port) == []
    finally:
        proc.kill9()
    proc, log, port = _start_bare(tmp_path, "--host", "0.0.0.0", "--allow-insecure")
    try:
        wait_until(lambda: "boot success" in log.read_text(), 20, "the open name server to start",
                   check=lambda: None if proc.alive() else pytest.fail(log.read_text()))
        assert "!!! name server OPEN on 0.0.0.0" in log.read_text()
    finally:
        proc.kill9()


@pytest.mark.multiprocess
@pytest.mark.timeout(150)
def test_our_broker_registers_signed_and_a_client_gets_the_route(tmp_path: Path) -> None:
    ns = start_acl_namesrv(tmp_path)
    brokers: list[BrokerProc] = []
    try:
        signed_conf, signed_port = master_conf(tmp_path, role="ASYNC_MASTER", namesrvAddr=ns.address,
                                               innerAccessKey=BROKER_AK, innerSecretKey=BROKER_SK)
        (tmp_path / "b").mkdir()
        bare_conf, bare_port = master_conf(tmp_path / "b", role="ASYNC_MASTER", namesrvAddr=ns.address,
                                           brokerName="broker-b")
        brokers.append(BrokerProc(signed_conf, signed_port, "broker-a", tmp_path).start(wait=False))
        brokers.append(BrokerProc(bare_conf, bare_port, "broker-b", tmp_path).start(wait=False))
        for b in brokers:
            b.wait_ready(60)
        for b in brokers:  # the topic on both brokers; only the signed one may put it in the route
            r = asyncio.run(call(b.api_port, RC.UPDATE_AND_CREATE_TOPIC, {"topic": TOPIC, "readQueueNums": 2,
                                                                         "writeQueueNums": 2, "perm": 6}))
            assert r.code == R.SUCCESS, r.remark
        wait_until(lambda: route_addrs(ns.port) == [f"127.0.0.1:{signed_port}"] or None, 30,
                   "the signed broker's route", check=lambda: None if ns.proc and ns.proc.poll() is None
                   else pytest.fail(ns.log()))
        wait_until(lambda: "refused by the name server's ACL" in brokers[1].log() or None, 30,
                   "broker-b to log its refused registration")
        assert "no innerAccessKey/innerSecretKey set" in brokers[1].log()
        r = asyncio.run(call(ns.port, RC.GET_BROKER_CLUSTER_INFO, {}))
        assert list(json.loads(r.body)["brokerAddrTable"]) == ["broker-a"]
        assert route_addrs(ns.port) == [f"127.0.0.1:{signed_port}"]
        assert brokers[0].stop() == 0  # a clean stop unregisters (signed): the route goes at once
        assert route_addrs(ns.port) == []
        assert BROKER_SK not in brokers[0].log() and BROKER_SK not in ns.log()
    finally:
        kill_all(brokers)
        ns.kill9()


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_the_shipped_sample_starts_on_loopback_and_its_secrets_are_refused_elsewhere(tmp_path: Path) -> None:
    sample = str(REPO / "conf" / "namesrv" / "namesrv.properties")
    proc, log, port = _start_bare(tmp_path, "-c", sample)
    try:
        wait_until(lambda: "boot success" in log.read_text(), 20, "the sample name server to start",
                   check=lambda: None if proc.alive() else pytest.fail(log.read_text()))
        assert "ACL on" in log.read_text() and listening_hosts(port) == ["127.0.0.1"]
        r = asyncio.run(call(port, RC.PUT_KV_CONFIG, {"namespace": "n", "key": "k", "value": "v"}))
        assert r.code == R.NO_PERMISSION
    finally:
        proc.kill9()
    proc, log, port = _start_bare(tmp_path, "-c", sample, "--host", "0.0.0.0")
    try:
        assert proc.wait_exit(20) == 2
        assert "public sample secret" in log.read_text()
    finally:
        proc.kill9()


APACHE = Path(os.environ.get("APACHE_ROCKETMQ", REPO.parent / "shared" / "apache-rocketmq-4.9.8"))


def _mqadmin(home: Path, *args: str) -> str:
    """``bin/mqadmin`` with ROCKETMQ_HOME=home (its conf/tools.yml signs) and -Duser.home=home, in a warm JVM."""
    return mqadmin_jvm.run(home, *args, rocketmq_home=home, timeout=60)


@pytest.mark.multiprocess
@pytest.mark.timeout(150)
@pytest.mark.skipif(not (APACHE / "bin" / "mqadmin").exists() or not shutil.which("java"),
                    reason="needs Apache RocketMQ 4.9.8 (APACHE_ROCKETMQ) and java")
def test_apache_mqadmin_signs_kv_writes_as_the_name_server_checks_them(tmp_path: Path) -> None:
    """Apache's mqadmin with ``conf/tools.yml`` credentials (its AclClientRPCHook): the admin
    account writes KV, a non-admin account and no credentials are refused; reads stay open."""
    homes = {}
    for name, creds in {"admin": (ADMIN_AK, ADMIN_SK), "reader": (READER_AK, READER_SK), "none": None}.items():
        conf = tmp_path / name / "conf"
        conf.mkdir(parents=True)
        shutil.copy(APACHE / "conf" / "logback_tools.xml", conf)
        if creds:
            (conf / "tools.yml").write_text(f"accessKey: {creds[0]}\nsecretKey: {creds[1]}\n")
        homes[name] = tmp_path / name
        mqadmin_jvm.start(homes[name], homes[name])  # the three JVMs boot while the name server starts
    ns = start_acl_namesrv(tmp_path)
    try:
        kv = ["updateKvConfig", "-n", ns.address, "-s", "ORDER_TOPIC_CONFIG", "-k", TOPIC, "-v"]
        assert "success" in _mqadmin(homes["admin"], *kv, "broker-a:4")
        assert "Need admin permission" in _mqadmin(homes["reader"], *kv, "evil:1")
        assert "No accessKey is configured" in _mqadmin(homes["none"], *kv, "evil:1")
        r = asyncio.run(call(ns.port, RC.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": TOPIC}))
        assert (r.code, r.ext_fields.get("value")) == (R.SUCCESS, "broker-a:4")
        assert "#Cluster Name" in _mqadmin(homes["none"], "clusterList", "-n", ns.address)  # an unsigned read
    finally:
        ns.kill9()


def test_every_code_has_a_kind_and_white_addresses_pass_as_in_rocketmq(tmp_path: Path) -> None:
    """Pure: the hook's table (unknown codes need an admin) and ``globalWhiteRemoteAddresses``,
    the way an Apache 4.9 broker, which does not sign registrations, registers with an ACL name server."""
    from types import SimpleNamespace

    from namesrv.doors import ADMIN_WRITE, BROKER_WRITE, READ, NamesrvAccess, kind_of
    from broker.remoting.acl import AclRefusal, PlainAccessValidator, sign_request

    assert kind_of(RC.REGISTER_BROKER) == kind_of(RC.UNREGISTER_BROKER) == BROKER_WRITE
    assert kind_of(RC.GET_ROUTEINFO_BY_TOPIC) == kind_of(RC.GET_KV_CONFIG) == READ
    assert kind_of(RC.PUT_KV_CONFIG) == kind_of(RC.WIPE_WRITE_PERM_OF_BROKER) == kind_of(9999) == ADMIN_WRITE
    acl = tmp_path / "acl.yml"
    acl.write_text("globalWhiteRemoteAddresses:\n  - 10.1.2.*\n" + ACL)
    hook = NamesrvAccess(PlainAccessValidator(acl), frozenset({BROKER_AK}))

    def ask(code: int, ip: str, creds: Optional[tuple[str, str]] = None) -> Optional[str]:
        cmd = RemotingCommand.request(code, {"brokerName": "b"}, b"body")
        if creds:
            sign_request(cmd, *creds)
        try:
            hook(cmd, SimpleNamespace(remote_addr=f"{ip}:4242"))  # type: ignore[arg-type]
        except AclRefusal as exc:
            return str(exc)
        return None

    assert ask(RC.REGISTER_BROKER, "10.1.2.3") is None  # white address: unsigned passes
    assert ask(RC.REGISTER_BROKER, "10.1.3.3") == "No accessKey is configured"
    assert ask(RC.REGISTER_BROKER, "10.1.3.3", (BROKER_AK, BROKER_SK)) is None
    assert "Need admin permission" in (ask(RC.PUT_KV_CONFIG, "10.1.3.3", (BROKER_AK, BROKER_SK)) or "")
    assert "Need admin permission" in (ask(9999, "10.1.3.3", (READER_AK, READER_SK)) or "")
    assert ask(RC.GET_ROUTEINFO_BY_TOPIC, "10.1.3.3") is None
