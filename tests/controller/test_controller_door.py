"""The controller's door with plain ACL (one real controller process): an unsigned or badly
signed request is refused before its header or body is decoded; admin-only codes need an admin
account; the other codes of Apache's processor answer as Apache's; /status and /metrics."""
from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

from broker.remoting.acl import signer
from broker.remoting.client import RemotingClient
from controller.bodies import encode_broker_names
from controller.codes import ControllerRequestCode as Q
from controller.codes import ControllerResponseCode as RC
from tests.controller.proc_util import connect, request
from tools.controller_cluster import ControllerGroup as Group

NO_PERMISSION = 16
ACL = """globalWhiteRemoteAddresses: []
accounts:
  - accessKey: brokerKey
    secretKey: broker-secret-0123456789
    admin: false
  - accessKey: adminKey
    secretKey: admin-secret-0123456789
    admin: true
"""


def test_door_with_acl(tmp_path: Path) -> None:
    asyncio.run(_door(tmp_path))


async def _door(tmp_path: Path) -> None:
    (tmp_path / "acl.yml").write_text(ACL)
    group = Group(tmp_path, 1, {"aclEnable": "true", "plainAclFile": tmp_path / "acl.yml",
                                "controllerMaxBrokerSets": 1})
    clients: list[RemotingClient] = []
    try:
        group.start_all()
        door = group.door["n0"]
        anon = await connect(door)
        broker = await connect(door, rpc_hook=signer("brokerKey", "broker-secret-0123456789"))
        forged = await connect(door, rpc_hook=signer("brokerKey", "wrong-secret-0123456789"))
        admin = await connect(door, rpc_hook=signer("adminKey", "admin-secret-0123456789"))
        clients += [anon, broker, forged, admin]
        # before anything is decoded: no header fields at all and a body that is not JSON
        bad = dict(code=Q.CONTROLLER_ALTER_SYNC_STATE_SET, body=b"\xff not json")
        r = await anon.invoke(request(bad["code"], None, bad["body"]), 5)
        assert (r.code, r.remark) == (NO_PERMISSION, "No accessKey is configured")
        r = await forged.invoke(request(bad["code"], None, bad["body"]), 5)
        assert r.code == NO_PERMISSION and "Check signature failed for accessKey=brokerKey" in r.remark
        r = await broker.invoke(request(bad["code"], None, bad["body"]), 5)  # signed: now the body is read
        assert r.code == RC.SYSTEM_ERROR and "JSON" in r.remark, (r.code, r.remark)
        r = await anon.invoke(request(Q.CONTROLLER_GET_METADATA_INFO), 5)
        assert r.code == NO_PERMISSION
        await find_leader_signed(admin)
        # admin-only codes
        clean = {"clusterName": "c", "brokerName": "nope", "isCleanLivingBroker": "true"}
        r = await broker.invoke(request(Q.CLEAN_BROKER_DATA, clean), 5)
        assert r.code == NO_PERMISSION and "Need admin permission" in r.remark
        r = await admin.invoke(request(Q.CLEAN_BROKER_DATA, clean), 5)
        assert (r.code, r.remark) == (RC.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                                      "Broker nope is not existed,clean broker data failure.")
        designated = {"clusterName": "c", "brokerName": "b", "brokerId": 1, "designateElect": "true"}
        r = await broker.invoke(request(Q.CONTROLLER_ELECT_MASTER, designated), 5)
        assert r.code == NO_PERMISSION
        # the rest of Apache's processor
        r = await broker.invoke(request(Q.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": "c", "brokerName": "b"}), 5)
        assert r.code == RC.SUCCESS and r.ext_fields["nextBrokerId"] == "1"
        r = await broker.invoke(request(Q.BROKER_HEARTBEAT, {"clusterName": "c", "brokerName": "b",
                                                             "brokerAddr": "127.0.0.1:1"}), 5)
        assert (r.code, r.remark) == (RC.CONTROLLER_INVALID_REQUEST, "Heart beat with empty brokerId")
        r = await broker.invoke(request(Q.BROKER_HEARTBEAT, {"clusterName": "c", "brokerAddr": "127.0.0.1:1"}), 5)
        assert r.code == RC.SYSTEM_ERROR and "brokerName" in r.remark
        r = await broker.invoke(request(Q.CONTROLLER_GET_SYNC_STATE_DATA, None, encode_broker_names([])), 5)
        assert (r.code, r.remark) == (RC.SYSTEM_ERROR, "not set any response code")
        r = await broker.invoke(request(Q.CONTROLLER_GET_SYNC_STATE_DATA, None, encode_broker_names(["zz"])), 5)
        assert r.code == RC.SUCCESS and r.body == b'{"replicasInfoTable":{}}'
        # the replicated tables are bounded: a second broker set is refused before anything is appended
        apply = {"clusterName": "c", "brokerName": "b", "appliedBrokerId": 1, "registerCheckCode": "127.0.0.1:1;1"}
        r = await broker.invoke(request(Q.CONTROLLER_APPLY_BROKER_ID, apply), 5)
        assert r.code == RC.SUCCESS, (r.code, r.remark)
        r = await broker.invoke(request(Q.CONTROLLER_APPLY_BROKER_ID, {**apply, "brokerName": "b2"}), 5)
        assert r.code == RC.SYSTEM_BUSY and "controllerMaxBrokerSets=1" in r.remark
        st = group.status("n0")
        assert st is not None and list(st["brokerSets"]) == ["b"]
        r = await admin.invoke(request(Q.UPDATE_CONTROLLER_CONFIG, None, b"configStorePath=/tmp/x\n"), 5)
        assert (r.code, r.remark) == (NO_PERMISSION, "Can not update config in black list.")
        r = await admin.invoke(request(Q.UPDATE_CONTROLLER_CONFIG, None, b"enableElectUncleanMastr=true\n"), 5)
        assert r.code == RC.SYSTEM_ERROR and "'enableElectUncleanMaster'" in r.remark
        r = await admin.invoke(request(Q.UPDATE_CONTROLLER_CONFIG, None, b"enableElectUncleanMaster=true\n"), 5)
        assert r.code == RC.SUCCESS
        r = await broker.invoke(request(Q.GET_CONTROLLER_CONFIG), 5)
        assert r.code == RC.SUCCESS and b"enableElectUncleanMaster=true\n" in r.body
        assert b"test-controller-secret" not in r.body  # the DLedger secret is masked
        with urllib.request.urlopen(f"http://127.0.0.1:{group.http['n0']}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        assert "rocketmq_controller_is_leader 1" in text
        st = group.status("n0")
        assert st is not None and st["role"] == "LEADER" and st["isLeader"] is True
    finally:
        for c in clients:
            await c.close()
        group.stop_all()


async def find_leader_signed(client: RemotingClient, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        r = await client.invoke(request(Q.CONTROLLER_GET_METADATA_INFO), 5)
        if r.ext_fields.get("isLeader") == "true":
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the single controller did not become leader")


