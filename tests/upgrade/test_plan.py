"""mqupgrade plan: actions with reasons, conf files, refusals."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from broker.config.conf_file import parse_conf
from tests.upgrade.upgrade_helpers import PEERS, copy, flip_byte, hold_lock, make_behind, make_dirty, mqupgrade
from upgrade.plan import Plan, PlanError, load_confs, make_plan, parse_self_ids

MASTER_TOUCHING = {"copy_file", "patch_file", "recover", "dispatch", "copy_tree"}


def _ids(tmp: Path, m: Path, s1: Path | None = None) -> dict[str, str]:
    return parse_self_ids(f"n0={m},n1={s1 or tmp / 'new1'},n2={tmp / 'new2'}")


def test_three_nodes_master_and_two_new(fixture_root: Path, fixture_set, tmp_path: Path) -> None:
    m = copy(fixture_root, fixture_set.classic, tmp_path / "m")
    plan = make_plan("g0", PEERS, _ids(tmp_path, m), conf_dir=tmp_path / "conf")
    assert plan.ok and plan.master == str(m.resolve())
    assert plan.master_max_offset == fixture_set.classic_max_offset
    assert plan.divided_commitlog_offset == fixture_set.divided_offset
    assert [n.state for n in plan.nodes] == ["master", "new", "new"]
    # nothing but a conf, the optional freeze and the final check touches the master: O(1) there
    assert {a.kind for a in plan.actions if a.node == "n0"} == {"write_conf", "freeze", "verify"}
    files = sorted(p.name for p in (m / "commitlog").iterdir())
    for sid in ("n1", "n2"):
        copies = [a.params["name"] for a in plan.actions if a.node == sid and a.kind == "copy_file"
                  and a.params["name"] != "checkpoint"]
        assert copies == files
        trees = [a.params["tree"] for a in plan.actions if a.node == sid and a.kind == "copy_tree"]
        assert trees == ["config", "consumequeue", "index"]
    assert all(a.reason for a in plan.actions)
    assert [a.optional for a in plan.actions if a.kind == "freeze"] == ["freeze"] * 3
    confs = [parse_conf(a.params["content"], a.params["path"]) for a in plan.actions if a.kind == "write_conf"]
    assert len({c.store.dleger_peers for c in confs}) == 1 and confs[0].store.dleger_peers == PEERS
    assert [c.store.dleger_self_id for c in confs] == ["n0", "n1", "n2"]
    assert {c.store.mapped_file_size_commit_log for c in confs} == {fixture_set.file_size}
    assert all(c.store.enable_dleger_commit_log and c.store.dleger_group == "g0" for c in confs)
    assert [c.store.store_path_root_dir for c in confs] == [n.root for n in plan.nodes]
    ports = [p for c in confs for p in (c.broker.listen_port, c.store.ha_listen_port)]
    assert len(ports) == len(set(ports))
    assert confs[0].store.max_hash_slot_num != 0
    # issue 14.4: without --conf the settings inferred from the store's own files are carried
    # (the fixture's IndexFile has 10,000 slots / 40,000 entries, not the 5M/20M defaults)
    assert {(c.store.max_hash_slot_num, c.store.max_index_num) for c in confs} == {(10_000, 40_000)}
    cq_size = next((m / "consumequeue").glob("*/*/*")).stat().st_size
    assert {c.store.mapped_file_size_consume_queue for c in confs} == {cq_size}


def test_plan_round_trips_as_json(fixture_root: Path, tmp_path: Path) -> None:
    m = copy(fixture_root, "rmq-classic", tmp_path / "m")
    token = "t" * 32
    plan = make_plan("g0", PEERS, _ids(tmp_path, m), conf_dir=tmp_path / "conf", auth_token=token)
    plan.save(tmp_path / "plan.json")
    assert (tmp_path / "plan.json").stat().st_mode & 0o077 == 0  # it holds the group's secret
    again = Plan.load(tmp_path / "plan.json")
    assert again.to_dict() == json.loads(json.dumps(plan.to_dict()))
    # deterministic: planning again with the same options (the secret is one) gives the same actions
    assert make_plan("g0", PEERS, _ids(tmp_path, m), conf_dir=tmp_path / "conf", auth_token=token).actions == plan.actions


def test_plan_gives_the_group_one_secret(fixture_root: Path, tmp_path: Path) -> None:
    """Every written conf carries the same dLegerAuthToken: a fresh random one unless --auth-token
    or a --conf supplies it; an old conf without ACL keeps listenPort open explicitly, with a warning."""
    m = copy(fixture_root, "rmq-classic", tmp_path / "m")
    plans = [make_plan("g0", PEERS, _ids(tmp_path, m), conf_dir=tmp_path / "conf") for _ in range(2)]
    tokens = []
    for plan in plans:
        confs = [parse_conf(a.params["content"]) for a in plan.actions if a.kind == "write_conf"]
        assert len({c.store.dleger_auth_token for c in confs}) == 1
        token = confs[0].store.dleger_auth_token
        assert token and len(token) >= 32
        assert all(c.broker.remoting_allow_insecure and not c.store.dleger_allow_insecure for c in confs)
        assert any("dLegerAuthToken" in w for w in plan.warnings)
        assert any("remotingAllowInsecure" in w for w in plan.warnings)
        tokens.append(token)
    assert tokens[0] != tokens[1]  # random, not derived from anything an attacker can read
    with pytest.raises(PlanError, match="at least 16"):
        make_plan("g0", PEERS, _ids(tmp_path, m), conf_dir=tmp_path / "conf", auth_token="short")


def test_slave_behind_gets_tail_and_missing_files(fixture_root: Path, fixture_set, manifests, tmp_path: Path) -> None:
    rows = manifests(fixture_set.classic)
    m = copy(fixture_root, fixture_set.classic, tmp_path / "m")
    s = copy(fixture_root, fixture_set.classic, tmp_path / "s")
    cut = next(r["commitLogOffset"] for r in rows if r["commitLogOffset"] > fixture_set.file_size + 1000)
    make_behind(s, cut, fixture_set.file_size)
    plan = make_plan("g0", PEERS, _ids(tmp_path, m, s), conf_dir=tmp_path / "conf")
    assert plan.ok
    kinds = [(a.kind, a.params.get("name")) for a in plan.actions if a.node == "n1"]
    assert kinds[0] == ("recover", None)  # its ConsumeQueues reach past its end
    patch = next(a for a in plan.actions if a.kind == "patch_file")
    assert patch.params["name"] == f"{cut - cut % fixture_set.file_size:020d}"
    assert patch.params["start"] == cut % fixture_set.file_size and patch.params["end"] == fixture_set.file_size
    later = [n for k, n in kinds if k == "copy_file"]
    assert later == [f.name for f in sorted((m / "commitlog").iterdir()) if int(f.name) > cut]
    assert ("dispatch", None) in kinds
    assert not [a for a in plan.actions if a.node == "n0" and a.kind in MASTER_TOUCHING]


def test_dirty_master_is_recovered_first(fixture_root: Path, tmp_path: Path) -> None:
    m = copy(fixture_root, "rmq-classic", tmp_path / "m")
    make_dirty(m, 3_665_318, 1 << 20)
    plan = make_plan("g0", PEERS, _ids(tmp_path, m), conf_dir=tmp_path / "conf")
    assert plan.ok
    first = plan.actions[0]
    assert (first.kind, first.node) == ("recover", "n0") and "abort" in first.reason
    assert first.params["expect_max_offset"] == 3_665_318 and plan.warnings


def test_refuse_divergent_slave(fixture_root: Path, fixture_set, tmp_path: Path) -> None:
    m = copy(fixture_root, fixture_set.classic, tmp_path / "m")
    s = copy(fixture_root, fixture_set.classic, tmp_path / "s")
    at = fixture_set.file_size + 12345
    flip_byte(s, at, fixture_set.file_size)
    plan = make_plan("g0", PEERS, _ids(tmp_path, m, s), conf_dir=tmp_path / "conf")
    assert not plan.ok and plan.actions == []
    (r,) = plan.refusals
    assert "00000000000001048576" in r and "file offset 12345" in r and f"physical offset {at}" in r


def test_refuse_slave_ahead_of_master(fixture_root: Path, tmp_path: Path) -> None:
    m = copy(fixture_root, "rmq-classic", tmp_path / "m")
    s = copy(fixture_root, "rmq-classic", tmp_path / "s")
    make_behind(m, 2_097_152, 1 << 20)  # the "master" lost its last two files
    plan = make_plan("g0", PEERS, _ids(tmp_path, m, s), master=str(m), conf_dir=tmp_path / "conf")
    assert any("ahead of its master" in r for r in plan.refusals)


def test_refuse_running_broker(fixture_root: Path, tmp_path: Path) -> None:
    m = copy(fixture_root, "rmq-classic", tmp_path / "m")
    holder = hold_lock(m)
    try:
        plan = make_plan("g0", PEERS, _ids(tmp_path, m), conf_dir=tmp_path / "conf")
    finally:
        holder.kill()
        holder.wait()
    assert any("in use" in r and f"process {holder.pid}" in r for r in plan.refusals)


def test_refuse_disk_and_sizes(fixture_root: Path, tmp_path: Path) -> None:
    m = copy(fixture_root, "rmq-classic", tmp_path / "m")
    plan = make_plan("g0", PEERS, _ids(tmp_path, m), conf_dir=tmp_path / "conf", min_free=1 << 50)
    assert any(r.startswith("not enough disk") for r in plan.refusals)
    conf = tmp_path / "m.conf"
    conf.write_text(f"storePathRootDir={m}\nmappedFileSizeCommitLog=2097152\nbrokerRole=ASYNC_MASTER\n")
    plan = make_plan("g0", PEERS, _ids(tmp_path, m), confs=load_confs([str(conf)]), conf_dir=tmp_path / "conf")
    assert any("mismatched file sizes" in r for r in plan.refusals)


def test_master_conf_keys_and_ports_are_kept(fixture_root: Path, tmp_path: Path) -> None:
    m = copy(fixture_root, "rmq-classic", tmp_path / "m")
    conf = tmp_path / "m.conf"
    conf.write_text(f"brokerName=broker-a\nlistenPort=30911\nstorePathRootDir={m}\nmappedFileSizeCommitLog=1048576\n"
                    "brokerRole=SYNC_MASTER\nflushDiskType=SYNC_FLUSH\nmaxHashSlotNum=10000\nmaxIndexNum=40000\n")
    plan = make_plan("broker-a", PEERS, _ids(tmp_path, m), confs=load_confs([str(conf)]), conf_dir=tmp_path / "c")
    assert plan.ok, plan.refusals
    confs = [parse_conf(a.params["content"]) for a in plan.actions if a.kind == "write_conf"]
    assert [c.broker.listen_port for c in confs] == [30911, 30921, 30931]
    assert {c.broker.broker_name for c in confs} == {"broker-a"}
    assert all(c.store.flush_disk_type.value == "SYNC_FLUSH" and c.store.max_hash_slot_num == 10000 for c in confs)
    assert all(c.store.broker_role.value == "ASYNC_MASTER" for c in confs)  # set at run time in DLedger mode


def test_confs_list_every_peers_http_api(fixture_root: Path, tmp_path: Path) -> None:
    """Regression: without dLegerPeersHttp a follower answers NOT_MASTER with no masterAddress and
    cannot sync metadata from the leader; the written confs list every node's HTTP API port."""
    m = copy(fixture_root, "rmq-classic", tmp_path / "m")
    conf = tmp_path / "m.conf"
    conf.write_text(f"brokerName=broker-a\nlistenPort=30911\nstorePathRootDir={m}\nmappedFileSizeCommitLog=1048576\n"
                    "brokerRole=SYNC_MASTER\n")
    plan = make_plan("broker-a", PEERS, _ids(tmp_path, m), confs=load_confs([str(conf)]), conf_dir=tmp_path / "c")
    assert plan.ok, plan.refusals
    confs = [parse_conf(a.params["content"]) for a in plan.actions if a.kind == "write_conf"]
    want = {n.self_id: f"{n.host}:{n.listen_port}" for n in plan.nodes}
    assert [c.store.dledger_http_peer_map() for c in confs] == [want] * 3
    assert [int(want[c.store.dleger_self_id].rpartition(":")[2]) for c in confs] == [30911, 30921, 30931]


def test_argument_mistakes(fixture_root: Path, tmp_path: Path) -> None:
    m = copy(fixture_root, "rmq-classic", tmp_path / "m")
    with pytest.raises(PlanError, match="must match"):
        make_plan("g0", PEERS, parse_self_ids(f"n0={m},n1={tmp_path / 'x'}"))
    with pytest.raises(PlanError, match="--peers"):
        make_plan("g0", "n0-nohost", parse_self_ids(f"n0={m}"))
    with pytest.raises(PlanError, match="ID=STORE_ROOT"):
        parse_self_ids("n0")
    r = mqupgrade("plan", "--group", "g0", "--peers", PEERS, "--self-ids", f"n0={m},n1=/a", "--out",
                  str(tmp_path / "p.json"))
    assert r.returncode == 1 and "Traceback" not in r.stderr and "must match" in r.stderr


def test_cli_writes_plan_and_refusal_exit_code(fixture_root: Path, tmp_path: Path) -> None:
    m = copy(fixture_root, "rmq-classic", tmp_path / "m")
    out = tmp_path / "plan.json"
    ids = f"n0={m},n1={tmp_path / 'a'},n2={tmp_path / 'b'}"
    r = mqupgrade("plan", "--group", "g0", "--peers", PEERS, "--self-ids", ids, "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "dividedCommitlogOffset will be 4194304" in r.stdout and out.exists()
    assert Plan.load(out).nodes[2].conf_out == str(tmp_path / "dledger-conf" / "broker-n2.conf")
    r = mqupgrade("plan", "--group", "g0", "--peers", PEERS, "--self-ids", ids, "--out", str(out), "--min-free", "1P")
    assert r.returncode == 2 and "REFUSED" in r.stdout and "not enough disk" in r.stdout
