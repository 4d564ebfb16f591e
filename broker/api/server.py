"""The broker's HTTP API (aiohttp): produce, pull, lookups, offsets, topics, status, metrics.

Routes (all JSON unless noted; errors are ``{"code", "message", ...}``, see ``errors.py``):

====== =========================================== ===============================================
POST   /messages                                   one message ``{"topic","queueId"?,"tags"?,
                                                   "keys"?,"properties"?,"body","bodyEncoding"?}``
POST   /messages/batch                             ``{"topic","queueId"?,"messages":[...]}``
GET    /topics/{topic}/queues/{queueId}/messages   pull: ``?offset=&maxCount=`` (default 32, max 1024)
GET    /messages/by-id/{msgId}                     offset msgId (or uniq key with ``?topic=``)
GET    /messages/by-offset/{commitLogOffset}       the record at that physical offset
GET    /messages/by-key                            ``?topic=&key=&maxNum=``
GET    /topics                                     topic configs
POST   /topics                                     ``{"topic","readQueueNums"?,"writeQueueNums"?,"perm"?}``
GET    /topics/{topic}                             config + per-queue min/max offsets
GET    /consumer-offsets                           ``?group=&topic=`` (both optional)
POST   /consumer-offsets                           ``{"group","topic","queueId","offset"}``
GET    /status                                     role, ids, offsets, dispatch behind, HA, paths
GET    /admin/config/{name}                        ``topics|consumerOffset|delayOffset|subscriptionGroup``:
                                                   ``{"name","dataVersion","content"}`` (SlaveSynchronize)
GET    /admin/dledger                              DLedger role, term, leader, indexes, divided offset,
                                                   per-follower lag (DLedger mode only)
POST   /admin/dledger/transfer-leader              ``{"to": "n1"}`` (on the leader; elsewhere NOT_MASTER)
POST   /admin/dledger/preferred-leader             ``{"ids": ["n1"]}`` (``[]`` clears; this node only)
GET    /metrics                                    Prometheus text format 0.0.4
GET    /health                                     ``{"ok": true}``; 503 ``{"ok": false, "error", "fix"}`` once the DLedger member stopped
====== =========================================== ===============================================

Rules:
- Handlers are thin: parse and validate (``validation.py``), call the controller, render. The
  controller owns every decision about roles ("am I master?") and the store.
- The request body limit is ``client_max_size`` (set from ``maxMessageSize``); exceeding it is
  ``REQUEST_TOO_LARGE`` before any byte is parsed. Malformed JSON is ``BAD_REQUEST``.
- Anything unexpected is logged once with its traceback and answered ``SYSTEM_ERROR``; the
  process keeps serving. A JSON body nested too deeply is ``BAD_REQUEST``, not a traceback.
- ``aclEnable=true``: every route but ``/health`` needs a signed request of a ``plain_acl.yml``
  account with RocketMQ's permissions (``http_acl.py`` has the scheme and the route table);
  refusals are 401/403 before any handler runs.
- Batches: at most ``maxBatchMessageCount`` messages and ``maxMessageSize`` encoded bytes.

Theory of operation: :func:`build_app` wires routes to a controller object (duck-typed, see
``broker.controller.BrokerController``) and installs :func:`error_middleware`, which also counts
requests per route/status for ``/metrics``, then (ACL on) :func:`acl_middleware`; the request
body is parsed once (:func:`read_json` caches it) whether the ACL or the handler asks first.
"""
from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

import orjson
from aiohttp import web

from broker.api import errors as E
from broker.api.backend import ApiBackend
from broker.api.errors import BrokerApiError
from broker.store.put_result import PutRefused
from broker.api.http_acl import HttpAcl, group_topic_sub, require, topic_sub
from broker.api.validation import DEFAULT_MAX_BATCH_MESSAGE_COUNT, check_name, int_field, parse_batch, parse_json, \
    parse_produce, query_int

log = logging.getLogger("broker.api")

CONTROLLER_KEY = web.AppKey("controller", ApiBackend)  # broker.processor.BrokerProcessor
ACL_KEY = web.AppKey("http_acl", object)  # HttpAcl when aclEnable=true
MAX_BATCH_KEY = web.AppKey("max_batch_message_count", int)
_JSON_KEY = web.RequestKey("rmq_json", object)
CONFIG_FILE_NAMES = ("topics", "consumerOffset", "delayOffset", "subscriptionGroup")
MAX_PULL_BATCH = 1024


_OPTS = orjson.OPT_NON_STR_KEYS  # as json.dumps: int keys become strings


def json_response(data: Any, status: int = 200) -> web.Response:
    """``data`` as a JSON response (orjson: UTF-8, non-ASCII unescaped, ~10x the json module)."""
    return web.Response(body=orjson.dumps(data, option=_OPTS), status=status, content_type="application/json")


def _route_name(request: web.Request) -> str:
    info = request.match_info
    route = getattr(info, "route", None)
    resource = getattr(route, "resource", None)
    return getattr(resource, "canonical", None) or "unmatched"


_HTTP_CODES = {404: E.NOT_FOUND, 405: E.METHOD_NOT_ALLOWED, 413: E.REQUEST_TOO_LARGE}


@web.middleware
async def error_middleware(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    controller = request.app[CONTROLLER_KEY]
    try:
        response = await handler(request)
    except BrokerApiError as exc:  # every refusal (broker.refusals): the one translation, E.http_error
        err = E.http_error(exc)
        response = json_response(err.to_json(), err.http_status)
    except PutRefused as refused:
        err = E.http_error(refused)
        response = json_response(err.to_json(), err.http_status)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = _HTTP_CODES.get(exc.status, E.BAD_REQUEST if exc.status < 500 else E.SYSTEM_ERROR)
        text = exc.text or exc.reason
        if exc.status == 404:
            text = f"no route for {request.method} {request.path}"
        response = json_response({"code": code, "message": text}, exc.status)
    except Exception as exc:  # noqa: BLE001 - never a traceback to the client
        log.exception("unexpected error serving %s %s", request.method, request.path)
        response = json_response({"code": E.SYSTEM_ERROR, "message": f"{type(exc).__name__}: {exc}"}, 500)
    controller.metrics.http_requests.inc(_route_name(request), str(response.status))
    return response


async def read_json(request: web.Request) -> Any:
    """The request body as JSON (parsed once per request; see ``validation.parse_json``)."""
    if _JSON_KEY not in request:
        raw = await request.read()  # raises HTTPRequestEntityTooLarge past client_max_size
        request[_JSON_KEY] = parse_json(raw)
    return request[_JSON_KEY]


@web.middleware
async def acl_middleware(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    """``aclEnable=true``: the route's policy (``http_acl.POLICIES``) passes before the handler runs."""
    acl: HttpAcl = request.app[ACL_KEY]  # type: ignore[assignment]
    await acl.guard(request, _route_name(request), lambda: read_json(request))
    return await handler(request)


def _peer(request: web.Request) -> tuple[str, int]:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    if isinstance(peer, tuple) and len(peer) >= 2:
        return str(peer[0]), int(peer[1])
    return ("127.0.0.1", 0)


# --- handlers ------------------------------------------------------------------------------------
async def produce(request: web.Request) -> web.Response:
    c = request.app[CONTROLLER_KEY]
    msg = parse_produce(await read_json(request), c.max_message_size)
    return json_response(await c.put_message(msg, born_host=_peer(request)))


async def produce_batch(request: web.Request) -> web.Response:
    c = request.app[CONTROLLER_KEY]
    msgs = parse_batch(await read_json(request), c.max_message_size, request.app[MAX_BATCH_KEY])
    return json_response(await c.put_messages(msgs, born_host=_peer(request)))


async def pull(request: web.Request) -> web.Response:
    c = request.app[CONTROLLER_KEY]
    topic = check_name(request.match_info["topic"], "topic")
    queue_id = query_int({"queueId": request.match_info["queueId"]}, "queueId")
    offset = query_int(request.query, "offset", default=0)
    max_count = query_int(request.query, "maxCount", default=32, minimum=1, maximum=MAX_PULL_BATCH)
    return json_response(c.get_messages(topic, queue_id, offset, max_count))


async def by_id(request: web.Request) -> web.Response:
    c = request.app[CONTROLLER_KEY]
    topic = request.query.get("topic")
    if topic is not None:
        check_name(topic, "topic")
    found = c.view_message_by_id(request.match_info["msgId"], topic)
    require(request, resources=topic_sub(found.get("topic") if isinstance(found, dict) else None))
    return json_response(found)


async def by_offset(request: web.Request) -> web.Response:
    c = request.app[CONTROLLER_KEY]
    offset = query_int({"offset": request.match_info["offset"]}, "offset")
    found = c.view_message_by_offset(offset)
    require(request, resources=topic_sub(found.get("topic") if isinstance(found, dict) else None))
    return json_response(found)


async def by_key(request: web.Request) -> web.Response:
    c = request.app[CONTROLLER_KEY]
    topic = check_name(request.query.get("topic"), "topic")
    key = request.query.get("key")
    if not key:
        raise BrokerApiError(E.BAD_REQUEST, "query parameter key is required")
    max_num = query_int(request.query, "maxNum", default=32, minimum=1, maximum=MAX_PULL_BATCH)
    return json_response(c.query_message_by_key(topic, key, max_num))


async def list_topics(request: web.Request) -> web.Response:
    return json_response(request.app[CONTROLLER_KEY].list_topics())


async def create_topic(request: web.Request) -> web.Response:
    c = request.app[CONTROLLER_KEY]
    body = await read_json(request)
    if not isinstance(body, dict):
        raise BrokerApiError(E.BAD_REQUEST, "request body must be a JSON object")
    topic = check_name(body.get("topic"), "topic")
    read_q = int_field(body, "readQueueNums", minimum=1, default=c.default_topic_queue_nums)
    write_q = int_field(body, "writeQueueNums", minimum=1, default=read_q)
    perm = int_field(body, "perm", minimum=0, default=6)
    if read_q > 1024 or write_q > 1024:
        raise BrokerApiError(E.BAD_REQUEST, "readQueueNums/writeQueueNums must be <= 1024")
    return json_response(c.create_topic(topic, read_q, write_q, perm))


async def topic_status(request: web.Request) -> web.Response:
    c = request.app[CONTROLLER_KEY]
    return json_response(c.topic_status(check_name(request.match_info["topic"], "topic")))


async def query_offsets(request: web.Request) -> web.Response:
    c = request.app[CONTROLLER_KEY]
    group = request.query.get("group")
    topic = request.query.get("topic")
    if group is not None:
        check_name(group, "group")
    if topic is not None:
        check_name(topic, "topic")
    return json_response(c.query_consumer_offsets(group, topic))


async def commit_offset(request: web.Request) -> web.Response:
    c = request.app[CONTROLLER_KEY]
    body = await read_json(request)
    if not isinstance(body, dict):
        raise BrokerApiError(E.BAD_REQUEST, "request body must be a JSON object")
    group = check_name(body.get("group"), "group")
    topic = check_name(body.get("topic"), "topic")
    queue_id = _non_negative(body, "queueId")
    offset = _non_negative(body, "offset")
    # the queue and range checks of both doors; moving back inside the queue is a reset: admin
    if c.is_offset_reset(group, topic, queue_id, offset) and ACL_KEY in request.app:
        require(request, admin_for="resetting a consumer offset backwards", resources=group_topic_sub(group, topic))
    return json_response(c.commit_consumer_offset(group, topic, queue_id, offset))


def _non_negative(body: dict[str, Any], name: str) -> int:
    value = body.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BrokerApiError(E.BAD_REQUEST, f"{name} must be an integer >= 0")
    return value


async def status(request: web.Request) -> web.Response:
    return json_response(await request.app[CONTROLLER_KEY].status())


async def config_file(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in CONFIG_FILE_NAMES:
        raise BrokerApiError(E.NOT_FOUND, f"unknown config file {name!r}; one of {', '.join(CONFIG_FILE_NAMES)}")
    return json_response(request.app[CONTROLLER_KEY].config_file(name))


async def dledger_status(request: web.Request) -> web.Response:
    return json_response(await request.app[CONTROLLER_KEY].dledger_status())


async def transfer_leader(request: web.Request) -> web.Response:
    body = await read_json(request)
    to = body.get("to") if isinstance(body, dict) else None
    if not isinstance(to, str) or not to:
        raise BrokerApiError(E.BAD_REQUEST, 'expected {"to": "<peer id>"}')
    return json_response(await request.app[CONTROLLER_KEY].transfer_leadership(to))


async def preferred_leader(request: web.Request) -> web.Response:
    body = await read_json(request)
    ids = body.get("ids") if isinstance(body, dict) else None
    if isinstance(ids, str):
        ids = [i.strip() for i in ids.split(";") if i.strip()]
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise BrokerApiError(E.BAD_REQUEST, 'expected {"ids": ["n1", ...]} (or "n1;n2")')
    return json_response(await request.app[CONTROLLER_KEY].set_preferred_leaders(ids))


async def metrics(request: web.Request) -> web.Response:
    text = request.app[CONTROLLER_KEY].metrics.render()
    return web.Response(text=text, content_type="text/plain", charset="utf-8", headers={"X-Prometheus-Format": "0.0.4"})


async def health(request: web.Request) -> web.Response:
    body = request.app[CONTROLLER_KEY].health()  # issue 13.1: not ok once the DLedger member died
    return json_response(body, status=200 if body["ok"] else 503)


def build_app(controller: ApiBackend, client_max_size: int, *, acl: HttpAcl | None = None,
              max_batch_message_count: int = DEFAULT_MAX_BATCH_MESSAGE_COUNT) -> web.Application:
    """The API application; ``acl`` (``aclEnable=true``) puts every route but ``/health`` behind it."""
    middlewares = [error_middleware] + ([acl_middleware] if acl is not None else [])
    app = web.Application(middlewares=middlewares, client_max_size=client_max_size)
    app[CONTROLLER_KEY] = controller
    app[MAX_BATCH_KEY] = max_batch_message_count
    if acl is not None:
        app[ACL_KEY] = acl
    r = app.router
    r.add_post("/messages", produce)
    r.add_post("/messages/batch", produce_batch)
    r.add_get("/topics/{topic}/queues/{queueId}/messages", pull)
    r.add_get("/messages/by-id/{msgId}", by_id)
    r.add_get("/messages/by-offset/{offset}", by_offset)
    r.add_get("/messages/by-key", by_key)
    r.add_get("/topics", list_topics)
    r.add_post("/topics", create_topic)
    r.add_get("/topics/{topic}", topic_status)
    r.add_get("/consumer-offsets", query_offsets)
    r.add_post("/consumer-offsets", commit_offset)
    r.add_get("/status", status)
    r.add_get("/admin/config/{name}", config_file)
    r.add_get("/admin/dledger", dledger_status)
    r.add_post("/admin/dledger/transfer-leader", transfer_leader)
    r.add_post("/admin/dledger/preferred-leader", preferred_leader)
    r.add_get("/metrics", metrics)
    r.add_get("/health", health)
    return app
