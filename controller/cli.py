"""``mqcontroller -c controller.conf``: Apache RocketMQ 5.3.3's ``ControllerStartup`` and the
assembly of one controller process.

Rules:
- ``-c/--config``: a Java properties file of :mod:`controller.config` keys (required);
  ``-p/--print-config``: print every key with its value and exit 0 (Apache's ``-p``).
- A conf that does not parse, an ACL file that does not load, or doors that would open without the
  operator saying so (:func:`controller.config.check_doors`): one line on stderr naming the key,
  exit 2, nothing bound. A port that cannot be bound: exit 1.
- Start order: state replayed from the local log, DLedger member started, then the remoting door
  (``bindAddress:listenPort``), then ``/status`` (``controllerHttpPort``). It prints
  ``The Controller Server boot success. ...`` with the ports when serving; SIGTERM / SIGINT stop
  it (door first, then DLedger, which flushes and writes its checkpoint).

- Inside the name server (Apache's ``enableControllerInNamesrv=true``): :func:`embedded_from_namesrv`
  takes the controller keys of the name server's file (its other keys are the name server's, and
  its ``listenPort`` is the name server's port), shares ``bindAddress``, ``aclEnable`` and
  ``plainAclFile``, and puts the controller's door on this member's ``controllerRemotingPeers``
  address (required there: the two doors cannot share a port). The same door checks apply.

Theory of operation: :class:`ControllerProcess` owns a :class:`controller.server.ControllerServer`,
a ``broker.remoting`` server with the :class:`controller.processor.ControllerDoor` on it, and the
optional :class:`controller.status_http.StatusHttp`.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import Optional

from broker.remoting.acl import AclConfigError, PlainAccessValidator
from broker.remoting.limits import ListenLimits
from broker.remoting.server import RemotingServer
from controller.config import (KEYS, ConfigError, ControllerConfig, DoorRefused, check_doors, load_config, set_key,
                               validate)
from dledger.rpc.framing import parse_peers
from controller.processor import ControllerAccess, ControllerDoor
from controller.server import ControllerServer
from controller.status_http import StatusHttp

log = logging.getLogger("controller")


class ControllerProcess:
    def __init__(self, config: ControllerConfig, validator: Optional[PlainAccessValidator]) -> None:
        self.config = config
        self.controller = ControllerServer(config)
        self.remoting = RemotingServer(name="controller", limits=ListenLimits(
            max_connections=config.server_max_connections, evict_unproven=validator is not None))
        if validator is not None:
            self.remoting.rpc_hooks.append(ControllerAccess(validator))
        ControllerDoor(self.controller).register(self.remoting)
        self.http: Optional[StatusHttp] = StatusHttp(self.controller.status) if config.controller_http_port else None

    async def start(self) -> None:
        await self.controller.start()
        await self.remoting.start(self.config.bind_address, self.config.listen_port)
        if self.http is not None:
            await self.http.start(self.config.bind_address, self.config.controller_http_port)

    async def stop(self) -> None:
        self.controller.begin_shutdown()
        if self.http is not None:
            await self.http.stop()
        await self.remoting.stop()
        await self.controller.shutdown()


def embedded_from_namesrv(props: dict[str, str], source: str) -> tuple[ControllerConfig, Optional[PlainAccessValidator]]:
    """``enableControllerInNamesrv``: the controller's settings from the name server's properties
    (module rules). Raises ``ConfigError`` / ``DoorRefused`` / ``AclConfigError``; logs the warnings."""
    config = ControllerConfig()
    for key, raw in props.items():
        if key in KEYS and key != "listenPort":
            set_key(config, key, raw, f"{key} ({source})")
    validate(config, source)
    door = parse_peers(config.controller_remoting_peers).get(config.controller_d_leger_self_id or "") \
        if config.controller_remoting_peers else None
    if door is None:
        raise ConfigError(f"controllerRemotingPeers ({source}): enableControllerInNamesrv=true needs this member's "
                          f"controller door there ({config.controller_d_leger_self_id}-<host>:<port>): the name "
                          "server keeps listenPort")
    config.listen_port = door[1]
    validator = PlainAccessValidator(config.plain_acl_file) if config.acl_enable and config.plain_acl_file else None
    if config.acl_enable and validator is None:
        raise DoorRefused("aclEnable=true needs plainAclFile=<path to plain_acl.yml>")
    for line in check_doors(config, validator.accounts if validator is not None else None):
        log.warning("%s", line)
    return config, validator


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="mqcontroller", description="RocketMQ controller (Controller mode, RIP-44)")
    p.add_argument("-c", "--config", required=True, help="controller properties file (controllerDLegerGroup, "
                   "controllerDLegerPeers, controllerDLegerSelfId, controllerStorePath, listenPort, ...)")
    p.add_argument("-p", "--print-config", action="store_true", help="print every key and its value, then exit")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config)
    except OSError as exc:
        print(f"mqcontroller: cannot read {args.config}: {exc.strerror}", file=sys.stderr)
        return 2
    except (ConfigError, UnicodeDecodeError) as exc:
        print(f"mqcontroller: {exc}", file=sys.stderr)
        return 2
    if args.print_config:
        for k, v in sorted(config.to_properties().items()):
            print(f"{k}={v}")
        return 0
    validator: Optional[PlainAccessValidator] = None
    try:
        if config.acl_enable:
            if not config.plain_acl_file:
                raise DoorRefused("aclEnable=true needs plainAclFile=<path to plain_acl.yml>")
            validator = PlainAccessValidator(config.plain_acl_file)
        for line in check_doors(config, validator.accounts if validator is not None else None):
            log.warning("%s", line)
    except (DoorRefused, AclConfigError) as exc:
        print(f"mqcontroller: refusing to start: {exc}", file=sys.stderr)
        return 2

    async def run() -> int:
        proc = ControllerProcess(config, validator)
        try:
            await proc.start()
        except OSError as exc:
            print(f"mqcontroller: cannot listen: {exc}", file=sys.stderr)
            await proc.controller.shutdown()
            return 1
        http = f", status http://{config.bind_address}:{proc.http.port}/status" if proc.http is not None else ""
        print(f"The Controller Server boot success. door {config.bind_address}:{proc.remoting.port}, DLedger "
              f"member {config.controller_d_leger_self_id} of {config.controller_d_leger_group}{http}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await proc.stop()
        return 0

    return asyncio.run(run())
