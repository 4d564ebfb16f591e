"""mqupgrade plan/apply/rollback --to controller from DLedger mode: the members' consumer offsets and
schedule progress are aligned to the largest any member holds (issue 27.3/27.5; upgrade.controller_offsets).
No processes: copies of Apache's DLedger store (rmq-mixed) as members, offset files written by hand."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from broker.metadata.consumer_offset import ConsumerOffsetManager
from broker.metadata.delay_offset import DelayOffsetManager
from tests.support import rmqfixtures as rf
from tests.upgrade.test_controller_dledger import Crash, crash_at, member, quiet, snapshot, write_plan
from upgrade import fileops
from upgrade.apply import ApplyError, apply_plan
from upgrade.rollback import rollback_plan

FS = rf.SETS["plain"]


def version(counter: int) -> dict[str, int]:
    return {"counter": counter, "stateVersion": 0, "timestamp": 1_700_000_000_000 + counter}


def write_offsets(root: Path, table: dict[str, dict[int, int]], counter: int, *, fastjson: bool = False) -> None:
    """consumerOffset.json as a broker wrote it (``fastjson``: Apache's unquoted int keys)."""
    if fastjson:
        inner = ",".join(f'"{k}":{{' + ",".join(f"{q}:{o}" for q, o in qs.items()) + "}" for k, qs in table.items())
        text = f'{{"dataVersion":{json.dumps(version(counter))},"offsetTable":{{{inner}}}}}'
    else:
        text = json.dumps({"dataVersion": version(counter),
                           "offsetTable": {k: {str(q): o for q, o in qs.items()} for k, qs in table.items()}})
    (root / "config" / "consumerOffset.json").write_text(text)


def write_delay(root: Path, table: dict[int, int], counter: int) -> None:
    (root / "config" / "delayOffset.json").write_text(
        json.dumps({"dataVersion": version(counter), "offsetTable": {str(k): v for k, v in table.items()}}))


def offsets(root: Path) -> dict[str, dict[int, int]]:
    m = ConsumerOffsetManager(root / "config" / "consumerOffset.json")
    assert m.load()
    return m.offset_table


def delays(root: Path) -> dict[int, int]:
    m = DelayOffsetManager(root / "config" / "delayOffset.json")
    assert m.load()
    return m.offset_table


def kept(snap: dict[str, Any]) -> dict[str, Any]:
    """A snapshot without apply's backups (``<file>.bak-<journal started_at>``: named by the run's time)."""
    return {k: v for k, v in snap.items() if ".bak-" not in k}


LEADER = {"T@G1": {0: 100, 1: 200}, "T@G2": {0: 7}}
MERGED = LEADER


def lagging_group(fixture_root: Path, tmp: Path) -> list[Path]:
    """n0 the leader (newest version); n1's copy lags one sync (a lower offset, a group it lacks, a lower delay
    level, in Apache's fastjson form); n2's copy is the leader's, byte for byte."""
    roots = [member(fixture_root, FS, tmp / "stores", sid) for sid in ("n0", "n1", "n2")]
    write_offsets(roots[0], LEADER, 50)
    write_delay(roots[0], {1: 10, 2: 3}, 20)
    write_offsets(roots[1], {"T@G1": {0: 90, 1: 200}}, 49, fastjson=True)
    write_delay(roots[1], {1: 8, 2: 3}, 19)
    for name in ("consumerOffset.json", "delayOffset.json"):
        (roots[2] / "config" / name).write_bytes((roots[0] / "config" / name).read_bytes())
    return roots


def test_a_lagging_member_is_aligned_then_rolled_back_byte_for_byte(fixture_root: Path, tmp_path: Path) -> None:
    roots = lagging_group(fixture_root, tmp_path)
    before = {r: snapshot(r) for r in roots}
    plan, path = write_plan(roots, tmp_path)
    assert plan.ok, plan.refusals
    assert [(a.kind, a.id.split("-", 1)[1]) for a in plan.actions] == [
        *[("write_regions", f"write_regions-n{i}") for i in range(3)],
        ("align_offsets", "align_offsets-n1"), ("align_offsets", "align_delay_offsets-n1"),
        *[("write_conf", f"write_conf-n{i}") for i in range(3)]]  # n0 and n2 agree: no action
    align = plan.actions[3]
    assert "largest any member holds" in align.reason and "1 lower, 1 missing" in align.reason
    assert "offset reset backwards" in align.reason and "undone" in align.reason  # the one case it is wrong
    assert not [w for w in plan.warnings if "newest version" in w]  # normal operation: no suspicion
    aligned = roots[1] / "config" / "consumerOffset.json"
    aligned.chmod(0o640)
    apply_plan(path, echo=quiet)
    for r in roots:
        assert offsets(r) == MERGED and delays(r) == {1: 10, 2: 3}
    assert aligned.stat().st_mode & 0o777 == 0o640  # the broker's file keeps its mode (no secret in it)
    for r in (roots[0], roots[2]):
        assert snapshot(r) == {**before[r], "commitlogRegions.json": snapshot(r)["commitlogRegions.json"]}
    assert json.loads((roots[1] / "config" / "consumerOffset.json").read_text())["dataVersion"] == version(50)
    assert (roots[1] / "config" / f"consumerOffset.json.bak-{json.loads((tmp_path / 'plan.journal.json').read_text())['started_at']}").exists()
    rollback_plan(path, echo=quiet)
    for r in roots:
        assert snapshot(r) == before[r]  # every original offset file back, byte for byte; no backup left


def test_a_group_one_member_holds_and_a_reset_backwards(fixture_root: Path, tmp_path: Path) -> None:
    roots = [member(fixture_root, FS, tmp_path / "stores", sid) for sid in ("n0", "n1", "n2")]
    write_offsets(roots[0], {"T@G1": {0: 50}}, 60)  # the leader reset G1 back from 100 just before the stop
    write_offsets(roots[1], {"T@G1": {0: 100}}, 59)
    write_offsets(roots[2], {"T@G1": {0: 100}, "T@G3": {0: 4}}, 12)  # a group only n2 holds
    plan, path = write_plan(roots, tmp_path)
    assert plan.ok, plan.refusals
    assert [a.id.split("-", 1)[1] for a in plan.actions if "align" in a.id] == ["align_offsets-n0", "align_offsets-n1"]
    warned = [w for w in plan.warnings if "newest version" in w]
    assert len(warned) == 1 and "n0" in warned[0] and "T@G1 queue 0: 50 < 100" in warned[0]
    assert "T@G3 queue 0: none < 4" in warned[0] and "reset" in warned[0]
    apply_plan(path, echo=quiet)
    for r in roots:
        assert offsets(r) == {"T@G1": {0: 100}, "T@G3": {0: 4}}


def test_kill_at_the_align_steps_of_apply_and_rollback_then_resume(fixture_root: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    roots = lagging_group(fixture_root, tmp_path)
    before = {r: snapshot(r) for r in roots}
    plan, path = write_plan(roots, tmp_path)
    k = next(i for i, a in enumerate(plan.actions) if a.id.endswith("align_offsets-n1"))
    target = roots[1] / "config" / "consumerOffset.json"
    real_write = fileops.atomic_write_text

    def killed_mid_write(p: Any, text: str, mode: int = 0o644) -> None:
        if Path(p) == target:
            Path(str(p) + fileops.TMP_SUFFIX).write_text(text[: len(text) // 2])
            raise Crash(p)
        real_write(p, text, mode)

    monkeypatch.setattr(fileops, "atomic_write_text", killed_mid_write)  # after the backup, before the rename
    with pytest.raises(Crash):
        apply_plan(path, echo=quiet)
    monkeypatch.undo()
    assert snapshot(roots[1])["config/consumerOffset.json"] == before[roots[1]]["config/consumerOffset.json"]
    crash_at(monkeypatch, k)  # the resumed run: killed after the aligned file is durable, before the journal
    with pytest.raises(Crash):
        apply_plan(path, echo=quiet)
    monkeypatch.undo()
    assert offsets(roots[1]) == MERGED
    apply_plan(path, echo=quiet)
    applied = {r: snapshot(r) for r in roots}
    assert all(offsets(r) == MERGED for r in roots)
    undo_k = list(reversed(plan.actions)).index(plan.actions[k])
    crash_at(monkeypatch, undo_k)  # rollback killed after the original is back, before its journal says so
    with pytest.raises(Crash):
        rollback_plan(path, echo=quiet)
    monkeypatch.undo()
    assert offsets(roots[1]) == {"T@G1": {0: 90, 1: 200}}
    rollback_plan(path, echo=quiet)
    for r in roots:
        assert snapshot(r) == before[r]
    apply_plan(path, echo=quiet)  # and the same plan applies again, to the same files (backups named by its time)
    assert {r: kept(snapshot(r)) for r in roots} == {r: kept(s) for r, s in applied.items()}


def test_changed_or_unreadable_offsets(fixture_root: Path, tmp_path: Path) -> None:
    roots = lagging_group(fixture_root, tmp_path)
    _, path = write_plan(roots, tmp_path)
    write_offsets(roots[1], {"T@G1": {0: 95, 1: 200}}, 50)  # a broker ran on n1 after the plan
    with pytest.raises(ApplyError, match="consumerOffset.json changed since the plan was made"):
        apply_plan(path, echo=quiet)
    for name in ("consumerOffset.json", "consumerOffset.json.bak"):
        (roots[1] / "config" / name).write_text("{not json")
    plan, _ = write_plan(roots, tmp_path / "again")
    assert not plan.actions and len(plan.refusals) == 1
    assert "consumerOffset.json" in plan.refusals[0] and "the broker would not start on it" in plan.refusals[0]


def test_a_master_slave_pair_is_aligned_too(fixture_root: Path, tmp_path: Path) -> None:
    from tests.upgrade.test_controller_classic import pair, write_plan as write_classic_plan

    m, s, confs = pair(fixture_root, rf.SETS["plain"], tmp_path / "stores")
    write_offsets(m, LEADER, 50)
    write_offsets(s, {"T@G1": {0: 90, 1: 200}}, 49, fastjson=True)  # the slave's copy lags one sync
    before = {m: snapshot(m), s: snapshot(s)}
    plan, path = write_classic_plan([m, s], confs, tmp_path)
    assert plan.ok, plan.refusals
    assert [a.id.split("-", 1)[1] for a in plan.actions] == [
        "record_end-master", "record_end-slave1", "align_offsets-slave1", "write_conf-master", "write_conf-slave1"]
    write_offsets(s, {"T@G1": {0: 95, 1: 200}}, 50)  # a broker ran on the slave after the plan
    with pytest.raises(ApplyError, match="consumerOffset.json changed since the plan was made"):
        apply_plan(path, echo=quiet)
    write_offsets(s, {"T@G1": {0: 90, 1: 200}}, 49, fastjson=True)
    apply_plan(path, echo=quiet)
    assert offsets(m) == offsets(s) == MERGED
    rollback_plan(path, echo=quiet)
    assert {m: snapshot(m), s: snapshot(s)} == before


def test_a_key_without_queues_counts_only_where_no_member_has_queues(tmp_path: Path) -> None:
    from upgrade.controller_offsets import align_actions

    roots = [tmp_path / n for n in ("a", "b", "c")]
    for r in roots:
        (r / "config").mkdir(parents=True)
    write_offsets(roots[0], {"T@G": {}, "T@E": {}}, 3)
    write_offsets(roots[1], {"T@G": {0: 5}, "T@E": {}}, 4)
    write_offsets(roots[2], {"T@G": {0: 5}}, 2)
    aligns, refusals, _ = align_actions([(str(r), r.name) for r in roots], now_ms=1)
    assert not refusals
    assert [(Path(a.root).name, a.label) for a in aligns] == [("a", "align_offsets"), ("c", "align_offsets")]
    for a in aligns:  # what apply writes: b's table
        Path(a.path).write_text(a.content)
    assert offsets(roots[0]) == offsets(roots[1]) == offsets(roots[2]) == {"T@G": {0: 5}, "T@E": {}}
