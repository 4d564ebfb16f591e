"""The Apache-written fixture stores validate clean on local Spark, with the fixture's numbers."""
from __future__ import annotations

from collections import Counter

import pytest

from upgrade.validate.job import run_validation
from tests.upgrade.validate.helpers import RANGE

pytestmark = pytest.mark.spark


def _expected_queues(manifest: list[dict]) -> Counter:
    return Counter(f"{r['topic']}:{r['queueId']}" for r in manifest if r.get("inConsumeQueue", 1) == 1)


def test_mixed_store_validates_clean(spark, fixture_root, fixture_set, manifests):
    report = run_validation([str(fixture_root / fixture_set.mixed)], spark=spark, range_size=RANGE, progress=False)
    assert report["ok"], report["checks"]
    assert {n: c["status"] for n, c in report["checks"].items()} == {
        "structure": "pass", "old_continuity": "pass", "divide": "pass", "dledger_continuity": "pass",
        "consumequeue": "pass", "replicas": "n/a"}
    (node,) = report["nodes"].values()
    manifest = manifests(fixture_set.mixed)
    assert node["divided_offset"] == fixture_set.divided_offset
    assert node["max_offset"] == fixture_set.mixed_max_offset
    assert node["messages"] == len(manifest)
    old = [r for r in manifest if r["commitLogOffset"] < fixture_set.divided_offset]
    assert node["old"]["messages"] == len(old)
    assert node["dledger"]["messages"] == node["dledger"]["entries"] == len(manifest) - len(old)
    assert node["dledger"]["committed_index"] == len(manifest) - len(old) - 1
    assert node["old"]["write_end"] == max(r["commitLogOffset"] + r["storeSize"] for r in old)
    queues = {q: v["messages"] for q, v in node["per_queue"].items()}
    assert queues == dict(_expected_queues(manifest))
    assert all(v["cq_units"] == v["messages"] for v in node["per_queue"].values())
    assert node["tx_skipped"] == sum(1 for r in manifest if r.get("inConsumeQueue", 1) == 0)
    assert node["barriers"] == 0
    if fixture_set.name == "plain":
        assert node["messages"] == 7000 and set(queues.values()) == {875}


def test_classic_store_validates_clean(spark, fixture_root, fixture_set, manifests):
    report = run_validation([str(fixture_root / fixture_set.classic)], spark=spark, range_size=RANGE, progress=False)
    assert report["ok"], report["checks"]
    status = {n: c["status"] for n, c in report["checks"].items()}
    assert status == {"structure": "pass", "old_continuity": "pass", "divide": "n/a",
                      "dledger_continuity": "n/a", "consumequeue": "pass", "replicas": "n/a"}
    (node,) = report["nodes"].values()
    manifest = manifests(fixture_set.classic)
    assert node["divided_offset"] is None and node["max_offset"] == fixture_set.classic_max_offset
    assert node["messages"] == len(manifest)
    assert {q: v["messages"] for q, v in node["per_queue"].items()} == dict(_expected_queues(manifest))
    if fixture_set.name == "plain":
        assert set(v["messages"] for v in node["per_queue"].values()) == {625}


def test_two_identical_replicas_agree(spark, store_copy, fixture_set):
    a = store_copy(fixture_set.mixed)
    b = a.parent / (a.name + "-n1")
    import shutil
    import subprocess
    subprocess.run(["cp", "-r", "--sparse=always", str(a), str(b)], check=True)
    shutil.move(str(b / "dledger-n0"), str(b / "dledger-n1"))
    report = run_validation([str(a), str(b)], spark=spark, range_size=RANGE, progress=False)
    assert report["ok"], report["checks"]
    assert report["checks"]["replicas"]["status"] == "pass"
    assert set(report["nodes"]) == {"n0", "n1"}


def test_classic_store_with_a_precreated_next_file(spark, store_copy, fixture_set, manifests):
    """A running broker pre-creates its next commitlog file (AllocateMappedFileService) before the
    current one is full: an empty trailing file is not in use yet, and the last file holding
    records is the one being written (zeros after its end are not a missing blank)."""
    root = store_copy(fixture_set.classic)
    files = sorted((root / "commitlog").iterdir())
    nxt = root / "commitlog" / f"{int(files[-1].name) + fixture_set.file_size:020d}"
    with open(nxt, "wb") as fh:
        fh.truncate(fixture_set.file_size)
    report = run_validation([str(root)], spark=spark, range_size=RANGE, progress=False)
    assert report["ok"], report["checks"]
    (node,) = report["nodes"].values()
    assert node["max_offset"] == fixture_set.classic_max_offset
    assert node["messages"] == len(manifests(fixture_set.classic))
    # the rule is about trailing files only: an empty file in the middle is still a violation
    mid = files[1]
    mid.write_bytes(bytes(fixture_set.file_size))
    report = run_validation([str(root)], spark=spark, range_size=RANGE, progress=False)
    assert not report["ok"]
