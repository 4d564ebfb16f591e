"""Python client of the broker HTTP API: ``BrokerClient`` (asyncio) and ``SyncBrokerClient``.

Rules:
- One method per route of ``broker.api.server``; both clients share the request building
  (:class:`_Requests`), so they cannot drift apart. Bodies given as ``bytes`` travel base64,
  ``str`` bodies as text.
- A non-2xx answer raises :class:`BrokerClientError` carrying the broker's ``code``,
  ``message``, HTTP status and the whole JSON (``masterAddress`` for ``NOT_MASTER``, the stored
  ``msgId``/offsets for ``FLUSH_SLAVE_TIMEOUT``). Connection failures raise
  :class:`BrokerUnavailable` (a subclass, code ``CONNECT_FAILED``).
- :class:`MasterFollowingProducer` writes to whichever broker of a group is master (follows
  ``NOT_MASTER``'s ``masterAddress``, rotates through seed addresses when a broker is down), as
  a RocketMQ producer does after a DLedger failover.
- The sync client uses only the standard library (``http.client``, one kept-alive connection,
  reconnecting once on a dropped connection), so the CLI and tests need no event loop.
- Given ``access_key``/``secret_key`` (an account of the broker's ``plain_acl.yml``), every
  request is signed (``broker.api.signing``: ``X-RMQ-AccessKey``, ``X-RMQ-Timestamp``,
  ``X-RMQ-Nonce``, ``X-RMQ-Signature``), as RocketMQ's ``AclClientRPCHook`` signs remoting
  requests; the signature covers the ``Host`` header, which the client sets to the address it
  was given (``host:port``), so a request is good only on that broker. The library reads no environment; :func:`broker.api.signing.credentials_from`
  resolves ``$RMQ_ACCESS_KEY``/``$RMQ_SECRET_KEY`` for tools (mqadmin).
- A broker address that is not ``host:port`` raises :class:`BrokerClientError`
  (``BAD_ADDRESS``) at construction, not a ``ValueError`` later.

Theory of operation: ``_Requests.<call>(...)`` returns ``(method, path, query, json_body)``;
each transport executes it and decodes the answer.
"""
from __future__ import annotations

import asyncio
import base64
import http.client
import json
import socket
import uuid
from typing import Any, Iterable, Mapping
from urllib.parse import quote, urlencode

import aiohttp

from broker.api.signing import host_header, sign_headers

Call = tuple[str, str, dict[str, Any] | None, Any]


class BrokerClientError(Exception):
    def __init__(self, code: str, message: str, status: int = 0, body: Mapping[str, Any] | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.body = dict(body or {})


class BrokerUnavailable(BrokerClientError):
    def __init__(self, address: str, reason: str) -> None:
        super().__init__("CONNECT_FAILED", f"cannot reach broker at {address}: {reason}")


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (``http://`` and ``[v6]`` accepted) -> (host, port), else ``BAD_ADDRESS``."""
    text = str(address or "").strip()
    bare = text.split("://", 1)[-1].rstrip("/")
    host, sep, port = bare.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536 or "/" in host or " " in host:
        raise BrokerClientError("BAD_ADDRESS", f"broker address {text!r} is not host:port (e.g. 127.0.0.1:10911)")
    return host, int(port)


def _auth_headers(credentials: tuple[str, str] | None, method: str, path_and_query: str,
                  data: bytes | None, host: str) -> dict[str, str]:
    """The signing headers (``Host`` among them: the signature binds the broker it is sent to)."""
    return sign_headers(method, path_and_query, data, *credentials, host=host) if credentials else {}


def _credentials(access_key: str | None, secret_key: str | None) -> tuple[str, str] | None:
    if access_key and secret_key:
        return access_key, secret_key
    if access_key or secret_key:
        raise ValueError("access_key and secret_key go together")
    return None


def message_json(body: bytes | str, *, tags: str | None = None, keys: str | Iterable[str] | None = None,
                 properties: Mapping[str, str] | None = None, flag: int | None = None,
                 uniq_key: str | None = None) -> dict[str, Any]:
    """One message object as the API expects it (``uniq_key``: the producer's message id, which
    the broker keeps as UNIQ_KEY and uses to answer a retry instead of storing it twice)."""
    out: dict[str, Any]
    if isinstance(body, str):
        out = {"body": body}
    else:
        out = {"body": base64.b64encode(bytes(body)).decode("ascii"), "bodyEncoding": "base64"}
    if tags:
        out["tags"] = tags
    if keys:
        out["keys"] = keys if isinstance(keys, str) else list(keys)
    if properties:
        out["properties"] = dict(properties)
    if flag is not None:
        out["flag"] = flag
    if uniq_key:
        out["uniqKey"] = uniq_key
    return out


def new_uniq_key() -> str:
    """A fresh producer-side message id (32 hex digits)."""
    return uuid.uuid4().hex.upper()


def body_bytes(message: Mapping[str, Any]) -> bytes:
    """Decode the body of a message returned by pull/lookup."""
    if message.get("bodyEncoding") == "base64":
        return base64.b64decode(message["body"])
    return str(message.get("body", "")).encode()


def _error_from(status: int, text: str) -> BrokerClientError:
    try:
        data = json.loads(text)
        return BrokerClientError(str(data.get("code", "UNKNOWN")), str(data.get("message", "")), status, data)
    except (ValueError, AttributeError):
        return BrokerClientError("HTTP_" + str(status), text[:200], status)


class _Requests:
    """Request builders shared by both transports."""

    @staticmethod
    def send(topic: str, body: bytes | str, *, queue_id: int | None = None, **kw: Any) -> Call:
        payload = {"topic": topic, **message_json(body, **kw)}
        if queue_id is not None:
            payload["queueId"] = queue_id
        return ("POST", "/messages", None, payload)

    @staticmethod
    def send_batch(topic: str, messages: Iterable[Mapping[str, Any] | bytes | str], *, queue_id: int | None = None) -> Call:
        msgs = [m if isinstance(m, Mapping) else message_json(m) for m in messages]
        payload: dict[str, Any] = {"topic": topic, "messages": msgs}
        if queue_id is not None:
            payload["queueId"] = queue_id
        return ("POST", "/messages/batch", None, payload)

    @staticmethod
    def pull(topic: str, queue_id: int, offset: int = 0, max_count: int = 32) -> Call:
        return ("GET", f"/topics/{quote(topic, safe='')}/queues/{queue_id}/messages", {"offset": offset, "maxCount": max_count}, None)

    @staticmethod
    def by_id(msg_id: str, topic: str | None = None) -> Call:
        return ("GET", f"/messages/by-id/{quote(msg_id, safe='')}", {"topic": topic} if topic else None, None)

    @staticmethod
    def by_offset(offset: int) -> Call:
        return ("GET", f"/messages/by-offset/{offset}", None, None)

    @staticmethod
    def by_key(topic: str, key: str, max_num: int = 32) -> Call:
        return ("GET", "/messages/by-key", {"topic": topic, "key": key, "maxNum": max_num}, None)

    @staticmethod
    def topics() -> Call:
        return ("GET", "/topics", None, None)

    @staticmethod
    def topic_status(topic: str) -> Call:
        return ("GET", f"/topics/{quote(topic, safe='')}", None, None)

    @staticmethod
    def create_topic(topic: str, read_queue_nums: int | None = None, write_queue_nums: int | None = None,
                     perm: int | None = None) -> Call:
        payload: dict[str, Any] = {"topic": topic}
        for name, value in (("readQueueNums", read_queue_nums), ("writeQueueNums", write_queue_nums), ("perm", perm)):
            if value is not None:
                payload[name] = value
        return ("POST", "/topics", None, payload)

    @staticmethod
    def commit_offset(group: str, topic: str, queue_id: int, offset: int) -> Call:
        return ("POST", "/consumer-offsets", None, {"group": group, "topic": topic, "queueId": queue_id, "offset": offset})

    @staticmethod
    def query_offsets(group: str | None = None, topic: str | None = None) -> Call:
        q = {k: v for k, v in (("group", group), ("topic", topic)) if v}
        return ("GET", "/consumer-offsets", q or None, None)

    @staticmethod
    def status() -> Call:
        return ("GET", "/status", None, None)

    @staticmethod
    def config_file(name: str) -> Call:
        return ("GET", f"/admin/config/{name}", None, None)

    @staticmethod
    def metrics() -> Call:
        return ("GET", "/metrics", None, None)

    @staticmethod
    def dledger_status() -> Call:
        return ("GET", "/admin/dledger", None, None)

    @staticmethod
    def transfer_leader(to: str) -> Call:
        return ("POST", "/admin/dledger/transfer-leader", None, {"to": to})

    @staticmethod
    def set_preferred_leader(ids: Iterable[str]) -> Call:
        return ("POST", "/admin/dledger/preferred-leader", None, {"ids": list(ids)})


def _path(path: str, query: dict[str, Any] | None) -> str:
    if not query:
        return path
    return path + "?" + urlencode({k: v for k, v in query.items() if v is not None})


class BrokerClient:
    """asyncio client; use ``async with BrokerClient("127.0.0.1:10911") as c: await c.send(...)``."""

    def __init__(self, address: str, timeout: float = 10.0, session: aiohttp.ClientSession | None = None, *,
                 access_key: str | None = None, secret_key: str | None = None) -> None:
        self._host = host_header(*split_address(address))
        self.address = address
        self._credentials = _credentials(access_key, secret_key)
        self._base = address if address.startswith("http") else f"http://{address}"
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session = session
        self._own_session = session is None

    async def __aenter__(self) -> "BrokerClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None and self._own_session:
            await self._session.close()
        self._session = None

    async def _do(self, call: Call, raw: bool = False) -> Any:
        method, path, query, body = call
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout, connector=aiohttp.TCPConnector(limit=0))
        data = json.dumps(body).encode() if body is not None else None
        target = _path(path, query)
        headers = {"Content-Type": "application/json"} if data is not None else {}
        headers.update(_auth_headers(self._credentials, method, target, data, self._host))
        try:
            async with self._session.request(method, self._base + target, data=data, headers=headers) as resp:
                text = await resp.text()
                if resp.status >= 300:
                    raise _error_from(resp.status, text)
                return text if raw else json.loads(text)
        except aiohttp.ClientConnectionError as exc:
            raise BrokerUnavailable(self.address, str(exc) or type(exc).__name__) from None

    async def send(self, topic: str, body: bytes | str, **kw: Any) -> dict[str, Any]:
        return await self._do(_Requests.send(topic, body, **kw))

    async def send_batch(self, topic: str, messages: Iterable[Any], **kw: Any) -> dict[str, Any]:
        return await self._do(_Requests.send_batch(topic, messages, **kw))

    async def pull(self, topic: str, queue_id: int, offset: int = 0, max_count: int = 32) -> dict[str, Any]:
        return await self._do(_Requests.pull(topic, queue_id, offset, max_count))

    async def by_id(self, msg_id: str, topic: str | None = None) -> dict[str, Any]:
        return await self._do(_Requests.by_id(msg_id, topic))

    async def by_offset(self, offset: int) -> dict[str, Any]:
        return await self._do(_Requests.by_offset(offset))

    async def by_key(self, topic: str, key: str, max_num: int = 32) -> dict[str, Any]:
        return await self._do(_Requests.by_key(topic, key, max_num))

    async def topics(self) -> dict[str, Any]:
        return await self._do(_Requests.topics())

    async def topic_status(self, topic: str) -> dict[str, Any]:
        return await self._do(_Requests.topic_status(topic))

    async def create_topic(self, topic: str, **kw: Any) -> dict[str, Any]:
        return await self._do(_Requests.create_topic(topic, **kw))

    async def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> dict[str, Any]:
        return await self._do(_Requests.commit_offset(group, topic, queue_id, offset))

    async def query_offsets(self, group: str | None = None, topic: str | None = None) -> dict[str, Any]:
        return await self._do(_Requests.query_offsets(group, topic))

    async def status(self) -> dict[str, Any]:
        return await self._do(_Requests.status())

    async def config_file(self, name: str) -> dict[str, Any]:
        return await self._do(_Requests.config_file(name))

    async def metrics(self) -> str:
        return await self._do(_Requests.metrics(), raw=True)

    async def dledger_status(self) -> dict[str, Any]:
        return await self._do(_Requests.dledger_status())

    async def transfer_leader(self, to: str) -> dict[str, Any]:
        return await self._do(_Requests.transfer_leader(to))

    async def set_preferred_leader(self, ids: Iterable[str]) -> dict[str, Any]:
        return await self._do(_Requests.set_preferred_leader(ids))

    async def request(self, method: str, path: str, body: Any = None, raw_body: bytes | None = None) -> tuple[int, str]:
        """Escape hatch for tests: any method/path/body (signed if keyed); ``(status, text)`` without raising."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        data = raw_body if raw_body is not None else (json.dumps(body).encode() if body is not None else None)
        headers = _auth_headers(self._credentials, method, path, data, self._host)
        async with self._session.request(method, self._base + path, data=data, headers=headers) as resp:
            return resp.status, await resp.text()


class SyncBrokerClient:
    """Blocking client on ``http.client`` (standard library only)."""

    def __init__(self, address: str, timeout: float = 10.0, *, access_key: str | None = None,
                 secret_key: str | None = None) -> None:
        self.address = str(address).split("://", 1)[-1].rstrip("/")
        self._host, self._port = split_address(address)
        self._host_header = host_header(self._host, self._port)
        self._timeout = timeout
        self._credentials = _credentials(access_key, secret_key)
        self._conn: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> "SyncBrokerClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def request(self, method: str, path: str, body: bytes | None = None, headers: Mapping[str, str] | None = None) -> tuple[int, str]:
        """One HTTP exchange (signed if keyed); returns ``(status, text)`` without interpreting it."""
        for attempt in (0, 1):
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
            try:  # signed per attempt: a resent request carries a fresh nonce, not a replay
                sent = {**_auth_headers(self._credentials, method, path, body, self._host_header), **dict(headers or {})}
                self._conn.request(method, path, body=body, headers=sent)
                resp = self._conn.getresponse()
                text = resp.read().decode("utf-8", "replace")
                if resp.getheader("Connection", "").lower() == "close":
                    self.close()
                return resp.status, text
            except (ConnectionError, http.client.HTTPException, socket.timeout, OSError, UnicodeError) as exc:
                self.close()
                if attempt == 1 or isinstance(exc, (ConnectionRefusedError, socket.timeout, socket.gaierror, UnicodeError)):
                    raise BrokerUnavailable(self.address, str(exc) or type(exc).__name__) from None
        raise AssertionError("unreachable")

    def _do(self, call: Call, raw: bool = False) -> Any:
        method, path, query, body = call
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {}
        status, text = self.request(method, _path(path, query), data, headers)
        if status >= 300:
            raise _error_from(status, text)
        return text if raw else json.loads(text)

    def send(self, topic: str, body: bytes | str, **kw: Any) -> dict[str, Any]:
        return self._do(_Requests.send(topic, body, **kw))

    def send_batch(self, topic: str, messages: Iterable[Any], **kw: Any) -> dict[str, Any]:
        return self._do(_Requests.send_batch(topic, messages, **kw))

    def pull(self, topic: str, queue_id: int, offset: int = 0, max_count: int = 32) -> dict[str, Any]:
        return self._do(_Requests.pull(topic, queue_id, offset, max_count))

    def by_id(self, msg_id: str, topic: str | None = None) -> dict[str, Any]:
        return self._do(_Requests.by_id(msg_id, topic))

    def by_offset(self, offset: int) -> dict[str, Any]:
        return self._do(_Requests.by_offset(offset))

    def by_key(self, topic: str, key: str, max_num: int = 32) -> dict[str, Any]:
        return self._do(_Requests.by_key(topic, key, max_num))

    def topics(self) -> dict[str, Any]:
        return self._do(_Requests.topics())

    def topic_status(self, topic: str) -> dict[str, Any]:
        return self._do(_Requests.topic_status(topic))

    def create_topic(self, topic: str, **kw: Any) -> dict[str, Any]:
        return self._do(_Requests.create_topic(topic, **kw))

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> dict[str, Any]:
        return self._do(_Requests.commit_offset(group, topic, queue_id, offset))

    def query_offsets(self, group: str | None = None, topic: str | None = None) -> dict[str, Any]:
        return self._do(_Requests.query_offsets(group, topic))

    def status(self) -> dict[str, Any]:
        return self._do(_Requests.status())

    def config_file(self, name: str) -> dict[str, Any]:
        return self._do(_Requests.config_file(name))

    def metrics(self) -> str:
        return self._do(_Requests.metrics(), raw=True)

    def dledger_status(self) -> dict[str, Any]:
        return self._do(_Requests.dledger_status())

    def transfer_leader(self, to: str) -> dict[str, Any]:
        return self._do(_Requests.transfer_leader(to))

    def set_preferred_leader(self, ids: Iterable[str]) -> dict[str, Any]:
        return self._do(_Requests.set_preferred_leader(ids))


#: Answers after which another broker (or the same one a moment later) may take the write.
RETRYABLE_CODES = frozenset({"NOT_MASTER", "SERVICE_NOT_AVAILABLE", "CONNECT_FAILED", "OS_PAGECACHE_BUSY", "TIMEOUT"})


class MasterFollowingProducer:
    """Produces to whichever broker of a group is master (DLedger mode: the leader).

    ``NOT_MASTER`` with a ``masterAddress`` switches to that address; a connection failure,
    timeout or an answer without an address rotates to the next seed. :meth:`send_once` makes
    one attempt (updating the target, then raising); :meth:`send` retries retryable failures
    until ``retry_for`` seconds have passed. A failed attempt may still have been stored
    (at-least-once, as RocketMQ's producer): only a returned result is an acknowledgement.
    """

    def __init__(self, seeds: Iterable[str], *, timeout: float = 5.0, retry_for: float = 15.0, backoff: float = 0.01,
                 access_key: str | None = None, secret_key: str | None = None) -> None:
        self._keys = {"access_key": access_key, "secret_key": secret_key}
        self.seeds = [s for s in seeds if s]
        if not self.seeds:
            raise ValueError("at least one broker address is needed")
        self.current = self.seeds[0]
        self.retry_for = retry_for
        self.backoff = backoff
        self._timeout = timeout
        self._session: aiohttp.ClientSession | None = None
        self._clients: dict[str, BrokerClient] = {}
        self.redirects = 0

    async def __aenter__(self) -> "MasterFollowingProducer":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        self._clients.clear()
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _client(self, address: str) -> BrokerClient:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self._timeout),
                                                  connector=aiohttp.TCPConnector(limit=0))
        c = self._clients.get(address)
        if c is None:
            c = self._clients[address] = BrokerClient(address, session=self._session,
                                                      access_key=self._keys["access_key"],
                                                      secret_key=self._keys["secret_key"])
        return c

    def _retarget(self, address: str, exc: BrokerClientError) -> None:
        if self.current != address:
            return  # another request already moved on
        master = exc.body.get("masterAddress") if exc.code == "NOT_MASTER" else None
        if master and master != address:
            self.current = master
        else:
            i = self.seeds.index(address) if address in self.seeds else -1
            self.current = self.seeds[(i + 1) % len(self.seeds)]
        self.redirects += 1

    async def _once(self, call: Call) -> dict[str, Any]:
        address = self.current
        try:
            result = await self._client(address)._do(call)
        except BrokerClientError as exc:
            self._retarget(address, exc)
            raise
        except asyncio.TimeoutError:
            timeout = BrokerClientError("TIMEOUT", f"no answer from {address} in {self._timeout}s")
            self._retarget(address, timeout)
            raise timeout from None
        result["brokerAddress"] = address
        return result

    async def send_once(self, topic: str, body: bytes | str, **kw: Any) -> dict[str, Any]:
        return await self._once(_Requests.send(topic, body, **kw))

    async def send_batch_once(self, topic: str, messages: Iterable[Any], **kw: Any) -> dict[str, Any]:
        return await self._once(_Requests.send_batch(topic, messages, **kw))

    async def _retrying(self, call: Call) -> dict[str, Any]:
        deadline = asyncio.get_running_loop().time() + self.retry_for
        while True:
            try:
                return await self._once(call)
            except BrokerClientError as exc:
                if exc.code not in RETRYABLE_CODES or asyncio.get_running_loop().time() >= deadline:
                    raise
                if exc.code != "NOT_MASTER" or not exc.body.get("masterAddress"):
                    await asyncio.sleep(self.backoff)

    async def send(self, topic: str, body: bytes | str, **kw: Any) -> dict[str, Any]:
        """Send until acknowledged or ``retry_for`` passes; every attempt carries the same
        ``uniqKey``, so a retry of an attempt the broker did store is answered, not stored again
        (within the broker's ``sendDedupWindowSeconds``)."""
        kw.setdefault("uniq_key", new_uniq_key())
        return await self._retrying(_Requests.send(topic, body, **kw))

    async def send_batch(self, topic: str, messages: Iterable[Any], **kw: Any) -> dict[str, Any]:
        """As :meth:`send`: each message gets its ``uniqKey`` once, before the first attempt."""
        msgs = [dict(m) if isinstance(m, Mapping) else message_json(m) for m in messages]
        for m in msgs:
            m.setdefault("uniqKey", new_uniq_key())
        return await self._retrying(_Requests.send_batch(topic, msgs, **kw))
