"""Issue 23, item 1: the DLedger port before authentication, attacked with real processes.

Before the fix the first frame of a connection was decoded before the HMAC handshake, up to the
64 MiB frame limit, with no connection cap (one 24 MB frame took a leader from 48 to 1,741 MB),
and the challenge told anyone who connected the group, the member id and the file sizes. Now a
connection may announce at most 4 KiB until its handshake completed (a larger header closes it
before the body is read), unauthenticated connections are capped (evict-oldest, per address and
in all), large unfinished frames of authenticated connections reserve a shared pending-bytes
budget, and the challenge is ``{t, v, nonce}``.

Memory is measured on the attacked processes: ``VmHWM`` (the peak RSS, which also catches a
buffer freed again before we look) and ``VmRSS`` from ``/proc/<pid>/status``.
"""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from dledger.rpc import framing as fr
from dledger.rpc import handshake as hk
from tests.dledger.test_processes import SECRET
from tests.security._dledger_support import RawConn, assert_nothing_lost, seeded_group, with_client

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(120)]
MIB = 1024 * 1024
DECLARED = 24 * 1000 * 1000  # the 24 MB frame
MAX_GROWTH_MIB = 16


@pytest.fixture(scope="module")
def dgroup(tmp_path_factory):
    """Three ``dledger server`` processes sharing SECRET, with a few acknowledged entries."""
    with seeded_group(tmp_path_factory.mktemp("dledger-preauth")) as g:
        yield g


_with_client = with_client


def mem_kib(pid: int) -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` (peak) of ``pid`` in KiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


async def closed_within(conn: RawConn, timeout: float) -> bool:
    """True if the remote closes ``conn`` within ``timeout`` seconds (what it sends is drained)."""
    try:
        return await conn.closed_by_remote(timeout)
    except asyncio.TimeoutError:
        return False
    except OSError:  # reset / broken pipe: closed as well
        return True


async def _send_huge_frame(port: int) -> tuple[dict, bool]:
    """Read the challenge, then announce a 24 MB frame and stream its body; returns the
    challenge and whether the remote closed the connection."""
    conn = await RawConn.open(port)
    try:
        challenge = await conn.frame()
        body = b"\xc4" * (1 * MIB)
        conn.writer.write(fr.HEADER.pack(DECLARED))
        try:
            for _ in range(DECLARED // len(body)):
                conn.writer.write(body)
                await asyncio.wait_for(conn.writer.drain(), 5)
        except (ConnectionError, OSError, asyncio.TimeoutError):
            pass
        return challenge, await closed_within(conn, 3.0)
    finally:
        conn.close()


def test_huge_first_frame_is_refused_before_its_body_is_buffered(dgroup):
    g = dgroup
    leader = asyncio.run(g.leader())
    follower = next(n for n in g.ids if n != leader)
    targets = {leader: 4, follower: 1}  # concurrent 24 MB frames per member
    before = {n: mem_kib(g.procs[n].pid) for n in targets}

    async def attack() -> list[tuple[dict, bool]]:
        return await asyncio.gather(*(_send_huge_frame(g.peers[n][1]) for n, k in targets.items() for _ in range(k)))

    results = asyncio.run(attack())
    after = {n: mem_kib(g.procs[n].pid) for n in targets}
    print("memory KiB before/after:", before, after)
    for n in targets:
        growth_peak = (after[n]["VmHWM"] - before[n]["VmHWM"]) / 1024
        growth_rss = (after[n]["VmRSS"] - before[n]["VmRSS"]) / 1024
        assert growth_peak < MAX_GROWTH_MIB and growth_rss < MAX_GROWTH_MIB, (n, before[n], after[n])
    for challenge, closed in results:
        assert set(challenge) == {"t", "v", "nonce"}, challenge  # no group, id or file sizes
        assert closed
    asyncio.run(_with_client(g, lambda c: assert_nothing_lost(c, g.acked, "huge")))
    assert asyncio.run(g.leader()) == leader  # the attack cost it nothing, not even the leadership
    assert all(p.poll() is None for p in g.procs.values())
    log = (g.root / f"{leader}.log").read_text(errors="replace")
    assert "exceeds the limit of 4096 bytes" in log


def test_unauthenticated_connections_are_capped_and_members_still_get_in(dgroup):
    g = dgroup

    async def attack() -> None:
        leader = await g.leader()
        port = g.peers[leader][1]
        flood = [await RawConn.open(port) for _ in range(100)]  # connect, then say nothing
        try:
            await asyncio.sleep(0.3)  # far below the 2 s handshake timeout
            closed = await asyncio.gather(*(closed_within(c, 0.2) for c in flood))
            # 8 per address (all of ours come from 127.0.0.1): the 92 oldest were evicted
            assert sum(closed) >= 92, sum(closed)
            # the flood is still held, yet an authenticated client and the peers get in
            await _with_client(g, lambda c: assert_nothing_lost(c, g.acked, "flood"))
            sts = await g.statuses()
            tp = sts[leader]["transport"]
            assert tp["evicted_unauthenticated"] >= 92 and tp["unauthenticated_connections"] <= 8, tp
        finally:
            for c in flood:
                c.close()

    asyncio.run(attack())
    for n in g.ids:  # the refusals were logged, but not one line per connection
        log = (g.root / f"{n}.log").read_text(errors="replace")
        assert log.count("closed unauthenticated connection") <= 12, n


def test_large_unfinished_frames_share_a_pending_bytes_budget(dgroup):
    """Authenticated connections may send big frames, but unfinished ones share 128 MiB."""
    g = dgroup

    async def attack() -> None:
        leader = await g.leader()
        port = g.peers[leader][1]
        conns = []
        try:
            for i in range(3):
                c = await RawConn.open(port)
                conns.append(c)
                assert (await c.handshake("g", f"app-{i}", SECRET, role=hk.ROLE_CLIENT))["t"] == "welcome"
                c.write(fr.HEADER.pack(60 * MIB) + b"\0" * MIB)  # 60 MiB announced, 1 MiB sent
                await c.writer.drain()
                await asyncio.sleep(0.2)
            assert await closed_within(conns[2], 3.0)  # 3 x 60 MiB > 128 MiB: the third is closed
            for c in conns[:2]:  # the first two still hold their reservations
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(c.reader.read(1), 0.3)
            sts = await g.statuses()
            tp = sts[leader]["transport"]
            assert tp["budget_refusals"] >= 1 and tp["pending_bytes"] == 2 * (60 * MIB), tp
        finally:
            for c in conns:
                c.close()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:  # closing the connections gives the budget back
            sts = await g.statuses()
            if sts[leader]["transport"]["pending_bytes"] == 0:
                break
            await asyncio.sleep(0.05)
        assert sts[leader]["transport"]["pending_bytes"] == 0
        await _with_client(g, lambda c: assert_nothing_lost(c, g.acked, "budget"))

    asyncio.run(attack())
