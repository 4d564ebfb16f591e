"""Issue 24.1: a store knows what it is, and a broker refuses a store of another shape.

Before: the classic conf started on an upgraded store ran as a master at the pre-upgrade offset,
zeroed the old region's tail blank and dropped the post-upgrade messages from the ConsumeQueues;
an upgraded node whose old commitlog was moved away started, said /health 200, could lead and
answered OFFSET_TOO_SMALL for every pre-upgrade message (consumers skipped them). Now both are
refused at start by a real ``mqbroker`` with a line naming the fix, and nothing in the store
changes. Both Apache fixture sets (upgraded in place by Apache itself).
"""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from broker.store.shape import read_shape
from tools.broker_confs import classic_conf, dledger_single_conf
from tools.nodes import BrokerProc, kill_all
from tools.procs import port_pair, wait_until

pytestmark = [pytest.mark.multiprocess, pytest.mark.timeout(120)]


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name not in ("lock",)}


def _classic_conf(tmp: Path, root: Path, name: str) -> tuple[Path, int]:
    port = port_pair()
    conf = classic_conf("broker-a.conf", tmp / f"{name}.conf", brokerRole="ASYNC_MASTER", listenPort=port,
                      haListenPort=port + 1, storePathRootDir=root, storePathCommitLog=root / "commitlog",
                      mappedFileSizeCommitLog=1 << 20)
    return conf, port


def _refused(b: BrokerProc) -> str:
    b.start(wait=False)
    code = b.wait_exit(60)
    assert code == 3, (code, b.log())
    return b.log()


def test_a_classic_conf_is_refused_on_an_upgraded_store(tmp_path: Path, store_copy, fixture_set) -> None:
    root = store_copy(fixture_set.mixed)
    before = _tree(root)
    conf, port = _classic_conf(tmp_path, root, "classic")
    log = _refused(BrokerProc(conf, port, "classic-on-dledger", tmp_path))
    assert "holds DLedger data" in log and "enableDLegerCommitLog=true" in log and "Traceback" not in log, log
    assert _tree(root) == before  # the frozen region, the CQs, everything as it was


def test_a_node_missing_its_old_region_never_serves(tmp_path: Path, store_copy, fixture_set) -> None:
    root = store_copy(fixture_set.mixed)
    conf, port = dledger_single_conf(tmp_path, root)
    b = BrokerProc(conf, port, "n0", tmp_path)
    try:
        b.start()
        with b.client() as c:
            wait_until(lambda: c.status()["isMaster"], 30.0, "the member leads")
        assert b.stop() == 0
    finally:
        kill_all([b])
    shape = read_shape(root)
    assert shape is not None and shape.mode == "dledger" and shape.group == "g0" and shape.self_id == "n0"
    assert shape.divided == fixture_set.divided_offset and shape.min_offset == 0
    # the classic conf is refused by the record now too
    conf_c, port_c = _classic_conf(tmp_path, root, "classic")
    log = _refused(BrokerProc(conf_c, port_c, "classic-again", tmp_path))
    assert "is a DLedger-mode store (group g0, member n0" in log, log
    # the old commitlog moved away (an operator's mistake): refused, naming reseed
    shutil.move(str(root / "commitlog"), str(tmp_path / "moved-commitlog"))
    log = _refused(BrokerProc(conf, port, "n0-without-old", tmp_path))
    assert "missing commitlog data it held" in log and f"[0, {fixture_set.divided_offset})" in log, log
    assert "mqupgrade reseed" in log and "Traceback" not in log
    # put back, it starts and serves again
    if (root / "commitlog").is_dir():  # the refused start may have made an empty one
        assert not any((root / "commitlog").iterdir())
        (root / "commitlog").rmdir()
    shutil.move(str(tmp_path / "moved-commitlog"), str(root / "commitlog"))
    b = BrokerProc(conf, port, "n0-again", tmp_path)
    try:
        b.start()
        with b.client() as c:
            wait_until(lambda: c.status()["isMaster"], 30.0, "the member leads again")
    finally:
        kill_all([b])


def test_retention_records_its_low_mark_before_it_deletes(tmp_path: Path) -> None:
    """A classic store: deleting the oldest files raises minCommitlogOffset first, so the next
    start accepts the store; files removed by hand are refused."""
    from broker.store.message import MessageExt
    from broker.store.message_store import DefaultMessageStore

    root = tmp_path / "store"
    with DefaultMessageStore(store_path_root_dir=str(root), mapped_file_size_commit_log=64 * 1024,
                             record_shape=True) as store:
        for i in range(300):
            store.put_message(MessageExt(topic="TopicShape", body=b"x" * 1000, queue_id=0))
        files = store.commitlog.mapped_file_queue.mapped_files
        assert len(files) >= 4
        second = files[1].file_from_offset
        assert store.delete_expired_files(clean_immediately=True, max_delete=1) == 1
        assert read_shape(root).min_offset == second
    with DefaultMessageStore(store_path_root_dir=str(root), mapped_file_size_commit_log=64 * 1024,
                             record_shape=True) as store:
        assert store.commitlog.min_offset == second  # accepted: retention recorded it
    first_left = sorted((root / "commitlog").iterdir())[0]
    first_left.unlink()  # by hand
    with pytest.raises(Exception, match="missing commitlog data it held"):
        DefaultMessageStore(store_path_root_dir=str(root), mapped_file_size_commit_log=64 * 1024,
                            record_shape=True).load()
