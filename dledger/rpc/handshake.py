"""Connection handshake of DLedger RPC: challenge, hello, welcome (sans-I/O).

Rules
-----
* Every connection starts with a three-frame handshake (protocol version 4: 4 stopped the
  challenge revealing anything, issue 23.1; 3 added ``ident``) before any other frame; a build
  speaking another version is refused by version, not by a failed proof. Handshake frames are
  never tagged (frames and tags: ``framing.py``):

  1. acceptor -> connector ``{"t": "challenge", "v": 4, "nonce"}`` -- nothing else: no group, no
     member id, no file size is told to a peer that has not proven the secret.
  2. connector -> acceptor ``{"t": "hello", "v": 4, "group", "id", "role", "nonce", "ident", "mac"}``
     (the connector tells only the address it chose to dial).
  3. acceptor -> connector ``{"t": "welcome", "id", "ident", "mac"}`` or
     ``{"t": "reject", "code", "reason"}`` (then the acceptor closes).

  ``role`` is ``"peer"`` (a member of the group replicating/voting; its ``id`` must be in the
  acceptor's peer set and must not be the acceptor's own id) or ``"client"`` (an application or
  the CLI: request/response traffic, any id). An acceptor built with ``allow_clients=False``
  (a broker-hosted member) rejects the client role. The group must match.
* Until the handshake is complete a frame may announce at most :data:`HANDSHAKE_MAX_FRAME`
  bytes (4 KiB; an honest hello or welcome is a few hundred): a larger header is refused before
  its body is read or buffered (``FrameDecoder.max_frame_size``, raised by the driver once the
  handshake succeeded).
* With a secret the acceptor checks the hello's proof **first**: a hello without a valid mac
  gets one generic reject ("authentication failed"), whatever else is wrong with it, so the
  reject tells an outsider nothing either. Group, member, ident and role checks (and their
  detailed reasons) come after the proof.
* ``ident`` (issue 13.7) is what every member of a group must agree on besides the group: the
  data and index file sizes and, for broker-hosted members, the broker name (``{name: value}``;
  ``DLedgerConfig.handshake_identity``). Members whose files roll at different offsets cannot
  replicate (the first roll kills one of them), so a peer whose ``ident`` differs is refused by
  the acceptor (reject frame + log line naming both values and the key to fix, so both sides
  log it), and by the connector too once the welcome is verified (an acceptor that did not compare). Clients send
  no ``ident`` and are not compared.
* With a shared secret (``dLegerAuthToken``; required unless the operator allowed an insecure
  loopback-only group) both sides prove it without sending it. ``hello.mac = HMAC-SHA256(secret,
  "hello" | H)`` over ``H = group | connector id | role | acceptor nonce | connector nonce |
  connector ident`` (what the connector knows when it answers); ``welcome.mac = HMAC-SHA256(secret,
  "welcome" | T)`` over the full transcript ``T = group | acceptor id | connector id | role |
  acceptor nonce | connector nonce | acceptor ident | connector ident`` (each part
  length-prefixed; an ident as sorted ``name=value`` pairs). Fresh 16-byte nonces on both sides
  mean no proof can be replayed on another connection. A node with a secret rejects a hello
  without a valid mac; a connector with a secret refuses a welcome without one (an impostor
  acceptor), and a peer connector refuses a welcome from another id than the one it dialled.
* After the welcome, every frame in both directions is sealed with a per-direction session
  key: ``K = HMAC-SHA256(secret, "session" | T)``, ``K_c2a = HMAC-SHA256(K, "connector->acceptor")``,
  ``K_a2c = HMAC-SHA256(K, "acceptor->connector")`` (:class:`Session`; how a frame is sealed
  with them: ``framing.py``).
* Without a secret (insecure loopback mode) macs are empty and frames carry no tag.

Theory of operation
-------------------
The classes here never touch sockets. A driver (``transport.py``) passes the first payloads its
``framing.FrameDecoder`` returns for a connection to :class:`AcceptorHandshake` /
:class:`ConnectorHandshake`, which return the frame to send next or raise
:class:`HandshakeRejected` with a DLedger response code. A finished handshake with a secret
yields a :class:`Session` (a ``framing.FrameSealer`` for outgoing frames, a
``framing.FrameOpener`` for the decoder). Everything is deterministic given the nonces, which
callers may inject for tests.
"""
from __future__ import annotations

import hashlib
import hmac
import os
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from .framing import HEADER, FrameOpener, FrameSealer

PROTOCOL_VERSION = 4
#: Largest frame a connection may announce before its handshake completed (issue 23.1).
HANDSHAKE_MAX_FRAME = 4 * 1024
NONCE_SIZE = 16

ROLE_PEER = "peer"
ROLE_CLIENT = "client"

# DLedger response codes used by the handshake (DLedgerResponseCode).
UNKNOWN_GROUP = 400
UNKNOWN_MEMBER = 401
UNEXPECTED_MEMBER = 402
UNSUPPORTED = 303
AUTH_FAILED = 401  # DLedger has no dedicated code; an unauthenticated sender is an unknown member
CLIENTS_REFUSED = 303  # UNSUPPORTED: a broker-hosted member serves no client role


class HandshakeRejected(Exception):
    """The handshake failed; ``code`` is a DLedger response code, ``reason`` human text."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"handshake rejected ({code}): {reason}")
        self.code = code
        self.reason = reason

    def to_frame(self) -> dict[str, Any]:
        return {"t": "reject", "code": self.code, "reason": self.reason}


def new_nonce() -> bytes:
    return os.urandom(NONCE_SIZE)


def _mac(secret: str | bytes | None, *parts: str | bytes) -> bytes:
    if not secret:
        return b""
    key = secret.encode("utf-8") if isinstance(secret, str) else secret
    h = hmac.new(key, digestmod=hashlib.sha256)
    for part in parts:
        raw = part.encode("utf-8") if isinstance(part, str) else part
        h.update(HEADER.pack(len(raw)))
        h.update(raw)
    return h.digest()


def _field(frame: Any, key: str, kind: type) -> Any:
    if not isinstance(frame, dict):
        raise HandshakeRejected(UNSUPPORTED, "handshake frame is not a map")
    value = frame.get(key)
    if not isinstance(value, kind):
        raise HandshakeRejected(UNSUPPORTED, f"handshake field {key!r} missing or mistyped")
    return value


IDENT_NAMES = {"data_file_size": "data file size", "index_file_size": "index file size",
               "broker_name": "broker name"}


def _ident(frame: dict[str, Any]) -> dict[str, Any]:
    """The ``ident`` map of a handshake frame (absent: empty); mistyped values are refused."""
    value = frame.get("ident", {})
    if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, (int, str)) and not isinstance(v, bool) for k, v in value.items()):
        raise HandshakeRejected(UNSUPPORTED, "handshake field 'ident' mistyped")
    return value


def ident_text(ident: Optional[dict[str, Any]]) -> str:
    """Canonical transcript form of an ident: sorted ``name=value`` pairs."""
    return ";".join(f"{k}={v}" for k, v in sorted((ident or {}).items()))


def compare_ident(mine: dict[str, Any], theirs: dict[str, Any], keys: dict[str, str], self_id: str,
                  remote: str, group: str) -> Optional[str]:
    """``None`` if equal, else one sentence naming the first difference, both values and the key."""
    for name in sorted(set(mine) | set(theirs)):
        a, b = mine.get(name), theirs.get(name)
        if a != b:
            what = IDENT_NAMES.get(name, name)
            key = keys.get(name, name)
            return (f"{what} differs: {remote} has {b if b is not None else '(none)'}, {self_id} has "
                    f"{a if a is not None else '(none)'}; set {key} to the same value on every member of "
                    f"group {group!r}")
    return None


@dataclass(frozen=True)
class Session:
    """Per-connection keys after an authenticated handshake (one per direction)."""

    sealer: FrameSealer
    opener: FrameOpener

    @classmethod
    def derive(cls, secret: str, transcript: tuple[str | bytes, ...], acceptor: bool) -> "Session":
        root = _mac(secret, "session", *transcript)
        c2a, a2c = _mac(root, "connector->acceptor"), _mac(root, "acceptor->connector")
        return cls(FrameSealer(a2c), FrameOpener(c2a)) if acceptor else cls(FrameSealer(c2a), FrameOpener(a2c))


@dataclass(frozen=True)
class Accepted:
    """Outcome of a successful handshake on the accepting side."""

    remote_id: str
    role: str
    reply: dict[str, Any]  # the welcome frame to send
    session: Optional[Session] = None  # None: no secret, frames travel untagged


class AcceptorHandshake:
    """The accepting side: send :meth:`challenge`, then :meth:`receive_hello`."""

    def __init__(
        self,
        group: str,
        self_id: str,
        members: Iterable[str],
        secret: str | None = None,
        nonce: bytes | None = None,
        allow_clients: bool = True,
        ident: Optional[dict[str, Any]] = None,
        ident_keys: Optional[dict[str, str]] = None,
    ) -> None:
        self.group = group
        self.self_id = self_id
        self.members = frozenset(members)
        self.secret = secret or None
        self.nonce = nonce if nonce is not None else new_nonce()
        self.allow_clients = allow_clients
        self.ident = dict(ident or {})
        self.ident_keys = dict(ident_keys or {})

    def challenge(self) -> dict[str, Any]:
        """The first frame: a version and a nonce, nothing an outsider could learn from."""
        return {"t": "challenge", "v": PROTOCOL_VERSION, "nonce": self.nonce}

    def receive_hello(self, frame: Any) -> Accepted:
        if _field(frame, "t", str) != "hello":
            raise HandshakeRejected(UNSUPPORTED, "expected a hello frame")
        if frame.get("v") != PROTOCOL_VERSION:
            raise HandshakeRejected(UNSUPPORTED, f"unsupported protocol version {frame.get('v')!r}")
        group = _field(frame, "group", str)
        remote = _field(frame, "id", str)
        role = _field(frame, "role", str)
        cnonce = _field(frame, "nonce", bytes)
        ident = _ident(frame)
        mac = frame.get("mac", b"") or b""
        session = None
        if self.secret is not None:  # the proof first: before it, a reject says nothing about us
            expected = _mac(self.secret, "hello", group, remote, role, self.nonce, cnonce, ident_text(ident))
            if not isinstance(mac, bytes) or not hmac.compare_digest(mac, expected):
                raise HandshakeRejected(AUTH_FAILED, f"{role} {remote!r} failed authentication "
                                                     "(missing or wrong dLegerAuthToken)")
        if group != self.group:
            raise HandshakeRejected(UNKNOWN_GROUP, f"group {group!r} is not {self.group!r}")
        if role == ROLE_PEER:
            if remote == self.self_id:
                raise HandshakeRejected(UNEXPECTED_MEMBER, f"peer claims this node's own id {remote!r}")
            if remote not in self.members:
                raise HandshakeRejected(UNKNOWN_MEMBER, f"{remote!r} is not a member of group {self.group!r}")
        elif role != ROLE_CLIENT:
            raise HandshakeRejected(UNSUPPORTED, f"unknown role {role!r}")
        transcript = (group, self.self_id, remote, role, self.nonce, cnonce, ident_text(self.ident), ident_text(ident))
        if self.secret is not None:
            session = Session.derive(self.secret, transcript, acceptor=True)
        if role == ROLE_PEER:  # after the proof: only a secret holder learns our configuration is off
            diff = compare_ident(self.ident, ident, self.ident_keys, self.self_id, remote, self.group)
            if diff is not None:
                raise HandshakeRejected(UNEXPECTED_MEMBER, f"peer {remote!r} refused: {diff}")
        if role == ROLE_CLIENT and not self.allow_clients:  # authenticated, but not served here
            raise HandshakeRejected(CLIENTS_REFUSED, f"client {remote!r} refused: this member serves its "
                                                     "peers only (broker-hosted DLedger; use the broker's API)")
        reply = {"t": "welcome", "id": self.self_id, "ident": self.ident,
                 "mac": _mac(self.secret, "welcome", *transcript)}
        return Accepted(remote, role, reply, session)


class ConnectorHandshake:
    """The connecting side: :meth:`receive_challenge` -> hello, then :meth:`receive_welcome`.

    ``expect_id`` (optional) is the id the connector believes it dialled; a mismatch is refused so
    a misconfigured peer list cannot silently route n1's traffic to n2.
    """

    def __init__(
        self,
        group: str,
        self_id: str,
        role: str = ROLE_PEER,
        secret: str | None = None,
        expect_id: str | None = None,
        nonce: bytes | None = None,
        ident: Optional[dict[str, Any]] = None,
        ident_keys: Optional[dict[str, str]] = None,
    ) -> None:
        self.group = group
        self.self_id = self_id
        self.role = role
        self.secret = secret or None
        self.expect_id = expect_id
        self.nonce = nonce if nonce is not None else new_nonce()
        self.ident = dict(ident or {})
        self.ident_keys = dict(ident_keys or {})
        self.remote_id: str | None = None  # set by a verified welcome
        self.challenged = False  # the hello was sent; the next frame is the welcome or a reject
        self.session: Optional[Session] = None
        self._snonce = b""

    def receive_challenge(self, frame: Any) -> dict[str, Any]:
        if _field(frame, "t", str) != "challenge":
            raise HandshakeRejected(UNSUPPORTED, "expected a challenge frame")
        if frame.get("v") != PROTOCOL_VERSION:
            raise HandshakeRejected(UNSUPPORTED, f"remote speaks protocol version {frame.get('v')!r}, "
                                                 f"not {PROTOCOL_VERSION}")
        self._snonce = _field(frame, "nonce", bytes)
        self.challenged = True
        return {
            "t": "hello",
            "v": PROTOCOL_VERSION,
            "group": self.group,
            "id": self.self_id,
            "role": self.role,
            "nonce": self.nonce,
            "ident": self.ident,
            "mac": _mac(self.secret, "hello", self.group, self.self_id, self.role, self._snonce, self.nonce,
                        ident_text(self.ident)),
        }

    def receive_welcome(self, frame: Any) -> str:
        """Returns the remote id; raises :class:`HandshakeRejected` on reject or bad proof.
        With a secret, :attr:`session` holds the keys for every later frame."""
        kind = _field(frame, "t", str)
        if kind == "reject":
            code = frame.get("code")
            raise HandshakeRejected(code if isinstance(code, int) else UNSUPPORTED, str(frame.get("reason", "")))
        if kind != "welcome":
            raise HandshakeRejected(UNSUPPORTED, "expected a welcome frame")
        remote = _field(frame, "id", str)
        remote_ident = _ident(frame)
        transcript = (self.group, remote, self.self_id, self.role, self._snonce, self.nonce,
                      ident_text(remote_ident), ident_text(self.ident))
        if self.secret is not None:
            mac = frame.get("mac", b"")
            expected = _mac(self.secret, "welcome", *transcript)
            if not isinstance(mac, bytes) or not hmac.compare_digest(mac, expected):
                raise HandshakeRejected(AUTH_FAILED, "remote failed to prove the shared secret (dLegerAuthToken)")
        if self.expect_id is not None and remote != self.expect_id:
            raise HandshakeRejected(UNEXPECTED_MEMBER, f"dialled {self.expect_id!r} but {remote!r} answered")
        if self.role == ROLE_PEER:  # an acceptor that did not compare (or lied) is still refused
            diff = compare_ident(self.ident, remote_ident, self.ident_keys, self.self_id, remote, self.group)
            if diff is not None:
                raise HandshakeRejected(UNEXPECTED_MEMBER, f"peer {remote!r} refused: {diff}")
        if self.secret is not None:
            self.session = Session.derive(self.secret, transcript, acceptor=False)
        self.remote_id = remote
        return remote
