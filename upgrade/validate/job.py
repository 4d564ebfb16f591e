"""The validation job: plan on the driver, scan ranges on the executors, reduce on the driver.

Rules:
- Only range descriptors go to the executors and only range summaries come back (DESIGN §6);
  the driver never reads record bytes except a short walk of a classic last file when replicas
  must be compared (``plan``).
- Rescans asked for by ``checks.reconcile``, detailed CQ/index rescans asked for by
  ``digest.detail_rescans`` (buckets whose digests differ) and exact-byte diffs of mismatching replica ranges
  run as further (small) Spark jobs on the same session.
- Progress goes to stderr: a tqdm bar over the tasks of each job, fed by polling Spark's status
  tracker from the driver while a helper thread runs the job.
- ``run_validation`` returns the report dict (see ``report``); it raises ``UnusableInput`` for
  inputs that are not stores, before any Spark work.

Theory of operation: ranges are packed into ``2 x cores`` groups by longest-processing-time-
first on their byte cost (a CQ byte weighs 64), so no core idles behind a straggler and tiny
ranges do not cost a task each (measured on the 5 GiB bench, local[2]: 2 groups per core
1.8 GB/s, 8 per core 1.2 GB/s - PySpark's per-task overhead); ``sc.parallelize(groups).flatMap(run all).collect()``. The same
for rescans and diffs. Bytes scanned / wall time of the scan job is the reported throughput.
"""
from __future__ import annotations

import heapq
import sys
import threading
import time
import uuid
from typing import Any, Callable, Sequence

from upgrade.validate import checks, digest
from upgrade.validate.layout import discover_all
from upgrade.validate.plan import CQ_DENSITY, DEFAULT_RANGE_SIZE, Plan, ScanRange, plan
from upgrade.validate.report import build_report
from upgrade.validate.tasks import diff_bytes, run_range

TASKS_PER_CORE = 2  # each PySpark task costs ~50-100 ms here: 8 per core lost ~30% of a 5 GiB scan


def _diff(m: dict) -> dict:
    if m.get("missing"):
        return m
    lo, hi = m["lo"], m["hi"]
    rel = diff_bytes(m["path"], lo - m["file_start"], m["ref_path"], lo - m["file_start"], hi - lo)
    out = dict(m)
    out["at"] = lo + rel if rel is not None else lo
    return out


def balance(items: Sequence[Any], groups: int, cost: Callable[[Any], float]) -> list[list[Any]]:
    """Longest-processing-time-first: each item, most expensive first, to the lightest group."""
    out: list[list[Any]] = [[] for _ in range(max(1, min(groups, len(items))))]
    heap = [(0.0, i) for i in range(len(out))]
    for item in sorted(items, key=cost, reverse=True):
        load, i = heapq.heappop(heap)
        out[i].append(item)
        heapq.heappush(heap, (load + cost(item), i))
    return [g for g in out if g]


def _run_group(fn: Callable[[Any], Any]) -> Callable[[list[Any]], list[Any]]:
    return lambda group: [fn(x) for x in group]


def run_spark(sc: Any, items: Sequence[Any], fn: Callable[[Any], Any], label: str, progress: bool = True,
              cost: Callable[[Any], float] = lambda _x: 1.0) -> list[Any]:
    """``fn`` over ``items`` on the executors, balanced into tasks, with a progress bar on stderr."""
    if not items:
        return []
    groups = balance(items, sc.defaultParallelism * TASKS_PER_CORE, cost)
    slices = len(groups)
    group = f"mqvalidate-{label}-{uuid.uuid4().hex[:8]}"
    result: dict[str, Any] = {}

    def work() -> None:
        sc.setJobGroup(group, f"mqupgrade validate: {label}")
        try:
            result["rows"] = sc.parallelize(groups, slices).flatMap(_run_group(fn)).collect()
        except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
            result["error"] = exc

    t = threading.Thread(target=work, name=group, daemon=True)
    t.start()
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=slices, desc=f"validate {label}", unit="task", file=sys.stderr, leave=False)
    tracker = sc.statusTracker()
    while t.is_alive():
        t.join(0.05 if bar is None else 0.2)
        if bar is not None:
            done = 0
            for job_id in tracker.getJobIdsForGroup(group):
                job = tracker.getJobInfo(job_id)
                for stage_id in (job.stageIds if job else []):
                    st = tracker.getStageInfo(stage_id)
                    if st:
                        done += st.numCompletedTasks
            bar.n = min(done, slices)
            bar.refresh()
    if bar is not None:
        bar.n = slices
        bar.close()
    if "error" in result:
        raise result["error"]
    return result["rows"]


def range_cost(x: Any) -> float:
    """Relative cost of a task item in data-byte equivalents (measured CPU per byte): a CQ or
    index byte costs ~2 / ~4 data bytes on the digest path; on the detailed path a CQ unit
    costs about one message check (CQ_DENSITY) and an index unit a fifth of one."""
    if isinstance(x, ScanRange):
        weight = {"cq": CQ_DENSITY if x.detail else 2, "idx": 12 if x.detail else 4}.get(x.kind, 1)
        return float((x.end - x.start) * weight) + 65536.0
    return 1.0


def local_map(items: Sequence[Any], fn: Callable[[Any], Any], label: str) -> list[Any]:
    """The same work in this process, one item after the other (tests, the bench's baseline)."""
    return [fn(x) for x in items]


class _Local:
    master = "single-process"


def run_validation(roots: Sequence[str], spark: Any = None, master: str = "local[*]",
                   range_size: int = DEFAULT_RANGE_SIZE, progress: bool = True, check_crc: bool = True,
                   max_rescan_rounds: int = 20, local: bool = False) -> dict:
    """Validate the stores at ``roots`` (one per replica); ``local=True`` runs without Spark."""
    started = time.time()
    layouts = discover_all(list(roots))
    pl: Plan = plan(layouts, range_size, check_crc)
    own = spark is None and not local
    if own:
        from upgrade.validate.session import make_spark_session

        spark = make_spark_session(master)
    try:
        if local:
            sc: Any = _Local()
            mapper: Callable[..., list[Any]] = lambda items, fn, label: local_map(items, fn, label)  # noqa: E731
        else:
            sc = spark.sparkContext
            mapper = lambda items, fn, label: run_spark(sc, items, fn, label, progress, range_cost)  # noqa: E731
        t0 = time.time()
        rows = mapper(pl.ranges, run_range, "scan")
        scan_seconds = time.time() - t0
        scan_cpu = sum(s.get("cpu_seconds", 0.0) for s in rows)
        summaries = {s["rid"]: s for s in rows}
        rescanned = 0
        for _ in range(max_rescan_rounds):
            todo: list[ScanRange] = checks.reconcile(pl, summaries)
            if not todo:
                break
            rescanned += len(todo)
            for s in mapper(todo, run_range, "rescan"):
                summaries[s["rid"]] = s
        todo = digest.detail_rescans(pl, summaries)  # CQ/index units whose digests disagree
        for s in mapper(todo, run_range, "detail") if todo else []:
            summaries[s["rid"]] = s
        order = [lay.node for lay in layouts]
        mismatches = checks.replica_mismatches(pl, summaries, order)
        if mismatches:
            mismatches = mapper(mismatches[:200], _diff, "replica-diff")
        findings, nodes = checks.evaluate(pl, layouts, summaries, mismatches)
        params = {"master": sc.master, "range_size": range_size, "ranges": len(pl.ranges), "rescans": rescanned,
                  "detail_rescans": len(todo), "scan_task_cpu_seconds": round(scan_cpu, 3),
                  "bytes_planned": pl.total_bytes, "scan_seconds": round(scan_seconds, 3),
                  "elapsed_seconds": round(time.time() - started, 3), "check_crc": check_crc,
                  "screen_disagreements": sum(s["screen_disagreements"] for s in summaries.values())}
        params["scan_gb_per_s"] = round(pl.total_bytes / scan_seconds / 1e9, 3) if scan_seconds > 0 else None
        return build_report(layouts, findings, nodes, params, summaries)
    finally:
        if own:
            spark.stop()
