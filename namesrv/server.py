"""NamesrvController: the name server's request processors, expiry scan and command line.

Rules (apache/rocketmq 4.9.x ``DefaultRequestProcessor``, ``NamesrvController``):
- REGISTER_BROKER: header ``brokerName, brokerAddr, clusterName, haServerAddr, brokerId,
  compressed, bodyCrc32``; body ``RegisterBrokerBody`` JSON (``topicConfigSerializeWrapper``,
  ``filterServerList``). A non-zero ``bodyCrc32`` that does not match (CRC32 & 0x7FFFFFFF,
  ``UtilAll.crc32``) is refused ``SYSTEM_ERROR`` "crc32 not match". Response header
  ``haServerAddr``/``masterAddr``; body the (empty) order-topic KV table.
- UNREGISTER_BROKER, GET_ROUTEINFO_BY_TOPIC (``TOPIC_NOT_EXIST`` "No topic route info in name
  server for the topic: T"), GET_BROKER_CLUSTER_INFO, GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
  QUERY_DATA_VERSION (also refreshes liveness), PUT/GET/DELETE_KV_CONFIG (in memory, bounded by
  :mod:`.kv_config`: a put over a limit is ``SYSTEM_ERROR`` naming the limit; GET of a missing
  item is ``QUERY_NOT_FOUND``), DELETE_TOPIC_IN_NAMESRV (``topic``: its route is forgotten; mqadmin
  deleteTopic sends it after DELETE_TOPIC_IN_BROKER); write perm, topic lists and the name server's
  config: :mod:`.admin_requests`. Other codes: ``REQUEST_CODE_NOT_SUPPORTED``.
- Who may call what (:mod:`.doors`): with ``aclEnable=true`` broker writes need a signed broker
  or admin account, admin writes an admin account, route reads stay open unless
  ``namesrvSignedReads=true``; without ACL it starts open on loopback only, elsewhere only with
  ``namesrvAllowInsecure=true`` / ``--allow-insecure`` (loud warning), else exits 2.
- ``enableControllerInNamesrv=true`` (Apache 5.x): the controller (``controller.cli``) runs in this
  process, from the controller keys of the same file, on its own door (``controllerRemotingPeers``).
- The scan runs every ``scan_interval_ms`` (10 s) and drops brokers silent for
  ``broker_channel_max_idle_ms`` (120 s); a closed registering connection drops its brokers
  at once.

- Listen address: ``--host``, else ``bindAddress`` from the ``-c`` properties file, else
  ``127.0.0.1`` (Apache's default is ``0.0.0.0``); logged at start. The port has the broker's listen limits
  (``broker.remoting.limits``): ``serverChannelMaxIdleTimeSeconds`` (120), ``serverReadTimeoutMillis``,
  ``serverMaxConnections``, ``serverMaxPendingBytes``, read from the properties file when set.
  Brokers register every 30 s, so a live broker's connection is never idle.

Theory of operation: RemotingServer + RouteInfoManager on one asyncio loop. ``main`` parses
``-p/--port`` (``listenPort``, default 9876), ``--host``, ``--acl-file``, ``--allow-insecure``,
optional ``-c`` properties file, and the test knobs ``--broker-expiry-ms`` / ``--scan-interval-ms``.
"""
from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import signal
import sys
import time
import zlib
from typing import Any, Callable, Optional

from broker.metadata import fastjson
from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from broker.remoting.limits import ListenLimits
from broker.remoting.server import RemotingConnection, RemotingServer
from broker.config.java_properties import ConfigError, read_properties_file
from namesrv.admin_requests import DEFAULTS, NamesrvAdmin
from namesrv.doors import DEFAULT_HOST, DoorRefused, NamesrvAccess, check_doors, security_from
from namesrv.kv_config import KvConfigStore, KvLimitError, KvLimits
from namesrv.route_info import BROKER_CHANNEL_MAX_IDLE_MS, RouteInfoManager
from broker.remoting.acl import AclConfigError, PlainAccessValidator

log = logging.getLogger("namesrv")
FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


def _now_ms() -> int:
    return int(time.time() * 1000)


def java_crc32(data: bytes) -> int:
    return zlib.crc32(data) & 0x7FFFFFFF


def _int(fields: dict[str, str], name: str, default: int = 0) -> int:
    try:
        return int(fields.get(name, default))
    except ValueError:
        raise ValueError(f"header field {name}={fields.get(name)!r} is not an integer") from None


def _json_body(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class NamesrvController:
    def __init__(self, *, host: str = DEFAULT_HOST, port: int = 9876,
                 broker_channel_max_idle_ms: int = BROKER_CHANNEL_MAX_IDLE_MS, scan_interval_ms: int = 10_000,
                 limits: Optional[ListenLimits] = None, kv_limits: Optional[KvLimits] = None,
                 access: Optional[NamesrvAccess] = None, config: Optional[dict[str, str]] = None) -> None:
        self.host, self.port = host, port
        self.route = RouteInfoManager(broker_channel_max_idle_ms)
        self.scan_interval_ms = scan_interval_ms
        self.kv = KvConfigStore(kv_limits)
        self.server = RemotingServer(name="namesrv", limits=limits)
        if access is not None:
            self.server.rpc_hooks.append(access)
        self.server.close_listeners.append(self._on_close)
        for code, handler in {
            RC.REGISTER_BROKER: self.register_broker, RC.UNREGISTER_BROKER: self.unregister_broker,
            RC.GET_ROUTEINFO_BY_TOPIC: self.get_route_info, RC.GET_BROKER_CLUSTER_INFO: self.get_cluster_info,
            RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_topic_list, RC.QUERY_DATA_VERSION: self.query_data_version,
            RC.PUT_KV_CONFIG: self.put_kv, RC.GET_KV_CONFIG: self.get_kv, RC.DELETE_KV_CONFIG: self.delete_kv,
            RC.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
        }.items():
            self.server.register(code, handler)
        self.config = {**DEFAULTS, **(config or {}), "listenPort": str(port), "bindAddress": host}
        NamesrvAdmin(self).register(self.server)  # 205/327/219/224/304/311-313/318/319
        self._scan_task: Optional[asyncio.Task[None]] = None

    async def start(self) -> None:
        await self.server.start(self.host, self.port)
        self.port = self.server.port
        self._scan_task = asyncio.get_running_loop().create_task(self._scan_loop(), name="namesrv-scan")

    async def shutdown(self) -> None:
        if self._scan_task is not None:
            self._scan_task.cancel()
            self._scan_task = None
        await self.server.stop()

    async def _scan_loop(self) -> None:
        while True:
            await asyncio.sleep(self.scan_interval_ms / 1000.0)
            for addr in self.route.scan_not_active_broker(_now_ms()):
                log.warning("the broker channel expired, %s %dms", addr, self.route.max_idle_ms)

    def _on_close(self, conn: RemotingConnection) -> None:
        self.route.on_channel_destroy(conn)

    # ------------------------------------------------------------------ processors
    async def register_broker(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        f = cmd.ext_fields
        for name in ("brokerName", "brokerAddr", "clusterName", "brokerId"):
            if not f.get(name):
                return cmd.response(R.SYSTEM_ERROR, f"the custom field <{name}> is null")
        crc = _int(f, "bodyCrc32")
        if crc != 0 and java_crc32(cmd.body) != crc:
            log.warning("receive registerBroker request, crc32 not match, from %s", conn.remote_addr)
            return cmd.response(R.SYSTEM_ERROR, "crc32 not match")
        if f.get("compressed") == "true":
            return cmd.response(R.SYSTEM_ERROR, "compressed RegisterBrokerBody is not supported; set compressedRegister=false")
        wrapper: Optional[dict[str, Any]] = None
        if cmd.body:
            try:
                body = fastjson.loads(cmd.body.decode("utf-8"))
                wrapper = body.get("topicConfigSerializeWrapper") or {}
            except (UnicodeDecodeError, ValueError, AttributeError) as exc:
                return cmd.response(R.SYSTEM_ERROR, f"RegisterBrokerBody is not valid JSON: {exc}")
        result = self.route.register_broker(f["clusterName"], f["brokerAddr"], f["brokerName"], _int(f, "brokerId"),
                                            f.get("haServerAddr"), wrapper if wrapper is not None else
                                            {"topicConfigTable": {}, "dataVersion": None}, conn, _now_ms())
        return cmd.response(R.SUCCESS, None, {k: v for k, v in result.items() if v},
                            _json_body({"table": self.kv.table("ORDER_TOPIC_CONFIG")}))

    async def unregister_broker(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        f = cmd.ext_fields
        self.route.unregister_broker(f.get("clusterName", ""), f.get("brokerAddr", ""), f.get("brokerName", ""),
                                     _int(f, "brokerId"))
        return cmd.response(R.SUCCESS)

    async def get_route_info(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        topic = cmd.ext_fields.get("topic", "")
        data = self.route.pickup_topic_route_data(topic)
        if data is None:
            return cmd.response(R.TOPIC_NOT_EXIST, f"No topic route info in name server for the topic: {topic}{FAQ}")
        order = self.kv.table("ORDER_TOPIC_CONFIG").get(topic)
        if order:
            data["orderTopicConf"] = order
        return cmd.response(R.SUCCESS, None, body=_json_body(data))

    async def get_cluster_info(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        return cmd.response(R.SUCCESS, None, body=_json_body(self.route.cluster_info()))

    async def get_topic_list(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        return cmd.response(R.SUCCESS, None, body=_json_body({"topicList": self.route.topic_list()}))

    async def delete_topic(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        topic = cmd.ext_fields.get("topic") or ""
        if self.route.topic_queue_table.pop(topic, None) is not None:
            log.info("deleteTopicInNamesrv %s called by %s", topic, conn.remote_addr)
        return cmd.response(R.SUCCESS)

    async def query_data_version(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        addr = cmd.ext_fields.get("brokerAddr", "")
        try:
            theirs = fastjson.loads(cmd.body.decode("utf-8")) if cmd.body else None
        except (UnicodeDecodeError, ValueError):
            theirs = None
        live = self.route.touch(addr, _now_ms())
        changed = live is None or live.data_version != theirs
        body = _json_body(live.data_version) if live is not None and live.data_version is not None else b""
        return cmd.response(R.SUCCESS, None, {"changed": changed}, body)

    async def put_kv(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        f = cmd.ext_fields
        try:
            self.kv.put(f.get("namespace", ""), f.get("key", ""), f.get("value", ""))
        except KvLimitError as exc:
            log.warning("refused PUT_KV_CONFIG from %s: %s", conn.remote_addr, exc)
            return cmd.response(R.SYSTEM_ERROR, str(exc))
        return cmd.response(R.SUCCESS)

    async def get_kv(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        ns, key = cmd.ext_fields.get("namespace", ""), cmd.ext_fields.get("key", "")
        value = self.kv.get(ns, key)
        if value is None:
            return cmd.response(R.QUERY_NOT_FOUND, f"No config item, Namespace: {ns} Key: {key}")
        return cmd.response(R.SUCCESS, None, {"value": value})

    async def delete_kv(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        self.kv.delete(cmd.ext_fields.get("namespace", ""), cmd.ext_fields.get("key", ""))
        return cmd.response(R.SUCCESS)


# ---------------------------------------------------------------------------------- CLI
def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="mqnamesrv", description="RocketMQ name server (remoting protocol)")
    p.add_argument("-c", "--config", help="properties file (listenPort, bindAddress, aclEnable, plainAclFile, "
                   "namesrvBrokerAccessKeys, namesrvSignedReads, namesrvAllowInsecure, kvConfigMax*, "
                   "serverChannelMaxIdleTimeSeconds, serverReadTimeoutMillis, serverMaxConnections, "
                   "serverMaxPendingBytes)")
    p.add_argument("-p", "--port", type=int, help="listenPort (default 9876)")
    p.add_argument("--host", help=f"address to listen on (default: bindAddress from -c, else {DEFAULT_HOST})")
    p.add_argument("--acl-file", help="plain_acl.yml of the name server's accounts "
                   "(same as aclEnable=true + plainAclFile)")
    p.add_argument("--allow-insecure", action="store_true",
                   help="without ACL, listen on a non-loopback address anyway (namesrvAllowInsecure=true)")
    p.add_argument("--broker-expiry-ms", type=int, default=BROKER_CHANNEL_MAX_IDLE_MS,
                   help="drop brokers silent this long (RocketMQ: 120000)")
    p.add_argument("--scan-interval-ms", type=int, default=10_000, help="expiry scan period (RocketMQ: 10000)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    props: dict[str, str] = {}
    if args.config:
        try:
            props = read_properties_file(args.config)
        except OSError as exc:
            print(f"mqnamesrv: cannot read {args.config}: {exc.strerror}", file=sys.stderr)
            return 2
        except (ConfigError, UnicodeDecodeError) as exc:
            print(f"mqnamesrv: {args.config}: {exc}", file=sys.stderr)
            return 2
    try:
        port = int(props.get("listenPort", 9876))
        limits = ListenLimits(
            idle_timeout_s=float(props.get("serverChannelMaxIdleTimeSeconds", 120)),
            read_timeout_s=float(props.get("serverReadTimeoutMillis", 30_000)) / 1000.0,
            max_connections=int(props.get("serverMaxConnections", 1024)),
            max_pending_bytes=int(props.get("serverMaxPendingBytes", 64 * 1024 * 1024)))
        kv_limits = KvLimits.from_properties(props)
    except ValueError as exc:
        print(f"mqnamesrv: bad number in {args.config}: {exc}", file=sys.stderr)
        return 2
    if args.port is not None:
        port = args.port
    access: Optional[NamesrvAccess] = None
    try:
        sec = security_from(props, host=args.host, acl_file=args.acl_file, allow_insecure=args.allow_insecure)
        validator = PlainAccessValidator(sec.acl_file) if sec.acl_file else None
        for line in check_doors(sec, validator):
            log.warning("%s", line)
    except (DoorRefused, AclConfigError) as exc:
        print(f"mqnamesrv: refusing to start: {exc}", file=sys.stderr)
        return 2
    if validator is not None:
        access = NamesrvAccess(validator, sec.broker_access_keys, sec.signed_reads)
        log.info("ACL on (%s, %d accounts): broker writes need admin or namesrvBrokerAccessKeys %s, admin writes "
                 "need admin, route reads %s", sec.acl_file, len(validator.accounts), sorted(sec.broker_access_keys),
                 "need a signed account" if sec.signed_reads else "are open")
    host = sec.host
    embedded: Optional[Callable[[], Any]] = None
    if props.get("enableControllerInNamesrv", "").strip().lower() == "true":  # Apache 5.x: controller in-process
        from controller.cli import ControllerProcess, embedded_from_namesrv
        from controller.config import DoorRefused as ControllerDoorRefused
        try:
            embedded = functools.partial(ControllerProcess, *embedded_from_namesrv(props, args.config or "<flags>"))
        except (ConfigError, ControllerDoorRefused, AclConfigError) as exc:
            print(f"mqnamesrv: refusing to start the controller (enableControllerInNamesrv): {exc}", file=sys.stderr)
            return 2

    async def run() -> int:
        ctl = NamesrvController(host=host, port=port, broker_channel_max_idle_ms=args.broker_expiry_ms,
                                scan_interval_ms=args.scan_interval_ms, limits=limits, kv_limits=kv_limits,
                                access=access, config=props)
        controller = embedded() if embedded is not None else None
        try:
            await ctl.start()
        except OSError as exc:
            print(f"mqnamesrv: cannot listen on {host}:{port}: {exc.strerror}", file=sys.stderr)
            return 1
        if controller is not None:
            try:
                await controller.start()
            except OSError as exc:
                print(f"mqnamesrv: the controller (enableControllerInNamesrv) cannot listen: {exc}", file=sys.stderr)
                await ctl.shutdown()
                return 1
        print(f"The Name Server boot success. serializeType=JSON, listening on {host}:{ctl.port}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        if controller is not None:
            await controller.stop()
        await ctl.shutdown()
        return 0

    return asyncio.run(run())
