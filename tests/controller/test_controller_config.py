"""controller.config and mqcontroller's refusals: Apache's keys and defaults, typos named, doors
closed unless the operator opens them (nothing is bound when it refuses)."""
from __future__ import annotations

from pathlib import Path

import pytest

from controller.cli import main
from controller.config import ConfigError, ControllerConfig, DoorRefused, check_doors, parse_config

BASE = "controllerDLegerPeers=n0-127.0.0.1:9877;n1-127.0.0.1:9867\ncontrollerDLegerSelfId=n0\n"


def test_apache_defaults() -> None:
    c = parse_config(BASE)
    assert (c.scan_not_active_broker_interval, c.scan_inactive_master_interval) == (5000, 5000)
    assert (c.elect_master_max_retry_count, c.enable_elect_unclean_master) == (3, False)
    assert (c.notify_broker_role_changed, c.is_process_read_event) == (True, False)
    assert c.controller_request_thread_pool_queue_capacity == 50000 and c.mapped_file_size == 1024 ** 3
    assert c.config_black_list == "configBlackList;configStorePath" and c.controller_type == "DLedger"
    assert c.store_path.endswith("DLedgerController")


def test_unknown_key_names_the_nearest(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"scanNotActivBrokerInterval \(x.conf:3\).*did you mean "
                                          r"'scanNotActiveBrokerInterval'"):
        parse_config(BASE + "scanNotActivBrokerInterval=100\n", "x.conf")
    with pytest.raises(ConfigError, match="enableElectUncleanMaster.*expected true or false"):
        parse_config(BASE + "enableElectUncleanMaster=yes\n")
    with pytest.raises(ConfigError, match="controllerDLegerSelfId of ControllerConfig is null or empty"):
        parse_config("controllerDLegerPeers=n0-127.0.0.1:9877\n")
    with pytest.raises(ConfigError, match="'n5' is not in controllerDLegerPeers"):
        parse_config("controllerDLegerPeers=n0-127.0.0.1:9877\ncontrollerDLegerSelfId=n5\n")


def test_doors() -> None:
    c = parse_config(BASE + "controllerDLegerAuthToken=0123456789abcdef0\n")
    with pytest.raises(DoorRefused, match="controllerAllowInsecure=true"):
        check_doors(c, None)
    c.controller_allow_insecure = True
    assert "OPEN" in check_doors(c, None)[0]
    c.controller_d_leger_auth_token = None
    with pytest.raises(DoorRefused, match="controllerDLegerAuthToken"):
        check_doors(c, None)
    c.controller_d_leger_allow_insecure = True
    check_doors(c, None)  # loopback-only group, opened on purpose
    off = parse_config("controllerDLegerPeers=n0-10.0.0.1:9877\ncontrollerDLegerSelfId=n0\n"
                       "controllerDLegerAllowInsecure=true\ncontrollerAllowInsecure=true\n")
    with pytest.raises(DoorRefused, match="only for loopback-only groups"):
        check_doors(off, None)
    off.controller_d_leger_auth_token = "sample-controller-dledger-secret-change-me"
    with pytest.raises(DoorRefused, match="public sample secret"):
        check_doors(off, None)


def test_sample_acl_secret_refused_off_loopback() -> None:
    class Acc:
        secret_key = "sample-controller-admin-change-me"

    c = ControllerConfig(bind_address="0.0.0.0", controller_d_leger_peers="n0-127.0.0.1:1",
                         controller_d_leger_self_id="n0", controller_d_leger_auth_token="0123456789abcdef0")
    with pytest.raises(DoorRefused, match="public sample secret"):
        check_doors(c, {"controller-admin": Acc()})
    c.bind_address = "127.0.0.1"
    assert check_doors(c, {"controller-admin": Acc()}) == []


def test_cli_refuses_and_binds_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "c.conf"
    conf.write_text(BASE + "controllerDLegerAuthToken=0123456789abcdef0\n")
    assert main(["-c", str(conf)]) == 2
    assert "refusing to start" in capsys.readouterr().err
    conf.write_text(BASE + "controllerAllowInsecur=true\n")
    assert main(["-c", str(conf)]) == 2
    assert "did you mean 'controllerAllowInsecure'" in capsys.readouterr().err


def test_shipped_confs_parse() -> None:
    repo = Path(__file__).resolve().parents[2]
    for i in range(3):
        c = parse_config((repo / f"conf/controller/controller-n{i}.conf").read_text(), f"controller-n{i}.conf")
        assert c.controller_d_leger_self_id == f"n{i}" and c.acl_enable
        assert c.remoting_address_of(f"n{i}") == f"127.0.0.1:{c.listen_port}"
