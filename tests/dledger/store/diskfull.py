"""A tiny real ext4 filesystem (loop mount) to provoke ENOSPC; skips when mounting is not allowed.

ext4 rather than tmpfs: on tmpfs even *reading* a hole of a shared mapping allocates a page, so
a full tmpfs raises SIGBUS on reads, which no real store filesystem does.
"""
from __future__ import annotations

import gc
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest


def small_ext4(tmp_path: Path, size_mib: int = 4) -> Iterator[Path]:
    img, mnt = tmp_path / "fs.img", tmp_path / "mnt"
    mnt.mkdir()
    if shutil.which("mkfs.ext4") is None:
        pytest.skip("mkfs.ext4 not available")
    with open(img, "wb") as fh:
        fh.truncate(size_mib << 20)
    mk = subprocess.run(["mkfs.ext4", "-q", "-F", "-O", "^has_journal", str(img)], capture_output=True)
    mount = subprocess.run(["mount", "-o", "loop", str(img), str(mnt)], capture_output=True) \
        if mk.returncode == 0 else mk
    if mount.returncode != 0:
        pytest.skip(f"cannot loop-mount a small ext4 here: {mount.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        gc.collect()  # drop mappings still referenced by a failed test's traceback
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], check=False)
