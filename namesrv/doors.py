"""Who may write to the name server: signed brokers, admin accounts, or an operator's explicit "open".

Rules (issue 23, item 3; the broker's ``broker.security_policy`` mirrored for ``mqnamesrv``):
- Listen address: ``--host``, else ``bindAddress`` from the ``-c`` file, else ``127.0.0.1``
  (Apache binds ``0.0.0.0``; ours listens on loopback unless told).
- ACL: ``aclEnable=true`` + ``plainAclFile=<plain_acl.yml>`` (or ``--acl-file PATH``). Accounts,
  white addresses and signatures are the broker's plain ACL (:mod:`broker.remoting.acl`): AccessKey
  + HmacSHA1 as Apache's ``AclClientRPCHook``, so Apache's mqadmin with credentials signs alike.
- With ACL every request code is one of three kinds (:func:`kind_of`):
  * **broker writes** (REGISTER_BROKER, UNREGISTER_BROKER, QUERY_DATA_VERSION, which refreshes a
    broker's liveness, REGISTER_TOPIC_IN_NAMESRV, REGISTER_FILTER_SERVER): a signed account that is
    ``admin: true`` or listed in ``namesrvBrokerAccessKeys`` (comma separated). Our broker signs
    with its ``innerAccessKey``/``innerSecretKey``.
  * **route reads** (GET_ROUTEINFO_BY_TOPIC, GET_BROKER_CLUSTER_INFO, topic lists, GET_KV_CONFIG,
    ...): open, as Apache's (clients do not sign them unless given credentials), unless
    ``namesrvSignedReads=true``: then any signed account.
  * **admin writes**: every other code (PUT/DELETE_KV_CONFIG, WIPE_WRITE_PERM_OF_BROKER,
    DELETE_TOPIC_IN_NAMESRV, UPDATE/GET_NAMESRV_CONFIG, any code added later): ``admin: true``.
  A white address (``globalWhiteRemoteAddresses`` or the account's ``whiteRemoteAddress``) passes
  unsigned, as in RocketMQ. Refusals are ``NO_PERMISSION`` with the ACL's remark.
- Without ACL the name server is open: it starts on a loopback address (one warning line), and
  elsewhere only with ``namesrvAllowInsecure=true`` (or ``--allow-insecure``), with a loud warning;
  otherwise it refuses to start (exit 2) naming the fix.
- The accounts of the shipped sample (``conf/namesrv/plain_acl.yml``, :data:`SAMPLE_SECRETS`) are
  public: refused as soon as the bind address is not loopback.

Theory of operation: :func:`security_from` reads the settings (properties + flags) into a
:class:`NamesrvSecurity`; :func:`check_doors` decides start or refuse; :class:`NamesrvAccess` is
the RemotingServer RPC hook.
"""
from __future__ import annotations

import hmac
import logging
from dataclasses import dataclass, field
from typing import Optional

from broker.remoting.acl import AclRefusal, PlainAccount, PlainAccessValidator, cal_signature, signed_content
from broker.remoting.codec import RemotingCommand
from broker.remoting.codes import RequestCode as RC
from broker.remoting.codes import request_name
from broker.remoting.server import RemotingConnection
from broker.security_policy import is_loopback

log = logging.getLogger("namesrv")

DEFAULT_HOST = "127.0.0.1"
BROKER_WRITE, READ, ADMIN_WRITE = "broker write", "route read", "admin write"
REGISTER_TOPIC_IN_NAMESRV = 217  # Apache 4.9.8 RequestCode values not in broker.remoting.codes
GET_TOPICS_BY_CLUSTER, GET_SYSTEM_TOPIC_LIST_FROM_NS, GET_UNIT_TOPIC_LIST = 224, 304, 311
GET_HAS_UNIT_SUB_TOPIC_LIST, GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST = 312, 313
BROKER_WRITES = frozenset({RC.REGISTER_BROKER, RC.UNREGISTER_BROKER, RC.QUERY_DATA_VERSION, REGISTER_TOPIC_IN_NAMESRV,
                           RC.REGISTER_FILTER_SERVER})
#: Apache's read codes of ``DefaultRequestProcessor`` (topic lists, cluster info, KV reads).
READS = frozenset({RC.GET_ROUTEINFO_BY_TOPIC, RC.GET_BROKER_CLUSTER_INFO, RC.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
                   RC.GET_KV_CONFIG, RC.GET_KVLIST_BY_NAMESPACE, GET_TOPICS_BY_CLUSTER, GET_SYSTEM_TOPIC_LIST_FROM_NS,
                   GET_UNIT_TOPIC_LIST, GET_HAS_UNIT_SUB_TOPIC_LIST, GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST})
#: Secret keys printed in ``conf/namesrv/plain_acl.yml``: anyone who read the repository knows them.
SAMPLE_SECRETS = frozenset({"sample-namesrv-admin-change-me", "sample-namesrv-broker-change-me"})


class DoorRefused(Exception):
    """The settings would open the name server to the network: the message says what to set."""


def kind_of(code: int) -> str:
    if code in BROKER_WRITES:
        return BROKER_WRITE
    if code in READS:
        return READ
    return ADMIN_WRITE  # fail closed: a code nobody classified needs an admin


def _true(text: Optional[str]) -> bool:
    return (text or "").strip().lower() == "true"


@dataclass
class NamesrvSecurity:
    host: str = DEFAULT_HOST
    acl_file: Optional[str] = None  # set: aclEnable
    broker_access_keys: frozenset[str] = field(default_factory=frozenset)
    signed_reads: bool = False
    allow_insecure: bool = False


def security_from(props: dict[str, str], *, host: Optional[str] = None, acl_file: Optional[str] = None,
                  allow_insecure: bool = False) -> NamesrvSecurity:
    """The door settings of a ``-c`` properties file, flags winning over keys."""
    acl_enable = _true(props.get("aclEnable")) or bool(acl_file)
    path = acl_file or (props.get("plainAclFile") or "").strip() or None
    if acl_enable and not path:
        raise DoorRefused("aclEnable=true needs plainAclFile=<path to plain_acl.yml> (or --acl-file PATH)")
    keys = frozenset(k.strip() for k in (props.get("namesrvBrokerAccessKeys") or "").split(",") if k.strip())
    return NamesrvSecurity(host=(host or props.get("bindAddress", "").strip() or DEFAULT_HOST),
                           acl_file=path if acl_enable else None, broker_access_keys=keys,
                           signed_reads=_true(props.get("namesrvSignedReads")),
                           allow_insecure=allow_insecure or _true(props.get("namesrvAllowInsecure")))


def check_doors(sec: NamesrvSecurity, validator: Optional[PlainAccessValidator]) -> list[str]:
    """Raise :class:`DoorRefused`, or return the warning lines to log at start."""
    loopback = is_loopback(sec.host)
    if validator is not None:
        if not loopback:
            public = [a.access_key for a in validator.accounts.values() if a.secret_key in SAMPLE_SECRETS]
            if public:
                raise DoorRefused(f"{sec.acl_file}: account {public[0]} has the public sample secret from conf/, and "
                                  f"the name server would listen on {sec.host}: set secrets of your own")
        return []
    if loopback:
        return [f"name server OPEN on loopback {sec.host}: no ACL, any local process may register brokers and "
                "write KV config (set aclEnable=true + plainAclFile to require signatures)"]
    if not sec.allow_insecure:
        raise DoorRefused(f"the name server would accept unsigned broker registrations and KV writes from anyone on "
                          f"{sec.host}: set aclEnable=true and plainAclFile=<plain_acl.yml> (brokers sign with "
                          "innerAccessKey/innerSecretKey), or namesrvAllowInsecure=true / --allow-insecure to run it "
                          "open, or bind 127.0.0.1")
    return [f"!!! name server OPEN on {sec.host} (namesrvAllowInsecure): anyone who reaches this port can redirect "
            "topic routes, remove brokers and inject order config !!!"]


class NamesrvAccess:
    """The name server's RPC hook: broker writes, admin writes and (optionally) reads are signed."""

    def __init__(self, validator: PlainAccessValidator, broker_access_keys: frozenset[str] = frozenset(),
                 signed_reads: bool = False) -> None:
        self.validator = validator
        self.broker_access_keys = broker_access_keys
        self.signed_reads = signed_reads

    def __call__(self, cmd: RemotingCommand, conn: RemotingConnection) -> None:
        kind = kind_of(cmd.code)
        if kind == READ and not self.signed_reads:
            return

        def verify(acc: PlainAccount) -> None:
            expected = cal_signature(signed_content(cmd.ext_fields, cmd.body), acc.secret_key)
            if not hmac.compare_digest(expected, cmd.ext_fields.get("Signature") or ""):
                raise AclRefusal(f"Check signature failed for accessKey={acc.access_key}", authenticated=False)

        ip = conn.remote_addr.rpartition(":")[0]
        what = f"{request_name(cmd.code)} (a name server {kind})"
        acc = self.validator.check(ip, cmd.ext_fields.get("AccessKey"), verify,
                                   admin_for=what if kind == ADMIN_WRITE else None, resources={})
        if kind == BROKER_WRITE and acc is not None and not acc.admin and acc.access_key not in self.broker_access_keys:
            raise AclRefusal(f"accessKey={acc.access_key} may not {request_name(cmd.code)}: it is neither admin nor "
                             "in namesrvBrokerAccessKeys", authenticated=True)
