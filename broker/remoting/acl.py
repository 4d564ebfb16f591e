"""Plain ACL as RocketMQ 4.x: ``plain_acl.yml`` accounts, AccessKey + HmacSHA1 signatures.

Rules (``PlainAccessValidator``, ``PlainPermissionManager``, ``AclUtils``, ``Permission``,
``AclClientRPCHook`` of apache/rocketmq 4.9.x):
- Signed content = the values (not the keys) of every extField except ``Signature``, in the
  sorted order of their keys, concatenated as UTF-8, followed by the body. Signature =
  base64(HmacSHA1(secretKey, content)). The client adds ``AccessKey`` (and ali-ons
  ``OnsChannel``) to the fields before signing, so they are part of the content.
- A request code the permission table lists as open (``Need.OPEN``: a controller's
  ``NOTIFY_BROKER_ROLE_CHANGED``, a wake-up with no authority) passes unchecked and proves
  nothing about its connection (:meth:`PlainAccessValidator.trust_of`).
- Validation order: a remote address matching ``globalWhiteRemoteAddresses`` passes; no
  ``AccessKey`` -> "No accessKey is configured"; unknown key -> "No acl config for K"; an
  account's own ``whiteRemoteAddress`` match passes; wrong signature -> "Check signature failed
  for accessKey=K"; admin-only codes need ``admin: true``; then every resource the request
  touches (topic PUB/SUB, group as ``%RETRY%group``) is checked against the account's
  ``topicPerms``/``groupPerms`` or its default perms.
- Refusals raise :class:`broker.remoting.server.RpcHookRefusal` (answered ``NO_PERMISSION``;
  RocketMQ 4.9 answers SYSTEM_ERROR with the same text, 5.x NO_PERMISSION). Secret keys and
  signatures never appear in remarks or logs; the AccessKey does, as in RocketMQ.

Theory of operation: :class:`PlainAccessValidator` is an RPC hook of the RemotingServer; the
YAML file is read once at start (PyYAML). Its :meth:`PlainAccessValidator.check` is the
protocol-free decision (white addresses, account, signature callback, admin, resources), shared
with the HTTP API's signature scheme (``broker.api.http_acl``). :func:`sign_request` is the
client side.
"""
from __future__ import annotations

import base64
import contextvars
import hashlib
import hmac
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import RequestCode as RC
from broker.remoting.limits import ADMIN_TRUST, AUTHENTICATED_TRUST, UNPROVEN_TRUST
from broker.remoting.permissions import remoting_is_open, remoting_needs_admin
from broker.remoting.server import RemotingConnection, RpcHookRefusal

DENY, ANY, PUB, SUB = 1, 2, 4, 8
RETRY_PREFIX = "%RETRY%"
# the account of the remoting request being processed (set by the ACL hook, read by handlers of
# operations whose resource is only known after a lookup: ``require_found``). _ACL_OFF: no ACL.
_ACL_OFF = object()
REQUEST_ACCOUNT: contextvars.ContextVar[Any] = contextvars.ContextVar("rmq_remoting_account", default=_ACL_OFF)


def signed_content(fields: dict[str, str], body: bytes) -> bytes:
    text = "".join(v for k, v in sorted(fields.items()) if k != "Signature")
    return text.encode("utf-8") + (body or b"")


def cal_signature(content: bytes, secret_key: str) -> str:
    return base64.b64encode(hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()).decode("ascii")


def sign_request(cmd: RemotingCommand, access_key: str, secret_key: str) -> None:
    """``AclClientRPCHook.doBeforeRequest``: add AccessKey and Signature to the extFields."""
    cmd.ext_fields["AccessKey"] = access_key
    cmd.ext_fields.pop("Signature", None)
    cmd.ext_fields["Signature"] = cal_signature(signed_content(cmd.ext_fields, cmd.body), secret_key)


def signer(access_key: str, secret_key: str) -> Callable[[RemotingCommand], None]:
    return lambda cmd: sign_request(cmd, access_key, secret_key)


def parse_perm(text: Optional[str]) -> int:
    """``Permission.parsePermFromString``: DENY (default), PUB, SUB, PUB|SUB / SUB|PUB -> PUB|SUB."""
    t = (text or "").strip().upper()
    if t == "PUB":
        return PUB
    if t == "SUB":
        return SUB
    if t in ("PUB|SUB", "SUB|PUB"):
        return PUB | SUB
    return DENY


def check_permission(needed: int, owned: int) -> bool:
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def _address_matcher(pattern: Optional[str]) -> Callable[[str], bool]:
    """RemoteAddressStrategy: ``*``, exact IPv4, per-octet ``*``, ``a-b`` ranges, ``{a,b}`` sets."""
    p = (pattern or "").strip()
    if not p:
        return lambda ip: False
    if p in ("*", "*.*.*.*"):
        return lambda ip: True
    segments = p.split(".")

    def seg_ok(spec: str, value: str) -> bool:
        if spec == "*":
            return True
        if spec.startswith("{") and spec.endswith("}"):
            return value in {s.strip() for s in spec[1:-1].split(",")}
        if "-" in spec:
            lo, _, hi = spec.partition("-")
            return value.isdigit() and int(lo) <= int(value) <= int(hi)
        return spec == value

    def match(ip: str) -> bool:
        parts = ip.split(".")
        return len(parts) == len(segments) and all(seg_ok(s, v) for s, v in zip(segments, parts))

    return match


@dataclass
class PlainAccount:
    access_key: str
    secret_key: str
    admin: bool = False
    default_topic_perm: int = DENY
    default_group_perm: int = DENY
    resource_perms: dict[str, int] = field(default_factory=dict)
    white: Callable[[str], bool] = lambda ip: False

    def __repr__(self) -> str:  # never show the secret
        return f"PlainAccount(access_key={self.access_key!r}, admin={self.admin})"


class AclConfigError(ValueError):
    pass


def acl_file_of(broker_config: Any) -> Path:
    """``plainAclFile`` (ours), else ``$rocketmqHome/conf/plain_acl.yml`` (as RocketMQ)."""
    explicit = getattr(broker_config, "plain_acl_file", None)
    if explicit:
        return Path(explicit)
    home = getattr(broker_config, "rocketmq_home", None) or os.environ.get("ROCKETMQ_HOME")
    if home:
        return Path(home) / "conf" / "plain_acl.yml"
    raise AclConfigError("aclEnable=true needs plainAclFile=<path to plain_acl.yml> (or rocketmqHome with conf/plain_acl.yml)")


def _perm_entries(items: Any, is_group: bool, where: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items or []:
        name, sep, perm = str(item).partition("=")
        if not sep or not name.strip():
            raise AclConfigError(f"{where}: entry {item!r} is not RESOURCE=PERM")
        res = name.strip()
        out[RETRY_PREFIX + res if is_group else res] = parse_perm(perm)
    return out


def load_plain_acl(path: str | Path) -> tuple[list[Callable[[str], bool]], dict[str, PlainAccount]]:
    import yaml  # noqa: WPS433 - only when aclEnable=true

    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise AclConfigError(f"cannot read ACL file {p}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise AclConfigError(f"ACL file {p} is not valid YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise AclConfigError(f"ACL file {p}: top level must be a mapping")
    white = [_address_matcher(str(a)) for a in doc.get("globalWhiteRemoteAddresses") or []]
    accounts: dict[str, PlainAccount] = {}
    for i, acc in enumerate(doc.get("accounts") or []):
        where = f"{p}: accounts[{i}]"
        ak, sk = str(acc.get("accessKey") or ""), str(acc.get("secretKey") or "")
        if len(ak) <= 6 or len(sk) <= 6:
            raise AclConfigError(f"{where}: accessKey and secretKey must be longer than 6 characters")
        perms = _perm_entries(acc.get("topicPerms"), False, where)
        perms.update(_perm_entries(acc.get("groupPerms"), True, where))
        accounts[ak] = PlainAccount(ak, sk, bool(acc.get("admin", False)), parse_perm(acc.get("defaultTopicPerm")),
                                    parse_perm(acc.get("defaultGroupPerm")), perms,
                                    _address_matcher(acc.get("whiteRemoteAddress")))
    return white, accounts


def needed_resources(cmd: RemotingCommand) -> dict[str, int]:
    """``PlainAccessValidator.parse``: which topics/groups a request touches, with what perm."""
    f = cmd.ext_fields
    res: dict[str, int] = {}

    def add(name: Any, perm: int, group: bool = False) -> None:
        if isinstance(name, str) and name:  # body fields may be anything a client sent
            key = name if not group or name.startswith(RETRY_PREFIX) else RETRY_PREFIX + name
            res[key] = res.get(key, 0) | perm

    code = cmd.code
    if code == RC.SEND_MESSAGE:
        add(f.get("topic"), PUB)
    elif code in (RC.SEND_MESSAGE_V2, RC.SEND_BATCH_MESSAGE):
        add(f.get("b"), PUB)
    elif code == RC.CONSUMER_SEND_MSG_BACK:
        add(f.get("group"), SUB, True)
    elif code == RC.PULL_MESSAGE:
        add(f.get("topic"), SUB)
        add(f.get("consumerGroup"), SUB, True)
    elif code == RC.QUERY_MESSAGE:
        add(f.get("topic"), SUB)
    elif code == RC.HEART_BEAT:
        try:
            hb = json.loads(cmd.body or b"{}")
        except ValueError:
            hb = {}
        cds = hb.get("consumerDataSet") if isinstance(hb, dict) else None
        for cd in cds if isinstance(cds, list) else []:
            if not isinstance(cd, dict):
                continue
            add(cd.get("groupName"), SUB, True)
            sds = cd.get("subscriptionDataSet")
            for sd in sds if isinstance(sds, list) else []:
                add(sd.get("topic") if isinstance(sd, dict) else None, SUB)
    elif code in (RC.LOCK_BATCH_MQ, RC.UNLOCK_BATCH_MQ):  # not parsed by 4.9.8; ours: the table's need
        try:
            body = json.loads(cmd.body or b"{}")
        except ValueError:
            body = {}
        if isinstance(body, dict):
            add(body.get("consumerGroup"), SUB, True)
            for mq in body.get("mqSet") or []:
                add(mq.get("topic") if isinstance(mq, dict) else None, SUB)
    elif code in (RC.UNREGISTER_CLIENT, RC.GET_CONSUMER_LIST_BY_GROUP):
        add(f.get("consumerGroup"), SUB, True)
    elif code in (RC.UPDATE_CONSUMER_OFFSET, RC.QUERY_CONSUMER_OFFSET, RC.GET_CONSUME_STATS):
        add(f.get("consumerGroup"), SUB, True)
        add(f.get("topic"), SUB)
    # not parsed by RocketMQ 4.9.8 (any account could ask); ours: the permission table's needs
    elif code in (RC.GET_MAX_OFFSET, RC.GET_MIN_OFFSET, RC.SEARCH_OFFSET_BY_TIMESTAMP, RC.GET_TOPIC_STATS_INFO):
        add(f.get("topic"), ANY)
    elif code in (RC.GET_CONSUMER_CONNECTION_LIST, RC.GET_CONSUMER_RUNNING_INFO):
        add(f.get("consumerGroup"), SUB, True)
    elif code == RC.INVOKE_BROKER_TO_GET_CONSUMER_STATUS:
        add(f.get("group"), SUB, True)
        add(f.get("topic"), SUB)
    elif code == RC.QUERY_TOPIC_CONSUME_BY_WHO:
        add(f.get("topic"), SUB)
    return res


class AclRefusal(RpcHookRefusal):
    """A refusal that says whether the caller was not authenticated (HTTP 401) or not allowed (403).

    Subclass of :class:`RpcHookRefusal`, so the remoting server answers it as before."""

    def __init__(self, message: str, *, authenticated: bool) -> None:
        super().__init__(message)
        self.authenticated = authenticated


def _unauthenticated(message: str) -> AclRefusal:
    return AclRefusal(message, authenticated=False)


def _forbidden(message: str) -> AclRefusal:
    return AclRefusal(message, authenticated=True)


class PlainAccessValidator:
    """The plain ACL (accounts, white addresses, permissions) of one broker.

    :meth:`check` is the protocol-free decision shared by the remoting RPC hook (:meth:`__call__`)
    and the HTTP API (``broker.api.http_acl``): both answer from the same accounts and rules."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.global_white, self.accounts = load_plain_acl(self.path)

    def check(self, ip: str, access_key: Optional[str], verify: Callable[[PlainAccount], None], *,
              admin_for: Optional[str], resources: dict[str, int]) -> Optional[PlainAccount]:
        """Allow or raise :class:`AclRefusal`; returns the account (None: a white address).

        ``verify(account)`` checks the request's signature with the account's secret and raises
        :class:`AclRefusal` when it does not match; ``admin_for`` names the operation when it
        needs ``admin: true``; ``resources`` maps topic / ``%RETRY%group`` to the needed perm.
        A white address (global or the account's own) skips signature and permissions, as in
        RocketMQ's ``PlainPermissionManager.validate``."""
        if any(m(ip) for m in self.global_white):
            return None
        if not access_key:
            raise _unauthenticated("No accessKey is configured")
        acc = self.accounts.get(access_key)
        if acc is None:
            raise _unauthenticated(f"No acl config for {access_key}")
        if acc.white(ip):
            return None
        verify(acc)
        self.authorize(acc, admin_for=admin_for, resources=resources)
        return acc

    @staticmethod
    def authorize(acc: PlainAccount, *, admin_for: Optional[str] = None, resources: dict[str, int] | None = None) -> None:
        """The authenticated part: ``admin: true`` when ``admin_for`` is given, then
        ``PlainPermissionManager.validate``'s resource loop (topic PUB/SUB, group as %RETRY%)."""
        if admin_for is not None and not acc.admin:
            raise _forbidden(f"Need admin permission for {admin_for}, but accessKey={acc.access_key} is not")
        if acc.admin and not acc.resource_perms:
            return
        for resource, needed in (resources or {}).items():
            if resource == "RMQ_SYS_TRACE_TOPIC" and needed == PUB:
                continue
            is_group = resource.startswith(RETRY_PREFIX)
            owned = acc.resource_perms.get(resource)
            if owned is None:
                owned = acc.default_group_perm if is_group else acc.default_topic_perm
            if not check_permission(needed, owned):
                what = f"group={resource[len(RETRY_PREFIX):]}" if is_group else f"topic={resource}"
                raise _forbidden(f"No default permission for {what}" if resource not in acc.resource_perms
                                 else f"No permission for {what} (accessKey={acc.access_key})")

    def __call__(self, cmd: RemotingCommand, conn: RemotingConnection) -> None:
        if remoting_is_open(cmd.code):  # no authority carried (permissions.Need.OPEN): nothing to check
            REQUEST_ACCOUNT.set(None)
            return

        def verify(acc: PlainAccount) -> None:
            expected = cal_signature(signed_content(cmd.ext_fields, cmd.body), acc.secret_key)
            if not hmac.compare_digest(expected, cmd.ext_fields.get("Signature") or ""):
                raise _unauthenticated(f"Check signature failed for accessKey={acc.access_key}")

        ip = conn.remote_addr.rpartition(":")[0]
        account = self.check(ip, cmd.ext_fields.get("AccessKey"), verify,
                             admin_for=f"request code={cmd.code}" if remoting_needs_admin(cmd.code) else None,
                             resources=needed_resources(cmd))
        REQUEST_ACCOUNT.set(account)  # this request's task only (each request runs in its own task)


    def trust_of(self, cmd: RemotingCommand) -> int:
        """How far a request that passed :meth:`__call__` proves its connection to the port guard
        (``broker.remoting.limits``): an open request nothing; a white address (no key needed) or
        an ``admin: true`` account admin trust; any other account authenticated trust."""
        if remoting_is_open(cmd.code):
            return UNPROVEN_TRUST
        key = cmd.ext_fields.get("AccessKey")
        if not key:
            return ADMIN_TRUST
        acc = self.accounts.get(key)
        return ADMIN_TRUST if acc is not None and acc.admin else AUTHENTICATED_TRUST


def require_found(resources: dict[str, int], *, admin_for: Optional[str] = None) -> None:
    """A remoting handler's check of what it only knows after a lookup (``Need.FOUND``), or of an
    admin-only variant of an operation (a backwards offset commit); a no-op with ACL off or for a
    white address. Raises :class:`AclRefusal` (answered NO_PERMISSION by the server)."""
    account = REQUEST_ACCOUNT.get()
    if account is _ACL_OFF or account is None:
        return
    PlainAccessValidator.authorize(account, admin_for=admin_for, resources=resources)


def topic_perm(topic: Optional[str], perm: int) -> dict[str, int]:
    return {topic: perm} if topic else {}
