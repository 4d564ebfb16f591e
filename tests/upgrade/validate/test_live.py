"""Classic stores a broker has open: the committed point, unfinished tail writes, a live broker.

The rule (``tasks._unfinished_tail``): in a classic store, an invalid record in the last file,
past the ConsumeQueues' dispatch frontier, followed by nothing but zeros is an unfinished write
(a note and the write end); an invalid record that a ConsumeQueue vouches for, or that more data
follows, stays a ``structure`` violation.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tools.broker_confs import master_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import wait_until
from tests.upgrade.validate.helpers import RANGE, assert_located, data_file, failing, flip, patch, read
from upgrade.validate import job
from upgrade.validate.report import summary_text


def _validate(*roots: Path, spark=None) -> dict:
    if spark is None:
        return job.run_validation([str(r) for r in roots], local=True, range_size=RANGE, progress=False)
    return job.run_validation([str(r) for r in roots], spark=spark, range_size=RANGE, progress=False)


def _last(manifests, store: str) -> dict:
    return max(manifests(store), key=lambda r: r["commitLogOffset"])


def test_half_written_tail_record_is_a_note(store_copy, fixture_set, manifests):
    root = store_copy(fixture_set.classic)
    last = _last(manifests, fixture_set.classic)
    end = last["commitLogOffset"] + last["storeSize"]
    path, at = data_file(root, last["commitLogOffset"], None)
    record = read(path, at, last["storeSize"])
    tail_path, tail_at = data_file(root, end, None)
    if tail_at + len(record) > (1 << 20):
        pytest.skip("no room after the last record in its file")
    patch(tail_path, tail_at, record[:len(record) // 2])  # the writer got half way (the rest still zeros)
    report = _validate(root)
    assert report["ok"], failing(report)
    old = report["nodes"][root.name]["old"]
    assert old["write_end"] == end and old["messages"] == len(manifests(fixture_set.classic))
    assert old["unfinished_tail"]["offset"] == end and "tail not yet written" in old["unfinished_tail"]["message"]
    assert "tail not yet written" in summary_text(report)


def test_invalid_tail_record_followed_by_data_is_a_violation(store_copy, fixture_set, manifests):
    root = store_copy(fixture_set.classic)
    last = _last(manifests, fixture_set.classic)
    end = last["commitLogOffset"] + last["storeSize"]
    path, at = data_file(root, last["commitLogOffset"], None)
    record = read(path, at, last["storeSize"])
    tail_path, tail_at = data_file(root, end, None)
    if tail_at + 2 * len(record) + 64 > (1 << 20):
        pytest.skip("no room after the last record in its file")
    patch(tail_path, tail_at, record[:len(record) // 2])
    patch(tail_path, tail_at + len(record) + 64, record)  # more data after the broken record
    report = _validate(root)
    assert "structure" in failing(report)
    assert_located(report, "structure", root.name, tail_path.name, end)


def test_corrupt_last_dispatched_record_is_a_violation(store_copy, fixture_set, manifests):
    """The ConsumeQueues vouch for the last record: a flipped body byte there is corruption."""
    root = store_copy(fixture_set.classic)
    last = max((r for r in manifests(fixture_set.classic) if r.get("inConsumeQueue", 1) == 1),
               key=lambda r: r["commitLogOffset"])
    path, at = data_file(root, last["commitLogOffset"], None)
    flip(path, at + 120)  # inside the body (IPv4) or its length (IPv6 hosts): invalid either way
    report = _validate(root)
    assert_located(report, "structure", root.name, path.name, last["commitLogOffset"])


def _producer(address: str, stop: threading.Event, acked: list[int], errors: list[str]) -> None:
    from broker.api.client import SyncBrokerClient

    i = 0
    with SyncBrokerClient(address, timeout=15.0) as c:
        while not stop.is_set():
            batch = [{"body": f"live-{i + k}-" + "x" * (200 + 37 * ((i + k) % 50)), "tags": f"T{(i + k) % 5}",
                      "keys": f"k{i + k}"} for k in range(16)]
            try:
                r = c.send_batch("LiveTopic", batch, queue_id=(i // 16) % 4)
            except Exception as exc:  # noqa: BLE001 - reported by the test
                errors.append(repr(exc))
                return
            if r.get("status") == "SEND_OK":
                acked.append(len(batch))
            i += 16


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_validate_while_a_broker_writes(tmp_path, spark):
    """A real mqbroker keeps writing (1 MiB files roll) while the validator runs, locally and on
    Spark: every run passes and counts at least what was acknowledged before it started."""
    conf, port = master_conf(tmp_path, "ASYNC_MASTER", autoCreateTopicEnable="true", defaultTopicQueueNums=4,
                             flushIntervalCommitLog=50)
    broker = BrokerProc(conf, port, "live-master", tmp_path)
    root = tmp_path / "broker-a"
    stop, acked, errors = threading.Event(), [], []
    thread = threading.Thread(target=_producer, args=(broker.address, stop, acked, errors), daemon=True)
    try:
        broker.start()
        thread.start()
        deadline = time.monotonic() + 60
        while sum(acked) < 3000 and time.monotonic() < deadline and not errors:
            time.sleep(0.1)
        assert not errors and sum(acked) >= 3000, errors
        runs = []
        for k in range(4):
            before = sum(acked)
            report = _validate(root, spark=spark if k == 3 else None)
            assert report["ok"], ([(r["file"], r["offset"], r["message"]) for c in report["checks"].values() for r in c["violations"][:3]], report["nodes"][root.name]["old"])
            node = report["nodes"][root.name]
            assert node["messages"] >= before
            runs.append((before, node["messages"], node["old"].get("undispatched", 0),
                         bool(node["old"].get("unfinished_tail"))))
        assert sum(acked) > runs[0][0], "the broker kept writing during the runs"
        assert len(list((root / "commitlog").iterdir())) > 1, "files rolled while validating"
        stop.set()
        thread.join(30)
        total = sum(acked)
        assert broker.stop() == 0
        report = _validate(root)
        assert report["ok"], failing(report)
        node = report["nodes"][root.name]
        assert node["messages"] == total and node["old"].get("undispatched", 0) == 0
        assert not node["old"].get("unfinished_tail")
        print("live runs (acked before, counted, undispatched, unfinished tail):", runs)
    finally:
        stop.set()
        kill_all([broker])


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_validate_a_dledger_store_while_its_broker_writes(tmp_path):
    """A one-member DLedger broker keeps appending: only the committed prefix (checkpoint) is read."""
    from tools import procs as devprocs
    from tools.procs import REPO, port_pair

    port, raft = port_pair(), port_pair()
    store = tmp_path / "dl-n0"
    conf = devprocs.write_conf(REPO / "conf" / "dledger" / "broker-n0.conf", tmp_path / "broker-n0.conf", {
        "listenPort": port, "storePathRootDir": store, "storePathCommitLog": store / "commitlog",
        "mappedFileSizeCommitLog": 1 << 20, "dLegerPeers": f"n0-127.0.0.1:{raft}",
        "dLegerPeersHttp": f"n0-127.0.0.1:{port}"})
    broker = BrokerProc(conf, port, "dl-n0", tmp_path)
    stop, acked, errors = threading.Event(), [], []
    thread = threading.Thread(target=_producer, args=(broker.address, stop, acked, errors), daemon=True)
    try:
        broker.start(timeout=60)

        def leader() -> bool:
            try:
                with broker.client() as c:
                    return c.send("LiveTopic", "hello", tags="T0")["status"] == "SEND_OK"
            except Exception:  # noqa: BLE001 - NOT_MASTER until it has elected itself
                return False

        wait_until(leader, 30, "a one-member DLedger group elects itself")
        acked.append(1)
        thread.start()
        checkpoint = store / "dledger-n0" / "checkpoint"
        deadline = time.monotonic() + 60
        while (sum(acked) < 2000 or not checkpoint.exists()) and time.monotonic() < deadline and not errors:
            time.sleep(0.1)
        assert not errors and sum(acked) >= 2000 and checkpoint.exists(), errors
        seen = []
        for _ in range(3):
            report = _validate(store)
            after = sum(acked)
            assert report["ok"], [(r["check"], r["offset"], r["message"]) for c in report["checks"].values()
                                  for r in c["violations"][:3]]
            node = report["nodes"]["n0"]  # the checkpoint (written every 3 s) bounds what is read
            assert node["mode"] == "mixed" and 0 < node["messages"] <= after
            seen.append((node["dledger"]["committed_index"], node["messages"]))
            time.sleep(1.5)
        assert seen == sorted(seen) and seen[-1] > seen[0], seen
        stop.set()
        thread.join(30)
        total = sum(acked)
        assert broker.stop() == 0
        report = _validate(store)
        assert report["ok"] and report["nodes"]["n0"]["messages"] == total
    finally:
        stop.set()
        kill_all([broker])
