"""``enableControllerInNamesrv=true``: the name server process also runs a controller (Apache 5.x's
NamesrvStartup), on its own door; a conf that leaves the door out is refused before binding."""
from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.remoting.codes import RequestCode
from controller.codes import ControllerRequestCode as Q
from controller.codes import ControllerResponseCode as RC
from namesrv.server import main as namesrv_main
from tests.controller.proc_util import connect, free_ports, request
from tools.nodes import Child


def conf_text(tmp: Path, raft: int, door: int, with_door: bool = True) -> str:
    return ("enableControllerInNamesrv=true\ncontrollerDLegerGroup=g\n"
            f"controllerDLegerPeers=n0-127.0.0.1:{raft}\ncontrollerDLegerSelfId=n0\n"
            + (f"controllerRemotingPeers=n0-127.0.0.1:{door}\n" if with_door else "")
            + f"controllerStorePath={tmp / 'ctl'}\nmappedFileSize=1048576\n"
            "controllerAllowInsecure=true\ncontrollerDLegerAllowInsecure=true\n")


def test_refused_without_a_door_of_its_own(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "ns.conf"
    conf.write_text(conf_text(tmp_path, 1, 2, with_door=False))
    assert namesrv_main(["-c", str(conf), "-p", "0"]) == 2
    err = capsys.readouterr().err
    assert "enableControllerInNamesrv" in err and "controllerRemotingPeers" in err


def test_namesrv_runs_a_controller(tmp_path: Path) -> None:
    ns_port, raft, door = free_ports(3)
    conf = tmp_path / "ns.conf"
    conf.write_text(conf_text(tmp_path, raft, door))
    proc = Child("mqnamesrv", ["namesrv", "-c", str(conf), "-p", str(ns_port)], tmp_path / "ns.log").start()
    try:
        asyncio.run(_check(ns_port, door, tmp_path))
    except BaseException:
        proc.kill9()  # the check's own error is the one to see
        raise
    code = proc.terminate(15)  # past 15 s: killed, ShutdownTooSlow with its stacks and log
    assert code == 0, (tmp_path / "ns.log").read_text()[-3000:]


async def _check(ns_port: int, door: int, tmp: Path) -> None:
    ns = await connect(ns_port)
    ctl = await connect(door)
    try:
        r = await ns.invoke(request(RequestCode.GET_BROKER_CLUSTER_INFO), 5)
        assert r.code == 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while True:
            r = await ctl.invoke(request(Q.CONTROLLER_GET_METADATA_INFO), 5)
            if r.ext_fields.get("isLeader") == "true":
                break
            assert loop.time() < deadline, (tmp / "ns.log").read_text()[-3000:]
            await asyncio.sleep(0.1)
        r = await ctl.invoke(request(Q.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": "c", "brokerName": "b"}), 5)
        assert r.code == RC.SUCCESS and r.ext_fields["nextBrokerId"] == "1"
    finally:
        await ns.close()
        await ctl.close()
