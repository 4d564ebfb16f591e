"""Authenticated HA: the mutual challenge-response that precedes the classic protocol, sans-I/O.

Rules:
- Runs only when master and slave share ``haAuthToken``. Without a token the classic RocketMQ
  wire protocol (:mod:`broker.ha.protocol`) starts at the first byte, unchanged, so Apache
  slaves/masters stay compatible; ``broker/security_policy.py`` lets ``mqbroker`` run that way
  only with ``haAllowInsecure=true``.
- The slave proves the secret **first**: the listening master (the door anyone can reach)
  hands a stranger nothing but a random nonce, never a value computed from the secret, so it is
  no oracle for guessing the secret offline. The master proves itself second, to the slave
  only, and the slave accepts no frame until that proof verifies (a fake master cannot feed it).
- Both proofs and the session keys are HMAC-SHA256 of the secret over distinct labels and the
  transcript ``nonce_slave | nonce_master | len(brokerName) | brokerName``. Fresh 32-byte nonces
  on both sides make every recorded handshake useless later (no replay); distinct labels make a
  proof from one role useless in the other (no reflection); the brokerName binds the session to
  one broker group, so a secret shared by several groups cannot cross-wire them.
- After the handshake each direction has its own key; every report (slave -> master) and every
  frame (master -> slave, heartbeats included) carries a 16-byte tag
  ``HMAC-SHA256(key, seq:8 | bytes)[:16]`` with an implicit per-direction message counter, so an
  injected or replayed ack or frame fails verification and the connection is dropped. (Integrity
  only: the commitlog still travels in clear; confidentiality needs a private network or TLS.)
- Malformed or unexpected input is a :class:`HandshakeError` with a readable message and, on
  the master, an optional refusal code to send (never for bytes that are not our handshake at
  all, e.g. an Apache slave's 8-byte report: those peers get nothing). A handshake has a
  deadline (``haHandshakeTimeout``); the driver enforces it with :meth:`_Handshake.check_timeout`.

Wire format (big-endian; every message starts ``"RMHA" | version:1 | type:1``)::

    HELLO     slave  -> master  nonce_s:32 | name_len:1 | brokerName
    CHALLENGE master -> slave   nonce_m:32 | name_len:1 | brokerName
    PROOF     slave  -> master  HMAC(secret, "...slave proof"  | transcript):32
    WELCOME   master -> slave   HMAC(secret, "...master proof" | transcript):32
    REFUSED   master -> slave   code:1        (bad proof, other brokerName, version, busy)

Theory of operation: :class:`SlaveHandshake` and :class:`MasterHandshake` are fed bytes and
return bytes to send; when :attr:`_Handshake.done` they expose :attr:`_Handshake.keys`
(:class:`SessionKeys`, from which each side takes its two :class:`ChannelMac`) and
:attr:`_Handshake.leftover` (bytes that followed the handshake, for the protocol machine).
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
import struct
from dataclasses import dataclass
from typing import Final

MAGIC: Final = b"RMHA"
VERSION: Final = 1
NONCE_SIZE: Final = 32
PROOF_SIZE: Final = 32
TAG_SIZE: Final = 16
MAX_NAME_SIZE: Final = 255
HEAD_SIZE: Final = 6

HELLO: Final = 1
CHALLENGE: Final = 2
PROOF: Final = 3
WELCOME: Final = 4
REFUSED: Final = 5
REFUSE_BAD_PROOF: Final = 1
REFUSE_BROKER_NAME: Final = 2
REFUSE_VERSION: Final = 3
REFUSE_BUSY: Final = 4
REFUSAL_TEXT: Final = {
    REFUSE_BAD_PROOF: "the proof does not match the master's haAuthToken (different secret)",
    REFUSE_BROKER_NAME: "the slave names another brokerName than the master's",
    REFUSE_VERSION: "unsupported HA handshake version",
    REFUSE_BUSY: "the master is at its limit of connected slaves",
}

_HEAD: Final = struct.Struct(">4sBB")
_SEQ: Final = struct.Struct(">Q")
_LABEL_SLAVE: Final = b"rocketmq-py HA v1 slave proof\x00"
_LABEL_MASTER: Final = b"rocketmq-py HA v1 master proof\x00"
_LABEL_SESSION: Final = b"rocketmq-py HA v1 session\x00"


@dataclass(frozen=True)
class HandshakeError:
    """Why a handshake failed; ``refusal`` is the code a master sends before closing (if any)."""

    message: str
    refusal: int | None = None


class ChannelMac:
    """One direction's message MAC: ``HMAC-SHA256(key, seq | parts)[:16]``, seq counting messages.

    Sender and receiver hold one each with the same key; TCP keeps messages in order, so both
    counters advance in lockstep and a replayed, dropped-in or reordered message fails.
    """

    def __init__(self, key: bytes) -> None:
        self._base = hmac.new(key, digestmod=hashlib.sha256)
        self.seq = 0

    def tag(self, *parts: bytes | bytearray | memoryview) -> bytes:
        h = self._base.copy()
        h.update(_SEQ.pack(self.seq))
        for part in parts:
            h.update(part)
        self.seq += 1
        return h.digest()[:TAG_SIZE]

    def verify(self, tag: bytes | bytearray | memoryview, *parts: bytes | bytearray | memoryview) -> bool:
        return hmac.compare_digest(self.tag(*parts), bytes(tag))


@dataclass(frozen=True)
class SessionKeys:
    """Per-connection keys, one per direction, derived from the secret and the transcript."""

    slave_to_master: bytes
    master_to_slave: bytes

    def for_master(self) -> "SessionMac":
        return SessionMac(send=ChannelMac(self.master_to_slave), recv=ChannelMac(self.slave_to_master))

    def for_slave(self) -> "SessionMac":
        return SessionMac(send=ChannelMac(self.slave_to_master), recv=ChannelMac(self.master_to_slave))


@dataclass(frozen=True)
class SessionMac:
    """What one side of :mod:`broker.ha.protocol` needs: the MAC it sends with and the one it checks."""

    send: ChannelMac
    recv: ChannelMac


def _digest(key: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, b"".join(parts), hashlib.sha256).digest()


def transcript(nonce_slave: bytes, nonce_master: bytes, broker_name: bytes) -> bytes:
    return nonce_slave + nonce_master + bytes([len(broker_name)]) + broker_name


def slave_proof(secret: bytes, tr: bytes) -> bytes:
    return _digest(secret, _LABEL_SLAVE, tr)


def master_proof(secret: bytes, tr: bytes) -> bytes:
    return _digest(secret, _LABEL_MASTER, tr)


def session_keys(secret: bytes, tr: bytes) -> SessionKeys:
    root = _digest(secret, _LABEL_SESSION, tr)
    return SessionKeys(_digest(root, b"slave->master"), _digest(root, b"master->slave"))


def encode_message(kind: int, body: bytes = b"") -> bytes:
    return _HEAD.pack(MAGIC, VERSION, kind) + body


def encode_hello_like(kind: int, nonce: bytes, broker_name: bytes) -> bytes:
    return encode_message(kind, nonce + bytes([len(broker_name)]) + broker_name)


def encode_refused(code: int) -> bytes:
    return encode_message(REFUSED, bytes([code]))


def _name_bytes(broker_name: str) -> bytes:
    raw = broker_name.encode("utf-8")
    if len(raw) > MAX_NAME_SIZE:
        raise ValueError(f"brokerName is {len(raw)} bytes; the HA handshake carries at most {MAX_NAME_SIZE}")
    return raw


def _secret_bytes(secret: str | bytes) -> bytes:
    raw = secret.encode("utf-8") if isinstance(secret, str) else bytes(secret)
    if not raw:
        raise ValueError("an HA handshake needs a non-empty haAuthToken")
    return raw


class _Handshake:
    """State shared by both roles: buffer, deadline, outcome."""

    role = "?"

    def __init__(self, secret: str | bytes, broker_name: str, *, now_ms: float, timeout_ms: float,
                 nonce: bytes | None = None) -> None:
        self._secret = _secret_bytes(secret)
        self.broker_name = _name_bytes(broker_name)
        self.nonce = nonce if nonce is not None else secrets.token_bytes(NONCE_SIZE)
        if len(self.nonce) != NONCE_SIZE:
            raise ValueError(f"nonce must be {NONCE_SIZE} bytes")
        self.deadline_ms = now_ms + timeout_ms
        self.timeout_ms = timeout_ms
        self.error: HandshakeError | None = None
        self.keys: SessionKeys | None = None
        self.leftover = b""
        self.peer_broker_name: str | None = None
        self._buf = bytearray()

    @property
    def done(self) -> bool:
        return self.keys is not None

    def check_timeout(self, now_ms: float) -> HandshakeError | None:
        """The deadline passed without a complete handshake (the error is kept)."""
        if self.error is None and not self.done and now_ms > self.deadline_ms:
            self.error = HandshakeError(f"no complete HA handshake within {self.timeout_ms:.0f} ms")
        return self.error

    def _fail(self, message: str, refusal: int | None = None) -> bytes:
        self.error = HandshakeError(message, refusal)
        self._buf.clear()
        return encode_refused(refusal) if refusal is not None else b""

    def _next_message(self, expected: tuple[int, ...]) -> tuple[int, bytes, bytes] | HandshakeError | None:
        """(type, nonce-or-proof-or-code, name) at the head of the buffer; None if incomplete."""
        buf = self._buf
        if not MAGIC.startswith(bytes(buf[:4])):
            return HandshakeError(
                f"first bytes {bytes(buf[:8]).hex()} are not an authenticated HA handshake ({MAGIC.decode()}): "
                "the peer speaks the classic unauthenticated protocol (no haAuthToken?) or is not an HA peer")
        if len(buf) < HEAD_SIZE:
            return None
        version, kind = buf[4], buf[5]
        if version != VERSION:
            return HandshakeError(f"peer speaks HA handshake version {version}, this broker {VERSION}", REFUSE_VERSION)
        if kind not in expected:
            return HandshakeError(f"unexpected HA handshake message type {kind} (expected {expected})")
        if kind in (HELLO, CHALLENGE):
            fixed = HEAD_SIZE + NONCE_SIZE + 1
            if len(buf) < fixed or len(buf) < fixed + buf[fixed - 1]:
                return None
            size = fixed + buf[fixed - 1]
            value, name = bytes(buf[HEAD_SIZE:fixed - 1]), bytes(buf[fixed:size])
        elif kind == REFUSED:
            size = HEAD_SIZE + 1
            if len(buf) < size:
                return None
            value, name = bytes(buf[HEAD_SIZE:size]), b""
        else:
            size = HEAD_SIZE + PROOF_SIZE
            if len(buf) < size:
                return None
            value, name = bytes(buf[HEAD_SIZE:size]), b""
        del buf[:size]
        return kind, value, name

    def _finish(self, keys: SessionKeys) -> None:
        self.keys = keys
        self.leftover = bytes(self._buf)
        self._buf.clear()


class SlaveHandshake(_Handshake):
    """Slave side: HELLO, then PROOF on CHALLENGE, then verify WELCOME."""

    role = "slave"

    def __init__(self, secret: str | bytes, broker_name: str, *, now_ms: float, timeout_ms: float,
                 nonce: bytes | None = None) -> None:
        super().__init__(secret, broker_name, now_ms=now_ms, timeout_ms=timeout_ms, nonce=nonce)
        self._transcript: bytes | None = None

    def start(self) -> bytes:
        """The HELLO, sent as soon as the connection is up."""
        return encode_hello_like(HELLO, self.nonce, self.broker_name)

    def receive_data(self, data: bytes, now_ms: float) -> bytes:
        """Feed bytes from the master; returns bytes to send (the PROOF, once)."""
        if self.error is not None or self.done or not data:
            return b""
        self._buf += data
        out = b""
        while self.error is None and not self.done:
            expected = (CHALLENGE, REFUSED) if self._transcript is None else (WELCOME, REFUSED)
            msg = self._next_message(expected)
            if msg is None:
                break
            if isinstance(msg, HandshakeError):
                self.error = HandshakeError(msg.message)  # the slave never sends a refusal
                break
            kind, value, name = msg
            if kind == REFUSED:
                text = REFUSAL_TEXT.get(value[0], f"refusal code {value[0]}")
                self.error = HandshakeError(f"master refused this slave: {text}")
            elif kind == CHALLENGE:
                self.peer_broker_name = name.decode("utf-8", "replace")
                if name != self.broker_name:
                    self.error = HandshakeError(
                        f"master serves brokerName {self.peer_broker_name!r}, this slave replicates "
                        f"{self.broker_name.decode('utf-8', 'replace')!r}")
                    break
                self._transcript = transcript(self.nonce, value, self.broker_name)
                out += encode_message(PROOF, slave_proof(self._secret, self._transcript))
            else:  # WELCOME
                assert self._transcript is not None
                if not hmac.compare_digest(value, master_proof(self._secret, self._transcript)):
                    self.error = HandshakeError(
                        "master could not prove haAuthToken (a different secret, or not our master); "
                        "refusing its data")
                    break
                self._finish(session_keys(self._secret, self._transcript))
        return out


class MasterHandshake(_Handshake):
    """Master side: CHALLENGE on HELLO, then verify PROOF and answer WELCOME (or REFUSED)."""

    role = "master"

    def __init__(self, secret: str | bytes, broker_name: str, *, now_ms: float, timeout_ms: float,
                 nonce: bytes | None = None) -> None:
        super().__init__(secret, broker_name, now_ms=now_ms, timeout_ms=timeout_ms, nonce=nonce)
        self._transcript: bytes | None = None

    def receive_data(self, data: bytes, now_ms: float) -> bytes:
        """Feed bytes from the slave; returns bytes to send (CHALLENGE, WELCOME or REFUSED)."""
        if self.error is not None or self.done or not data:
            return b""
        self._buf += data
        out = b""
        while self.error is None and not self.done:
            msg = self._next_message((HELLO,) if self._transcript is None else (PROOF,))
            if msg is None:
                break
            if isinstance(msg, HandshakeError):
                return out + self._fail(msg.message, msg.refusal)
            kind, value, name = msg
            if kind == HELLO:
                self.peer_broker_name = name.decode("utf-8", "replace")
                if name != self.broker_name:
                    return out + self._fail(
                        f"slave names brokerName {self.peer_broker_name!r}, this master serves "
                        f"{self.broker_name.decode('utf-8', 'replace')!r}", REFUSE_BROKER_NAME)
                self._transcript = transcript(value, self.nonce, self.broker_name)
                out += encode_hello_like(CHALLENGE, self.nonce, self.broker_name)
            else:  # PROOF
                assert self._transcript is not None
                if not hmac.compare_digest(value, slave_proof(self._secret, self._transcript)):
                    return out + self._fail("slave's proof does not match haAuthToken (wrong secret)",
                                            REFUSE_BAD_PROOF)
                self._finish(session_keys(self._secret, self._transcript))
                out += encode_message(WELCOME, master_proof(self._secret, self._transcript))
        return out

    def buffered(self) -> int:
        """Bytes held for an incomplete message (bounded by the largest HELLO, 294 bytes)."""
        return len(self._buf)


__all__ = [
    "ChannelMac", "HandshakeError", "MAGIC", "MasterHandshake", "REFUSAL_TEXT", "REFUSE_BAD_PROOF",
    "REFUSE_BROKER_NAME", "REFUSE_BUSY", "REFUSE_VERSION", "SessionKeys", "SessionMac", "SlaveHandshake",
    "TAG_SIZE", "encode_refused",
]
