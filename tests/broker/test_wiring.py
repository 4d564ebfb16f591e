"""The controller's wiring (issue 26): the objects it wires never import it, and classic HA, now its
own composed object (``broker.classic_ha``), keeps the controller's start errors and status."""
from __future__ import annotations

import ast
import socket
from pathlib import Path

import pytest

from broker.config.conf_file import load_conf
from broker.controller import BrokerController, BrokerStartError
from broker.store.lockfile import StoreLock
from tools.broker_confs import master_conf
from tests.test_import_graph import REPO, circles, import_graph

WIRED = ("broker.processor", "broker.role", "broker.store_access", "broker.master_services", "broker.broker_gauges",
         "broker.classic_ha")


def test_the_wired_objects_do_not_import_the_controller() -> None:
    g = import_graph()
    assert {m: "broker.controller" in g[m] for m in WIRED} == {m: False for m in WIRED}
    assert [sorted(c) for c in circles(g) if "broker.controller" in c] == []


def test_the_role_handler_uses_the_dledger_servers_api_without_probing_it() -> None:
    """Issue 26: ``role.py`` once probed ``getattr(server, "set_preferred_leaders", None)``, a method
    DLedgerServer did not have, so its fallback always rewrote ``server.core.cfg``. The handler now
    holds a typed ``DLedgerServer``/``DLedgerCommitLog`` (mypy checks every member it uses) and
    reads them directly: no ``getattr``/``hasattr`` with a fallback anywhere in the class."""
    tree = ast.parse((REPO / "broker" / "role.py").read_text())
    handler = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "DLedgerRoleChangeHandler")
    probes = [f"line {n.lineno}: {ast.unparse(n)}" for n in ast.walk(handler)
              if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("getattr", "hasattr")]
    assert probes == []


def _controller(tmp_path: Path, role: str, **extra: object) -> BrokerController:
    conf, _port = master_conf(tmp_path, role, **extra)
    parsed = load_conf(conf)
    return BrokerController(parsed.broker, parsed.store, conf_path=str(conf))


@pytest.mark.timeout(60)
async def test_a_slave_without_ha_master_address_is_a_one_sentence_start_error(tmp_path: Path) -> None:
    controller = _controller(tmp_path, "SLAVE", brokerId=1)
    assert controller.ha_status() == {"mode": "none"}
    with pytest.raises(BrokerStartError) as exc:
        await controller.start()
    assert str(exc.value) == "brokerRole=SLAVE needs haMasterAddress=<master host>:<master haListenPort>"
    with StoreLock(tmp_path / "broker-a"):  # the failed start let go of the store
        pass


@pytest.mark.timeout(60)
async def test_a_master_whose_ha_port_is_taken_says_so_and_a_started_one_reports_its_ha(tmp_path: Path) -> None:
    controller = _controller(tmp_path, "ASYNC_MASTER")
    with socket.socket() as taken:
        taken.bind((controller.ha.bind_address, controller.ha_listen_port))
        taken.listen()
        with pytest.raises(BrokerStartError) as exc:
            await controller.start()
    assert str(exc.value).startswith(f"cannot listen on HA port {controller.ha.bind_address}:"
                                     f"{controller.ha_listen_port} (haListenPort): ")
    assert controller.ha.service is None

    again = _controller(tmp_path, "ASYNC_MASTER")
    await again.start()
    try:
        st = again.ha_status()
        assert (st["mode"], st["listenPort"], st["connections"], st["slaveLagBytes"]) == (
            "master", again.ha_listen_port, 0, None)
        assert again.ha.summary() == f"HA listening on {again.ha.bind_address}:{again.ha_listen_port}"
    finally:
        await again.shutdown()
    assert again.ha.service is None and again.shutdown_problems == []


def test_both_doors_send_through_one_send_service() -> None:
    """Issue 26.1: the HTTP processor and the remoting SendMessageProcessor share one typed
    ``SendMessageService`` (write gate, topic rules, queue choice, the put, its counters); the
    remoting door no longer reaches into the HTTP processor's private methods, and the send
    rules are written once."""
    send_py = (REPO / "broker" / "remoting" / "processors" / "send.py").read_text()
    assert "broker_processor" not in send_py and "send_service" in send_py
    assert "self.send = SendMessageService(" in (REPO / "broker" / "processor.py").read_text()
    rule = "sending message is forbidden (perm"
    holders = sorted(str(p.relative_to(REPO)) for p in (REPO / "broker").rglob("*.py") if rule in p.read_text())
    assert holders == ["broker/send_service.py"]
