"""Our controller JSON against fastjson 1.2.83 itself: FastjsonProbe.java (beans shaped like Apache
5.3.3's events and bodies) is compiled against the fastjson jar that Apache ships and its bytes
compared with ours, case by case. Skipped without java/javac or the jar."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from controller.bodies import (
    BrokerMemberGroup,
    BrokerReplicasInfo,
    ElectMasterResponseBody,
    ReplicaIdentity,
    ReplicasInfo,
    SyncStateSet,
)
from controller.events import (
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ElectMasterEvent,
    UpdateBrokerAddressEvent,
    event_json,
)

HERE = Path(__file__).resolve().parent
APACHE = Path(os.environ.get("APACHE_ROCKETMQ", HERE.parents[1].parent / "shared" / "apache-rocketmq-4.9.8"))
JAR = APACHE / "lib" / "fastjson-1.2.83.jar"
HAVE = JAR.exists() and shutil.which("java") is not None and shutil.which("javac") is not None
pytestmark = pytest.mark.skipif(not HAVE, reason="needs java, javac and fastjson-1.2.83.jar (APACHE_ROCKETMQ)")

TWELVE = (16, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)


def ours() -> list[bytes]:
    def rep(name: str, i: int, addr: str, alive: bool) -> ReplicaIdentity:
        return ReplicaIdentity(name, i, addr, alive)

    table = {name: ReplicasInfo(None if name == "zz" else 1, None if name == "zz" else "a:1", 2, 3,
                                (rep(name, 1, "a:1", True),), (rep(name, 2, "b:2", False),))
             for name in ("broker-b", "broker-a", "zz")}
    group = BrokerMemberGroup("DefaultCluster", "broker-a", {i: f"10.0.0.{i}:1<" for i in (17, 1, 2)})
    return [
        event_json(AlterSyncStateSetEvent("broker-a", (100, 17, 1))),
        event_json(AlterSyncStateSetEvent("broker-a", TWELVE)),
        event_json(ApplyBrokerIdEvent("DefaultCluster", "broker-a", "127.0.0.1:30911", 1, "127.0.0.1:30911;1700000000000")),
        event_json(ApplyBrokerIdEvent("c<>()&'\"\u00e9\u2028\u0001\u007f\u0085", "b", None, 1, "x\t\n/\\")),
        event_json(ElectMasterEvent(True, "broker-a", 2)),
        event_json(ElectMasterEvent(False, "broker-a")),
        event_json(CleanBrokerDataEvent("broker-a")),
        event_json(CleanBrokerDataEvent("broker-a", (33, 1, 17))),
        event_json(UpdateBrokerAddressEvent("DefaultCluster", "broker-a", "127.0.0.1:30921", 2)),
        SyncStateSet(TWELVE, 7).encode(),
        ElectMasterResponseBody((2,), group).encode(),
        ElectMasterResponseBody((3, 1)).encode(),
        BrokerReplicasInfo(table).encode(),
    ]


def test_bytes_equal_fastjson_1_2_83(tmp_path: Path) -> None:
    shutil.copy(HERE / "FastjsonProbe.java", tmp_path)
    subprocess.run(["javac", "-nowarn", "-cp", str(JAR), "-d", str(tmp_path), str(tmp_path / "FastjsonProbe.java")],
                   check=True, timeout=120, capture_output=True)
    out = subprocess.run(["java", "-cp", f"{JAR}{os.pathsep}{tmp_path}", "FastjsonProbe"], check=True, timeout=120,
                         capture_output=True, text=True).stdout.split()
    java = [bytes.fromhex(line) for line in out]
    mine = ours()
    assert len(java) == len(mine)
    for i, (j, m) in enumerate(zip(java, mine)):
        assert m == j, f"case {i}: ours {m!r} != fastjson {j!r}"
