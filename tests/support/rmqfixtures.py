"""Access to the Apache-written stores in ``../shared/fixtures``.

The tarballs are extracted once per test session into a temporary directory that tests treat as
read-only; a test that modifies a store takes a private copy with :func:`copy_store` (sparse copy,
so the 167 MiB DLedger index files cost nothing).

Two sets, and every codec / recovery / upgrade / validator test runs on both:

- ``plain``:   ``rmq-classic`` / ``rmq-mixed`` (5,000 / 7,000 messages, 1 MiB files)
- ``variety``: ``variety-classic`` / ``variety-mixed`` (IPv6 hosts, non-ASCII tags and keys,
  empty and compressed bodies, transactions, delay levels)
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("RMQ_SHARED", REPO.parent / "shared"))
FIXTURES = SHARED / "fixtures"
TARBALLS = ("rocketmq-4.9.8-stores.tgz", "rocketmq-4.9.8-variety.tgz")


@dataclass(frozen=True)
class FixtureSet:
    """One pair of Apache stores: the classic store and the same store upgraded in place."""

    name: str  # "plain" or "variety"
    classic: str  # directory name of the classic store
    mixed: str  # directory name of the upgraded (DLedger) store
    classic_max_offset: int
    mixed_max_offset: int
    divided_offset: int
    file_size: int = 1 << 20


SETS = {
    "plain": FixtureSet("plain", "rmq-classic", "rmq-mixed", 3_665_318, 5_757_790, 4_194_304),
    "variety": FixtureSet("variety", "variety-classic", "variety-mixed", 7_506_636, 10_957_773, 8_388_608),
}


def extract_all(dest: Path) -> Path:
    """Extract both tarballs into ``dest`` (idempotent). Returns ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    marker = dest / ".extracted"
    if marker.exists():
        return dest
    for name in TARBALLS:
        tgz = FIXTURES / name
        if not tgz.exists():
            raise FileNotFoundError(f"fixture tarball missing: {tgz} (set RMQ_SHARED to the shared/ dir)")
        # GNU tar keeps the files sparse; tarfile is the fallback.
        if shutil.which("tar"):
            subprocess.run(["tar", "-xzf", str(tgz), "-C", str(dest)], check=True)
        else:  # pragma: no cover
            with tarfile.open(tgz) as tf:
                tf.extractall(dest)
    marker.touch()
    return dest


def copy_store(src: Path, dst: Path) -> Path:
    """Private, writable, sparse copy of an extracted store."""
    if shutil.which("cp"):
        subprocess.run(["cp", "-r", "--sparse=always", str(src), str(dst)], check=True)
    else:  # pragma: no cover
        shutil.copytree(src, dst)
    return dst


def _int(v: str) -> int:
    return int(v) if v not in ("", None) else 0


def load_manifest(root: Path, store: str) -> list[dict[str, Any]]:
    """Rows of ``<store>.manifest.csv`` with integer columns converted.

    The plain manifests lack the variety columns; missing columns are filled with the values
    the recipe implies (sysFlag 0, IPv4 hosts, ``properties`` rebuilt from tags/keys) only where
    that is certain; otherwise they are absent from the row.
    """
    path = root / f"{store}.manifest.csv"
    ints = {
        "queueId", "queueOffset", "commitLogOffset", "storeSize", "bornTimestamp", "storeTimestamp",
        "bodyLen", "bodyCRC", "sysFlag", "flag", "reconsumeTimes", "preparedTransactionOffset",
        "inConsumeQueue", "id",
    }
    rows: list[dict[str, Any]] = []
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            out: dict[str, Any] = {}
            for k, v in row.items():
                if k in ints:
                    out[k] = _int(v)
                elif k == "properties":
                    out[k] = json.loads(v) if v else {}
                else:
                    out[k] = v
            rows.append(out)
    return rows


def plain_body(i: int) -> bytes:
    """Body of message ``i`` of the plain set (README recipe)."""
    return (b"body-%08d-" % i) + b"x" * (200 + (37 * i) % 800)
