"""Checker of a fault run: history + final replica contents -> anomalies (empty means safe).

Rules (testing reference §3.2, OpenChaos QueueChecker/OrderChecker/RecoveryChecker, etcd LogInv)
-------------------------------------------------------------------------------------------------
Inputs: the history events (``history.py``) and, per replica, the messages of the workload topic
in commitlog order as ``{"key", "phys", "queue", "qoff"}`` read after healing and a clean stop.
Every check can fail; each failure is one line in ``anomalies`` with a category:

* ``lost``: an acknowledged send is missing on a replica (must be 0).
* ``misplaced``: an acknowledged send is on a replica at another physical/queue offset or queue.
* ``duplicated``: a key is stored more than once on a replica (the workload never resends a key).
* ``phantom``: a stored key was never sent (never invoked).
* ``failed-present``: a send answered with a definite failure is stored (it took effect).
* ``queue-order``: on a replica, a queue's offsets are not 0..n-1 dense in commitlog order, or a
  producer's acknowledged sends to one queue are not in its send order.
* ``realtime``: send A acknowledged before send B was invoked, yet ``phys(B) <= phys(A)``
  (with the exact positions this makes the log linearizable, reference C5).
* ``read``: a consumer read a key at (queue, qoff) where the final log has something else
  (a dirty read of an entry that was later truncated, or a read of garbage). With
  ``strict_reads=False`` (classic mode: RocketMQ dispatches a message to consumers before the
  slave acknowledges it) a read of an unacknowledged message that is gone from the final log is
  only counted (``dirty-read``); a read that contradicts an acknowledged message still fails.
* ``prefix``: the replicas' logs are not prefixes of one another (``LogInv``); ``require_equal``
  (all replicas in sync after healing) makes any difference an anomaly.
* ``leader``: two nodes claimed leadership of the same term (status samples and node logs).
* ``liveness``: no write succeeded after the last heal (a stuck cluster is a failure too).

Availability is measured, not judged: per nemesis instance, ``recovery_s`` (fault start to the
first acknowledged send invoked after it) and ``max_gap_s`` (longest time without any
acknowledgement between the fault start and the end of its settle period).
"""
from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence

from .history import sends

Msg = Mapping[str, Any]
MAX_LINES_PER_CATEGORY = 20


@dataclass
class CheckResult:
    counts: Counter = field(default_factory=Counter)
    anomalies: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    windows: list[dict[str, Any]] = field(default_factory=list)

    def flag(self, category: str, text: str) -> None:
        self.counts[category] += 1
        if len(self.anomalies[category]) < MAX_LINES_PER_CATEGORY:
            self.anomalies[category].append(text)

    @property
    def ok(self) -> bool:
        return not self.anomalies

    def summary(self) -> dict[str, Any]:
        keys = ("acked", "failed", "indeterminate", "recovered", "lost", "duplicated", "misplaced", "phantom",
                "failed-present", "queue-order", "realtime", "read", "reads", "dirty-read", "prefix", "leader", "liveness")
        return {k: self.counts.get(k, 0) for k in keys}

    def report(self) -> str:
        lines = [f"{cat}: {self.counts[cat]}" + "".join(f"\n    {t}" for t in texts) for cat, texts in self.anomalies.items()]
        return "\n".join(lines) or "no anomalies"


def check(events: Sequence[dict[str, Any]], replicas: Mapping[str, Sequence[Msg]], *,
          require_equal: bool = True, status_samples: Iterable[Mapping[str, Any]] = (),
          log_leaders: Iterable[tuple[str, int]] = (), definite_fail_codes: Optional[set[str]] = None,
          strict_reads: bool = True) -> CheckResult:
    res = CheckResult()
    ops = list(sends(events))
    by_key = {o["key"]: o for o in ops}
    acked = [o for o in ops if o["outcome"] == "ok"]
    res.counts["acked"] = len(acked)
    res.counts["failed"] = sum(o["outcome"] == "fail" for o in ops)
    res.counts["indeterminate"] = sum(o["outcome"] == "info" for o in ops)

    # ---------------------------------------------------------------- per replica contents
    first = True
    for node, msgs in replicas.items():
        where: dict[str, list[Msg]] = defaultdict(list)
        for m in msgs:
            where[m["key"]].append(m)
        for key, found in where.items():
            if len(found) > 1:
                res.flag("duplicated", f"{node}: {key} stored {len(found)} times at {[f['phys'] for f in found]}")
            op = by_key.get(key)
            if op is None:
                res.flag("phantom", f"{node}: {key} at {found[0]['phys']} was never sent")
            elif op["outcome"] == "fail" and (definite_fail_codes is None or op.get("code") in definite_fail_codes):
                res.flag("failed-present", f"{node}: {key} failed with {op.get('code')} but is stored at {found[0]['phys']}")
            elif op["outcome"] in ("info", "fail") and first:
                res.counts["recovered"] += 1
                res.counts[f"recovered:{op.get('code')}"] += 1
        for o in acked:
            found = where.get(o["key"], [])
            if not found:
                res.flag("lost", f"{node}: acknowledged {o['key']} (phys {o['phys']}, q{o['queue']}/{o['qoff']}, "
                                 f"acked by {o.get('node')} at t={o['t_complete']}) is missing")
            elif (found[0]["phys"], found[0]["queue"], found[0]["qoff"]) != (o["phys"], o["queue"], o["qoff"]):
                f0 = found[0]
                res.flag("misplaced", f"{node}: {o['key']} acked at phys {o['phys']} q{o['queue']}/{o['qoff']}, "
                                      f"stored at phys {f0['phys']} q{f0['queue']}/{f0['qoff']}")
        # queue offsets dense and increasing in log order
        nxt: dict[int, int] = defaultdict(int)
        for m in msgs:
            if m["qoff"] != nxt[m["queue"]]:
                res.flag("queue-order", f"{node}: q{m['queue']} offset {m['qoff']} at phys {m['phys']} "
                                        f"(expected {nxt[m['queue']]})")
            nxt[m["queue"]] = m["qoff"] + 1
        phys = [m["phys"] for m in msgs]
        if any(b <= a for a, b in zip(phys, phys[1:])):
            res.flag("queue-order", f"{node}: physical offsets not increasing in log order")
        first = False

    # ---------------------------------------------------------------- history-only order checks
    per_proc_queue: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for o in acked:
        per_proc_queue[(o["proc"], o["queue"])].append(o)
    for (proc, q), lst in per_proc_queue.items():
        lst.sort(key=lambda o: o["t_invoke"])
        for a, b in zip(lst, lst[1:]):
            if b["qoff"] <= a["qoff"]:
                res.flag("queue-order", f"{proc} q{q}: {b['key']} (qoff {b['qoff']}) sent after {a['key']} (qoff {a['qoff']})")
    by_complete = sorted(acked, key=lambda o: o["t_complete"])
    done_t = [o["t_complete"] for o in by_complete]
    prefix_max: list[tuple[int, str]] = []
    best = (-1, "")
    for o in by_complete:
        best = max(best, (o["phys"], o["key"]))
        prefix_max.append(best)
    for b in acked:
        i = bisect.bisect_left(done_t, b["t_invoke"]) - 1
        if i >= 0 and prefix_max[i][0] >= b["phys"]:
            res.flag("realtime", f"{b['key']} invoked at t={b['t_invoke']} got phys {b['phys']} <= {prefix_max[i][0]} "
                                 f"of {prefix_max[i][1]}, acknowledged earlier")

    # ---------------------------------------------------------------- reads vs the final log
    if replicas:
        ref = max(replicas.values(), key=len)
        at = {(m["queue"], m["qoff"]): m for m in ref}
        final_keys = {m["key"] for m in ref}
        for e in events:
            if e["type"] != "read":
                continue
            for qoff, phys, key in e["msgs"]:
                res.counts["reads"] += 1
                m = at.get((e["queue"], qoff))
                if m is None or m["key"] != key or m["phys"] != phys:
                    if not strict_reads and by_key.get(key, {}).get("outcome") != "ok" and key not in final_keys:
                        res.counts["dirty-read"] += 1  # allowed: an unacknowledged message read, later dropped
                        continue
                    res.flag("read", f"{e['proc']} read {key} at q{e['queue']}/{qoff} phys {phys} from {e['node']} "
                                     f"(t={e['t']}); final log has {m and (m['key'], m['phys'])}")

    # ---------------------------------------------------------------- replicas agree
    if len(replicas) > 1:
        seqs = {n: [(m["key"], m["phys"]) for m in msgs] for n, msgs in replicas.items()}
        longest_node = max(seqs, key=lambda n: len(seqs[n]))
        longest = seqs[longest_node]
        for n, s in seqs.items():
            if s != longest[: len(s)]:
                i = next(i for i, (a, b) in enumerate(zip(s, longest)) if a != b) if any(
                    a != b for a, b in zip(s, longest)) else len(longest)
                res.flag("prefix", f"{n} diverges from {longest_node} at entry {i}: "
                                   f"{s[i] if i < len(s) else None} vs {longest[i] if i < len(longest) else None}")
            elif require_equal and len(s) != len(longest):
                res.flag("prefix", f"{n} has {len(s)} messages, {longest_node} {len(longest)} after healing")

    # ---------------------------------------------------------------- election safety
    leaders: dict[int, set[str]] = defaultdict(set)
    for s in status_samples:
        if s.get("role") == "LEADER" and s.get("term") is not None:
            leaders[int(s["term"])].add(s["node"])
    for node, term in log_leaders:
        leaders[int(term)].add(node)
    for term, nodes in sorted(leaders.items()):
        if len(nodes) > 1:
            res.flag("leader", f"term {term} had leaders {sorted(nodes)}")

    # ---------------------------------------------------------------- availability
    res.windows = windows(events, acked)
    heals = [e["t"] for e in events if e["type"] == "nemesis" and e["phase"] == "heal"]
    if heals and not any(o["t_invoke"] >= max(heals) for o in acked):
        res.flag("liveness", f"no send invoked after the last heal (t={max(heals)}) was acknowledged")
    return res


def windows(events: Sequence[dict[str, Any]], acked: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per nemesis instance: recovery (fault start -> first ack of a send invoked after it), max gap."""
    out = []
    starts: dict[str, float] = {}
    heal: dict[str, float] = {}
    done = sorted(o["t_complete"] for o in acked)
    for e in events:
        if e["type"] != "nemesis":
            continue
        name = e["name"]
        if e["phase"] == "start":
            starts[name] = e["t"]
        elif e["phase"] == "heal":
            heal[name] = e["t"]
        elif e["phase"] == "end" and name in starts:
            t0, t1 = starts.pop(name), e["t"]
            after = [o["t_complete"] for o in acked if o["t_invoke"] >= t0]
            recovery = (min(after) - t0) if after else None
            inside = [t for t in done if t0 <= t <= t1]
            points = [t0] + inside + [t1]
            gap = max(b - a for a, b in zip(points, points[1:]))
            out.append({"nemesis": name, "start": t0, "heal": heal.pop(name, None), "end": t1,
                        "recovery_s": None if recovery is None else round(recovery, 3),
                        "max_gap_s": round(gap, 3), "acked": len(inside)})
    return out
