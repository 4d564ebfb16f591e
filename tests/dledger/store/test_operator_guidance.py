"""Operator guidance of the DLedger store's refusals (issue 13.8): every error names the real fix.

- a data file 5 bytes short is damage, not a size change: the message must not say "delete old
  files before changing the mapped file size" (following that deletes the log); it says the file
  is damaged, not to delete anything, and how to restore it;
- ``EntryCorruptionError`` must not name ``allow_truncate_committed`` (a store argument no
  configuration reaches); it names moving the member's directory away so the leader
  re-replicates, and ``mqupgrade validate`` to check the result;
- the same through a real ``mqbroker``: exit 3 with one line carrying that guidance.
"""
from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from dledger.entry import EntryCorruptionError
from dledger.store.errors import StoreLayoutError
from dledger.store.file_store import DLedgerMmapFileStore

REPO = Path(__file__).resolve().parents[3]


def make(tmp: Path, data_size: int = 4096) -> DLedgerMmapFileStore:
    store = DLedgerMmapFileStore(tmp, "n0", data_file_size=data_size, index_file_size=32 * 64)
    store.startup()
    return store


def filled(tmp: Path, n: int = 50) -> Path:
    store = make(tmp)
    store.append_batch_as_leader([bytes([i % 251]) * 300 for i in range(n)], 1)
    store.update_committed_index(1, n - 1)
    store.flush()
    store.persist_checkpoint()
    store.shutdown()
    return tmp / "dledger-n0" / "data"


def test_data_file_five_bytes_short_is_damage_not_a_size_change(tmp_path: Path) -> None:
    data = filled(tmp_path)
    files = sorted(data.iterdir())
    assert len(files) > 2
    victim = files[-1]
    os.truncate(victim, victim.stat().st_size - 5)
    with pytest.raises(StoreLayoutError) as info:
        make(tmp_path)
    msg = str(info.value)
    assert "delete old files" not in msg and "before changing the mapped file size" not in msg
    assert victim.name in msg and "5 bytes short" in msg and "damaged" in msg
    assert "do not delete" in msg and "move" in msg and "re-replicates" in msg
    assert len(list(data.iterdir())) == len(files)  # nothing was removed


def test_entry_corruption_names_the_real_recovery(tmp_path: Path) -> None:
    data = filled(tmp_path)
    victim = sorted(data.iterdir())[-2]  # inside the recovery scan, valid entries follow
    raw = bytearray(victim.read_bytes())
    struct.pack_into(">i", raw, 4, 7)  # the size field of the first entry of the second file
    victim.write_bytes(bytes(raw))
    with pytest.raises(EntryCorruptionError) as info:
        make(tmp_path)
    msg = str(info.value)
    assert "allow_truncate_committed" not in msg
    assert f"move {tmp_path / 'dledger-n0'} away" in msg and "re-replicates" in msg
    assert "mqupgrade validate" in msg and "backup" in msg


def test_mqbroker_refuses_a_short_file_with_the_real_fix(tmp_path: Path) -> None:
    from tools.procs import free_ports, write_conf

    http, raft = free_ports(2)
    root = tmp_path / "store"
    conf = write_conf(REPO / "conf" / "dledger" / "broker-n0.conf", tmp_path / "b.conf", {
        "listenPort": http, "dLegerPeers": f"n0-127.0.0.1:{raft}", "dLegerPeersHttp": f"n0-127.0.0.1:{http}",
        "storePathRootDir": root, "storePathCommitLog": root / "commitlog", "mappedFileSizeCommitLog": 4096})
    data = root / "dledger-n0" / "data"
    data.mkdir(parents=True)
    for i in range(2):  # two files of a store written with 4096-byte files; the last one cut short
        (data / f"{i * 4096:020d}").write_bytes(b"\0" * (4096 if i == 0 else 4091))
    r = subprocess.run([sys.executable, "-m", "broker.cli.mqbroker", "-c", str(conf)], cwd=REPO, capture_output=True,
                       text=True, timeout=60)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("mqbroker:")]
    assert r.returncode == 3 and len(lines) == 1, r.stderr[-2000:]
    assert "5 bytes short" in lines[0] and "do not delete" in lines[0] and "delete old files" not in lines[0]
