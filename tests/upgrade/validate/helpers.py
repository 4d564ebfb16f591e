"""Fault injection and report assertions shared by the validator tests."""
from __future__ import annotations

import struct
from pathlib import Path

FILE_SIZE = 1 << 20
RANGE = 64 << 10  # small ranges so records straddle range boundaries


def data_file(root: Path, offset: int, divided: int | None, selfid: str = "n0") -> tuple[Path, int]:
    """(path, file-relative offset) of the physical ``offset`` in the old or DLedger files."""
    start = offset - offset % FILE_SIZE
    if divided is not None and offset >= divided:
        return root / f"dledger-{selfid}" / "data" / f"{start:020d}", offset - start
    return root / "commitlog" / f"{start:020d}", offset - start


def patch(path: Path, at: int, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek(at)
        fh.write(data)


def read(path: Path, at: int, n: int) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(at)
        return fh.read(n)


def flip(path: Path, at: int) -> None:
    patch(path, at, bytes([read(path, at, 1)[0] ^ 0x5A]))


def put_long(path: Path, at: int, value: int) -> None:
    patch(path, at, struct.pack(">q", value))


def rows(report: dict, check: str) -> list[dict]:
    return report["checks"][check]["violations"]


def failing(report: dict) -> set[str]:
    return {name for name, c in report["checks"].items() if c["status"] == "fail"}


def assert_located(report: dict, check: str, node: str, file: str, offset: int, queue: str | None = None,
                   contains: str | None = None) -> dict:
    """The check failed and one of its rows names exactly this node/file/offset(/queue)."""
    assert report["checks"][check]["status"] == "fail", f"{check} did not fail: {report['checks'][check]}"
    for row in rows(report, check):
        if (row["node"], row["file"], row["offset"]) == (node, file, offset) and (queue is None or row["queue"] == queue) \
                and (contains is None or contains in row["message"]):
            return row
    raise AssertionError(f"no {check} row at {node} {file} @{offset} {queue or ''}: {rows(report, check)[:10]}")
