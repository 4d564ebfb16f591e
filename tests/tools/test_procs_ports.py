"""free_ports: two processes on one machine (a CI run and a developer's pytest) never share a port.

Each process holds one lane of the pool (an flock the kernel drops at exit); these run real
child processes, each drawing ports while the others hold their lanes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

from tools.procs import REPO

_DRAW = """
import json, sys
from tools import procs
ports = [p for _ in range(40) for p in procs.free_ports(5)]
lane = procs._claim_lane()
print(json.dumps({"lane": [lane.start, lane.stop], "laned": len(lane) < procs._SLOTS, "ports": ports}))
sys.stdout.flush()
sys.stdin.read()  # keep the lane until every sibling has drawn (the parent closes stdin then)
"""


def _draw_in_children(n: int) -> list[dict]:
    # a private lane directory: the lanes other pytest runs on this machine hold (a developer's run
    # beside CI) must not decide which of these children get one
    lanes = tempfile.mkdtemp(prefix="port-lanes-")
    env = {**os.environ, "RMQPY_PORT_LANE_DIR": lanes}
    procs = [subprocess.Popen([sys.executable, "-c", _DRAW], cwd=REPO, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env) for _ in range(n)]
    try:
        out = []
        for p in procs:  # one after the other: each holds its lane while the later ones draw
            assert p.stdout is not None and p.stdin is not None
            line = p.stdout.readline()
            assert line, "a child exited before drawing"
            out.append(json.loads(line))
        for p in procs:
            p.stdin.close()  # type: ignore[union-attr]
            assert p.wait(timeout=60) == 0
        return out
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_concurrent_processes_draw_disjoint_ports():
    results = _draw_in_children(3)  # 3 children, 4 lanes of their own: each holds one
    for r in results:
        assert len(set(r["ports"])) == len(r["ports"]), "a process handed out one port twice within a lap"
    laned = [r for r in results if r["laned"]]
    assert len(laned) == 3
    assert len({tuple(r["lane"]) for r in laned}) == len(laned), "two processes hold one lane"
    for i, a in enumerate(laned):
        for b in laned[i + 1:]:
            assert not set(a["ports"]) & set(b["ports"]), "two processes were handed the same port"


def test_processes_beyond_the_lanes_still_get_ports():
    results = _draw_in_children(6)  # more processes than lanes: the extra ones use the whole pool
    assert all(len(r["ports"]) == 200 for r in results)
    whole = [r for r in results if not r["laned"]]
    assert len(whole) == 2, "with every lane taken a process falls back to the whole pool"
