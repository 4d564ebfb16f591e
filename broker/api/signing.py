"""HTTP request signatures for the plain ACL: RocketMQ's AccessKey + HmacSHA1, made replay-safe.

Rules:
- Modelled on ``AclClientRPCHook`` (AccessKey + base64(HmacSHA1(secretKey, content))), with the
  content an HTTP request needs so that a captured signature cannot be reused for anything
  else, later, or on another broker: the canonical string is ::

      RMQ-HMAC-SHA1-HOST\\n<METHOD>\\n<host>\\n<decoded path>\\n<canonical query>\\n<AccessKey>\\n<Timestamp>\\n<Nonce>\\n

  followed by the raw body bytes. ``<host>`` is the ``Host`` header as sent (``ip:port``,
  lower-cased; the client sends the header it signed). The canonical query is every
  ``name=value`` pair, each side percent-encoded (RFC 3986 unreserved characters kept), sorted,
  joined with ``&``. (Issue 23.7: the first scheme, ``RMQ-HMAC-SHA1``, did not sign the host, so
  a request accepted by a DLedger leader was accepted again by a follower; its signatures no
  longer verify — a breaking change of our own HTTP signing, clients and broker change together.)
- Headers: ``X-RMQ-AccessKey``, ``X-RMQ-Timestamp`` (Unix epoch milliseconds),
  ``X-RMQ-Nonce`` (random, so two identical requests in the same millisecond differ),
  ``X-RMQ-Signature`` and ``Host``. All are ASCII; anything else is refused with a clear reason
  (:func:`non_ascii_header`), never an exception.
- The broker refuses a timestamp more than :data:`MAX_SKEW_MS` (5 minutes) behind its clock or
  more than :data:`MAX_FUTURE_MS` (1 minute) ahead of it, a ``Host`` that does not name the
  broker the request reached (``broker.api.host_binding``), and a signature it has already
  accepted (:class:`ReplayGuard`), so a captured request works once, on one broker, and never
  after its window.
- :class:`ReplayGuard` keeps one book per account: no account (not even a deny-all one, the only
  kind that can fill it: unsigned requests never reach it) can push another account's
  signatures out. An entry expires when its own timestamp leaves the window. A full book
  forgets its oldest-timestamped entry and raises *that account's* floor to it (older requests
  of that account are refused: a forgotten signature still cannot be replayed); when the
  whole guard is full, the account holding the most entries gives one up.
- The secret key never travels and is never logged; only the AccessKey is named in refusals.

Theory of operation: pure functions and one in-memory table (no I/O) used by the broker's
middleware (``broker.api.http_acl``), the Python client (``broker.api.client``), mqadmin and the
slave's metadata sync (``broker.slave_sync``).
"""
from __future__ import annotations

import base64
import hashlib
import heapq
import hmac
import os
import time
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Optional
from urllib.parse import quote, unquote

ALGORITHM = "RMQ-HMAC-SHA1-HOST"
H_ACCESS_KEY = "X-RMQ-AccessKey"
H_TIMESTAMP = "X-RMQ-Timestamp"
H_NONCE = "X-RMQ-Nonce"
H_SIGNATURE = "X-RMQ-Signature"
H_HOST = "Host"
SIGNING_HEADERS = (H_ACCESS_KEY, H_TIMESTAMP, H_NONCE, H_SIGNATURE, H_HOST)
MAX_SKEW_MS = 5 * 60 * 1000
#: how far ahead of the broker's clock a request may be signed (clock differences, not 5 minutes)
MAX_FUTURE_MS = 60 * 1000
#: environment variables the client, mqadmin and tools read when no key is given explicitly
ENV_ACCESS_KEY = "RMQ_ACCESS_KEY"
ENV_SECRET_KEY = "RMQ_SECRET_KEY"


def canonical_query(pairs: Iterable[tuple[str, str]]) -> str:
    enc = sorted((quote(str(k), safe="-_.~"), quote(str(v), safe="-_.~")) for k, v in pairs)
    return "&".join(f"{k}={v}" for k, v in enc)


def canonical_request(method: str, host: str, path: str, query: Iterable[tuple[str, str]], access_key: str,
                      timestamp: str, nonce: str, body: bytes) -> bytes:
    """The bytes signed (module rules); ``path`` is the decoded path, without the query. Text that
    is not valid Unicode (undecodable bytes a server kept as surrogates) is signed as its raw
    bytes: it never raises, a forged value simply does not verify."""
    head = "\n".join((ALGORITHM, method.upper(), host.strip().lower(), path, canonical_query(query), access_key,
                      timestamp, nonce)) + "\n"
    return head.encode("utf-8", "surrogateescape") + (body or b"")


def signature(secret_key: str, content: bytes) -> str:
    return base64.b64encode(hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()).decode("ascii")


def host_header(host: str, port: int) -> str:
    """The ``Host`` header of ``host:port`` (IPv6 in brackets), as the client signs and sends it."""
    host = host.strip("[]")
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def sign_headers(method: str, path_and_query: str, body: bytes | None, access_key: str, secret_key: str, *,
                 host: Optional[str] = None, now_ms: Optional[int] = None,
                 nonce: Optional[str] = None) -> dict[str, str]:
    """The headers of a signed request to ``path_and_query`` (as sent, percent-encoded) at
    ``host`` (``ip:port`` of the broker, :func:`host_header`); ``Host`` is among them, send it as
    is. Without ``host`` the signature binds no broker and every broker refuses it."""
    path, _, raw_query = path_and_query.partition("?")
    pairs = []
    for part in raw_query.split("&") if raw_query else ():
        k, _, v = part.partition("=")
        pairs.append((unquote(k.replace("+", " ")), unquote(v.replace("+", " "))))
    ts = str(int(time.time() * 1000) if now_ms is None else now_ms)
    nonce = nonce if nonce is not None else os.urandom(12).hex()
    content = canonical_request(method, host or "", unquote(path), pairs, access_key, ts, nonce, body or b"")
    out = {H_ACCESS_KEY: access_key, H_TIMESTAMP: ts, H_NONCE: nonce, H_SIGNATURE: signature(secret_key, content)}
    if host:
        out[H_HOST] = host.strip().lower()
    return out


def non_ascii_header(headers: Mapping[str, str]) -> Optional[str]:
    """The name of the first signing header that is not printable ASCII (e.g. bytes that are not
    UTF-8, which the HTTP server keeps as surrogates), else None."""
    for name in SIGNING_HEADERS:
        value = headers.get(name)
        if value is not None and not (value.isascii() and value.isprintable()):
            return name
    return None


def printable(text: str, limit: int = 200) -> str:
    """``text`` safe for a log line or a JSON answer: undecodable bytes and controls escaped, capped."""
    out = text.encode("utf-8", "backslashreplace").decode("utf-8")
    out = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in out)
    return out if len(out) <= limit else out[:limit - 3] + "..."


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


@dataclass
class _Book:
    """One account's remembered signatures (a set for lookups, a heap by timestamp for expiry)."""

    seen: set[str] = field(default_factory=set)
    by_ts: list[tuple[int, str]] = field(default_factory=list)
    floor_ms: int = 0

    def expire(self, before_ms: int) -> None:
        heap = self.by_ts
        while heap and heap[0][0] < before_ms:
            self.seen.discard(heapq.heappop(heap)[1])

    def forget_oldest(self) -> None:
        old_ts, old_sig = heapq.heappop(self.by_ts)
        self.seen.discard(old_sig)
        self.floor_ms = max(self.floor_ms, old_ts)


class ReplayGuard:
    """Remembers accepted signatures, per account, while their timestamps are inside the window
    (module rules). ``per_account`` bounds one account's book, ``capacity`` all books together."""

    def __init__(self, capacity: int = 65536, window_ms: int = MAX_SKEW_MS, per_account: int = 16384) -> None:
        self.capacity = capacity
        self.window_ms = window_ms
        self.per_account = per_account
        self._books: dict[str, _Book] = {}
        self._total = 0
        self.evicted = 0

    def __len__(self) -> int:
        return self._total

    def floor_ms(self, account: str) -> int:
        book = self._books.get(account)
        return book.floor_ms if book is not None else 0

    def admit(self, account: str, sig: str, ts_ms: int, now_ms: int) -> Optional[str]:
        """None when ``sig`` is new for ``account`` (and remembers it), else why it is refused."""
        book = self._books.get(account)
        if book is None:
            book = self._books[account] = _Book()
        self._total -= len(book.by_ts)
        book.expire(now_ms - self.window_ms)  # the window refuses these anyway
        self._total += len(book.by_ts)
        if sig in book.seen:
            return "the signature was already used (replayed request)"
        if ts_ms <= book.floor_ms:
            return ("the request timestamp is older than the oldest signature the broker still remembers for "
                    "this account (too many requests of this account in the window)")
        while len(book.by_ts) >= self.per_account:
            book.forget_oldest()
            self._total -= 1
            self.evicted += 1
        if self._total >= self.capacity:
            self._make_room(now_ms, keep=account)
        heapq.heappush(book.by_ts, (ts_ms, sig))
        book.seen.add(sig)
        self._total += 1
        return None

    def _make_room(self, now_ms: int, keep: str) -> None:
        """The guard is full: drop every expired entry; if still full, the biggest book gives one up."""
        for name, book in list(self._books.items()):
            book.expire(now_ms - self.window_ms)
            if name != keep and not book.by_ts and book.floor_ms < now_ms - self.window_ms:
                del self._books[name]  # its floor is below the window: nothing to remember
        self._total = sum(len(b.by_ts) for b in self._books.values())
        while self._total >= self.capacity:
            biggest = max(self._books.values(), key=lambda b: len(b.by_ts))
            biggest.forget_oldest()
            self._total -= 1
            self.evicted += 1
