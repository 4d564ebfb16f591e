"""Plain ACL on the HTTP API: the same accounts and permissions as remoting, signed HTTP requests.

Rules (``aclEnable=true``; with ACL off nothing here runs):
- Authentication: the signature scheme of ``broker.api.signing`` (AccessKey + HmacSHA1 over
  method, Host, path, sorted query, timestamp, nonce and body). The decision is
  ``PlainAccessValidator.check`` of ``broker.remoting.acl``, the one remoting uses:
  ``globalWhiteRemoteAddresses`` and an account's ``whiteRemoteAddress`` pass without a
  signature, an unknown AccessKey or a wrong signature is refused. Then, for HTTP only: the
  signing headers must be ASCII (a clear 401, never a 500), the timestamp at most 5 minutes
  behind and 1 minute ahead of the broker's clock, the signed ``Host`` this broker
  (``broker.api.host_binding``: a request accepted by one node is refused by the others) and the
  signature never seen before for that account (``signing.ReplayGuard``, one book per account).
  An authenticated connection is marked for the listen port's eviction rule
  (``broker.remoting.limits``): an admin's (or a white address's) is never evicted.
- Permissions (RocketMQ's PUB / SUB / admin, groups as ``%RETRY%group``), per route; which
  routes are open or admin-only comes from ``broker.remoting.permissions``, the one table the
  remoting door uses too:

  ============================================ =====================================================
  POST /messages, /messages/batch              PUB on the topic
  GET  /topics/{t}/queues/{q}/messages         SUB on the topic
  GET  /messages/by-key                        SUB on the topic
  GET  /messages/by-id, /messages/by-offset    SUB on the found message's topic (checked after
                                               the lookup; ``?topic=`` is checked before too)
  GET  /topics/{t}                             PUB or SUB on the topic (producers need queues too)
  GET  /consumer-offsets                       SUB on the group (and topic if given); all groups:
                                               admin
  POST /consumer-offsets                       SUB on group and topic to commit forward (as
                                               UPDATE_CONSUMER_OFFSET); moving an offset back (a
                                               reset) needs admin
  POST /topics, GET /admin/config/*,           admin
  POST /admin/dledger/transfer-leader,
  POST /admin/dledger/preferred-leader
  GET  /topics, /status, /admin/dledger,       any account (authenticated; no message data — as
  GET  /metrics                                RocketMQ's runtime-info requests, which need no
                                               admin). ``/metrics`` also takes ``Authorization:
                                               Bearer <metricsBearerToken>`` for Prometheus
  GET  /health                                 open (liveness only, no data)
  anything else (404/405)                      any account, so a stranger learns nothing
  ============================================ =====================================================
- Refusals: HTTP 401 (``UNAUTHORIZED``: no/unknown key, bad signature, stale timestamp, replay)
  or 403 (``NO_PERMISSION``: authenticated, not allowed), JSON as ``errors.py``, and one log
  line naming the peer, the route and RocketMQ's reason; never the secret or the signature.
  Log lines are capped per second (a flood of refusals cannot fill the disk); the suppressed
  count is logged with the next line.

Theory of operation: ``broker.api.server`` builds an :class:`HttpAcl` when ACL is on and runs
:meth:`HttpAcl.guard` from its ACL middleware before any handler; routes whose resource is only
known inside the handler call :func:`require` there. :data:`POLICIES` maps a route to what it
needs; a handler cannot be reached without its route's policy having passed.
"""
from __future__ import annotations

import hmac
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

from aiohttp import web
from dledger.ratelog import RateLimitedLog

from broker.api import errors as E
from broker.api.errors import BrokerApiError
from broker.api.host_binding import HostBinding
from broker.api.signing import (H_ACCESS_KEY, H_HOST, H_NONCE, H_SIGNATURE, H_TIMESTAMP, MAX_FUTURE_MS, MAX_SKEW_MS,
                                ReplayGuard, canonical_request, non_ascii_header, printable, signature)
from broker.remoting.http_guard import note_trust
from broker.remoting.limits import ADMIN_TRUST, AUTHENTICATED_TRUST
from broker.remoting.acl import ANY, PUB, RETRY_PREFIX, SUB, AclRefusal, PlainAccessValidator, PlainAccount
from broker.remoting.permissions import OPERATIONS, Need, http_need

log = logging.getLogger("broker.api.acl")

# the authenticated PlainAccount, or None (a white address or the metrics token)
ACCOUNT_KEY: web.RequestKey[Optional[PlainAccount]] = web.RequestKey("rmq_acl_account")
ACL_ON_KEY: web.RequestKey[HttpAcl] = web.RequestKey("rmq_acl")
Resources = dict[str, int]


def _name(value: Any) -> Optional[str]:
    return value if isinstance(value, str) and value else None


def _res(*items: tuple[Optional[str], int, bool]) -> Resources:
    out: Resources = {}
    for name, perm, group in items:
        if name:
            key = RETRY_PREFIX + name if group and not name.startswith(RETRY_PREFIX) else name
            out[key] = out.get(key, 0) | perm
    return out


@dataclass(frozen=True)
class Policy:
    """What one route needs: nothing (open), an account, admin, and/or resources."""

    open: bool = False
    admin: bool = False
    needs_body: bool = False
    resources: Callable[[web.Request, Any], Resources] = lambda r, b: {}
    admin_when: Callable[[web.Request, Any], bool] = lambda r, b: False
    bearer_ok: bool = False


def _body_topic_pub(r: web.Request, b: Any) -> Resources:
    return _res((_name(b.get("topic")) if isinstance(b, dict) else None, PUB, False))


def _offsets_query(r: web.Request, b: Any) -> Resources:
    return _res((_name(r.query.get("group")), SUB, True), (_name(r.query.get("topic")), SUB, False))


def _offsets_commit(r: web.Request, b: Any) -> Resources:
    b = b if isinstance(b, dict) else {}
    return _res((_name(b.get("group")), SUB, True), (_name(b.get("topic")), SUB, False))


AUTHENTICATED = Policy()
ADMIN = Policy(admin=True)


def _route(method: str, route: str, **detail: Any) -> tuple[tuple[str, str], Policy]:
    """A route's policy: open/admin from the permission table shared with remoting
    (``broker.remoting.permissions.HTTP``), the resources from the request as this door sees it."""
    need = http_need(method, route)
    return (method, route), Policy(open=need is Need.OPEN, admin=need is Need.ADMIN, **detail)


def _topic_of_path(perm: int) -> Callable[[web.Request, Any], Resources]:
    return lambda r, b: _res((r.match_info.get("topic"), perm, False))


def _topic_of_query(r: web.Request, b: Any) -> Resources:
    return _res((_name(r.query.get("topic")), SUB, False))


POLICIES: dict[tuple[str, str], Policy] = dict((
    _route("GET", "/health"),
    _route("POST", "/messages", needs_body=True, resources=_body_topic_pub),
    _route("POST", "/messages/batch", needs_body=True, resources=_body_topic_pub),
    _route("GET", "/topics/{topic}/queues/{queueId}/messages", resources=_topic_of_path(SUB)),
    _route("GET", "/messages/by-id/{msgId}", resources=_topic_of_query),  # + handler: the found topic
    _route("GET", "/messages/by-offset/{offset}"),  # the handler checks the message's topic
    _route("GET", "/messages/by-key", resources=_topic_of_query),
    _route("GET", "/topics"),
    _route("POST", "/topics"),
    _route("GET", "/topics/{topic}", resources=_topic_of_path(ANY)),
    # without ?group= it is every group's offsets: the table's "query-all-offsets" (admin)
    _route("GET", "/consumer-offsets", resources=_offsets_query,
           admin_when=lambda r, b: not r.query.get("group") and OPERATIONS["query-all-offsets"].need is Need.ADMIN),
    _route("POST", "/consumer-offsets", needs_body=True, resources=_offsets_commit),  # + handler: reset = admin
    _route("GET", "/status"),
    _route("GET", "/admin/config/{name}"),
    _route("GET", "/admin/dledger"),
    _route("POST", "/admin/dledger/transfer-leader"),
    _route("POST", "/admin/dledger/preferred-leader"),
    _route("GET", "/metrics", bearer_ok=True),
))


def policy_for(method: str, canonical: Optional[str]) -> Policy:
    m = "GET" if method == "HEAD" else method
    return POLICIES.get((m, canonical or ""), AUTHENTICATED)


def peer_ip(request: web.Request) -> tuple[str, str]:
    """(ip, "ip:port") of the HTTP peer."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    if isinstance(peer, tuple) and len(peer) >= 2:
        return str(peer[0]), f"{peer[0]}:{peer[1]}"
    return "", "?"


class HttpAcl:
    """The plain ACL of one broker's HTTP API (module rules)."""

    def __init__(self, validator: PlainAccessValidator, *, metrics_bearer_token: Optional[str] = None,
                 clock_ms: Callable[[], int] = lambda: int(time.time() * 1000), max_skew_ms: int = MAX_SKEW_MS,
                 max_future_ms: int = MAX_FUTURE_MS, host_names: Iterable[str] = ()) -> None:
        self.validator = validator
        self.metrics_bearer_token = metrics_bearer_token or None
        self.clock_ms = clock_ms
        self.max_skew_ms = max_skew_ms
        self.max_future_ms = max_future_ms
        self.replay = ReplayGuard(window_ms=max_skew_ms)
        self.hosts = HostBinding(host_names)
        self.refused = {"401": 0, "403": 0}
        self._log = RateLimitedLog(log, burst=20, window_s=1.0)

    # ---- the middleware's part
    async def guard(self, request: web.Request, canonical: Optional[str], read_body: Callable[[], Any]) -> None:
        """Authenticate and authorize ``request`` for its route, or raise a 401/403 BrokerApiError."""
        request[ACL_ON_KEY] = self
        pol = policy_for(request.method, canonical)
        if pol.open:
            return
        if pol.bearer_ok and self._bearer_ok(request.headers.get("Authorization")):
            request[ACCOUNT_KEY] = None
            note_trust(request.transport, AUTHENTICATED_TRUST)
            return
        try:
            raw = await request.read()
            account = await self._authenticate(request, raw)
            request[ACCOUNT_KEY] = account
            # the connection proved itself: the port's eviction spares it (admins: always)
            note_trust(request.transport, ADMIN_TRUST if account is None or account.admin else AUTHENTICATED_TRUST)
            if account is None:
                return
            body = await read_body() if pol.needs_body else None
            admin = pol.admin or pol.admin_when(request, body)
            self.validator.authorize(account, admin_for=f"{request.method} {request.path}" if admin else None,
                                     resources=pol.resources(request, body))
        except AclRefusal as exc:
            raise self._refuse(request, exc) from None

    def _bearer_ok(self, header: Optional[str]) -> bool:
        token = self.metrics_bearer_token
        if not token or not header or not header.startswith("Bearer "):
            return False
        return hmac.compare_digest(header[7:].strip().encode(), token.encode())

    async def _authenticate(self, request: web.Request, raw: bytes) -> Optional[PlainAccount]:
        """The account of a signed request (None: a white address), or AclRefusal. Order: ASCII
        headers, signature (over the Host too), timestamp window, the Host names this broker,
        then the replay guard (so a request for another broker is never remembered)."""
        ip, _ = peer_ip(request)
        h = request.headers
        access_key = h.get(H_ACCESS_KEY)
        stamp: list[int] = []

        def verify(acc: PlainAccount) -> None:
            bad = non_ascii_header(h)
            if bad is not None:
                raise AclRefusal(f"header {bad} is not ASCII text (its bytes are not UTF-8 or not printable); "
                                 f"signing headers are ASCII (accessKey={acc.access_key})", authenticated=False)
            ts, nonce, sig = h.get(H_TIMESTAMP) or "", h.get(H_NONCE) or "", h.get(H_SIGNATURE) or ""
            content = canonical_request(request.method, h.get(H_HOST) or "", request.path, request.query.items(),
                                        acc.access_key, ts, nonce, raw)
            if not sig or not hmac.compare_digest(signature(acc.secret_key, content).encode(), sig.encode()):
                raise AclRefusal(f"Check signature failed for accessKey={acc.access_key}", authenticated=False)
            if not ts.isdigit() or len(ts) > 15:
                raise AclRefusal(f"{H_TIMESTAMP} must be Unix epoch milliseconds (accessKey={acc.access_key})",
                                 authenticated=False)
            now = self.clock_ms()
            skew = int(ts) - now
            if skew < -self.max_skew_ms or skew > self.max_future_ms:
                limit = self.max_future_ms if skew > 0 else self.max_skew_ms
                raise AclRefusal(f"request timestamp is {abs(skew) // 1000} s {'ahead of' if skew > 0 else 'behind'} "
                                 f"the broker's clock, outside the {limit // 1000} s window"
                                 f"{' allowed for clock differences' if skew > 0 else ''} "
                                 f"(accessKey={acc.access_key})", authenticated=False)
            stamp[:] = [int(ts), now]

        account = self.validator.check(ip, access_key, verify, admin_for=None, resources={})
        if account is None or not stamp:
            return account
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        why = await self.hosts.refusal(h.get(H_HOST) or "", sockname)
        if why is None:
            why = self.replay.admit(account.access_key, h.get(H_SIGNATURE) or "", stamp[0], stamp[1])
        if why is not None:
            raise AclRefusal(f"{why} (accessKey={account.access_key})", authenticated=False)
        return account

    def _refuse(self, request: web.Request, exc: AclRefusal) -> BrokerApiError:
        _, peer = peer_ip(request)
        status = "403" if exc.authenticated else "401"
        self.refused[status] += 1
        reason = printable(str(exc), 400)  # a header's undecodable bytes never reach the log or the JSON raw
        self._log.warning("refused", "HTTP ACL refused %s %s from %s (%s): %s", request.method, printable(request.path), peer,
                          status, reason)
        return BrokerApiError(E.NO_PERMISSION if exc.authenticated else E.UNAUTHORIZED, reason)

    # ---- the handlers' part
    def require(self, request: web.Request, *, admin_for: Optional[str] = None,
                resources: Optional[Resources] = None) -> None:
        if ACCOUNT_KEY not in request:  # never authenticated: cannot happen past guard(), refuse anyway
            raise self._refuse(request, AclRefusal("request was not authenticated", authenticated=False))
        account = request[ACCOUNT_KEY]
        if account is None:  # a white address or the metrics token: allowed everything it reached
            return
        try:
            self.validator.authorize(account, admin_for=admin_for, resources=resources or {})
        except AclRefusal as exc:
            raise self._refuse(request, exc) from None


def http_acl_for(broker_config: Any, validator: Optional[PlainAccessValidator] = None) -> Optional[HttpAcl]:
    """The broker's HTTP ACL when ``aclEnable=true``, else None. ``validator`` is the one the
    remoting port uses (one reading of ``plain_acl.yml``, one decision for both protocols); without
    it the file is read here."""
    if not getattr(broker_config, "acl_enable", False):
        return None
    if validator is None:
        from broker.remoting.acl import acl_file_of  # noqa: WPS433

        validator = PlainAccessValidator(acl_file_of(broker_config))
    return HttpAcl(validator, metrics_bearer_token=getattr(broker_config, "metrics_bearer_token", None),
                   host_names=[str(getattr(broker_config, "broker_ip1", "") or "")])


def require(request: web.Request, *, admin_for: Optional[str] = None, resources: Optional[Resources] = None) -> None:
    """A handler's check for what it only knows after a lookup; a no-op with ACL off."""
    acl = request.get(ACL_ON_KEY)
    if acl is not None:
        acl.require(request, admin_for=admin_for, resources=resources)


def topic_sub(topic: Optional[str]) -> Resources:
    return _res((topic, SUB, False))


def group_topic_sub(group: str, topic: str) -> Resources:
    return _res((group, SUB, True), (topic, SUB, False))
