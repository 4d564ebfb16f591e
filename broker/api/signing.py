"""HTTP request signatures for the plain ACL: RocketMQ's AccessKey + HmacSHA1, made replay-safe.

Rules:
- Modelled on ``AclClientRPCHook`` (AccessKey + base64(HmacSHA1(secretKey, content))), with the
  content an HTTP request needs so that a captured signature cannot be reused for anything
  else or later: the canonical string is ::

      RMQ-HMAC-SHA1\\n<METHOD>\\n<decoded path>\\n<canonical query>\\n<AccessKey>\\n<Timestamp>\\n<Nonce>\\n

  followed by the raw body bytes. The canonical query is every ``name=value`` pair, each side
  percent-encoded (RFC 3986 unreserved characters kept), sorted, joined with ``&``.
- Headers: ``X-RMQ-AccessKey``, ``X-RMQ-Timestamp`` (Unix epoch milliseconds),
  ``X-RMQ-Nonce`` (random, so two identical requests in the same millisecond differ) and
  ``X-RMQ-Signature``.
- The broker refuses a timestamp more than :data:`MAX_SKEW_MS` (5 minutes) away from its clock
  and a signature it has already accepted (:class:`ReplayGuard`), so a captured request works
  once, and never after its window.
- The secret key never travels and is never logged; only the AccessKey is named in refusals.

Theory of operation: pure functions (no I/O) used by the broker's middleware
(``broker.api.http_acl``), the Python client (``broker.api.client``), mqadmin and the slave's
metadata sync (``broker.slave_sync``).
"""
from __future__ import annotations

import base64
import hashlib
import heapq
import hmac
import os
import time
from typing import Any, Iterable, Mapping, Optional
from urllib.parse import quote, unquote

ALGORITHM = "RMQ-HMAC-SHA1"
H_ACCESS_KEY = "X-RMQ-AccessKey"
H_TIMESTAMP = "X-RMQ-Timestamp"
H_NONCE = "X-RMQ-Nonce"
H_SIGNATURE = "X-RMQ-Signature"
MAX_SKEW_MS = 5 * 60 * 1000
#: environment variables the client, mqadmin and tools read when no key is given explicitly
ENV_ACCESS_KEY = "RMQ_ACCESS_KEY"
ENV_SECRET_KEY = "RMQ_SECRET_KEY"


def canonical_query(pairs: Iterable[tuple[str, str]]) -> str:
    enc = sorted((quote(str(k), safe="-_.~"), quote(str(v), safe="-_.~")) for k, v in pairs)
    return "&".join(f"{k}={v}" for k, v in enc)


def canonical_request(method: str, path: str, query: Iterable[tuple[str, str]], access_key: str, timestamp: str,
                      nonce: str, body: bytes) -> bytes:
    """The bytes signed (module rules); ``path`` is the decoded path, without the query."""
    head = "\n".join((ALGORITHM, method.upper(), path, canonical_query(query), access_key, timestamp, nonce)) + "\n"
    return head.encode("utf-8") + (body or b"")


def signature(secret_key: str, content: bytes) -> str:
    return base64.b64encode(hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()).decode("ascii")


def sign_headers(method: str, path_and_query: str, body: bytes | None, access_key: str, secret_key: str, *,
                 now_ms: Optional[int] = None, nonce: Optional[str] = None) -> dict[str, str]:
    """The four headers of a signed request to ``path_and_query`` (as sent, percent-encoded)."""
    path, _, raw_query = path_and_query.partition("?")
    pairs = []
    for part in raw_query.split("&") if raw_query else ():
        k, _, v = part.partition("=")
        pairs.append((unquote(k.replace("+", " ")), unquote(v.replace("+", " "))))
    ts = str(int(time.time() * 1000) if now_ms is None else now_ms)
    nonce = nonce if nonce is not None else os.urandom(12).hex()
    content = canonical_request(method, unquote(path), pairs, access_key, ts, nonce, body or b"")
    return {H_ACCESS_KEY: access_key, H_TIMESTAMP: ts, H_NONCE: nonce, H_SIGNATURE: signature(secret_key, content)}


def credentials_from(access_key: Optional[str] = None, secret_key: Optional[str] = None,
                     env: Mapping[str, str] = os.environ) -> Optional[tuple[str, str]]:
    """Explicit keys, else ``$RMQ_ACCESS_KEY``/``$RMQ_SECRET_KEY``; None when neither is complete."""
    ak = access_key if access_key is not None else env.get(ENV_ACCESS_KEY)
    sk = secret_key if secret_key is not None else env.get(ENV_SECRET_KEY)
    if ak and sk:
        return ak, sk
    if ak or sk:
        raise ValueError("an access key needs its secret key (and the other way round): give both "
                         f"(--access-key/--secret-key or ${ENV_ACCESS_KEY}/${ENV_SECRET_KEY})")
    return None


class ReplayGuard:
    """Remembers accepted signatures while their timestamps are inside the window.

    Bounded: at most ``capacity`` signatures are kept. When one has to be forgotten before its
    timestamp left the window, the one with the oldest timestamp goes and :attr:`floor_ms`
    rises to that timestamp: every request signed at or before it is refused ("too old"), so a
    forgotten signature still cannot be replayed. Evicting by timestamp (not arrival) keeps the
    floor below fresh requests even when someone signs with timestamps in the future."""

    def __init__(self, capacity: int = 65536, window_ms: int = MAX_SKEW_MS) -> None:
        self.capacity = capacity
        self.window_ms = window_ms
        self.floor_ms = 0
        self._seen: set[str] = set()
        self._by_ts: list[tuple[int, str]] = []  # heap

    def __len__(self) -> int:
        return len(self._seen)

    def admit(self, sig: str, ts_ms: int, now_ms: int) -> Optional[str]:
        """None when ``sig`` is new (and remembers it), else why it is refused."""
        heap = self._by_ts
        while heap and heap[0][0] < now_ms - self.window_ms:  # the window refuses these anyway
            self._seen.discard(heapq.heappop(heap)[1])
        if sig in self._seen:
            return "the signature was already used (replayed request)"
        if ts_ms <= self.floor_ms:
            return "the request timestamp is older than the oldest signature the broker still remembers"
        while len(heap) >= self.capacity:
            old_ts, old_sig = heapq.heappop(heap)
            self._seen.discard(old_sig)
            self.floor_ms = max(self.floor_ms, old_ts)
        heapq.heappush(heap, (ts_ms, sig))
        self._seen.add(sig)
        return None
