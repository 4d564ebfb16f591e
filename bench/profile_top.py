"""Sum py-spy collapsed stacks (``py-spy record -f raw``): where each microsecond per message goes.

Usage::

    python -m bench.profile_top PROFILE.txt [--messages N] [--top 25] [--threads]

Prints the functions with the most *self* samples (the frame on top of the stack) and the most
*inclusive* samples (anywhere on the stack), as a share of all samples and, with ``--messages``
(the messages stored while the profile ran), as CPU microseconds per message at the sampling
rate given by ``--rate`` (py-spy's ``-r``; ``bench.java_producer --profile`` uses 97 Hz).
``--idle`` keeps samples whose top frame is a wait (select, epoll, lock acquire, sleep); by
default they are dropped, so the shares are of busy time. ``--threads`` also splits samples by
thread (the first frame of each stack is ``thread name (pid)`` when py-spy is run with
``--threads``; otherwise all are one).
"""
from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path
from typing import Iterable

_IDLE = re.compile(r"^(select|poll|epoll|_run_once|wait|acquire|sleep|_worker|get|_wait_for_tstate_lock) ")
_FRAME = re.compile(r"^(?P<fn>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def parse(lines: Iterable[str]) -> list[tuple[list[str], int]]:
    out = []
    for line in lines:
        line = line.rstrip("\n")
        if not line:
            continue
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        out.append((stack.split(";"), int(count)))
    return out


def short(frame: str) -> str:
    m = _FRAME.match(frame)
    if not m:
        return frame
    path = m.group("file")
    for marker in ("/broker/", "/dledger/", "/upgrade/", "/site-packages/", "/lib/python3"):
        i = path.find(marker)
        if i >= 0:
            path = path[i + 1:]
            break
    return f"{m.group('fn')} ({path})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.profile_top", description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--messages", type=int, default=0)
    ap.add_argument("--rate", type=float, default=97.0)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--idle", action="store_true")
    args = ap.parse_args(argv)
    stacks: list[tuple[list[str], int]] = []
    for f in args.files:
        stacks += parse(f.read_text(errors="replace").splitlines())
    if not args.idle:
        stacks = [(s, n) for s, n in stacks if not _IDLE.match(s[-1])]
    total = sum(n for _, n in stacks)
    if not total:
        print("no samples", file=sys.stderr)
        return 1
    self_c: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    for frames, n in stacks:
        self_c[short(frames[-1])] += n
        for fr in set(short(f) for f in frames):
            incl[fr] += n
    per_msg = (1e6 / args.rate / args.messages) if args.messages else 0.0
    print(f"{total} busy samples ({total / args.rate:.1f} s of CPU at {args.rate:g} Hz)"
          + (f", {total * per_msg:.1f} us/message" if per_msg else ""))
    for title, counter in (("self", self_c), ("inclusive", incl)):
        print(f"\n-- top {args.top} by {title} samples --")
        for fn, n in counter.most_common(args.top):
            us = f"{n * per_msg:8.1f} us/msg" if per_msg else ""
            print(f"{100.0 * n / total:6.1f}%  {us}  {fn}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
