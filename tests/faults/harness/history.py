"""History of a fault run: every operation with its outcome, as JSONL (Jepsen's history model).

Rules
-----
* One event per line: ``{"type", "t", ...}`` where ``t`` is seconds since the run started
  (``time.monotonic``). Types:

  - ``invoke``  ``{op, proc, f: "send", key, queue}``: a send is about to go on the wire;
  - ``ok``      ``{op, phys, queue, qoff, node}``: acknowledged at that physical offset, queue
    and queue offset by the broker at ``node``;
  - ``fail``    ``{op, code}``: definitely not stored (refused before the write: NOT_MASTER
    from a node that never appended, connection refused);
  - ``info``    ``{op, code}``: indeterminate (timeout, dropped connection, replication or
    flush timeout after a local append): may or may not be stored;
  - ``read``    ``{proc, node, queue, offset, msgs: [[qoff, phys, key], ...]}``: a consumer pull;
  - ``nemesis`` ``{name, phase: start|heal|end, detail}``: fault schedule;
  - ``note``    anything else worth keeping (status anomalies, errors).
* Every ``invoke`` is completed by exactly one of ok/fail/info (the workload guarantees it;
  an op still open at the end is treated as ``info``).
* The file is appended and flushed per event, so a crashed or timed-out test leaves it behind.
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional


class History:
    def __init__(self, path: Optional[Path] = None, t0: Optional[float] = None) -> None:
        self.path = path
        self.t0 = time.monotonic() if t0 is None else t0
        self.events: list[dict[str, Any]] = []
        self._fh = open(path, "a", encoding="utf-8") if path is not None else None
        self._lock = threading.Lock()
        self._next_op = 0

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 6)

    def add(self, event: dict[str, Any]) -> dict[str, Any]:
        event.setdefault("t", self.now())
        with self._lock:
            self.events.append(event)
            if self._fh is not None:
                self._fh.write(json.dumps(event, separators=(",", ":"), default=str) + "\n")
                self._fh.flush()
        return event

    def invoke(self, proc: str, key: str, queue: int, f: str = "send") -> int:
        with self._lock:
            op = self._next_op
            self._next_op += 1
        self.add({"type": "invoke", "op": op, "proc": proc, "f": f, "key": key, "queue": queue})
        return op

    def ok(self, op: int, phys: int, queue: int, qoff: int, node: str) -> None:
        self.add({"type": "ok", "op": op, "phys": phys, "queue": queue, "qoff": qoff, "node": node})

    def fail(self, op: int, code: str) -> None:
        self.add({"type": "fail", "op": op, "code": code})

    def info(self, op: int, code: str) -> None:
        self.add({"type": "info", "op": op, "code": code})

    def read(self, proc: str, node: str, queue: int, offset: int, msgs: list[list[Any]]) -> None:
        self.add({"type": "read", "proc": proc, "node": node, "queue": queue, "offset": offset, "msgs": msgs})

    def nemesis(self, name: str, phase: str, **detail: Any) -> None:
        self.add({"type": "nemesis", "name": name, "phase": phase, "detail": detail})

    def note(self, what: str, **detail: Any) -> None:
        self.add({"type": "note", "what": what, **detail})

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def load(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def sends(events: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """One merged record per send: invoke fields + ``outcome`` (ok/fail/info) + completion fields."""
    open_ops: dict[int, dict[str, Any]] = {}
    done: list[dict[str, Any]] = []
    for e in events:
        if e["type"] == "invoke":
            open_ops[e["op"]] = {**e, "t_invoke": e["t"], "outcome": "info", "t_complete": None}
        elif e["type"] in ("ok", "fail", "info") and e["op"] in open_ops:
            rec = open_ops.pop(e["op"])
            rec.update({k: v for k, v in e.items() if k not in ("type", "t", "op")})
            rec["outcome"], rec["t_complete"] = e["type"], e["t"]
            done.append(rec)
    done.extend(open_ops.values())  # never completed: indeterminate
    done.sort(key=lambda r: r["op"])
    return iter(done)
