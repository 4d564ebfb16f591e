"""SlaveSynchronize against stand-in masters: the remoting admin requests (GET_ALL_*), and the
HTTP fallback for a master address that does not speak remoting (a separate httpListenPort)."""
from __future__ import annotations

import json
import logging
from typing import Any, Optional

import pytest
from aiohttp import web

from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode
from broker.remoting.server import RemotingConnection, RemotingServer
from broker.slave_sync import SYNC_FILES, MetadataAccess, SlaveSynchronize

CODES = {RC.GET_ALL_TOPIC_CONFIG: "topics", RC.GET_ALL_CONSUMER_OFFSET: "consumerOffset",
         RC.GET_ALL_DELAY_OFFSET: "delayOffset", RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: "subscriptionGroup"}


def _file(name: str, counter: int) -> str:
    table = {"topics": "topicConfigTable", "consumerOffset": "offsetTable", "delayOffset": "offsetTable",
             "subscriptionGroup": "subscriptionGroupTable"}[name]
    return json.dumps({"dataVersion": {"counter": counter, "timestamp": 1000 + counter}, table: {"k": counter}})


class Local:
    def __init__(self) -> None:
        self.files: dict[str, tuple[str, Optional[dict[str, Any]]]] = {n: ("{}", None) for n in SYNC_FILES}
        self.replaced: list[str] = []

    def access(self) -> dict[str, MetadataAccess]:
        def make(n: str) -> MetadataAccess:
            def replace(content: str, version: Optional[dict[str, Any]]) -> None:
                self.files[n] = (content, version)
                self.replaced.append(n)
            return MetadataAccess(lambda: self.files[n][1], lambda: self.files[n][0], replace)
        return {n: make(n) for n in SYNC_FILES}


async def test_sync_uses_remoting_admin_requests_and_gates_on_data_version(caplog: pytest.LogCaptureFixture) -> None:
    counters = {n: 1 for n in SYNC_FILES}
    seen: list[int] = []

    async def get_all(cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        seen.append(cmd.code)
        name = CODES[cmd.code]
        return cmd.response(ResponseCode.SUCCESS, None, body=_file(name, counters[name]).encode())

    server = RemotingServer(name="fake-master")
    for code in CODES:
        server.register(code, get_all)
    await server.start("127.0.0.1", 0)
    local = Local()
    ss = SlaveSynchronize(local.access(), f"127.0.0.1:{server.port}", interval=3600, initial_delay=3600)
    caplog.set_level(logging.INFO, logger="broker.slave_sync")
    try:
        assert await ss.sync_all()
        assert seen == list(CODES) and ss.protocol == "remoting" and ss.http_requests == 0
        assert local.replaced == list(SYNC_FILES)
        assert local.files["topics"] == (_file("topics", 1), {"counter": 1, "timestamp": 1001})
        # same dataVersion: nothing replaced; a bumped one: only that file
        assert await ss.sync_all() and local.replaced == list(SYNC_FILES)
        counters["consumerOffset"] = 2
        assert await ss.sync_all() and local.replaced[4:] == ["consumerOffset"]
        assert ss.remoting_requests == 12 and len(seen) == 12
        # one kept-open connection
        assert len(server.connections) == 1
        # master gone: one failing line, then one recovered line
        await server.stop()
        assert not await ss.sync_all() and not await ss.sync_all()
        await server.start("127.0.0.1", server.port)
        assert await ss.sync_all()
        lines = [r.getMessage() for r in caplog.records]
        assert sum("failing" in m for m in lines) == 1 and sum("recovered" in m for m in lines) == 1
        assert sum("over remoting" in m for m in lines) == 1
    finally:
        await ss.stop()
        await server.stop()


async def test_http_only_master_address_falls_back_to_http() -> None:
    async def config_file(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        content = _file(name, 5)
        return web.json_response({"name": name, "dataVersion": json.loads(content)["dataVersion"], "content": content})

    app = web.Application()
    app.router.add_get("/admin/config/{name}", config_file)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    local = Local()
    ss = SlaveSynchronize(local.access(), f"127.0.0.1:{port}", interval=3600, initial_delay=3600)
    try:
        assert await ss.sync_all()
        assert ss.protocol == "http" and local.replaced == list(SYNC_FILES)
        assert local.files["delayOffset"][1] == {"counter": 5, "timestamp": 1005}
        probes = ss.remoting_requests
        assert probes == 1  # one probe, then HTTP for this address
        assert await ss.sync_all() and ss.remoting_requests == probes and local.replaced == list(SYNC_FILES)
    finally:
        await ss.stop()
        await runner.cleanup()


# ---- ACL on the master (issue 12.2): the slave signs with its own account, refusals are loud
ACL_YAML = """
accounts:
  - accessKey: slave-admin-key
    secretKey: slave-admin-secret-1234
    admin: true
  - accessKey: plain-user-key
    secretKey: plain-user-secret-1234
    admin: false
"""


class _FakeController:
    """What ``build_app`` needs for ``/admin/config/*``: the file and the metrics registry."""

    def __init__(self) -> None:
        from broker.api.metrics import BrokerMetrics

        self.metrics = BrokerMetrics()

    def config_file(self, name: str) -> dict[str, Any]:
        content = _file(name, 7)
        return {"name": name, "dataVersion": json.loads(content)["dataVersion"], "content": content}


async def test_signed_http_sync_under_acl_and_a_clear_refusal(tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    from broker.api.http_acl import HttpAcl
    from broker.api.server import build_app
    from broker.remoting.acl import PlainAccessValidator

    (tmp_path / "plain_acl.yml").write_text(ACL_YAML)
    app = build_app(_FakeController(), 1 << 20, acl=HttpAcl(PlainAccessValidator(tmp_path / "plain_acl.yml")))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    addr = f"127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    caplog.set_level(logging.INFO, logger="broker.slave_sync")
    slaves = []
    try:
        good = SlaveSynchronize(Local().access(), addr, interval=3600, initial_delay=3600,
                                credentials=("slave-admin-key", "slave-admin-secret-1234"))
        slaves.append(good)
        assert await good.sync_all() and good.protocol == "http" and good.last_refusal is None
        for creds, why in ((None, "No accessKey is configured"),
                           (("plain-user-key", "plain-user-secret-1234"), "Need admin permission"),
                           (("slave-admin-key", "wrong-secret-123456"), "Check signature failed")):
            local = Local()
            ss = SlaveSynchronize(local.access(), addr, interval=3600, initial_delay=3600, credentials=creds)
            slaves.append(ss)
            assert not await ss.sync_all() and not await ss.sync_all()
            assert local.replaced == [] and ss.last_refusal is not None and why in ss.last_refusal
            assert f"master {addr} refused the metadata sync over HTTP" in ss.last_refusal
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 3  # one line per refused slave, not one per round
        assert all("secret-123" not in m and "secret-1234" not in m for m in errors)
    finally:
        for ss in slaves:
            await ss.stop()
        await runner.cleanup()


async def test_signed_remoting_sync_under_acl_never_falls_back_to_http(tmp_path: Any) -> None:
    from broker.remoting.acl import PlainAccessValidator

    async def get_all(cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        return cmd.response(ResponseCode.SUCCESS, None, body=_file(CODES[cmd.code], 3).encode())

    (tmp_path / "plain_acl.yml").write_text(ACL_YAML)
    server = RemotingServer(name="acl-master")
    server.rpc_hooks.append(PlainAccessValidator(tmp_path / "plain_acl.yml"))
    for code in CODES:
        server.register(code, get_all)
    await server.start("127.0.0.1", 0)
    # the metadata dumps need admin on both doors (broker.remoting.permissions, issue 23.4)
    good = SlaveSynchronize(Local().access(), f"127.0.0.1:{server.port}", interval=3600, initial_delay=3600,
                            credentials=("slave-admin-key", "slave-admin-secret-1234"))
    plain = SlaveSynchronize(Local().access(), f"127.0.0.1:{server.port}", interval=3600, initial_delay=3600,
                             credentials=("plain-user-key", "plain-user-secret-1234"))
    bad = SlaveSynchronize(Local().access(), f"127.0.0.1:{server.port}", interval=3600, initial_delay=3600)
    try:
        assert await good.sync_all() and good.protocol == "remoting"
        assert not await plain.sync_all() and "Need admin permission" in (plain.last_refusal or "")
        assert plain.http_requests == 0
        assert not await bad.sync_all()
        assert bad.http_requests == 0 and "No accessKey is configured" in (bad.last_refusal or "")
        assert "innerAccessKey" in (bad.last_refusal or "")
    finally:
        await good.stop()
        await plain.stop()
        await bad.stop()
        await server.stop()


@pytest.mark.parametrize("yields", range(4))
async def test_stop_right_after_a_retarget_returns(yields: int) -> None:
    """Issue 21's hang: a role change retargets and triggers the sync in the iteration in which
    shutdown stops it. With asyncio.wait_for in ``_sleep`` (Python 3.11) the cancellation was
    lost, the task kept syncing every interval and ``stop()`` never returned."""
    import asyncio
    import socket

    def refused() -> str:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return f"127.0.0.1:{s.getsockname()[1]}"

    ss = SlaveSynchronize(Local().access(), refused(), interval=0.5, initial_delay=0.0)
    ss.start()
    await asyncio.sleep(0.3)  # failing against the stopped leader, asleep in _sleep
    ss.set_master_address(refused())
    ss.trigger()
    for _ in range(yields):
        await asyncio.sleep(0)
    stop = asyncio.ensure_future(ss.stop())
    done, _ = await asyncio.wait({stop}, timeout=5.0)
    assert done, "SlaveSynchronize.stop() did not return within 5 s of a retarget"
