"""The permission table (``broker.remoting.permissions``) covers both doors of a running broker.

A broker is started in process; every request code its remoting server registers and every
route its HTTP API serves must be in the table, so a new code or route cannot arrive without
somebody deciding what it needs. The HTTP policies are the table's, and the table's admin
operations are exactly the ones remoting refuses to non-admins.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from broker.api.http_acl import POLICIES
from broker.config.conf_file import load_conf
from broker.controller import BrokerController
from broker.remoting.codes import RequestCode as RC
from broker.remoting.permissions import HTTP, OPERATIONS, REMOTING, Need, remoting_needs_admin
from tools.broker_confs import master_conf


@pytest.mark.timeout(60)
async def test_every_code_and_route_of_a_running_broker_is_in_the_table(tmp_path: Path) -> None:
    conf, _port = master_conf(tmp_path, "ASYNC_MASTER")
    parsed = load_conf(conf)
    controller = BrokerController(parsed.broker, parsed.store, conf_path=str(conf))
    await controller.start()
    try:
        codes = set(controller.remoting.server.processors)
        routes = {(r.method, r.resource.canonical) for r in controller._runner.app.router.routes()
                  if r.method != "HEAD" and r.resource is not None}
    finally:
        await controller.shutdown()
    assert codes and routes
    assert sorted(codes - set(REMOTING)) == [], "request codes with no entry in broker.remoting.permissions"
    assert sorted(routes - set(HTTP)) == [], "HTTP routes with no entry in broker.remoting.permissions"
    assert set(POLICIES) == set(HTTP)


def test_the_http_policies_are_the_tables() -> None:
    for key, name in HTTP.items():
        need = OPERATIONS[name].need
        assert POLICIES[key].admin == (need is Need.ADMIN), key
        assert POLICIES[key].open == (need is Need.OPEN), key
    assert [k for k, v in POLICIES.items() if v.open] == [("GET", "/health")]


def test_admin_operations_on_the_remoting_door() -> None:
    admin = {c for c in REMOTING if remoting_needs_admin(c)}
    assert {RC.GET_ALL_TOPIC_CONFIG, RC.GET_ALL_CONSUMER_OFFSET, RC.GET_ALL_DELAY_OFFSET,
            RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, RC.GET_BROKER_CONFIG, RC.UPDATE_AND_CREATE_TOPIC,
            RC.DELETE_TOPIC_IN_BROKER, RC.TRIGGER_DELETE_FILES} <= admin
    assert not ({RC.SEND_MESSAGE, RC.PULL_MESSAGE, RC.VIEW_MESSAGE_BY_ID, RC.HEART_BEAT} & admin)
    assert not remoting_needs_admin(99999)  # unknown: needs an account only (answered "not supported")


def test_a_role_change_push_is_open_and_proves_nothing(tmp_path: Path) -> None:
    """``NOTIFY_BROKER_ROLE_CHANGED`` carries no authority (the broker asks its controller): the
    ACL hook lets Apache's unsigned push through, and it earns its connection no trust; every
    other unsigned request is still refused, and a signed admin request still proves admin."""
    from types import SimpleNamespace

    from broker.remoting.acl import PlainAccessValidator, sign_request
    from broker.remoting.codec import RemotingCommand
    from broker.remoting.limits import ADMIN_TRUST, AUTHENTICATED_TRUST, UNPROVEN_TRUST
    from broker.remoting.server import RpcHookRefusal

    acl = tmp_path / "plain_acl.yml"
    acl.write_text("accounts:\n  - accessKey: admin-key\n    secretKey: admin-secret-1234\n    admin: true\n"
                   "  - accessKey: user-key\n    secretKey: user-secret-1234\n    admin: false\n")
    hook = PlainAccessValidator(acl)
    conn = SimpleNamespace(remote_addr="192.0.2.7:40000")
    push = RemotingCommand.request(RC.NOTIFY_BROKER_ROLE_CHANGED, {"masterBrokerId": 2, "masterEpoch": 99})
    hook(push, conn)  # type: ignore[arg-type]  # no AccessKey, no Signature: passes
    assert OPERATIONS[REMOTING[RC.NOTIFY_BROKER_ROLE_CHANGED]].need is Need.OPEN
    assert hook.trust_of(push) == UNPROVEN_TRUST
    with pytest.raises(RpcHookRefusal, match="No accessKey is configured"):
        hook(RemotingCommand.request(RC.GET_MAX_OFFSET, {"topic": "T", "queueId": 0}), conn)  # type: ignore[arg-type]
    signed = RemotingCommand.request(RC.GET_BROKER_CONFIG, {})
    sign_request(signed, "admin-key", "admin-secret-1234")
    hook(signed, conn)  # type: ignore[arg-type]
    assert hook.trust_of(signed) == ADMIN_TRUST
    user = RemotingCommand.request(RC.GET_MAX_OFFSET, {"topic": "T", "queueId": 0})
    sign_request(user, "user-key", "user-secret-1234")
    assert hook.trust_of(user) == AUTHENTICATED_TRUST
