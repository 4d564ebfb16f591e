"""The controller's door: Apache RocketMQ 5.3.3's ``ControllerRequestProcessor`` over our
``broker.remoting`` server (codec, limits and plain ACL reused, not edited).

Rules:
- Codes served (Apache's): CONTROLLER_APPLY_BROKER_ID, CONTROLLER_REGISTER_BROKER, BROKER_HEARTBEAT,
  CONTROLLER_ALTER_SYNC_STATE_SET, CONTROLLER_ELECT_MASTER, CONTROLLER_GET_REPLICA_INFO,
  CONTROLLER_GET_METADATA_INFO, CONTROLLER_GET_SYNC_STATE_DATA, CLEAN_BROKER_DATA,
  CONTROLLER_GET_NEXT_BROKER_ID, GET_CONTROLLER_CONFIG, UPDATE_CONTROLLER_CONFIG. Any other code:
  ``REQUEST_CODE_NOT_SUPPORTED`` (the remoting server's answer).
- Writes (apply id, register, alter, elect, clean) and reads (replica info, sync state data, next
  id) go through :meth:`controller.server.ControllerServer.submit` (leader only, answered after
  commit). BROKER_HEARTBEAT, GET_METADATA_INFO and the config codes are answered by whichever
  member is asked (Apache's). A heartbeat without ``brokerId`` is ``CONTROLLER_INVALID_REQUEST``
  "Heart beat with empty brokerId"; a full heartbeat table ``SYSTEM_BUSY``.
- A header that does not decode (a missing ``@CFNotNull`` field, a bad number) or a body that is
  not the JSON Apache writes is ``SYSTEM_ERROR`` naming the field (Java: the exception's message).
  GET_SYNC_STATE_DATA with no broker names is Apache's ``createResponseCommand(null)``:
  ``SYSTEM_ERROR`` "not set any response code".
- A successful CONTROLLER_ELECT_MASTER is pushed to the set's live brokers when
  ``notifyBrokerRoleChanged`` (Apache's processor does it too).
- UPDATE_CONTROLLER_CONFIG: keys of ``configBlackList`` are ``NO_PERMISSION`` "Can not update config
  in black list." (Apache's); :data:`controller.config.HOT_KEYS` change at once; any other known key
  is refused naming it (it needs a restart) and an unknown key names the nearest known one
  (Apache sets any field by reflection and ignores unknown keys).
- Authentication (:class:`ControllerAccess`, the remoting server's RPC hook, run before any header
  or body is decoded): every request is signed by an account of the plain ACL (AccessKey +
  HmacSHA1, as Apache's ``AclClientRPCHook``) or comes from a white address; CLEAN_BROKER_DATA,
  UPDATE_CONTROLLER_CONFIG and a designated CONTROLLER_ELECT_MASTER (``designateElect=true``, an
  admin's) need ``admin: true``. Refusals are ``NO_PERMISSION`` with the ACL's remark.

Theory of operation: :class:`ControllerDoor` registers one coroutine per code on a
``RemotingServer`` and turns :class:`controller.server.Reply` into a response command.
"""
from __future__ import annotations

import hmac
import logging
from typing import Any, Awaitable, Callable, Optional, Protocol

from broker.remoting.acl import AclRefusal, PlainAccessValidator, PlainAccount, cal_signature, signed_content
from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import ResponseCode as BrokerResponseCode
from broker.remoting.limits import ADMIN_TRUST, AUTHENTICATED_TRUST
from broker.remoting.server import RemotingConnection, RemotingServer
from broker.config.java_properties import ConfigError, parse_properties
from controller.bodies import SyncStateSet, decode_broker_names
from controller.codes import ControllerRequestCode as Q
from controller.codes import ControllerResponseCode as RC
from controller.codes import request_name
from controller.config import HOT_KEYS, KEYS, ControllerConfig, nearest_key, set_key
from controller.elect_policy import LiveBrokers
from controller.fastjson import JsonBodyError
from controller.headers import (
    AlterSyncStateSetRequestHeader,
    ApplyBrokerIdRequestHeader,
    ApplyBrokerIdResponseHeader,
    BrokerHeartbeatRequestHeader,
    CleanControllerBrokerDataRequestHeader,
    ElectMasterRequestHeader,
    GetNextBrokerIdRequestHeader,
    GetReplicaInfoRequestHeader,
    HeaderError,
    RegisterBrokerToControllerRequestHeader,
    from_ext_fields,
    to_ext_fields,
)
from controller.heartbeat import BrokerHeartbeatTable, HeartbeatTableFull
from controller.replicas_info import ControllerResult, ReplicasInfoManager
from controller.server import Reply

log = logging.getLogger("controller.door")

ADMIN_CODES = frozenset({Q.CLEAN_BROKER_DATA, Q.UPDATE_CONTROLLER_CONFIG})


class ControllerHost(Protocol):
    """What the door needs of :class:`controller.server.ControllerServer`."""

    config: ControllerConfig
    replicas: ReplicasInfoManager
    heartbeats: BrokerHeartbeatTable
    counters: dict[str, int]

    def clock(self) -> int: ...

    def live(self) -> LiveBrokers: ...

    async def submit(self, name: str, supplier: Callable[[], ControllerResult[Any]], write: bool) -> Reply: ...

    def after_elect(self, broker_name: str) -> None: ...

    def metadata(self) -> Any: ...

    def on_channel_close(self, channel: object) -> None: ...


class ControllerAccess:
    """The door's RPC hook (module rules)."""

    def __init__(self, validator: PlainAccessValidator) -> None:
        self.validator = validator
        self.accounts = validator.accounts

    def _needs_admin(self, cmd: RemotingCommand) -> Optional[str]:
        if cmd.code in ADMIN_CODES:
            return request_name(cmd.code)
        if cmd.code == Q.CONTROLLER_ELECT_MASTER and (cmd.ext_fields.get("designateElect") or "").lower() == "true":
            return "CONTROLLER_ELECT_MASTER with designateElect=true"
        return None

    def __call__(self, cmd: RemotingCommand, conn: RemotingConnection) -> None:
        def verify(acc: PlainAccount) -> None:
            expected = cal_signature(signed_content(cmd.ext_fields, cmd.body), acc.secret_key)
            if not hmac.compare_digest(expected, cmd.ext_fields.get("Signature") or ""):
                raise AclRefusal(f"Check signature failed for accessKey={acc.access_key}", authenticated=False)

        ip = conn.remote_addr.rpartition(":")[0]
        self.validator.check(ip, cmd.ext_fields.get("AccessKey"), verify, admin_for=self._needs_admin(cmd),
                             resources={})

    def trust_of(self, cmd: RemotingCommand) -> int:
        key = cmd.ext_fields.get("AccessKey")
        acc = self.accounts.get(key) if key else None
        return ADMIN_TRUST if key is None or (acc is not None and acc.admin) else AUTHENTICATED_TRUST


Handler = Callable[[RemotingCommand, RemotingConnection], Awaitable[RemotingCommand]]


def _respond(cmd: RemotingCommand, reply: Reply) -> RemotingCommand:
    return cmd.response(reply.code, reply.remark, reply.fields, reply.body or b"")


class ControllerDoor:
    def __init__(self, host: ControllerHost) -> None:
        self.host = host

    def register(self, server: RemotingServer) -> None:
        table: dict[int, Handler] = {
            Q.CONTROLLER_APPLY_BROKER_ID: self.apply_broker_id, Q.CONTROLLER_REGISTER_BROKER: self.register_broker,
            Q.BROKER_HEARTBEAT: self.heartbeat, Q.CONTROLLER_ALTER_SYNC_STATE_SET: self.alter_sync_state_set,
            Q.CONTROLLER_ELECT_MASTER: self.elect_master, Q.CONTROLLER_GET_REPLICA_INFO: self.get_replica_info,
            Q.CONTROLLER_GET_METADATA_INFO: self.get_metadata, Q.CONTROLLER_GET_SYNC_STATE_DATA: self.sync_state_data,
            Q.CLEAN_BROKER_DATA: self.clean_broker_data, Q.CONTROLLER_GET_NEXT_BROKER_ID: self.next_broker_id,
            Q.GET_CONTROLLER_CONFIG: self.get_config, Q.UPDATE_CONTROLLER_CONFIG: self.update_config,
        }
        for code, handler in table.items():
            server.register(code, self._guarded(handler))
        server.close_listeners.append(self.host.on_channel_close)

    @staticmethod
    def _guarded(handler: Handler) -> Handler:
        async def run(cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
            try:
                return await handler(cmd, conn)
            except (HeaderError, JsonBodyError) as exc:
                return cmd.response(RC.SYSTEM_ERROR, str(exc))
        return run

    # ------------------------------------------------------------------ writes
    async def apply_broker_id(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        h = from_ext_fields(ApplyBrokerIdRequestHeader, cmd.ext_fields)
        return _respond(cmd, await self.host.submit("applyBrokerId", lambda: self._apply_broker_id(h), True))

    def _apply_broker_id(self, h: ApplyBrokerIdRequestHeader) -> ControllerResult[Any]:
        """The handler, behind the table bounds (``controllerMaxBrokerSets`` / ``...PerSet``)."""
        cfg, table = self.host.config, self.host.replicas.replica_info_table
        replicas = table.get(h.broker_name) if h.broker_name is not None else None
        if replicas is None and len(table) >= cfg.controller_max_broker_sets:
            return ControllerResult(ApplyBrokerIdResponseHeader(h.cluster_name, h.broker_name), (), None,
                                    RC.SYSTEM_BUSY, f"the controller holds {len(table)} broker sets "
                                    f"(controllerMaxBrokerSets={cfg.controller_max_broker_sets})")
        if replicas is not None and not replicas.is_broker_exist(h.applied_broker_id) \
                and len(replicas.broker_id_info) >= cfg.controller_max_brokers_per_set:
            return ControllerResult(ApplyBrokerIdResponseHeader(h.cluster_name, h.broker_name), (), None,
                                    RC.SYSTEM_BUSY, f"broker set {h.broker_name} has {len(replicas.broker_id_info)} "
                                    f"brokers (controllerMaxBrokersPerSet={cfg.controller_max_brokers_per_set})")
        return self.host.replicas.apply_broker_id(h)

    async def register_broker(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        h = from_ext_fields(RegisterBrokerToControllerRequestHeader, cmd.ext_fields)
        return _respond(cmd, await self.host.submit(
            "registerSuccess", lambda: self.host.replicas.register_broker(h, self.host.live()), True))

    async def alter_sync_state_set(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        h = from_ext_fields(AlterSyncStateSetRequestHeader, cmd.ext_fields)
        body = SyncStateSet.decode(cmd.body) if cmd.body else None
        return _respond(cmd, await self.host.submit(
            "alterSyncStateSet", lambda: self.host.replicas.alter_sync_state_set(h, body, self.host.live()), True))

    async def elect_master(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        h = from_ext_fields(ElectMasterRequestHeader, cmd.ext_fields)
        reply = await self.host.submit("electMaster", lambda: self.host.replicas.elect_master(h, self.host.live()),
                                       True)
        if reply.code == RC.SUCCESS:
            self.host.after_elect(h.broker_name)
        return _respond(cmd, reply)

    async def clean_broker_data(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        h = from_ext_fields(CleanControllerBrokerDataRequestHeader, cmd.ext_fields)
        return _respond(cmd, await self.host.submit(
            "cleanBrokerData", lambda: self.host.replicas.clean_broker_data(h, self.host.live()), True))

    # ------------------------------------------------------------------ reads
    async def get_replica_info(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        h = from_ext_fields(GetReplicaInfoRequestHeader, cmd.ext_fields)
        return _respond(cmd, await self.host.submit("getReplicaInfo", lambda: self.host.replicas.get_replica_info(h),
                                                    False))

    async def next_broker_id(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        h = from_ext_fields(GetNextBrokerIdRequestHeader, cmd.ext_fields)
        return _respond(cmd, await self.host.submit(
            "getNextBrokerId", lambda: self.host.replicas.get_next_broker_id(h), False))

    async def sync_state_data(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        names = decode_broker_names(cmd.body) if cmd.body else []
        if not names:
            return cmd.response(RC.SYSTEM_ERROR, "not set any response code")
        return _respond(cmd, await self.host.submit(
            "getSyncStateData", lambda: self.host.replicas.get_sync_state_data(names, self.host.live()), False))

    # ------------------------------------------------------------------ any member
    async def heartbeat(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        h = from_ext_fields(BrokerHeartbeatRequestHeader, cmd.ext_fields)
        if h.broker_id is None:
            return cmd.response(RC.CONTROLLER_INVALID_REQUEST, "Heart beat with empty brokerId")
        try:
            self.host.heartbeats.on_heartbeat(
                h.cluster_name, h.broker_name, h.broker_addr, h.broker_id, self.host.clock(),
                timeout_ms=h.heartbeat_timeout_mills, channel=conn, epoch=h.epoch, max_offset=h.max_offset,
                confirm_offset=h.confirm_offset, election_priority=h.election_priority)
        except HeartbeatTableFull as exc:
            return cmd.response(RC.SYSTEM_BUSY, str(exc))
        self.host.counters["heartbeats"] += 1
        return cmd.response(RC.SUCCESS, "Heart beat success")

    async def get_metadata(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        return cmd.response(RC.SUCCESS, None, to_ext_fields(self.host.metadata()))

    async def get_config(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        props = self.host.config.to_properties()
        text = "".join(f"{k}={v}\n" for k, v in sorted(props.items()))
        return cmd.response(RC.SUCCESS, None, None, text.encode("utf-8"))

    async def update_config(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        log.info("updateConfig called by %s", conn.remote_addr)
        if not cmd.body:
            return cmd.response(RC.SUCCESS)
        try:
            items = parse_properties(cmd.body.decode("utf-8"), "UPDATE_CONTROLLER_CONFIG")
        except (UnicodeDecodeError, ConfigError) as exc:
            return cmd.response(RC.SYSTEM_ERROR, f"string2Properties error: {exc}")
        cfg = self.host.config
        black = {k.strip() for k in cfg.config_black_list.split(";") if k.strip()}
        if any(k in black for k, _, _ in items):
            return cmd.response(BrokerResponseCode.NO_PERMISSION, "Can not update config in black list.")
        for key, _, _ in items:
            if key not in KEYS:
                return cmd.response(RC.SYSTEM_ERROR, f"unknown controller key {key!r}{nearest_key(key)}")
            if key not in HOT_KEYS:
                return cmd.response(RC.SYSTEM_ERROR, f"{key} cannot change while the controller runs (restart it "
                                                     f"with the new value); these can: {', '.join(sorted(HOT_KEYS))}")
        try:
            for key, raw, _ in items:
                probe = ControllerConfig(**{f: getattr(cfg, f) for f in vars(cfg)})
                set_key(probe, key, raw, key)
                attr = KEYS[key][0]
                if isinstance(getattr(probe, attr), int) and not isinstance(getattr(probe, attr), bool) \
                        and getattr(probe, attr) <= 0:
                    return cmd.response(RC.SYSTEM_ERROR, f"{key}: must be positive, got {raw!r}")
            for key, raw, _ in items:
                set_key(cfg, key, raw, key)
        except ConfigError as exc:
            return cmd.response(RC.SYSTEM_ERROR, str(exc))
        self.host.replicas.enable_elect_unclean_master = cfg.enable_elect_unclean_master
        log.info("controller config updated by %s: %s", conn.remote_addr, ", ".join(k for k, _, _ in items))
        return cmd.response(RC.SUCCESS)
