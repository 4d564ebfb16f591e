"""free_ports: two processes on one machine (a CI run and a developer's pytest) never share a port.

Each process holds one lane of the pool (an flock the kernel drops at exit); these run real
child processes, each drawing ports while the others hold their lanes."""
from __future__ import annotations

import json
import subprocess
import sys

from tools.procs import REPO

_DRAW = """
import json, sys, time
from tools import procs
ports = [p for _ in range(40) for p in procs.free_ports(5)]
lane = procs._claim_lane()
print(json.dumps({"lane": [lane.start, lane.stop], "laned": len(lane) < procs._SLOTS, "ports": ports}))
sys.stdout.flush()
time.sleep(1.5)  # keep the lane while the siblings draw
"""


def _draw_in_children(n: int) -> list[dict]:
    procs = [subprocess.Popen([sys.executable, "-c", _DRAW], cwd=REPO, stdout=subprocess.PIPE, text=True)
             for _ in range(n)]
    out = []
    for p in procs:
        stdout, _ = p.communicate(timeout=60)
        assert p.returncode == 0
        out.append(json.loads(stdout.splitlines()[0]))
    return out


def test_concurrent_processes_draw_disjoint_ports():
    # this pytest (and maybe another run on the machine) may hold lanes too: compare the children
    # that got one
    results = _draw_in_children(3)
    for r in results:
        assert len(set(r["ports"])) == len(r["ports"]), "a process handed out one port twice within a lap"
    laned = [r for r in results if r["laned"]]
    assert len(laned) >= 2
    assert len({tuple(r["lane"]) for r in laned}) == len(laned), "two processes hold one lane"
    for i, a in enumerate(laned):
        for b in laned[i + 1:]:
            assert not set(a["ports"]) & set(b["ports"]), "two processes were handed the same port"


def test_processes_beyond_the_lanes_still_get_ports():
    results = _draw_in_children(6)  # more processes than lanes: the extra ones use the whole pool
    assert all(len(r["ports"]) == 200 for r in results)
    whole = [r for r in results if not r["laned"]]
    assert whole, "with every lane taken a process falls back to the whole pool"
