"""Helpers for tests/security/test_dledger_doors.py: a raw DLedger dialer and loss checks.

Rules
-----
* :class:`RawConn` speaks the DLedger wire protocol by hand (``dledger.rpc.framing``,
  ``dledger.rpc.handshake``) so a test can do what an attacker does: claim any id, send a wrong
  or no secret, pipeline frames without waiting for the welcome, replay or inject frames. Every read is bounded by a timeout.
* :func:`append_acked` records every acknowledged ``index -> body``; :func:`assert_nothing_lost`
  reads each one back from the leader (committed entries) and appends once more, so "the group
  is still up and nothing acknowledged was lost" is one call.

Theory of operation
-------------------
The three-member ``dledger server`` group is ``tests.dledger.test_processes.ProcGroup`` (real
processes, shared secret); brokers come from ``tests.broker.test_dledger_group.DLedgerGroup``.
"""
from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterator, Optional

from dledger.rpc import framing as fr
from dledger.rpc import handshake as hk
from dledger.rpc.client import DLedgerClient


#: The handshake identity of a ``tests.dledger.test_processes.ProcGroup`` member (1m / 64k files).
PROC_IDENT = {"data_file_size": 1 << 20, "index_file_size": 64 << 10}


class RawConn:
    """One hand-driven TCP connection to a DLedger port."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.decoder = fr.FrameDecoder()
        self.sent = bytearray()  # everything written, for replays
        self.session: Optional[hk.Session] = None

    @classmethod
    async def open(cls, port: int) -> "RawConn":
        r, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
        return cls(r, w)

    def write(self, data: bytes) -> None:
        self.sent += data
        self.writer.write(data)

    async def frame(self, timeout: float = 5.0) -> Optional[Any]:
        """Next frame, or None when the remote closed."""
        for _ in range(1000):
            got = self.decoder.feed(b"", 1)
            if got:
                return got[0]
            data = await asyncio.wait_for(self.reader.read(65536), timeout)
            if not data:
                return None
            got = self.decoder.feed(data, 1)
            if got:
                return got[0]
        raise AssertionError("no complete frame")

    async def handshake(self, group: str, claim_id: str, secret: Optional[str], role: str = hk.ROLE_PEER,
                        then: bytes = b"", ident: Optional[dict[str, Any]] = None) -> Any:
        """Answer the challenge (sending ``then`` right behind the hello, as a pipelining
        attacker would) and return the welcome/reject frame; sets :attr:`session` on success.
        A peer claims ``ident`` (default: :data:`PROC_IDENT`, a ``ProcGroup`` member's file sizes;
        the challenge tells nothing since issue 23.1)."""
        hs = hk.ConnectorHandshake(group, claim_id, role, secret)
        challenge = await self.frame()
        if role == hk.ROLE_PEER:
            hs.ident = dict(PROC_IDENT if ident is None else ident)
        self.write(fr.encode_frame(hs.receive_challenge(challenge)) + then)
        reply = await self.frame()
        if isinstance(reply, dict) and reply.get("t") == "welcome":
            hs.receive_welcome(reply)
            self.session = hs.session
            if self.session is not None:
                self.decoder.opener = self.session.opener
        return reply

    async def closed_by_remote(self, timeout: float = 5.0) -> bool:
        """True once the remote closes (anything it still sends is drained)."""
        for _ in range(1000):
            try:
                data = await asyncio.wait_for(self.reader.read(65536), timeout)
            except ConnectionResetError:
                return True
            if not data:
                return True
        return False

    def close(self) -> None:
        self.writer.close()


def forged_vote(src: str, dst: str, term: int) -> dict[str, Any]:
    """The issue's attack: a transfer vote (overrides the leader lease) with a huge term."""
    return {"t": "vote", "src": src, "dst": dst, "term": term, "last_index": 2**62, "last_term": min(term, 2**63 - 1),
            "pre_vote": False, "transfer": True}


def forged_append(src: str, dst: str, term: int) -> dict[str, Any]:
    return {"t": "append", "src": src, "dst": dst, "term": term, "prev_index": -1, "prev_term": -1, "commit": -1,
            "entries": []}


async def append_acked(client: DLedgerClient, acked: dict[int, bytes], tag: str, n: int) -> None:
    for i in range(n):
        body = f"{tag}-{i}".encode()
        res = await client.append(body)
        acked[res.index] = body


async def assert_nothing_lost(client: DLedgerClient, acked: dict[int, bytes], tag: str) -> None:
    """The group appends (it has a leader and a quorum) and serves every acknowledged entry."""
    await append_acked(client, acked, f"{tag}-after", 1)
    for index, body in sorted(acked.items()):
        entry = await client.get(index)
        assert entry["body"] == body, (index, entry["body"], body)


async def with_client(g: Any, fn: Callable[[DLedgerClient], Awaitable[Any]]) -> Any:
    """Run ``fn`` with a client of ``g`` (a ``tests.dledger.test_processes.ProcGroup``) once it has a leader."""
    await g.leader()
    c = g.client()
    try:
        return await fn(c)
    finally:
        await c.close()


@contextlib.contextmanager
def seeded_group(root: Path) -> Iterator[Any]:
    """Three ``dledger server`` processes sharing SECRET, with 5 acknowledged entries in ``g.acked``."""
    from tests.dledger.test_processes import ProcGroup  # noqa: WPS433 - test helpers, imported when used

    g = ProcGroup(root)
    g.acked = {}
    try:
        for n in g.ids:
            g.start(n)
        asyncio.run(with_client(g, lambda c: append_acked(c, g.acked, "seed", 5)))
        yield g
    finally:
        g.kill_all()
