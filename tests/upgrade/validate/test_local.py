"""Range cutting and task order do not change the verdict or the numbers (single process)."""
from __future__ import annotations

import random

from upgrade.validate import job


def _strip(report: dict) -> dict:
    return {"ok": report["ok"], "nodes": report["nodes"],
            "checks": {k: (v["status"], v["violation_count"]) for k, v in report["checks"].items()}}


def test_same_report_for_any_range_size_and_task_order(fixture_root, fixture_set, monkeypatch):
    root = str(fixture_root / fixture_set.mixed)
    big = job.run_validation([root], local=True, range_size=4 << 20, progress=False)
    assert big["ok"] and big["params"]["rescans"] == 0
    assert big["params"]["detail_rescans"] == 0  # CQ and index digests agree: no unit re-read
    real = job.local_map

    def shuffled(items, fn, label):
        out = real(items, fn, label)
        random.Random(5).shuffle(out)
        return out

    monkeypatch.setattr(job, "local_map", shuffled)
    tiny = job.run_validation([root], local=True, range_size=4096, progress=False)  # records straddle ranges
    assert _strip(tiny) == _strip(big)
    assert tiny["params"]["ranges"] > 1000 and tiny["params"]["screen_disagreements"] == 0


def test_balance_spreads_cost():
    groups = job.balance(list(range(1, 101)), 8, float)
    loads = [sum(g) for g in groups]
    assert len(groups) == 8 and max(loads) - min(loads) <= 100 and sorted(sum(groups, [])) == list(range(1, 101))


def test_store_frozen_by_the_upgrade_before_dledger_starts(store_copy, fixture_set, manifests):
    """Old commitlog closed by the upgrade's blank, empty dledger dir: the divide holds (no Spark)."""
    root = store_copy(fixture_set.classic)
    end = fixture_set.classic_max_offset
    last = root / "commitlog" / f"{end - end % (1 << 20):020d}"
    with open(last, "r+b") as fh:  # what the first DLedger start (or mqupgrade apply) writes
        fh.seek(end % (1 << 20))
        fh.write(((1 << 20) - end % (1 << 20)).to_bytes(4, "big") + (0xCBD43194).to_bytes(4, "big"))
    frozen = job.run_validation([str(root)], local=True, range_size=256 << 10, progress=False)
    assert frozen["ok"] and frozen["checks"]["divide"]["status"] == "pass"
    assert frozen["nodes"][root.name]["mode"] == "frozen"
    assert frozen["nodes"][root.name]["divided_offset"] == fixture_set.divided_offset
    (root / "dledger-n0").mkdir()  # the DLedger directory exists, no data file yet
    report = job.run_validation([str(root)], local=True, range_size=256 << 10, progress=False)
    assert report["ok"], report["checks"]
    node = report["nodes"]["n0"]
    assert report["checks"]["divide"]["status"] == "pass"
    assert node["divided_offset"] == fixture_set.divided_offset and node["messages"] == len(manifests(fixture_set.classic))
    (root / "commitlog" / last.name).write_bytes(b"")  # and a broken freeze is caught
    broken = job.run_validation([str(root)], local=True, range_size=256 << 10, progress=False)
    assert broken["checks"]["divide"]["status"] == "fail"
