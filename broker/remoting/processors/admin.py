"""AdminBrokerProcessor + QueryMessageProcessor: offsets, lookups, topic admin, metadata dumps.

Rules (apache/rocketmq 4.9.x):
- GET_MAX_OFFSET / GET_MIN_OFFSET (``topic, queueId``) -> header ``offset``.
- SEARCH_OFFSET_BY_TIMESTAMP (``topic, queueId, timestamp``) -> the first queue offset whose
  store timestamp is >= timestamp (the max offset when none is), by binary search over the
  ConsumeQueue. (RocketMQ picks the nearer neighbour when there is no exact hit; for a
  consumer that wants "from this time on" the first later message is the useful answer.)
- VIEW_MESSAGE_BY_ID (``offset`` = commitlog offset) -> the stored record as body, else
  ``SYSTEM_ERROR`` "can not find message by the offset, N".
- QUERY_MESSAGE (``topic, key, maxNum, beginTimestamp, endTimestamp``) -> records indexed under
  the key (a KEYS token or the UNIQ_KEY) as body, header ``indexLastUpdateTimestamp``,
  ``indexLastUpdatePhyoffset``; none -> ``QUERY_NOT_FOUND`` "can not find message, maybe time
  range not correct".
- GET_ALL_TOPIC_CONFIG / GET_ALL_CONSUMER_OFFSET / GET_ALL_DELAY_OFFSET /
  GET_ALL_SUBSCRIPTIONGROUP_CONFIG -> the JSON of topics.json / consumerOffset.json /
  delayOffset.json / subscriptionGroup.json (with their ``dataVersion``), what a classic slave
  syncs (``SlaveSynchronize``).
- UPDATE_AND_CREATE_TOPIC (``topic, readQueueNums, writeQueueNums, perm, order``) -> create/update on
  the master (a slave answers SERVICE_NOT_AVAILABLE); a topic named like the cluster is
  ``SYSTEM_ERROR``, and so is a name over 127 characters from a client below 5.0 (4.9.8's "The
  specified topic is longer than topic max length."; ``topic_group_admin.refuse_long_topic``). The name server learns it at the next registration, which the registrar
  sends at once when the topic table's dataVersion changes.
- GET_BROKER_RUNTIME_INFO -> ``{"table": {...}}`` with a few of RocketMQ's keys.
- UPDATE_BROKER_CONFIG (25): body = properties. A key of ``configBlackList`` (default
  ``configBlackList;brokerConfigPath``) is ``NO_PERMISSION`` "Can not update config in black
  list." (as Java); a key this broker reads only at start (:data:`START_ONLY_KEYS`: names, ids,
  role, ports, addresses, store paths and file sizes, DLedger, ACL, name servers) is
  ``SYSTEM_ERROR`` naming it and saying to edit the conf file and restart (Java would accept it
  and persist it for the next start); a bad value is ``SYSTEM_ERROR`` naming the key. Other known
  keys are set in memory (``getBrokerConfig`` shows them; code reading the setting at run time
  sees them); unknown keys are ignored, as Java's ``properties2Object``. Unlike Java the conf
  file is not rewritten: a restart goes back to the file. ``brokerPermission`` applies at once as
  Apache's: the broker re-registers (routes carry it) and pulls / ordered sends follow it. A key in
  :data:`NOT_APPLIED_KEYS` (none today) would be refused with what to use instead.
- ACL (50-53, ``updateAclConfig`` / ``deleteAclConfig`` / ``clusterAclConfigVersion`` /
  ``updateGlobalWhiteAddr``): with ``aclEnable=true`` the plain_acl.yml is edited as Java's
  ``PlainPermissionManager`` does (account map keys ``accessKey, secretKey, whiteRemoteAddress,
  admin, defaultTopicPerm, defaultGroupPerm, topicPerms, groupPerms``; ``dataVersion`` counter +1),
  written atomically and re-read by the live validator, so the change applies to the next request
  on both doors. Failures answer Java's codes 209/210/211 with a one-line reason. Without ACL the
  answer is the one-line reason (Java answers a null remark). GET_BROKER_CLUSTER_ACL_INFO: header
  ``version`` (DataVersion JSON), ``allAclFileVersion`` ({file: DataVersion}), ``brokerName,
  brokerAddr, clusterName``. Changes need an admin account (checked here, whatever the permission table says).
- Requests that cannot apply to this broker (:data:`CANNOT_APPLY`) answer
  ``REQUEST_CODE_NOT_SUPPORTED`` with one line saying why, not a bare "request type N not supported".
"""
from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Optional

from broker.metadata.topic_config import TopicValidationError, validate_topic
from broker.config.java_properties import ConfigError, parse_properties
from broker.remoting.acl import SUB, AclConfigError, require_found
from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import ResponseCode as R
from broker.remoting.codes import request_name
from broker.refusals import Refusal
from broker.remoting.processors.common import (HandlerRegistry, HeaderError, Processor, field_bool, field_int,
                                               field_str, raw_message_at, refusal_response)
from broker.remoting.processors.topic_group_admin import refuse_long_topic
from broker.remoting.server import RemotingConnection
from broker.store.message import decode_message, record_store_timestamp

#: what this broker cannot do for a request Apache's broker answers, in one line each
CANNOT_APPLY = {
    RC.REGISTER_FILTER_SERVER: "filter servers (class filter) are not supported: TAG expressions only",
    RC.REGISTER_MESSAGE_FILTER_CLASS: "filter classes are not supported: TAG expressions only",
    RC.QUERY_CORRECTION_OFFSET: "offset correction across filter groups is not supported (no filter servers)",
    RC.RESUME_CHECK_HALF_MESSAGE: "half messages are checked back by the transaction service on its own schedule; "
                                  "resuming one by id is not supported",
}
START_ONLY_KEYS = frozenset({
    "brokerName", "brokerClusterName", "brokerId", "brokerRole", "brokerIP1", "brokerIP2", "listenPort",
    "haListenPort", "httpListenPort", "bindAddress", "haBindAddress", "haMasterAddress", "haAuthToken",
    "namesrvAddr", "rocketmqHome", "aclEnable", "plainAclFile", "enableDLegerCommitLog", "storePathRootDir",
    "storePathCommitLog", "storePathConsumeQueue", "storePathIndex", "mappedFileSizeCommitLog",
    "mappedFileSizeConsumeQueue", "maxHashSlotNum", "maxIndexNum", "remotingAllowInsecure",
})
START_ONLY_PREFIXES = ("dLeger", "storePath", "mappedFileSize")
#: keys Apache applies at once that this broker does not apply at all: refused, with what to do instead
NOT_APPLIED_KEYS: dict[str, str] = {}
ACL_FAILED = {RC.UPDATE_AND_CREATE_ACL_CONFIG: R.UPDATE_AND_CREATE_ACL_CONFIG_FAILED,
              RC.DELETE_ACL_CONFIG: R.DELETE_ACL_CONFIG_FAILED,
              RC.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG: R.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG_FAILED,
              RC.GET_BROKER_CLUSTER_ACL_INFO: R.SYSTEM_ERROR}

log = logging.getLogger("broker.remoting.admin")
_DUMPS = {RC.GET_ALL_TOPIC_CONFIG: "topics", RC.GET_ALL_CONSUMER_OFFSET: "consumerOffset",
          RC.GET_ALL_DELAY_OFFSET: "delayOffset", RC.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: "subscriptionGroup"}


class AclEditError(ValueError):
    """An ACL edit refused (Java's AclException text where it has one)."""


def read_acl_doc(path: Path) -> dict[str, Any]:
    import yaml  # noqa: WPS433 - only with aclEnable=true

    doc = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else None
    return doc if isinstance(doc, dict) else {}


def acl_data_version(doc: dict[str, Any]) -> dict[str, Any]:
    first = (doc.get("dataVersion") or [{}])[0] or {}
    return {"counter": int(first.get("counter", 0)), "timestamp": int(first.get("timestamp", 0))}


def _split(value: Optional[str]) -> Optional[list[str]]:
    return None if value is None else [x.strip() for x in value.split(",") if x.strip()]


def edit_acl_file(validator: Any, code: int, f: dict[str, str]) -> None:
    """UPDATE_AND_CREATE_ACL_CONFIG / DELETE_ACL_CONFIG / UPDATE_GLOBAL_WHITE_ADDRS_CONFIG on the
    validator's plain_acl.yml (``PlainPermissionManager``), then the validator re-reads it."""
    import yaml  # noqa: WPS433

    from broker.remoting.acl import load_plain_acl  # noqa: WPS433

    path: Path = validator.path
    doc = read_acl_doc(path)
    accounts = [a for a in doc.get("accounts") or [] if isinstance(a, dict)]
    ak = f.get("accessKey") or ""
    if code == RC.UPDATE_AND_CREATE_ACL_CONFIG:
        if len(ak) <= 6:
            raise AclEditError(f"The accessKey={ak or None} cannot be null and length should longer than 6")
        sk = f.get("secretKey")
        if sk and len(sk) <= 6:
            raise AclEditError("The secretKey value length should longer than 6")
        account = next((a for a in accounts if str(a.get("accessKey")) == ak), None)
        if account is None:
            if not sk:
                raise AclEditError(f"The secretKey of the new account {ak} cannot be null")
            account = {}
            accounts.append(account)
        account["accessKey"] = ak
        for key in ("secretKey", "defaultTopicPerm", "defaultGroupPerm"):
            if f.get(key):
                account[key] = f[key]
        if f.get("whiteRemoteAddress") is not None:
            account["whiteRemoteAddress"] = f["whiteRemoteAddress"]
        account["admin"] = str(f.get("admin", "false")).lower() == "true"
        for key in ("topicPerms", "groupPerms"):
            perms = _split(f.get(key))
            if perms is not None:
                account[key] = perms
    elif code == RC.DELETE_ACL_CONFIG:
        kept = [a for a in accounts if str(a.get("accessKey")) != ak]
        if len(kept) == len(accounts):
            raise AclEditError(f"The accesskey[{ak}] corresponding to accessConfig has been deleted failed.")
        accounts = kept
    else:
        doc["globalWhiteRemoteAddresses"] = _split(f.get("globalWhiteAddrs")) or []
    doc["accounts"] = accounts
    version = acl_data_version(doc)
    doc["dataVersion"] = [{"counter": version["counter"] + 1, "timestamp": int(time.time() * 1000)}]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    try:
        white, table = load_plain_acl(tmp)  # refuse what the validator could not read back
    except Exception:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    validator.global_white, validator.accounts = white, table


def _record_topic(raw: bytes) -> str:
    return decode_message(raw, 0, read_body=False).topic


class AdminBrokerProcessor(Processor):
    def register(self, server: HandlerRegistry) -> None:
        server.register(RC.GET_MAX_OFFSET, self.get_max_offset)
        server.register(RC.GET_MIN_OFFSET, self.get_min_offset)
        server.register(RC.SEARCH_OFFSET_BY_TIMESTAMP, self.search_offset_by_timestamp)
        server.register(RC.VIEW_MESSAGE_BY_ID, self.view_message_by_id)
        server.register(RC.QUERY_MESSAGE, self.query_message)
        for code in _DUMPS:
            server.register(code, self.get_all)
        server.register(RC.UPDATE_AND_CREATE_TOPIC, self.update_and_create_topic)
        server.register(RC.UPDATE_BROKER_CONFIG, self.update_broker_config)
        for code in (RC.UPDATE_AND_CREATE_ACL_CONFIG, RC.DELETE_ACL_CONFIG, RC.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
                     RC.GET_BROKER_CLUSTER_ACL_INFO):
            server.register(code, self.acl_admin)
        for code in CANNOT_APPLY:
            server.register(code, self.cannot_apply)

    def _tq(self, cmd: RemotingCommand) -> tuple[str, int]:
        return field_str(cmd, "topic", required=True) or "", field_int(cmd, "queueId")

    async def get_max_offset(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        return self._queue_offset(cmd, "max_offset_in_queue")

    async def get_min_offset(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        return self._queue_offset(cmd, "min_offset_in_queue")

    def _queue_offset(self, cmd: RemotingCommand, which: str) -> RemotingCommand:
        """GET_MAX_OFFSET / GET_MIN_OFFSET: ``which`` is the StoreAccess method answering it."""
        try:
            topic, q = self._tq(cmd)
        except HeaderError as exc:
            return cmd.response(R.SYSTEM_ERROR, str(exc))
        return cmd.response(R.SUCCESS, None, {"offset": getattr(self.store, which)(topic, q)})

    def offset_by_time(self, topic: str, q: int, timestamp: int) -> int:
        sa = self.store
        store = sa.store
        lo, hi = sa.min_offset_in_queue(topic, q), sa.max_offset_in_queue(topic, q)
        left, right = lo, hi  # answer in [lo, hi]
        while left < right:
            mid = (left + right) // 2
            r = store.get_message(topic, q, mid, 1)
            ts = record_store_timestamp(r.buffers[0], 0) if r.buffers else None
            if ts is None:  # removed or unreadable: look later
                left = mid + 1
            elif ts >= timestamp:
                right = mid
            else:
                left = mid + 1
        return left

    async def search_offset_by_timestamp(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        try:
            topic, q = self._tq(cmd)
            ts = field_int(cmd, "timestamp")
        except HeaderError as exc:
            return cmd.response(R.SYSTEM_ERROR, str(exc))
        return cmd.response(R.SUCCESS, None, {"offset": self.offset_by_time(topic, q, ts)})

    async def view_message_by_id(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        try:
            offset = field_int(cmd, "offset")
        except HeaderError as exc:
            return cmd.response(R.SYSTEM_ERROR, str(exc))
        raw = raw_message_at(self.c, offset)
        if raw is None:
            return cmd.response(R.SYSTEM_ERROR, f"can not find message by the offset, {offset}")
        require_found({_record_topic(raw): SUB})  # the permission table's "read-by-offset"
        return cmd.response(R.SUCCESS, None, body=raw)

    async def query_message(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        try:
            topic = field_str(cmd, "topic", required=True) or ""
            key = field_str(cmd, "key", required=True) or ""
            max_num = max(1, min(field_int(cmd, "maxNum", 32), 64))
            begin = field_int(cmd, "beginTimestamp", 0)
            end = field_int(cmd, "endTimestamp", int(time.time() * 1000) + 1)
        except HeaderError as exc:
            return cmd.response(R.SYSTEM_ERROR, str(exc))
        store = self.store.store
        index = getattr(store, "index_service", None)
        offsets = list(index.query_offset(topic, key, max_num, begin, end)) if index is not None else []
        bodies = []
        for phy in offsets:
            raw = raw_message_at(self.c, phy)
            # the index is keyed by a hash of topic#key: a collision may name another topic's
            # record, which this request has no permission to read
            if raw is not None and _record_topic(raw) == topic:
                bodies.append(raw)
        if not bodies:
            return cmd.response(R.QUERY_NOT_FOUND, "can not find message, maybe time range not correct")
        header = {"indexLastUpdateTimestamp": int(time.time() * 1000), "indexLastUpdatePhyoffset": max(offsets)}
        return cmd.response(R.SUCCESS, None, header, b"".join(bodies))

    async def get_all(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        content, _version = self.c.metadata.file_content(_DUMPS[cmd.code])
        return cmd.response(R.SUCCESS, None, body=content.encode("utf-8"))

    async def update_and_create_topic(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        try:
            topic = field_str(cmd, "topic", required=True) or ""
            validate_topic(topic)
            read_q = field_int(cmd, "readQueueNums", 8)
            write_q = field_int(cmd, "writeQueueNums", 8)
            perm = field_int(cmd, "perm", 6)
            order = field_bool(cmd, "order")  # mqadmin updateTopic -o true: an ordered topic
        except (HeaderError, TopicValidationError) as exc:
            return cmd.response(R.SYSTEM_ERROR, str(exc))
        refused = refuse_long_topic(cmd, topic)  # over 127 characters from a client below 5.0
        if refused is not None:
            return refused
        if topic == self.c.cluster_name:
            return cmd.response(R.SYSTEM_ERROR, f"the topic[{topic}] is conflict with system reserved words.")
        try:
            self.ctx.broker_processor.create_topic(topic, read_q, write_q, perm, order=order)
        except Refusal as exc:
            return refusal_response(cmd, exc)
        self.ctx.registrar_wakeup()
        return cmd.response(R.SUCCESS)

    # ------------------------------------------------------------------ config, ACL, cannot apply
    async def cannot_apply(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        return cmd.response(R.REQUEST_CODE_NOT_SUPPORTED, f"request type {cmd.code} ({request_name(cmd.code)}): "
                                                          f"{CANNOT_APPLY[cmd.code]}")

    async def update_broker_config(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        from broker.config.broker_config import FIELD_BY_KEY  # noqa: WPS433
        from broker.config.conf_file import _HINTS, _convert  # noqa: WPS433

        if not cmd.body:
            return cmd.response(R.SUCCESS)
        try:
            props = {k: v for k, v, _line in parse_properties(cmd.body.decode("utf-8"))}
        except (UnicodeDecodeError, ConfigError) as exc:
            return cmd.response(R.SYSTEM_ERROR, f"string2Properties error: {exc}")
        black = str(getattr(self.c.broker_config, "config_black_list", None) or "configBlackList;brokerConfigPath")
        if set(black.split(";")) & set(props):
            return cmd.response(R.NO_PERMISSION, "Can not update config in black list.")
        ignored = sorted(k for k in props if k in NOT_APPLIED_KEYS)
        if ignored:
            return cmd.response(R.SYSTEM_ERROR, f"{ignored[0]}: {NOT_APPLIED_KEYS[ignored[0]]}")
        fixed = sorted(k for k in props if k in START_ONLY_KEYS or k.startswith(START_ONLY_PREFIXES))
        if fixed:
            return cmd.response(R.SYSTEM_ERROR, f"{', '.join(fixed)}: read once at start by this broker; edit the "
                                                "conf file and restart it")
        changes: list[tuple[Any, str, Any]] = []
        for key, raw in props.items():
            target = FIELD_BY_KEY.get(key)
            if target is None:
                continue
            owner, name = target
            obj = self.c.broker_config if isinstance(self.c.broker_config, owner) else self.c.store_config
            try:
                changes.append((obj, name, _convert(_HINTS[owner][name], raw, key)))
            except ConfigError as exc:
                return cmd.response(R.SYSTEM_ERROR, str(exc))
        for obj, name, value in changes:
            setattr(obj, name, value)
        log.info("updateBrokerConfig called by %s: %s", conn.remote_addr, sorted(props))
        if "brokerPermission" in props:  # routes change: as Apache, a new topics dataVersion (the name
            self.c.metadata.managers["topics"].changed()  # server takes queue data only from a new one)
            self.ctx.registrar_wakeup()  # and register at once
        return cmd.response(R.SUCCESS)

    async def acl_admin(self, cmd: RemotingCommand, conn: RemotingConnection) -> RemotingCommand:
        v = getattr(self.ctx, "acl", None)
        if cmd.code != RC.GET_BROKER_CLUSTER_ACL_INFO:
            require_found({}, admin_for="changing the ACL")  # also until broker.remoting.permissions lists 50-53
        if v is None:
            return cmd.response(ACL_FAILED[cmd.code], "aclEnable=false on this broker: there is no plain_acl.yml to "
                                                      "read or change (set aclEnable=true and plainAclFile)")
        try:
            if cmd.code == RC.GET_BROKER_CLUSTER_ACL_INFO:
                version = acl_data_version(read_acl_doc(v.path))
                c = self.c
                return cmd.response(R.SUCCESS, None, {
                    "version": json.dumps(version, separators=(",", ":")),
                    "allAclFileVersion": json.dumps({str(v.path): version}, separators=(",", ":")),
                    "brokerName": c.broker_name, "brokerAddr": f"{c.broker_ip}:{c.listen_port}",
                    "clusterName": c.cluster_name})
            edit_acl_file(v, cmd.code, cmd.ext_fields)
        except (AclEditError, AclConfigError, OSError) as exc:
            return cmd.response(ACL_FAILED[cmd.code], str(exc))
        log.info("%s called by %s", request_name(cmd.code), conn.remote_addr)
        return cmd.response(R.SUCCESS)
