"""NOTIFY_BROKER_ROLE_CHANGED (1008): a controller tells a broker in Controller mode who the master is.

Rules (Apache RocketMQ 5.3.3 ``AdminBrokerProcessor.notifyBrokerRoleChanged``):
- Registered only on a broker with ``enableControllerMode=true`` (elsewhere the code stays
  unknown: ``REQUEST_CODE_NOT_SUPPORTED``).
- Authenticated like the other admin requests: with ``aclEnable=true`` the request needs an admin
  account (``require_found`` with ``admin_for``). Apache's controller sends it unsigned, so a
  broker with ACL refuses it and learns the new master from its periodic
  ``CONTROLLER_GET_REPLICA_INFO`` instead (``syncBrokerMetadataPeriod``).
- The header (``masterAddress``, ``masterEpoch``, ``syncStateSetEpoch``, ``masterBrokerId``) and
  the ``SyncStateSet`` body go to the ReplicasManager's driver undecoded (it decodes and ignores
  a stale epoch); the answer is SUCCESS (not sent for Apache's oneway push).

Theory of operation: a processor with one handler; the target is
``ReplicasDriver.role_change_notified``, reached through the broker's ``ha`` (``ControllerModeHA``).
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Optional

from broker.remoting.acl import require_found
from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import ResponseCode as R
from broker.remoting.server import RemotingConnection, RemotingServer

log = logging.getLogger("broker.remoting.controller_notify")

NOTIFY_BROKER_ROLE_CHANGED = 1008  # controller.codes.ControllerRequestCode (kept out of the broker's imports)

Target = Callable[[dict[str, str], Optional[bytes]], None]


class ControllerNotifyProcessor:
    def __init__(self, target: Target) -> None:
        self.target = target
        self.received = 0

    def register(self, server: RemotingServer) -> None:
        server.register(NOTIFY_BROKER_ROLE_CHANGED, self.notify)

    async def notify(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        require_found({}, admin_for="a controller's NOTIFY_BROKER_ROLE_CHANGED")
        self.received += 1
        log.info("NOTIFY_BROKER_ROLE_CHANGED from %s: master %s (id %s) epoch %s", conn.remote_addr,
                 cmd.ext_fields.get("masterAddress"), cmd.ext_fields.get("masterBrokerId"),
                 cmd.ext_fields.get("masterEpoch"))
        self.target(dict(cmd.ext_fields), cmd.body or None)
        return cmd.response(R.SUCCESS)


def register_controller_notify(server: RemotingServer, controller: Any) -> Optional[ControllerNotifyProcessor]:
    """Register 1008 when the broker runs in Controller mode (its ``ha`` has a ReplicasDriver)."""
    driver = getattr(getattr(controller, "ha", None), "driver", None)
    if not getattr(controller, "controller_mode", False) or driver is None:
        return None
    p = ControllerNotifyProcessor(driver.role_change_notified)
    p.register(server)
    return p
