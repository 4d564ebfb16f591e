"""Runs the CI fault set (no Spark) and prints the results table; JSON with ``--json FILE``.

Usage: ``python bench/fault_table.py [--seed N] [--rounds R] [--fault-s S] [--dir DIR] [--json FILE]``.
Each round runs the three CI schedules (DLedger process/network, DLedger storage/clock, classic
pair) with seeds ``N + round``; the table aggregates per nemesis: runs, acknowledged sends
during the nemesis, lost, duplicated, unknown outcomes, max unavailability and max recovery.
Exit status 1 when any run has an anomaly (its directory is printed).
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.faults.harness.run import results_table, run_faults  # noqa: E402
from tests.faults.test_classic_faults import CLASSIC  # noqa: E402
from tests.faults.test_dledger_faults import PROCESS_AND_NETWORK, STORAGE_AND_CLOCK  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=8101)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--fault-s", type=float, default=2.5)
    ap.add_argument("--dir", default=None, help="where run directories go (default: a new temp dir)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    base = Path(args.dir or tempfile.mkdtemp(prefix="fault-table-"))
    results = []
    for r in range(args.rounds):
        for i, (mode, names) in enumerate([("dledger", PROCESS_AND_NETWORK), ("dledger", STORAGE_AND_CLOCK),
                                           ("classic", CLASSIC)]):
            seed = args.seed + 1000 * r + i
            res = run_faults(mode, names, seed, base / f"r{r}-{mode}-{i}-{seed}", fault_s=args.fault_s)
            results.append(res)
            print(f"{mode} seed {seed}: {'ok' if res.get('ok') else 'ANOMALIES'} in {res.get('seconds')} s "
                  f"({res['run_dir']})", file=sys.stderr, flush=True)
    table, text = results_table(results)
    print(text)
    out = {"table": table, "runs": [{k: r.get(k) for k in ("mode", "seed", "ok", "summary", "anomalies", "run_dir",
                                                          "nemeses", "seconds")} for r in results]}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    print(json.dumps({"table": table}, default=str))
    return 0 if all(r.get("ok") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
