"""SlaveSynchronize: a slave pulls the master's metadata JSON files every 10 s.

Rules (RocketMQ ``SlaveSynchronize.syncAll`` / ``BrokerController.handleSlaveSynchronize``,
seed 000):
- Four files, in this order: ``topics.json``, ``consumerOffset.json``, ``delayOffset.json``,
  ``subscriptionGroup.json``. They are pulled from the master with the remoting admin requests
  GET_ALL_TOPIC_CONFIG, GET_ALL_CONSUMER_OFFSET, GET_ALL_DELAY_OFFSET and
  GET_ALL_SUBSCRIPTIONGROUP_CONFIG over one kept-open connection; the response body is the
  file's JSON wrapper, whose ``dataVersion`` is the master's version. Never replicated through
  the commitlog (nor through Raft in DLedger mode).
- HTTP fallback: the master address is the master's ``listenPort``, which speaks remoting
  unless that master set a separate ``httpListenPort`` (then the address is its HTTP port). When
  the master's first reply is not a remoting frame (an HTTP server answers ``HTTP/1.1 400``), or
  it closes the connection before any frame, that master address is synced over HTTP instead
  (``GET /admin/config/<name>`` -> ``{"dataVersion", "content"}``). The choice is kept until the
  address changes or a round fails, then remoting is probed again. :attr:`protocol` says which
  one the last round used; switching logs one line.
- ACL (the master's ``aclEnable=true``): with ``credentials`` (the slave's ``innerAccessKey`` /
  ``innerSecretKey``, an account of the master's ``plain_acl.yml``) every remoting request is
  signed as ``AclClientRPCHook`` signs it and every HTTP request as ``broker.api.signing``
  (``/admin/config/*`` needs ``admin: true``). A refusal (remoting NO_PERMISSION, HTTP 401/403)
  is never answered by trying the other protocol unsigned: it fails the round with
  :class:`SyncRefused`, logged as one ERROR line naming the master, the AccessKey (never the
  secret) and the master's reason (again only when the reason changes); :attr:`last_refusal`
  keeps it and the ``slave_sync`` metric counts result ``refused``.
- A local file is replaced only when the master's ``dataVersion`` differs from ours (topics,
  subscription groups; consumer offsets and delay offsets when the master sends a version).
  Without a version on either side the content is compared instead (RocketMQ 4.9.8 compares
  the delayOffset string). On replace the local version becomes the master's.
- The first sync runs ``initial_delay`` after start (3 s in RocketMQ), then every ``interval``.
  A failing sync (master down, garbage answer) logs one line per transition (ok -> failing,
  failing -> ok), not one per attempt, and never stops the task.
- The master address can change at runtime (DLedger role change): :meth:`set_master_address`;
  ``None`` pauses syncing.

Theory of operation: the controller passes a :class:`MetadataAccess` (how to read the local
version/content and how to replace a file), so this module knows nothing about the metadata
managers' classes. One asyncio task; one :class:`RemotingClient` to the current master (reopened
when closed or retargeted); an ``aiohttp`` session only for the HTTP fallback.
"""
from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any, Callable, Optional

import aiohttp

from broker.api.signing import sign_headers
from broker.remoting.acl import signer
from broker.remoting.client import RemotingClient
from broker.remoting.codes import RequestCode, ResponseCode
from broker.tasks import cancel_and_wait, wait_for

log = logging.getLogger("broker.slave_sync")

SYNC_FILES = ("topics", "consumerOffset", "delayOffset", "subscriptionGroup")
SYNC_CODES = {"topics": RequestCode.GET_ALL_TOPIC_CONFIG, "consumerOffset": RequestCode.GET_ALL_CONSUMER_OFFSET,
              "delayOffset": RequestCode.GET_ALL_DELAY_OFFSET,
              "subscriptionGroup": RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG}
REQUEST_TIMEOUT = 3.0


class _NotRemoting(Exception):
    """The master address does not speak remoting: use HTTP."""


class SyncRefused(Exception):
    """The master's ACL refused the sync (missing, unknown or insufficient credentials)."""


def inner_credentials(broker_config: Any) -> Optional[tuple[str, str]]:
    """``innerAccessKey``/``innerSecretKey`` of a broker's conf: both, or neither."""
    ak = getattr(broker_config, "inner_access_key", None) or None
    sk = getattr(broker_config, "inner_secret_key", None) or None
    if bool(ak) != bool(sk):
        raise ValueError("innerAccessKey and innerSecretKey go together: set both (an account of the master's "
                         "plain_acl.yml) or neither")
    return (str(ak), str(sk)) if ak and sk else None


@dataclass
class MetadataAccess:
    """How SlaveSynchronize touches one local metadata file (supplied by the controller)."""

    local_version: Callable[[], Optional[dict[str, Any]]]
    local_content: Callable[[], str]
    replace: Callable[[str, Optional[dict[str, Any]]], None]  # (content, master's dataVersion)


def _same_version(a: Optional[dict[str, Any]], b: Optional[dict[str, Any]]) -> bool:
    """``DataVersion.equals``: counter and timestamp (stateVersion when both have it)."""
    if a is None or b is None:
        return False
    keys = ("counter", "timestamp") + (("stateVersion",) if "stateVersion" in a and "stateVersion" in b else ())
    return all(a.get(k) == b.get(k) for k in keys)


class SlaveSynchronize:
    def __init__(self, access: dict[str, MetadataAccess], master_address: Optional[str] = None,
                 interval: float = 10.0, initial_delay: float = 3.0, on_update: Callable[[str, str], None] | None = None,
                 credentials: Optional[tuple[str, str]] = None) -> None:
        self._access = access
        self._credentials = credentials
        self.last_refusal: Optional[str] = None
        self._master = master_address
        self.interval = interval
        self.initial_delay = initial_delay
        self._on_update = on_update
        self._task: Optional[asyncio.Task[None]] = None
        self._session: Optional[aiohttp.ClientSession] = None
        self._failing = False
        self._wake = asyncio.Event()
        self.last_sync_ok_ms: int = 0
        self.syncs = 0
        self.protocol: Optional[str] = None  # "remoting" or "http": what the last successful fetch used
        self.remoting_requests = 0
        self.http_requests = 0
        self._client: Optional[RemotingClient] = None
        self._client_master: Optional[str] = None
        self._http_master: Optional[str] = None  # master address found not to speak remoting
        self._http_noted: Optional[str] = None

    @property
    def master_address(self) -> Optional[str]:
        return self._master

    def set_master_address(self, address: Optional[str]) -> None:
        if address != self._master:
            log.info("SlaveSynchronize master address %s -> %s", self._master, address)
        self._master = address

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="SlaveSynchronize")

    def trigger(self) -> None:
        """Sync now (e.g. right after the HA connection to the master is established)."""
        self._wake.set()

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        await self._close_client()
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _run(self) -> None:
        await self._sleep(self.initial_delay)
        while True:
            await self.sync_all()
            await self._sleep(self.interval)

    async def _sleep(self, seconds: float) -> None:
        try:
            await wait_for(self._wake.wait(), timeout=seconds)
        except asyncio.TimeoutError:
            pass
        self._wake.clear()

    async def sync_all(self) -> bool:
        """One round over the four files; True when every file was fetched and applied."""
        master = self._master
        if not master:
            return False
        ok = True
        problem = ""
        refusal: Optional[str] = None
        for name in SYNC_FILES:
            access = self._access.get(name)
            if access is None:
                continue
            try:
                changed = await self._sync_one(master, name, access)
                if changed and self._on_update is not None:
                    self._on_update(name, "updated")
            except SyncRefused as exc:
                ok = False
                refusal = problem = str(exc)
                if self._on_update is not None:
                    self._on_update(name, "refused")
                break  # the other files would be refused the same way
            except Exception as exc:  # noqa: BLE001 - keep syncing whatever the master sends
                ok = False
                problem = f"{name}: {type(exc).__name__}: {exc}"
                if self._on_update is not None:
                    self._on_update(name, "error")
        self.syncs += 1
        if ok:
            self.last_sync_ok_ms = int(asyncio.get_running_loop().time() * 1000)
            if self._failing:
                log.info("SlaveSynchronize from master %s recovered", master)
            self._failing = False
        else:
            self._http_master = None  # probe remoting again next round
        if refusal is not None and refusal != self.last_refusal:
            log.error("SlaveSynchronize: %s; metadata is not synced until the master accepts it (retrying every %.0f s)",
                      refusal, self.interval)
            self._failing = True
        elif not ok and not self._failing:
            log.warning("SlaveSynchronize from master %s failing (%s); will keep retrying every %.0f s", master, problem, self.interval)
            self._failing = True
        self.last_refusal = refusal
        return ok

    def _refused(self, master: str, how: str, reason: str) -> SyncRefused:
        who = f"accessKey={self._credentials[0]}" if self._credentials else "no credentials (innerAccessKey unset)"
        hint = "" if self._credentials else "; set innerAccessKey/innerSecretKey to an admin account of the master's plain_acl.yml"
        return SyncRefused(f"master {master} refused the metadata sync over {how} for {who}: {reason}{hint}")

    async def _sync_one(self, master: str, name: str, access: MetadataAccess) -> bool:
        content, remote_version = await self._fetch(master, name)
        local_version = access.local_version()
        if remote_version is not None and local_version is not None:
            if _same_version(local_version, remote_version):
                return False
        elif access.local_content() == content:
            return False
        access.replace(content, remote_version)
        log.info("Update slave %s from master %s (dataVersion %s)", name, master,
                 None if remote_version is None else remote_version.get("counter"))
        return True

    async def _fetch(self, master: str, name: str) -> tuple[str, Optional[dict[str, Any]]]:
        """The master's file content and dataVersion, over remoting, else (see rules) HTTP."""
        if self._http_master != master:
            try:
                result = await self._fetch_remoting(master, name)
                self._set_protocol("remoting", master)
                return result
            except _NotRemoting as exc:
                if self._http_noted != master:  # once per address, not once per probe
                    log.info("SlaveSynchronize: master %s %s; syncing over HTTP", master, exc)
                    self._http_noted = master
                self._http_master = master
        result = await self._fetch_http(master, name)
        self._set_protocol("http", master)
        return result

    def _set_protocol(self, protocol: str, master: str) -> None:
        if protocol != self.protocol:
            log.info("SlaveSynchronize from master %s over %s", master, protocol)
            self.protocol = protocol

    async def _close_client(self) -> None:
        client, self._client, self._client_master = self._client, None, None
        if client is not None:
            await client.close()

    async def _fetch_remoting(self, master: str, name: str) -> tuple[str, Optional[dict[str, Any]]]:
        client = self._client
        if client is not None and (client.is_closed or self._client_master != master):
            await self._close_client()
            client = None
        if client is None:
            host, _, port = master.rpartition(":")
            if not port.isdigit():
                raise ValueError(f"master address {master!r} is not host:port")
            hook = signer(*self._credentials) if self._credentials else None
            client = await wait_for(RemotingClient.connect(host, int(port), rpc_hook=hook), REQUEST_TIMEOUT)
            self._client, self._client_master = client, master
        self.remoting_requests += 1
        try:
            resp = await client.request(SYNC_CODES[name], timeout=REQUEST_TIMEOUT)
        except ConnectionError:
            if client.frames_received == 0:
                await self._close_client()
                why = f"answered no remoting frame ({client.protocol_error})" if client.protocol_error \
                    else "closed the connection before any remoting frame"
                raise _NotRemoting(why) from None
            raise
        except asyncio.TimeoutError:
            await self._close_client()  # a late answer must not be taken for the next request's
            raise
        if resp.code == ResponseCode.NO_PERMISSION:
            raise self._refused(master, "remoting", resp.remark or "NO_PERMISSION")
        if resp.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"master answered remoting code {resp.code}: {resp.remark}")
        content = resp.body.decode("utf-8")
        data = json.loads(content)
        if not isinstance(data, dict):
            raise ValueError("master's file is not a JSON object")
        version = data.get("dataVersion")
        if version is not None and not isinstance(version, dict):
            raise ValueError("master's file has a non-object 'dataVersion'")
        return content, version

    async def _fetch_http(self, master: str, name: str) -> tuple[str, Optional[dict[str, Any]]]:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT))
        self.http_requests += 1
        path = f"/admin/config/{name}"
        headers = sign_headers("GET", path, None, *self._credentials, host=master) if self._credentials else None
        async with self._session.get(f"http://{master}{path}", headers=headers) as resp:
            text = await resp.text()
            if resp.status in (401, 403):
                try:
                    reason = str(json.loads(text).get("message"))
                except (ValueError, AttributeError):
                    reason = text[:200]
                raise self._refused(master, f"HTTP ({resp.status})", reason)
            if resp.status != 200:
                raise RuntimeError(f"master answered HTTP {resp.status}: {text[:200]}")
        data = json.loads(text)
        if not isinstance(data, dict) or not isinstance(data.get("content"), str):
            raise ValueError("master answer has no 'content' string")
        remote_version = data.get("dataVersion")
        if remote_version is not None and not isinstance(remote_version, dict):
            raise ValueError("master answer has a non-object 'dataVersion'")
        return data["content"], remote_version
