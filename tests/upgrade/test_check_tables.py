"""The planner's, the inspector's and the validator's checks as tables (issue 26.6), row by row.

Each check is driven on its own with plain data (no store on disk unless the row reads one) and
its message asserted word for word: these are the lines an operator reads. The order tests pin
that the tables, read top to bottom, are the order of what an operator is told.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.upgrade.upgrade_helpers import copy
from upgrade.inspect import SHAPE_CHECKS, Comparison, Inspection, StoreInspection
from upgrade.plan import PlanError, make_plan, parse_self_ids
from upgrade.plan_checks import (ARGUMENT_CHECKS, REFUSAL_CHECKS, Draft, PlanRequest, check_arguments,
                                 refusals_of)
from upgrade.plan_model import Node
from upgrade.store_files import CommitLogFile
from upgrade.validate.checks import GROUP_CHECKS, NODE_CHECKS, evaluate
from upgrade.validate.layout import FileRef, StoreLayout
from upgrade.validate.plan import Plan as ScanPlan

MB = 1 << 20


def _request(**kw: object) -> PlanRequest:
    base: dict[str, object] = {"group": "g0", "peers": "n0-127.0.0.1:40911;n1-127.0.0.1:40912",
                               "self_ids": {"n0": "/s/a", "n1": "/s/b"}, "confs": {}}
    base.update(kw)
    return PlanRequest(**base)  # type: ignore[arg-type]


# ---- plan: the arguments ------------------------------------------------------------------------
@pytest.mark.parametrize("kw, message", [
    ({"group": " "}, "--group is empty"),
    ({"peers": "n0-nohost"}, "--peers: "),
    ({"self_ids": {"n0": "/s/a"}}, "--self-ids names ['n0'] but --peers names ['n0', 'n1']; they must match"),
    ({"seed_consumequeue": "clone"}, "--seed-consumequeue must be copy or rebuild"),
    ({"roots": ("/s/c",)}, "/s/c: store root has no self id in --self-ids"),
])
def test_each_argument_check_names_the_mistake(kw: dict[str, object], message: str) -> None:
    with pytest.raises(PlanError) as err:
        check_arguments(_request(**kw))
    assert str(err.value).startswith(message), str(err.value)
    if not message.endswith(": "):
        assert str(err.value) == message


def test_a_conf_outside_the_group_is_named(tmp_path: Path) -> None:
    from upgrade.plan import load_confs

    conf = tmp_path / "x.conf"
    conf.write_text(f"storePathRootDir={tmp_path / 'elsewhere'}\n")
    confs = load_confs([str(conf)])
    with pytest.raises(PlanError) as err:
        check_arguments(_request(confs=confs))
    assert str(err.value) == f"--conf {conf}: its storePathRootDir {tmp_path / 'elsewhere'} is not in --self-ids"


def test_the_first_failing_argument_row_wins() -> None:
    """An empty group with unparsable peers: the table's first row is the one reported."""
    with pytest.raises(PlanError, match="^--group is empty$"):
        check_arguments(_request(group="", peers="nonsense", seed_consumequeue="clone"))
    assert [c.name for c in ARGUMENT_CHECKS][:2] == ["--group names the group", "--peers parses as dLegerPeers"]


# ---- plan: the refusals -------------------------------------------------------------------------
def _store(root: str, size: int = MB, files: int = 2, **kw: object) -> StoreInspection:
    s = StoreInspection(root, True, root + "/commitlog", file_size=size, **kw)  # type: ignore[arg-type]
    s.files = [CommitLogFile(f"{i * size:020d}", i * size, size, size) for i in range(files)]
    return s


def _node(sid: str, root: str, port: int, listen: int) -> Node:
    return Node(sid, root, "new", "127.0.0.1", port, listen, 0, root + "/commitlog", None, f"/c/{sid}.conf", {})


def _draft(stores: list[StoreInspection], comparisons: list[Comparison], nodes: list[Node]) -> Draft:
    insp = Inspection(stores, stores[0].root, "test", comparisons)
    return Draft(_request(), insp, stores[0], nodes)


def test_each_refusal_row_in_table_order() -> None:
    m = _store("/s/a", max_offset=2 * MB - 100)
    m.lock_holder = "process 42 holds the lock."
    ahead = _store("/s/b", max_offset=2 * MB - 10)
    odd = _store("/s/c", size=2 * MB, files=1)
    broken = _store("/s/d", problems=["gap in the commitlog: 2 does not follow 1"])  # type: ignore[list-item]
    comparisons = [Comparison("/s/a", "/s/b", -90, identical=False,
                              first_difference={"file": f"{MB:020d}", "file_offset": 7, "offset": MB + 7})]
    nodes = [_node("n0", "/s/a", 40911, 10911), _node("n1", "/s/b", 40911, 20911)]
    refusals = refusals_of(_draft([m, ahead, odd, broken], comparisons, nodes))
    assert refusals == [
        "/s/a: in use: process 42 holds the lock. Stop the broker first.",
        "/s/d: gap in the commitlog: 2 does not follow 1",
        f"/s/c: mismatched file sizes: mappedFileSizeCommitLog {2 * MB} but the master's is {MB}",
        f"/s/b: slave is ahead of its master /s/a ({2 * MB - 10} > {2 * MB - 100}); the master must hold the most "
        "data (choose it with --master, or investigate)",
        f"/s/b: bytes diverge from the master /s/a in commitlog file {MB:020d} at file offset 7 (physical offset "
        f"{MB + 7})",
        "port 40911 on 127.0.0.1 is used by both n0 and n1 (listenPort, listenPort+1 for HA, httpListenPort and "
        "the dLegerPeers port must all differ)",
    ]
    assert len(REFUSAL_CHECKS) == 5


def test_no_data_skips_the_comparisons_but_not_the_ports() -> None:
    empty = _store("/s/a", files=0)
    odd = _store("/s/c", size=2 * MB, files=1)
    nodes = [_node("n0", "/s/a", 40911, 10911), _node("n1", "/s/c", 40911, 20911)]
    refusals = refusals_of(_draft([empty, odd], [], nodes))
    assert refusals[0] == "no store holds commitlog data: nothing to upgrade (check the store roots)"
    assert len(refusals) == 2 and refusals[1].startswith("port 40911 on 127.0.0.1 is used by both n0 and n1")


def test_make_plan_refuses_two_peers_on_one_port(fixture_root: Path, tmp_path: Path) -> None:
    m = copy(fixture_root, "rmq-classic", tmp_path / "m")
    peers = "n0-127.0.0.1:40911;n1-127.0.0.1:40911"
    plan = make_plan("g0", peers, parse_self_ids(f"n0={m},n1={tmp_path / 'new'}"), conf_dir=tmp_path / "c")
    assert not plan.ok and plan.actions == []
    assert plan.refusals == ["port 40911 on 127.0.0.1 is used by both n0 and n1 (listenPort, listenPort+1 for HA, "
                             "httpListenPort and the dLegerPeers port must all differ)"]


# ---- inspect: the commitlog's shape -------------------------------------------------------------
@pytest.mark.parametrize("files, problem", [
    ([(0, MB), (MB, MB // 2)], f"mismatched file sizes: {MB:020d} ({MB // 2} bytes) != mappedFileSizeCommitLog {MB}"),
    ([(0, MB), (2 * MB, MB)], f"gap in the commitlog: {2 * MB:020d} does not follow {0:020d}"),
    ([(MB // 2, MB)], f"{MB // 2:020d} is not a multiple of the file size {MB}"),
    ([(0, MB), (MB, MB)], None),
])
def test_each_shape_check(files: list[tuple[int, int]], problem: str | None) -> None:
    s = StoreInspection("/s/a", True, "/s/a/commitlog", file_size=MB)
    s.files = [CommitLogFile(f"{start:020d}", start, size, size) for start, size in files]
    found = next((p for p in (c.problem(s) for c in SHAPE_CHECKS) if p is not None), None)
    assert found == problem


# ---- validate: the node and group tables --------------------------------------------------------
def _frozen(node: str, files: int) -> StoreLayout:
    old = tuple(FileRef(f"/v/{node}/commitlog/{i * MB:020d}", i * MB, MB) for i in range(files))
    return StoreLayout(f"/v/{node}", node, old, MB, None, frozen=True)


def test_validator_tables_report_divides_and_na() -> None:
    findings, nodes = evaluate(ScanPlan(), [_frozen("n0", 1), _frozen("n1", 2)], {})
    assert [r["message"] for r in findings.rows["replicas"]] == [f"divided offset {2 * MB} differs from n0's {MB}"]
    assert findings.not_applicable == {"dledger_continuity"}
    assert list(nodes) == ["n0", "n1"] and nodes["n1"]["divided_offset"] == 2 * MB
    assert list(nodes["n0"]) == ["root", "mode", "old", "divided_offset", "max_offset", "per_queue", "messages",
                                 "dispatchable", "tx_skipped", "barriers", "cq_units_checked"]
    one, _ = evaluate(ScanPlan(), [_frozen("n0", 1)], {})
    assert one.not_applicable == {"dledger_continuity", "replicas"} and not one.rows["replicas"]
    assert len(NODE_CHECKS) == 6 and len(GROUP_CHECKS) == 4
