"""Helpers shared by the mqupgrade tests: store copies, slaves made behind/divergent/dirty,
a lock holder in another real process, and a digest of a whole setup for state comparisons.

Process rules are the harness's (``tools/``, issue 26.7): every wait is bounded (the lock holder's
first line, :func:`wait_for` through :func:`tools.procs.wait_until`), and a holder that fails to
start is killed before the error is raised; the caller kills a running holder in ``finally``."""
from __future__ import annotations

import hashlib
import json
import os
import select
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

from tests.support import rmqfixtures as rf
from tools.procs import REPO, wait_until

PEERS = "n0-127.0.0.1:40911;n1-127.0.0.1:40912;n2-127.0.0.1:40913"


def copy(fixture_root: Path, name: str, dst: Path) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    return rf.copy_store(fixture_root / name, dst)


def commitlog_files(root: Path) -> list[Path]:
    return sorted((root / "commitlog").iterdir())


def make_behind(root: Path, cut_offset: int, file_size: int) -> None:
    """Make ``root`` end at ``cut_offset`` (a record boundary): later files go, the rest of the
    cut file is zeroed, the ConsumeQueues are left as they are (recovery truncates them)."""
    for f in commitlog_files(root):
        start = int(f.name)
        if start > cut_offset or (start == cut_offset and start > 0):
            f.unlink()
        elif start <= cut_offset < start + file_size:
            with open(f, "r+b") as fh:
                fh.seek(cut_offset - start)
                fh.write(bytes(file_size - (cut_offset - start)))


def flip_byte(root: Path, offset: int, file_size: int) -> Path:
    f = root / "commitlog" / f"{offset - offset % file_size:020d}"
    with open(f, "r+b") as fh:
        fh.seek(offset % file_size)
        b = fh.read(1)
        fh.seek(offset % file_size)
        fh.write(bytes([b[0] ^ 0xFF]))
    return f


def make_dirty(root: Path, max_offset: int, file_size: int, corrupt: bool = False) -> None:
    """A crash: ``abort`` left behind and, after the end, a torn record (the first 40 bytes of a
    300-byte record) or, with ``corrupt``, 64 bytes of garbage (data after an invalid record)."""
    (root / "abort").write_bytes(b"")
    f = root / "commitlog" / f"{max_offset - max_offset % file_size:020d}"
    torn = struct.pack(">iiii", 300, -626843481, 0x1234, 1) + bytes(range(1, 25))
    with open(f, "r+b") as fh:
        fh.seek(max_offset % file_size)
        fh.write(b"\xab" * 64 if corrupt else torn)


def hold_lock(root: Path, timeout: float = 30.0) -> subprocess.Popen:
    """Another real process holding the store lock (a running broker); the caller kills it in a
    ``finally``. Bounded: a holder that has not said ``locked`` within ``timeout`` s is killed here."""
    code = ("import sys,time; from broker.store.lockfile import StoreLock; StoreLock(sys.argv[1]).acquire(); "
            "print('locked', flush=True); time.sleep(600)")
    p = subprocess.Popen([sys.executable, "-c", code, str(root)], cwd=REPO, stdout=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, text=True)
    try:
        assert p.stdout is not None
        said = p.stdout.readline().strip() if select.select([p.stdout], [], [], timeout)[0] else None
        assert said == "locked", f"the lock holder said {said!r} (exit code {p.poll()})"
    except BaseException:
        p.kill()
        p.wait(10)
        raise
    return p


def mqupgrade(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "upgrade.cli", *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def tree_state(base: Path, exclude_suffixes: tuple[str, ...] = ()) -> dict[str, str]:
    """{relative path: sha256} of every file under ``base``; text files have ``base`` replaced by
    ``<base>`` so two setups in different directories compare; backups lose their timestamp."""
    out: dict[str, str] = {}
    for p in sorted(base.rglob("*")):
        if not p.is_file() or p.name.endswith(exclude_suffixes):
            continue
        rel = str(p.relative_to(base))
        if ".bak-" in rel:
            rel = rel.split(".bak-")[0] + ".bak-<ts>"
        data = p.read_bytes()
        if p.suffix in (".conf", ".json"):
            data = data.replace(str(base).encode(), b"<base>")
        out[rel] = hashlib.sha256(data).hexdigest()
    return out


def journal_state(path: Path, base: Path) -> dict[str, Any]:
    data = json.loads(path.read_text().replace(str(base), "<base>"))
    return {"steps": data["steps"], "finished": data["finished"]}


def wait_for(pred: Callable[[], Any], timeout: float = 60.0, interval: float = 0.02) -> bool:
    """True once ``pred()`` is truthy, False after ``timeout`` s (:func:`tools.procs.wait_until`)."""
    try:
        wait_until(pred, timeout, "the predicate", interval)
        return True
    except TimeoutError:
        return False
