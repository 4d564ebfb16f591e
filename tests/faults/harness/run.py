"""One seeded fault run end to end, and the results table.

Rules
-----
* ``run_faults(mode, nemeses, seed, run_dir)`` starts the cluster (``dledger``: three nodes,
  ``classic``: master + slave), creates the topic, runs the workload, applies the nemeses one
  after the other (in the given order; ``shuffle=True`` lets the seed order them), stops the
  workload, waits until the replicas are in sync, stops every node cleanly (exit code 0
  required), reads every replica's files and runs the checker; ``validate`` (optional) gets the
  store roots of all replicas (the Spark validator) before the cluster's mounts are removed.
* The run directory keeps everything a post-mortem needs: ``seed``, ``history.jsonl``,
  ``statuses.jsonl``, ``final-status.json``, node logs and confs, the stores, ``result.json``.
  The same seed gives the same nemesis order, targets, workload keys/queues and proxy drops.
* ``results_table(results)`` aggregates per nemesis: runs, acknowledged sends during the
  nemesis, lost, duplicated (keys attributed by their send time), max unavailability
  (longest time without an acknowledgement inside the nemesis window) and max recovery.
"""
from __future__ import annotations

import asyncio
import json
import random
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from .checker import CheckResult, check
from .cluster import QUEUES, TOPIC, ClassicPair, Cluster, DLedgerCluster
from .history import History, sends
from .nemesis import NEMESES, Ctx
from . import nemesis_disk  # noqa: F401 - registers the storage and clock nemeses
from . import nemesis_store  # noqa: F401 - registers wipe-follower
from .workload import Workload

LEADER_LINE = r"(n\d+): role LEADER term (\d+)"


def log_leaders(cluster: Cluster) -> list[tuple[str, int]]:
    import re

    out = []
    for p in cluster.procs.values():
        try:
            text = p.log_path.read_text(errors="replace")
        except FileNotFoundError:
            continue
        out += [(m.group(1), int(m.group(2))) for m in re.finditer(LEADER_LINE, text)]
    return out


def run_faults(mode: str, nemeses: list[str], seed: int, run_dir: Path, *, fault_s: float = 2.5,
               warmup_s: float = 1.5, producers: int = 3, tmpfs_size: Optional[str] = "48m",
               shuffle: bool = False, validate: Optional[Callable[[list[str]], dict[str, Any]]] = None) -> dict[str, Any]:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "seed").write_text(f"{seed}\n{mode}\n{' '.join(nemeses)}\n")
    rng = random.Random(seed)
    order = list(nemeses)
    if shuffle:
        rng.shuffle(order)
    cluster: Cluster = DLedgerCluster(run_dir, seed) if mode == "dledger" else ClassicPair(run_dir, seed)
    history = History(run_dir / "history.jsonl")
    tmpfs_node = None
    if tmpfs_size and "disk-full" in order:
        want = "n2" if mode == "dledger" else "m"
        if cluster.mount_tmpfs(cluster.roots[want], tmpfs_size):
            tmpfs_node = want
    result: dict[str, Any] = {"mode": mode, "seed": seed, "run_dir": str(run_dir), "order": order, "nemeses": [],
                              "tmpfs": tmpfs_node}
    t_start = time.monotonic()
    try:
        cluster.start()
        ld = wait_until_leader(cluster)
        with cluster.procs[ld].client(timeout=10) as c:
            c.create_topic(TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        time.sleep(1.0)  # metadata sync to the followers (slaveSyncIntervalMs=500)
        wl = Workload(cluster, history, seed, producers=producers, status_path=run_dir / "statuses.jsonl")
        ctx = Ctx(cluster, history, wl, rng, fault_s=fault_s, tmpfs=tmpfs_node)

        async def scenario() -> None:
            task = asyncio.ensure_future(wl.run())
            try:
                await asyncio.sleep(warmup_s)
                for name in order:
                    t0 = time.monotonic()
                    detail = await NEMESES[name](ctx)
                    result["nemeses"].append({"name": name, "detail": detail, "seconds": round(time.monotonic() - t0, 2)})
                await asyncio.sleep(1.0)
            finally:
                wl.stop.set()
                await asyncio.wait_for(task, 30)

        asyncio.run(scenario())
        synced = wait_until(cluster.in_sync, 60)
        result["in_sync"] = synced is not None
        (run_dir / "final-status.json").write_text(json.dumps({n: cluster.status(n) for n in cluster.names}, indent=1))
        result["exit_codes"] = cluster.stop_clean()
        res, replicas = check_replicas(cluster, history, wl)
        if validate is not None:  # the Spark validator on every replica (before tmpfs mounts go away)
            result["validate"] = validate([str(cluster.roots[n]) for n in cluster.names])
        if any(code != 0 for code in result["exit_codes"].values()):
            res.flag("shutdown", f"unclean exit codes {result['exit_codes']}")
        if not result["in_sync"]:
            res.flag("liveness", "replicas not in sync 60 s after the last heal")
        for note in (e for e in history.events if e["type"] == "note" and e["what"] == "not-recovered"):
            res.flag("liveness", f"{note['nemesis']}: no write acknowledged within {note['after_s']} s of the heal")
        result.update(summary=res.summary(), anomalies=dict(res.anomalies), windows=res.windows,
                      per_nemesis=per_nemesis(history.events, res), replica_sizes={n: len(m) for n, m in replicas.items()},
                      proxy=cluster.hub.stats(), seconds=round(time.monotonic() - t_start, 1), ok=res.ok)
        return result
    finally:
        cluster.close()
        history.close()
        (run_dir / "result.json").write_text(json.dumps(result, indent=1, default=str))


def check_replicas(cluster: Cluster, history: History,
                   wl: Workload) -> tuple[CheckResult, dict[str, list[dict[str, Any]]]]:
    """The checker over every replica's files (nodes stopped cleanly) and the run's history;
    also returns what each replica holds."""
    replicas, problems = cluster.read_replicas()
    res = check(history.events, replicas, status_samples=wl.status_samples, log_leaders=log_leaders(cluster),
                strict_reads=cluster.mode == "dledger")
    for p in problems:
        res.flag("store", p)
    return res, replicas


def spark_validate(spark: Any) -> Callable[[list[str]], dict[str, Any]]:
    """A ``validate`` for :func:`run_faults`: the Spark validator over the replicas' store roots."""
    from upgrade.validate.job import run_validation
    from upgrade.validate.report import exit_code, summary_text

    def validate(roots: list[str]) -> dict[str, Any]:
        report = run_validation(roots, spark=spark, range_size=1 << 20, progress=False)
        violations = [v for c in report["checks"].values() for v in c.get("violations", [])]
        return {"exit_code": exit_code(report), "summary": summary_text(report), "violations": violations}
    return validate


def wait_until(pred: Any, timeout: float, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    return last


def wait_until_leader(cluster: Cluster, timeout: float = 30.0) -> str:
    ld = wait_until(cluster.leader, timeout)
    if not ld:
        raise AssertionError(f"no master within {timeout}s")
    return ld


def per_nemesis(events: list[dict[str, Any]], res: CheckResult) -> dict[str, dict[str, Any]]:
    """Per nemesis of this run: acked sends, lost/duplicated keys sent during it, windows."""
    spans = [(w["nemesis"], w["start"], w["end"]) for w in res.windows]
    ops = {o["key"]: o for o in sends(events)}

    def owner(key: str) -> str:
        o = ops.get(key)
        t = o["t_invoke"] if o else -1
        return next((n for n, a, b in spans if a <= t <= b), "(between nemeses)")

    out: dict[str, dict[str, Any]] = defaultdict(lambda: {"acked": 0, "lost": 0, "duplicated": 0, "indeterminate": 0,
                                                          "max_unavailable_s": 0.0, "max_recovery_s": 0.0})
    for w in res.windows:
        row = out[w["nemesis"]]
        row["acked"] += w["acked"]
        row["max_unavailable_s"] = max(row["max_unavailable_s"], w["max_gap_s"])
        row["max_recovery_s"] = max(row["max_recovery_s"], w["recovery_s"] or 0.0)
    for o in ops.values():
        if o["outcome"] == "info":
            n = owner(o["key"])
            if n in out:
                out[n]["indeterminate"] += 1
    for cat in ("lost", "duplicated"):
        for text in res.anomalies.get(cat, []):
            key = next((tok for tok in text.replace(":", " ").split() if tok.startswith("p") and "-" in tok), "")
            out[owner(key)][cat] += 1
    return dict(out)


def results_table(results: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for r in results:
        for name, row in (r.get("per_nemesis") or {}).items():
            k = (r["mode"], name)
            agg = rows.setdefault(k, {"mode": r["mode"], "nemesis": name, "runs": 0, "acked": 0, "lost": 0,
                                      "duplicated": 0, "indeterminate": 0, "max_unavailable_s": 0.0,
                                      "max_recovery_s": 0.0})
            agg["runs"] += 1
            for f in ("acked", "lost", "duplicated", "indeterminate"):
                agg[f] += row[f]
            for f in ("max_unavailable_s", "max_recovery_s"):
                agg[f] = round(max(agg[f], row[f]), 3)
    table = sorted(rows.values(), key=lambda r: (r["mode"], r["nemesis"]))
    head = f"{'mode':8} {'nemesis':18} {'runs':>4} {'acked':>7} {'lost':>5} {'dup':>4} {'unknown':>7} {'max unavail s':>13} {'max recov s':>11}"
    lines = [head, "-" * len(head)]
    for r in table:
        lines.append(f"{r['mode']:8} {r['nemesis']:18} {r['runs']:>4} {r['acked']:>7} {r['lost']:>5} {r['duplicated']:>4} "
                     f"{r['indeterminate']:>7} {r['max_unavailable_s']:>13.2f} {r['max_recovery_s']:>11.2f}")
    return table, "\n".join(lines)
