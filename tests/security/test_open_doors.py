"""Issue 23.10: a door left open is never silent.

Before: the sample conf with only ``bindAddress=0.0.0.0`` changed, or a conf written by
``mqupgrade plan`` without ``--conf``, served listenPort unauthenticated on every interface
without a word. Now every unauthenticated door is listed (``/status`` ``openDoors`` and the
``rocketmq_broker_open_doors`` metric), one reachable off loopback gets a SECURITY warning at
start, and the plan names the doors its confs leave open. (Tests bind 127.0.0.1 only, so the
exposed case is checked on the parsed conf and the warning text, the live case on loopback.)
"""
from __future__ import annotations

from pathlib import Path

import pytest

from broker.config.conf_file import parse_conf
from broker.security_policy import exposed_warnings, open_doors
from tools.broker_confs import master_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import REPO
from tests.upgrade.upgrade_helpers import PEERS, copy
from upgrade.plan import make_plan, parse_self_ids

SAMPLE = (REPO / "conf" / "classic" / "broker-a.conf").read_text()


def _with(text: str, **keys: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.split("=", 1)[0] not in keys]
    return "\n".join(lines + [f"{k}={v}" for k, v in keys.items()]) + "\n"


def test_the_sample_conf_on_every_interface_is_reported_loudly() -> None:
    conf = parse_conf(_with(SAMPLE, bindAddress="0.0.0.0"), validate=False)
    doors = open_doors(conf.broker, conf.store)
    assert [(d.door, d.port, d.exposed) for d in doors] == [("listenPort", 10911, True)]  # HA has its token
    (line,) = exposed_warnings(doors)
    assert line.startswith("SECURITY: listenPort 10911 accepts unauthenticated traffic on every interface")
    assert "remotingAllowInsecure=true" in line and "127.0.0.1" in line
    conf = parse_conf(_with(SAMPLE, bindAddress="0.0.0.0", haAuthToken="", haAllowInsecure="true"), validate=False)
    assert [(d.door, d.port) for d in open_doors(conf.broker, conf.store)] == [("listenPort", 10911), ("haListenPort", 10912)]
    assert len(exposed_warnings(open_doors(conf.broker, conf.store))) == 2
    conf = parse_conf(_with(SAMPLE, aclEnable="true", remotingAllowInsecure="false"), validate=False)
    assert open_doors(conf.broker, conf.store) == []
    on_loopback = parse_conf(SAMPLE, validate=False)
    assert [d.exposed for d in open_doors(on_loopback.broker, on_loopback.store)] == [False]
    assert exposed_warnings(open_doors(on_loopback.broker, on_loopback.store)) == []


@pytest.mark.multiprocess
@pytest.mark.timeout(60)
def test_a_running_broker_lists_its_open_doors(tmp_path: Path) -> None:
    conf, port = master_conf(tmp_path, role="ASYNC_MASTER", remotingAllowInsecure="true", haAuthToken="",
                             haAllowInsecure="true")
    b = BrokerProc(conf, port, "open-doors", tmp_path)
    try:
        b.start()
        with b.client() as c:
            doors = {d["door"]: d for d in c.status()["openDoors"]}
            metrics = c.metrics()
    finally:
        kill_all([b])
    assert doors["listenPort"]["port"] == port and doors["listenPort"]["bindAddress"] == "127.0.0.1"
    assert doors["haListenPort"]["port"] == port + 1 and not doors["haListenPort"]["exposed"]
    assert f'rocketmq_broker_open_doors{{door="listenPort",exposed="false",port="{port}"}} 1' in metrics \
        or f'rocketmq_broker_open_doors{{door="listenPort",port="{port}",exposed="false"}} 1' in metrics, metrics[:2000]
    assert "SECURITY:" not in b.log_path.read_text(errors="replace")  # loopback only: no alarm


def test_plan_names_the_doors_its_confs_leave_open(fixture_root: Path, fixture_set, tmp_path: Path) -> None:
    copy(fixture_root, fixture_set.classic, tmp_path / "m")
    ids = parse_self_ids(f"n0={tmp_path / 'm'},n1={tmp_path / 'n1'},n2={tmp_path / 'n2'}")
    plan = make_plan("g0", PEERS, ids, conf_dir=tmp_path / "conf", auth_token="test-group-secret-0123456789")
    open_notes = [w for w in plan.warnings if "leaves open" in w]
    assert len(open_notes) == 3 and all("listenPort" in w and "every interface" in w for w in open_notes), plan.warnings
