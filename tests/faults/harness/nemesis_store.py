"""Store-replacement nemesis (issue 13.2): a follower loses its whole store and is re-seeded.

Rules
-----
* ``wipe-follower`` (DLedger only) kills a follower with SIGKILL, moves its store root away (what
  ``EntryCorruptionError`` tells an operator to do), runs ``mqupgrade reseed --from <leader root>
  --to <victim root>`` while the leader keeps serving (the old commitlog region and config/; a
  group that was never upgraded has no old region, and reseed says so), and restarts the victim
  empty. Raft's reject hint must bring the whole DLedger log back: the nemesis waits (bounded by
  ``ctx.recover_s``) until the victim's ``committedIndex`` reaches the leader's and reports the
  catch-up time. The final check then finds every acknowledged message on the re-seeded replica.
* The moved-away store stays under the run directory for forensics; nothing is deleted.
* Only a follower is wiped, and only when a leader is known, so the group keeps a quorum with
  data: wiping the leader too (or two nodes) would lose acknowledged data by construction.
"""
from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from .nemesis import Ctx, followers, leader, nemesis, recovered, restart

REPO = Path(__file__).resolve().parents[3]


def _reseed(src: Path, dst: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "upgrade.cli", "reseed", "--from", str(src), "--to", str(dst)],
                          cwd=str(REPO), capture_output=True, text=True, timeout=120)


def _committed(ctx: Ctx, n: str) -> int:
    st = ctx.cluster.status(n) or {}
    return int((st.get("dledger") or {}).get("committedIndex", -1))


@nemesis("wipe-follower", dledger_only=True)
async def wipe_follower(ctx: Ctx) -> dict[str, Any]:
    ld = await leader(ctx)
    fs = await followers(ctx)
    # a store root that is a tmpfs mount point (disk-full's node) cannot be moved away: another follower
    victim = ctx.rng.choice([n for n in fs if n != ctx.tmpfs] or fs)
    root = ctx.cluster.roots[victim]
    moved = root.parent / f"{root.name}.wiped-{int(ctx.history.now() * 1000)}"
    ctx.history.nemesis("wipe-follower", "start", node=victim, leader=ld)
    detail: dict[str, Any] = {"node": victim, "leader": ld, "moved_to": str(moved)}
    try:
        await asyncio.to_thread(ctx.cluster.kill9, victim)
        if victim == ctx.tmpfs:  # only when no other follower exists: move what is in it, not the mount
            moved.mkdir(parents=True)
            for child in list(root.iterdir()):
                await asyncio.to_thread(shutil.move, str(child), str(moved / child.name))
        else:
            await asyncio.to_thread(shutil.move, str(root), str(moved))
        r = await asyncio.to_thread(_reseed, ctx.cluster.roots[ld], root)
        detail["reseed_exit"] = r.returncode
        detail["reseed_out"] = (r.stdout + r.stderr).strip().splitlines()[-3:]
        await asyncio.sleep(ctx.fault_s / 2)
    finally:
        if not ctx.cluster.alive(victim):
            root.mkdir(parents=True, exist_ok=True)
            await restart(ctx, victim)
        t = ctx.history.now()
        ctx.history.nemesis("wipe-follower", "heal")
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    caught_up = False
    while loop.time() - t0 < ctx.recover_s:
        current = await leader(ctx)
        target = await asyncio.to_thread(_committed, ctx, current)
        if target >= 0 and await asyncio.to_thread(_committed, ctx, victim) >= target:
            caught_up = True
            break
        await asyncio.sleep(0.1)
    detail["caught_up"] = caught_up
    detail["catch_up_s"] = round(loop.time() - t0, 2)
    await recovered(ctx, "wipe-follower", t)
    return detail
