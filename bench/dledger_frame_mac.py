"""Per-frame cost of DLedger's frame tags (issue 12), sans-I/O: seal + decode, as JSON.

Rules
-----
* Measures what one frame costs the sender (framing + tag) and the receiver (``FrameDecoder``
  with the tag check + msgpack) for payload sizes typical of the group: heartbeats and acks
  (~100 B), single-body client appends (~1 KiB), 16-body requests (~16 KiB) and batch pushes
  (256 KiB, 1 MiB). Rows: ``plain`` (insecure loopback mode, no tag), ``hmac-sha256`` (what
  ``dledger.rpc.framing`` ships) and ``blake2b`` (keyed BLAKE2b-128 via ``hashlib``, the
  alternative considered). Reported: microseconds per frame (send + receive) and the tag's
  overhead over ``plain``.
* No sockets, no processes: the numbers isolate the CPU cost of the tags, which the end-to-end
  ``bench/dledger_replication.py`` (±10-15 % noise on a shared 2-core machine) cannot resolve.

Theory of operation
-------------------
For each size, a batch of frames is sealed into wire pieces and fed back through a
``FrameDecoder`` (with the matching opener), repeated until about ``--seconds`` have passed;
the BLAKE2b sealer/opener are small local classes with the same interface as framing's.
"""
from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dledger.rpc import framing as fr  # noqa: E402


class Blake2Sealer:
    def __init__(self, key: bytes) -> None:
        self.key, self.seq = key[:64], 0

    def seal(self, payloads: list[bytes], out: list[bytes]) -> None:
        for p in payloads:
            h = hashlib.blake2b(fr.SEQ.pack(self.seq), key=self.key, digest_size=fr.TAG_SIZE)
            h.update(p)
            self.seq += 1
            out += (fr.HEADER.pack(len(p) + fr.TAG_SIZE), p, h.digest())


class Blake2Opener:
    def __init__(self, key: bytes) -> None:
        self.key, self.seq = key[:64], 0

    def open(self, body: Any) -> memoryview:
        view = memoryview(body)
        payload = view[:-fr.TAG_SIZE]
        h = hashlib.blake2b(fr.SEQ.pack(self.seq), key=self.key, digest_size=fr.TAG_SIZE)
        h.update(payload)
        if not hmac.compare_digest(h.digest(), view[-fr.TAG_SIZE:]):
            raise fr.FrameAuthError("bad tag")
        self.seq += 1
        return payload


def _run(kind: str, payload: bytes, batch: int, seconds: float) -> float:
    key = os.urandom(32)
    sealer: Optional[Any] = {"plain": None, "hmac-sha256": fr.FrameSealer(key), "blake2b": Blake2Sealer(key)}[kind]
    opener: Optional[Any] = {"plain": None, "hmac-sha256": fr.FrameOpener(key), "blake2b": Blake2Opener(key)}[kind]
    dec = fr.FrameDecoder()
    dec.opener = opener
    payloads = [payload] * batch
    frames = 0
    t0 = time.perf_counter()
    while True:
        parts: list[bytes] = []
        if sealer is None:
            fr.plain_frames(payloads, parts)
        else:
            sealer.seal(payloads, parts)
        got = dec.feed(b"".join(parts))
        assert len(got) == batch
        frames += batch
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            return elapsed / frames * 1e6


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=0.5, help="per row")
    args = ap.parse_args(argv)
    rows = []
    for size in (100, 1024, 16 * 1024, 256 * 1024, 1024 * 1024):
        payload = fr.encode_payload({"t": "append", "body": os.urandom(size)})
        batch = max(1, min(256, (4 << 20) // len(payload)))
        us = {k: _run(k, payload, batch, args.seconds) for k in ("plain", "hmac-sha256", "blake2b")}
        rows.append({"payload_bytes": len(payload), "us_per_frame": {k: round(v, 2) for k, v in us.items()},
                     "tag_overhead_us": {k: round(us[k] - us["plain"], 2) for k in ("hmac-sha256", "blake2b")}})
        print(json.dumps(rows[-1]), file=sys.stderr)
    print(json.dumps({"benchmark": "dledger_frame_mac", "rows": rows, "loadavg": list(os.getloadavg())}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
