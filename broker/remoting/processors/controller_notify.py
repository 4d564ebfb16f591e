"""NOTIFY_BROKER_ROLE_CHANGED (1008): a wake-up telling a broker in Controller mode to ask the
controller who the master is now. A wake-up, never an order (issue 27).

Rules (Apache RocketMQ 5.3.3 ``AdminBrokerProcessor.notifyBrokerRoleChanged``, with one named
divergence):
- Registered only on a broker with ``enableControllerMode=true`` (elsewhere the code stays
  unknown: ``REQUEST_CODE_NOT_SUPPORTED``).
- Divergence: Apache applies the push's header (``masterBrokerId``, ``masterEpoch``, ...) as a
  role change, so anyone who reaches the broker's port could make a slave a second master or
  demote the master. Here the push carries no authority: neither its header nor its body is
  decoded into anything (the body is never read; the header's claimed master is only logged, at
  debug level). It wakes the broker's ReplicasManager, which sends
  ``CONTROLLER_GET_REPLICA_INFO`` to the controller leader at once (the call of its
  ``syncBrokerMetadataPeriod`` poll) and acts only on the controller's answer: a failover costs
  one more controller round trip (~1 ms on a LAN), a forged push nothing but that call.
- Bounded: at most one replica-info call is in flight and at most one push waits behind it
  (:class:`broker.ha.autoswitch.replicas_manager_calls.RefreshGate`, the driver's queue); the rest
  are counted (``/status`` ``ha.roleChangeHintsDropped``) and cost nothing more.
- No ACL check: the push carries no authority, so the permission table lists it as open
  (``broker.remoting.permissions``, ``Need.OPEN``): the broker's ACL hook lets Apache's unsigned
  push through on a broker with ``aclEnable=true`` too, and it earns its connection no trust
  with the port guard (``PlainAccessValidator.trust_of``).
- The answer is SUCCESS (not sent for Apache's oneway push), whatever the push said.

Theory of operation: a processor with one handler; the target is
``ReplicasDriver.role_change_notified``, reached through the broker's ``ha`` (``ControllerModeHA``),
which drops the header and body it is handed.
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Optional

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
        self.received += 1
        log.debug("NOTIFY_BROKER_ROLE_CHANGED from %s (a wake-up; it claims master %s, id %s, epoch %s)",
                  conn.remote_addr, cmd.ext_fields.get("masterAddress"), cmd.ext_fields.get("masterBrokerId"),
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
