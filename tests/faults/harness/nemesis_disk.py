"""Storage and clock nemeses: torn writes, bit flips, a full disk, a monotonic clock jump.

Rules
-----
* Files are touched only while their node is stopped (killed with SIGKILL), and only in ways a
  real machine produces:

  - ``torn-write``: the node is first cut off from its peers (DLedger: the leader; classic: the
    master's HA link), so what it appends next is not acknowledged; it is killed and the last
    record of its last data file is cut short (zeroed from a random point inside it). The torn
    record must belong to an unacknowledged send (checked against the history), and in classic
    mode the tear starts at or past the checkpoint's flushed offset (bytes below it were fsync'ed
    before the crash: a tear there is disk damage, the bitflip nemesis's job, and recovery rightly
    refuses it); otherwise the tear is skipped and noted, never faked. Recovery must drop it and
    rejoin.
  - ``bitflip``: one bit of a record inside the committed region of a closed data file that the
    recovery scan reads (the second-last file). The node must refuse to start with an error
    that names the file and the offset; the nemesis records what the log said, then restores
    the byte and restarts the node (healing).
  - ``disk-full``: the node whose store root is a size-limited tmpfs (``Ctx.tmpfs``; DLedger:
    made leader first) gets its filesystem filled to the last byte by a filler file; writes must
    be refused (never acknowledged), the log must say so; deleting the filler heals.
  - ``clock-jump``: the leader is killed and restarted inside a time namespace whose monotonic
    and boot clocks are one day ahead (``unshare --time``), later restarted without it (a jump
    back). Wall-clock jumps of a running process are not possible honestly here (no libfaketime
    installed); elections and timeouts use the monotonic clock, so this is the clock that
    matters.
"""
from __future__ import annotations

import asyncio
import errno
import os
import re
import struct
from pathlib import Path
from typing import Any, Optional

from broker.api.client import SyncBrokerClient

from .cluster import DLedgerCluster
from .nemesis import Ctx, both_ways, cut, leader, nemesis, recovered, restart
from .workload import wait_for

_I = struct.Struct(">i")


def records(path: Path, dledger: bool) -> list[tuple[int, int]]:
    """(start, size) of every record in a data file, in order, up to the first empty/blank one."""
    data = path.read_bytes()
    out, pos = [], 0
    while pos + 8 <= len(data):
        if dledger:
            magic, size = struct.unpack_from(">ii", data, pos)
            if magic <= 0 or size <= 48:
                break
        else:
            size, magic = struct.unpack_from(">ii", data, pos)
            if size <= 0 or magic == -875286124:
                break
        if pos + size > len(data):
            break
        out.append((pos, size))
        pos += size
    return out


def key_in(data: bytes) -> Optional[str]:
    m = re.search(rb"(p\d+-\d+)\|", data)
    return m.group(1).decode() if m else None


# ---------------------------------------------------------------------------- torn write
def unflushed_tail(files: list[Path], root: Path) -> bool:
    """The last record of the last commitlog file ends past the checkpoint's flushed offset."""
    files = [f for f in files if records(f, False)]
    if not files:
        return False
    start, size = records(files[-1], False)[-1]
    return int(files[-1].name) + start + size > flushed_offset(root)


def flushed_offset(root: Path) -> int:
    """The classic checkpoint's physicFlushedOffset (@40): what recovery treats as durable."""
    try:
        return struct.unpack_from(">q", (root / "checkpoint").read_bytes(), 40)[0]
    except (OSError, struct.error):
        return 0


@nemesis("torn-write")
async def torn_write(ctx: Ctx) -> dict[str, Any]:
    c, h = ctx.cluster, ctx.history
    dl = isinstance(c, DLedgerCluster)
    victim = await leader(ctx)
    others = [n for n in c.names if n != victim]
    h.nemesis("torn-write", "start", node=victim)
    detail: dict[str, Any] = {"node": victim}
    try:
        for a, b in both_ways([[victim], others]):
            cut(ctx, a, b)
        await asyncio.sleep(min(ctx.fault_s, 1.5))
        if not dl:  # wait (bounded) for an unflushed record to tear: the workload keeps putting
            await wait_for(lambda: unflushed_tail(c.data_files(victim), c.roots[victim]), 5.0)
        await asyncio.to_thread(c.kill9, victim)
        files = [f for f in c.data_files(victim) if records(f, dl)]
        if files:
            f = files[-1]
            start, size = records(f, dl)[-1]
            data = f.read_bytes()[start:start + size]
            key = key_in(data)
            acked = {e["op"] for e in h.events if e["type"] == "ok"}
            ops = {e["key"]: e["op"] for e in h.events if e["type"] == "invoke"}
            # classic: bytes below the checkpoint's flushed offset (@40, published right after each
            # fsync) were durable before the crash; only what lies past it can be torn by one
            durable = 0 if dl else max(0, flushed_offset(c.roots[victim]) - int(f.name))
            cut_at = max(start + ctx.rng.randrange(8, size), durable)
            if key is not None and ops.get(key) in acked:
                detail["skipped"] = f"last record ({key}) was acknowledged; a tear there is not a real fault"
            elif cut_at >= start + size:
                detail["skipped"] = (f"last record ({key}) is below the flushed offset: durable, so a tear there "
                                     "would be disk damage (bitflip's job), not a crash")
            else:
                with open(f, "r+b") as fh:
                    fh.seek(cut_at)
                    fh.write(bytes(start + size - cut_at))
                detail.update(file=f.name, record_at=start, torn_from=cut_at, torn_bytes=start + size - cut_at, key=key)
        c.hub.heal_all()
    finally:
        c.hub.heal_all()
        if not c.alive(victim):
            await restart(ctx, victim)
        t = h.now()
        h.nemesis("torn-write", "heal", **detail)
    await recovered(ctx, "torn-write", t)
    return detail


# ---------------------------------------------------------------------------- bit flip
def persisted_committed_end(root: Path, self_id: str) -> Optional[int]:
    """End position of the committed index recorded in the node's checkpoint (what recovery trusts)."""
    from dledger.store.state_files import CheckpointFile

    idx = CheckpointFile(root / f"dledger-{self_id}").load_committed_index()
    index_dir = root / f"dledger-{self_id}" / "index"
    if idx is None or idx < 0 or not index_dir.exists():
        return None
    raw = b"".join(p.read_bytes() for p in sorted(index_dir.iterdir()) if p.name.isdigit())
    if len(raw) < (idx + 1) * 32:
        return None
    _magic, pos, size, _index, _term = struct.unpack_from(">iqiqq", raw, idx * 32)
    return pos + size


@nemesis("bitflip")
async def bitflip(ctx: Ctx) -> dict[str, Any]:
    c, h = ctx.cluster, ctx.history
    dl = isinstance(c, DLedgerCluster)
    ld = await leader(ctx)
    victim = ctx.rng.choice([n for n in c.names if n != ld and n != ctx.tmpfs] or [n for n in c.names if n != ld])
    st = c.status(victim) or {}
    committed = None if dl else (st.get("commitLog") or {}).get("flushedOffset")
    h.nemesis("bitflip", "start", node=victim)
    detail: dict[str, Any] = {"node": victim}
    restore: Optional[tuple[Path, int, int]] = None
    if dl:  # the persisted checkpoint lags (every few s): wait until it covers a closed file's records
        def covered() -> bool:
            files = c.data_files(victim)
            end = persisted_committed_end(c.roots[victim], victim)
            return len(files) >= 2 and end is not None and end > int(files[-2].name) + 4096
        await wait_for(covered, 15.0)
    try:
        await asyncio.to_thread(c.kill9, victim)
        if dl:
            committed = persisted_committed_end(c.roots[victim], victim)
        detail["committed_end"] = committed
        files = c.data_files(victim)
        closed = files[-3:-1] if len(files) >= 2 else files
        if not closed or committed is None:
            detail["skipped"] = f"{len(files)} data files, committed position {committed}"
        else:
            recs: list[tuple[int, int]] = []
            for f in reversed(closed + files[-1:]):  # newest closed file with committed records, the last file at worst
                base = int(f.name)
                recs = [(s, z) for s, z in records(f, dl) if base + s + z <= committed]
                if recs:
                    break
            if not recs:
                detail["skipped"] = "no committed record in the chosen file"
            else:
                s, z = ctx.rng.choice(recs)
                rec = f.read_bytes()[s:s + z]
                pad = re.search(rb"\|(x+)", rec)  # the message body's padding: what the record CRC covers
                at = s + (pad.start(1) + ctx.rng.randrange(len(pad.group(1))) if pad else ctx.rng.randrange(48, z))
                bit = 1 << ctx.rng.randrange(8)
                with open(f, "r+b") as fh:
                    fh.seek(at)
                    old = fh.read(1)[0]
                    fh.seek(at)
                    fh.write(bytes([old ^ bit]))
                restore = (f, at, old)
                detail.update(file=f.name, offset=at, absolute=base + at, bit=bit)
                log_before = len(c.procs[victim].log_path.read_bytes())
                p = c.procs[victim]
                await asyncio.to_thread(p.start, False)
                code = await wait_for(lambda: p.proc.poll(), 20.0)  # type: ignore[union-attr]
                text = p.log_path.read_bytes()[log_before:].decode(errors="replace")
                named = f.name in text and any(str(v) in text for v in (at, base + at, s, base + s))
                detail.update(exit_code=code, refused=code is not None and code != 0, names_file_and_offset=named,
                              error=next((l for l in text.splitlines() if f.name in l), text.strip().splitlines()[-1:]))
                if p.alive():
                    await asyncio.to_thread(c.kill9, victim)
    finally:
        if restore is not None:
            f, at, old = restore
            with open(f, "r+b") as fh:
                fh.seek(at)
                fh.write(bytes([old]))
        if not c.alive(victim):
            await restart(ctx, victim)
        t = h.now()
        h.nemesis("bitflip", "heal", **{k: v for k, v in detail.items() if k != "node"})
    await recovered(ctx, "bitflip", t)
    return detail


# ---------------------------------------------------------------------------- full disk
def fill(path: Path) -> int:
    """Write zeros to ``path`` until ENOSPC; returns the bytes written."""
    written = 0
    chunk = bytes(1 << 16)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        while True:
            try:
                n = os.write(fd, chunk if len(chunk) > 512 else chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(chunk) <= 512:
                    break
                chunk = bytes(len(chunk) // 8)
                continue
            written += n
    finally:
        os.close(fd)
    return written


@nemesis("disk-full")
async def disk_full(ctx: Ctx) -> dict[str, Any]:
    c, h = ctx.cluster, ctx.history
    victim = ctx.tmpfs
    if victim is None:
        h.note("disk-full skipped: no tmpfs node")
        return {"skipped": "no size-limited filesystem (mount not permitted)"}
    if isinstance(c, DLedgerCluster):
        ld = await leader(ctx)
        if ld != victim:
            with SyncBrokerClient(c.address(ld), timeout=10) as cl:
                try:
                    cl.transfer_leader(victim)
                except Exception as exc:  # noqa: BLE001 - recorded; the nemesis still fills the disk
                    h.note("transfer-leader failed", error=str(exc))
            await wait_for(lambda: c.leader() == victim, 15.0)
    filler = c.roots[victim] / "zz-filler"
    log_before = len(c.procs[victim].log_path.read_bytes())
    h.nemesis("disk-full", "start", node=victim, leader=c.leader())
    detail: dict[str, Any] = {"node": victim}
    try:
        detail["filled_bytes"] = await asyncio.to_thread(fill, filler)
        await asyncio.sleep(ctx.fault_s)
        detail["alive_while_full"] = c.alive(victim)
    finally:
        try:
            filler.unlink()
        except FileNotFoundError:
            pass
        text = c.procs[victim].log_path.read_bytes()[log_before:].decode(errors="replace")
        lines = [l for l in text.splitlines() if re.search(r"disk full|No space|ENOSPC|Errno 28|SIGBUS", l, re.I)]
        detail["log_lines"] = lines[:3]
        detail["log_names_path"] = any(str(c.roots[victim]) in l for l in lines)
        if not c.alive(victim):
            detail["exit_code"] = c.procs[victim].proc.returncode  # type: ignore[union-attr]
            await restart(ctx, victim)
        t = h.now()
        h.nemesis("disk-full", "heal", **{k: v for k, v in detail.items() if k != "node"})
    await recovered(ctx, "disk-full", t)
    return detail


# ---------------------------------------------------------------------------- clock jump
@nemesis("clock-jump", dledger_only=True)
async def clock_jump(ctx: Ctx) -> dict[str, Any]:
    c, h = ctx.cluster, ctx.history
    victim = await leader(ctx)
    jump = 86400
    h.nemesis("clock-jump", "start", node=victim, monotonic_ahead_s=jump)
    p = c.procs[victim]
    try:
        await asyncio.to_thread(c.kill9, victim)
        p.wrapper = ["unshare", "--time", "--fork", "--kill-child", "--monotonic", str(jump), "--boottime", str(jump)]
        await restart(ctx, victim)
        await asyncio.sleep(ctx.fault_s)
        await asyncio.to_thread(c.kill9, victim)  # and back: the monotonic clock jumps a day backwards
    finally:
        p.wrapper = []
        if not c.alive(victim):
            await restart(ctx, victim)
        t = h.now()
        h.nemesis("clock-jump", "heal")
    await recovered(ctx, "clock-jump", t)
    return {"node": victim, "monotonic_ahead_s": jump}
