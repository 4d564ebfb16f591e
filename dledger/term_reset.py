"""``dledger reset-term``: the offline recovery of a group whose term is exhausted (issue 23.2).

Rules
-----
* Raft never lets a term go backwards, and it is only safe here because of three conditions the
  command enforces or states:

  1. **Every member is stopped.** The command refuses while any member of ``--peers`` accepts
     TCP connections on its DLedger port (no message of the old terms can still be in flight or
     arrive later).
  2. **Every member gets the same new term N, with its vote cleared.**  Run it on each member's
     store; a member left at the exhausted term refuses the others' lower terms and stays out.
  3. **N is above every member's last log term.** Each term that has entries had a leader; a
     reused term with a fresh vote could elect a second leader in it whose entries would share
     an (index, term) with different bodies. The command refuses an N at or below this store's
     last log term and prints that term, so the operator takes N = max over all members + 1.

  Entries, commit index and checkpoints are untouched; only ``currterm`` is rewritten (the old
  file is kept as ``currterm.before-reset``). The last log term is read from the index files (the
  largest term of any written index unit, torn tail included: conservative).
* Without ``--term`` the command only reports (JSON): term (or why the file is unreadable), vote,
  last log term, the limit, whether the term is exhausted. With ``--term N`` it also needs
  ``--yes``.

Theory of operation
-------------------
:func:`inspect` reads ``currterm`` and scans ``index/`` in 32-byte units; :func:`reset` checks the
conditions above and writes the file with :class:`MemberStateFile` (fsynced safe write).
"""
from __future__ import annotations

import shutil
import socket
from pathlib import Path
from typing import Any, Optional

from .core.terms import TERM_LIMIT, exhausted
from .entry import CURRENT_MAGIC, INDEX_UNIT
from .store.properties import PropertiesError
from .store.state_files import MemberStateFile


class ResetRefused(Exception):
    """A condition of the module rules does not hold; the message says which."""


def last_log_term(member_dir: Path) -> int:
    """Largest term of any written index unit under ``member_dir/index`` (-1: no entry)."""
    best = -1
    size = INDEX_UNIT.size
    index_dir = member_dir / "index"
    if not index_dir.is_dir():
        return best
    for f in sorted(index_dir.iterdir()):
        if not f.is_file():
            continue
        data = f.read_bytes()
        for off in range(0, len(data) - size + 1, size):
            magic, _pos, _size, _index, term = INDEX_UNIT.unpack_from(data, off)
            if magic == CURRENT_MAGIC:
                best = max(best, term)
    return best


def reachable_members(peers: dict[str, tuple[str, int]], timeout: float = 0.5) -> list[str]:
    """Members whose DLedger port accepts a TCP connection (they are running)."""
    up = []
    for pid, (host, port) in peers.items():
        try:
            with socket.create_connection((host, port), timeout=timeout):
                up.append(f"{pid} at {host}:{port}")
        except OSError:
            pass
    return up


def inspect(store: Path, self_id: str) -> dict[str, Any]:
    member_dir = Path(store) / f"dledger-{self_id}"
    if not member_dir.is_dir():
        raise ResetRefused(f"{member_dir} does not exist (check --store and --id)")
    out: dict[str, Any] = {"id": self_id, "member_dir": str(member_dir), "limit": TERM_LIMIT}
    try:
        term, vote = MemberStateFile(member_dir).load()
        out.update(term=term, vote=vote, exhausted=exhausted(term))
    except PropertiesError as exc:
        out.update(term=None, vote=None, exhausted=True, term_error=str(exc))
    out["last_log_term"] = last_log_term(member_dir)
    return out


def reset(store: Path, self_id: str, peers: dict[str, tuple[str, int]], new_term: int) -> dict[str, Any]:
    """Write ``new_term`` (vote cleared) after checking the module's conditions."""
    up = reachable_members(peers)
    if up:
        raise ResetRefused(f"stop every member first: {', '.join(up)} accepts connections (a term may only go "
                           "back while the whole group is stopped)")
    info = inspect(store, self_id)
    if new_term <= info["last_log_term"]:
        raise ResetRefused(f"--term {new_term} is not above this member's last log term {info['last_log_term']}; "
                           "take the largest last log term of all members, plus one")
    if new_term < 0 or exhausted(new_term):
        raise ResetRefused(f"--term {new_term} must be at least 0 and below {TERM_LIMIT - 1}")
    state = MemberStateFile(Path(info["member_dir"]))
    if state.path.exists():
        shutil.copy2(state.path, state.path.with_name(state.path.name + ".before-reset"))
    state.save(new_term, None)
    info.update(previous_term=info["term"], term=new_term, vote=None, exhausted=False)
    return info


def run(store: str, self_id: str, peers: dict[str, tuple[str, int]], new_term: Optional[int],
        yes: bool) -> dict[str, Any]:
    """The CLI entry: report, or reset with ``--term N --yes``."""
    if self_id not in peers:
        raise ResetRefused(f"--id {self_id!r} is not one of the --peers ids ({', '.join(peers)})")
    if new_term is None:
        return inspect(Path(store), self_id)
    if not yes:
        raise ResetRefused("resetting a term is only safe on every member of a stopped group with the same --term; "
                           "add --yes once that is what you are doing")
    return reset(Path(store), self_id, peers, new_term)
