"""``mqupgrade plan``: from an inspection and the target group, the actions (each with its reason)
or the refusal (each with its reason).

Rules:
- The group is ``--group``, ``--peers`` (``n0-host:port;n1-host:port;...``, DLedger ports) and
  ``--self-ids n0=ROOT,n1=ROOT,...``: every peer gets exactly one store root. A root holding a
  commitlog is an existing store (the master or a slave); any other root is a new node, seeded
  from the master.
- Refused (nothing is done): a store in use (lock held), a store already upgraded, commitlog
  files of another size or with a gap, replicas whose bytes differ from the master's (file and
  first differing offset named), a replica ahead of its master, two nodes on one host with the
  same port, not enough free disk, no store with data.
- Actions, in order: ``recover`` every store that did not shut down cleanly (or whose tail or
  ConsumeQueues disagree) with the store's own recovery; align each slave that is behind
  (``copy_file`` for whole missing files, ``patch_file`` for the missing tail of its last file),
  then ``dispatch`` (the store's ReputMessageService builds ConsumeQueue/IndexFile units for the
  copied records); seed each new node (``copy_file`` per commitlog file, ``copy_tree`` of
  ``config/``, and the master's ``consumequeue/``, ``index/`` and ``checkpoint`` unless
  ``--seed-consumequeue rebuild``, which replays the commitlog instead); ``copy_tree`` the
  master's ``config/`` to slaves (theirs came from SlaveSynchronize and may be stale); write the
  DLedger conf of every node (``write_conf``); ``freeze`` every node (only with ``apply
  --freeze``; otherwise the first DLedger start writes the same blank); ``verify``.
- Nothing is planned on the master's commitlog except ``recover`` (when dirty) and ``freeze``:
  the cost there is O(1) in the store size. Every path is absolute; the plan is deterministic
  for the same stores and options (no timestamps in conf contents), so re-planning is stable.

Theory of operation: :func:`make_plan` parses the group, inspects the roots
(:mod:`upgrade.inspect`), collects refusals, then emits :class:`Action` rows; the plan is JSON
(:meth:`Plan.to_dict`) that ``apply`` executes step by step under its journal. The plan's data
model and file are :mod:`upgrade.plan_model`; each node's DLedger conf is :mod:`upgrade.node_conf`.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from broker.config.conf_file import ConfigError, ParsedConf
from broker.config.broker_config import BrokerConfig, MessageStoreConfig, parse_dleger_peers
from upgrade.inspect import Inspection, StoreInspection, inspect_stores
from upgrade.node_conf import (assign_ports, group_auth_token, http_peers_of, load_confs,  # noqa: F401 - load_confs: the plan's API
                               ports_of, render_conf)
from upgrade.plan_model import Action, Node, Plan, PlanError  # noqa: F401 - the plan's API (apply, tests)

if TYPE_CHECKING:  # pragma: no cover
    import argparse

_NO_CONF = ParsedConf(BrokerConfig(), MessageStoreConfig())
DLEDGER_INDEX_FILE_SIZE = 32 * 5 * 1024 * 1024
DEFAULT_LISTEN_PORT = 10911


# ---- arguments ----------------------------------------------------------------------------------
def parse_self_ids(text: str) -> dict[str, str]:
    """``n0=/a,n1=/b`` -> ``{"n0": "/abs/a", ...}``."""
    out: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        sid, eq, root = part.partition("=")
        if not eq or not sid.strip() or not root.strip():
            raise PlanError(f"--self-ids: {part!r} is not ID=STORE_ROOT")
        sid = sid.strip()
        if sid in out:
            raise PlanError(f"--self-ids: {sid} appears twice")
        out[sid] = str(Path(root.strip()).expanduser().resolve())
    if len(set(out.values())) != len(out):
        raise PlanError("--self-ids: two peers share one store root")
    return out


# ---- the plan -----------------------------------------------------------------------------------
class _Builder:
    def __init__(self) -> None:
        self.actions: list[Action] = []

    def add(self, kind: str, node: str, reason: str, optional: Optional[str] = None, **params: Any) -> None:
        label = params.get("name") or params.get("tree") or ""
        aid = f"{len(self.actions) + 1:03d}-{kind}-{node}" + (f"-{label}" if label else "")
        self.actions.append(Action(aid, kind, node, reason, params, optional))


def _settings(s: StoreInspection) -> dict[str, Any]:
    return {"store_path_commit_log": s.commit_log_dir, "mapped_file_size_commit_log": s.file_size,
            "mapped_file_size_consume_queue": s.cq_file_size, **{k: v for k, v in s.index_settings.items()
                                                                   if k != "source"}}


def _refusals(insp: Inspection) -> list[str]:
    out = []
    for s in insp.stores:
        if s.lock_holder:
            out.append(f"{s.root}: in use: {s.lock_holder} Stop the broker first.")
        out.extend(f"{s.root}: {p}" for p in s.problems)
    master = insp.store(insp.master) if insp.master else None
    if master is None or not master.has_data:
        out.append("no store holds commitlog data: nothing to upgrade (check the store roots)")
        return out
    for s in insp.stores:
        if s.has_data and s.file_size != master.file_size and not s.problems:
            out.append(f"{s.root}: mismatched file sizes: mappedFileSizeCommitLog {s.file_size} "
                       f"but the master's is {master.file_size}")
    for c in insp.comparisons:
        if c.behind_bytes < 0:
            r = insp.store(c.replica)
            out.append(f"{c.replica}: slave is ahead of its master {c.master} ({r.max_offset} > {master.max_offset}); "
                       "the master must hold the most data (choose it with --master, or investigate)")
        if not c.identical and c.first_difference:
            d = c.first_difference
            out.append(f"{c.replica}: bytes diverge from the master {c.master} in commitlog file {d['file']} "
                       f"at file offset {d['file_offset']} (physical offset {d['offset']})")
    return out


def _exposed_doors(conf_text: str, source: str) -> list[str]:
    """The unauthenticated doors reachable off loopback of a conf this plan writes."""
    from broker.config.conf_file import parse_conf
    from broker.security_policy import open_doors

    try:
        parsed = parse_conf(conf_text, source, validate=False)
    except ConfigError:
        return []
    return [d.describe() for d in open_doors(parsed.broker, parsed.store) if d.exposed]


def make_plan(group: str, peers: str, self_ids: dict[str, str], *, confs: Optional[dict[str, ParsedConf]] = None,
              master: Optional[str] = None, conf_dir: str | os.PathLike[str] = "dledger-conf",
              seed_consumequeue: str = "copy", sync_slave_config: bool = True, compare_last: Optional[int] = None,
              min_free: int = 0, roots: Optional[list[str]] = None, auth_token: Optional[str] = None) -> Plan:
    """Inspect the stores of ``self_ids`` and plan their upgrade into one DLedger group."""
    if not group or not group.strip():
        raise PlanError("--group is empty")
    try:
        peer_map = parse_dleger_peers(peers)
    except ValueError as exc:
        raise PlanError(f"--peers: {exc}") from None
    if set(peer_map) != set(self_ids):
        raise PlanError(f"--self-ids names {sorted(self_ids)} but --peers names {sorted(peer_map)}; they must match")
    if seed_consumequeue not in ("copy", "rebuild"):
        raise PlanError("--seed-consumequeue must be copy or rebuild")
    confs = confs or {}
    by_root = {r: sid for sid, r in self_ids.items()}
    for r in roots or []:
        if str(Path(r).resolve()) not in by_root:
            raise PlanError(f"{r}: store root has no self id in --self-ids")
    for r, conf in confs.items():
        if r not in by_root:
            raise PlanError(f"--conf {conf.source}: its storePathRootDir {r} is not in --self-ids")
    order = [self_ids[sid] for sid in peer_map]
    insp = inspect_stores(order, confs, master, compare_last)
    refusals = _refusals(insp)
    warnings: list[str] = []
    m = insp.store(insp.master) if insp.master else None
    file_size = m.file_size if m else 0
    conf_dir = Path(conf_dir).expanduser().resolve()

    nodes: list[Node] = []
    for sid, addr in peer_map.items():
        s = insp.store(self_ids[sid])
        host, _, port = addr.rpartition(":")
        own = confs.get(s.root)
        state = "master" if s.role == "master" else "slave" if s.role == "slave" else "new"
        cl_dir = s.commit_log_dir if s.has_data or own else str(Path(s.root) / "commitlog")
        settings = _settings(s) if s.has_data else (_settings(m) if m else {})
        settings["store_path_commit_log"] = cl_dir
        nodes.append(Node(sid, s.root, state, host, int(port),
                          own.broker.listen_port if own else 0, own.broker.http_listen_port if own else 0,
                          cl_dir, own.source if own else None, str(conf_dir / f"broker-{sid}.conf"), settings))
    mconf = confs.get(m.root) if m else None
    assign_ports(nodes, mconf.broker.listen_port if mconf else DEFAULT_LISTEN_PORT,
                  mconf.broker.http_listen_port if mconf else 0)
    for host in {n.host for n in nodes}:
        seen: dict[int, str] = {}
        for n in (x for x in nodes if x.host == host):
            for p in ports_of(n):
                if p in seen and seen[p] != n.self_id:
                    refusals.append(f"port {p} on {host} is used by both {seen[p]} and {n.self_id} (listenPort, "
                                    "listenPort+1 for HA, httpListenPort and the dLegerPeers port must all differ)")
                seen[p] = n.self_id
    if m is None or refusals:
        return Plan(group, peers, file_size, insp.master, m.max_offset if m else 0, -1, nodes, [], refusals,
                    warnings, insp.to_dict())

    b = _Builder()
    master_node = next(n for n in nodes if n.state == "master")
    mfiles = [f for f in m.files if f.name not in m.files_after_end]
    divided = mfiles[-1].from_offset + file_size
    need: dict[str, int] = {}  # root -> bytes to be written there
    # 1. recover dirty stores (the master first: the others are aligned to its recovered end)
    for n in sorted(nodes, key=lambda x: x.state != "master"):
        s = insp.store(n.root)
        if s.has_data and s.needs_recovery:
            why = [] if s.clean_shutdown else ["not shut down cleanly (abort file present)"]
            if s.stop_reason not in ("zeros", "blank"):
                why.append(f"invalid record at {s.max_offset}: {s.stop_reason}")
            if s.files_after_end:
                why.append(f"files after the end: {', '.join(s.files_after_end)}")
            if s.cq_state == "ahead":
                why.append(s.cq_detail)
            b.add("recover", n.self_id, "; ".join(why) + "; the store's own recovery truncates the torn tail "
                  "(or stops on real corruption) before anything is compared or copied",
                  root=n.root, settings=n.store_settings, expect_max_offset=s.max_offset)
    # 2. align slaves, 3. seed new nodes
    for n in nodes:
        s = insp.store(n.root)
        if n.state == "slave":
            c = insp.comparison(n.root)
            assert c is not None
            copied = False
            for name in c.head_missing:
                f = next(x for x in mfiles if x.name == name)
                b.add("copy_file", n.self_id, "the slave lacks this older file the master still has",
                      name=name, src=str(m.file_path(name)), dst=str(Path(n.commit_log_dir) / name), size=f.size)
                need[n.root] = need.get(n.root, 0) + f.allocated
                copied = True
            if c.behind_bytes > 0:
                tail = next(x for x in mfiles if x.name == s.tail_file) if s.tail_file in {x.name for x in mfiles} else None
                if tail is not None:
                    end = m.max_offset - tail.from_offset if tail.name == mfiles[-1].name else file_size
                    b.add("patch_file", n.self_id,
                          f"the slave is {c.behind_bytes} bytes behind: copy the master's bytes [{s.tail_position}, {end}) "
                          f"of {tail.name} after the slave's end",
                          name=tail.name, src=str(m.file_path(tail.name)), dst=str(Path(n.commit_log_dir) / tail.name),
                          start=s.tail_position, end=end)
                    need[n.root] = need.get(n.root, 0) + end - s.tail_position
                for name in c.missing_files:
                    f = next(x for x in mfiles if x.name == name)
                    b.add("copy_file", n.self_id, "a whole commitlog file the slave is missing",
                          name=name, src=str(m.file_path(name)), dst=str(Path(n.commit_log_dir) / name), size=f.size)
                    need[n.root] = need.get(n.root, 0) + f.allocated
                copied = True
            if copied or s.cq_state == "behind":
                b.add("dispatch", n.self_id, "build ConsumeQueue and IndexFile units for records the slave's "
                      "ConsumeQueues do not cover yet (the store's ReputMessageService, O(copied bytes))",
                      root=n.root, settings=n.store_settings, expect_max_offset=m.max_offset)
            if sync_slave_config and m.config_files:
                b.add("copy_tree", n.self_id, "config/ of a slave comes from SlaveSynchronize and may be stale; "
                      "the master's is authoritative (the slave's files are kept as .bak-<time>)",
                      tree="config", src=str(Path(m.root) / "config"), dst=str(Path(n.root) / "config"), backup=True)
        elif n.state == "new":
            for f in mfiles:
                b.add("copy_file", n.self_id, "seed the new node with the master's old commitlog (Raft replicates "
                      "only new entries, so every node needs the old bytes)",
                      name=f.name, src=str(m.file_path(f.name)), dst=str(Path(n.commit_log_dir) / f.name), size=f.size)
                need[n.root] = need.get(n.root, 0) + f.allocated
            if m.config_files:
                b.add("copy_tree", n.self_id, "topics, offsets and subscription groups live in config/, which Raft "
                      "does not replicate", tree="config", src=str(Path(m.root) / "config"),
                      dst=str(Path(n.root) / "config"), backup=True)
            if seed_consumequeue == "copy":
                for tree in ("consumequeue", "index"):
                    if (Path(m.root) / tree).is_dir():
                        b.add("copy_tree", n.self_id, f"{tree}/ is derived from the commitlog; copying is O(its size) "
                              "where rebuilding replays every record (--seed-consumequeue rebuild)",
                              tree=tree, src=str(Path(m.root) / tree), dst=str(Path(n.root) / tree), backup=False)
                if (Path(m.root) / "checkpoint").is_file():
                    b.add("copy_file", n.self_id, "the checkpoint goes with the copied ConsumeQueues and IndexFiles",
                          name="checkpoint", src=str(Path(m.root) / "checkpoint"), dst=str(Path(n.root) / "checkpoint"), overwrite=True,
                          size=(Path(m.root) / "checkpoint").stat().st_size)
            else:
                b.add("dispatch", n.self_id, "rebuild ConsumeQueues and IndexFiles by replaying the copied commitlog",
                      root=n.root, settings=n.store_settings, expect_max_offset=m.max_offset)
    # 4. conf files
    broker_name = mconf.broker.broker_name if mconf else group
    token, note = group_auth_token(confs, auth_token)
    if note:
        warnings.append(note)
    open_doors = [n.self_id for n in nodes if not (confs.get(n.root) or mconf or _NO_CONF).broker.acl_enable]
    if open_doors:
        warnings.append(f"no aclEnable in the conf of {', '.join(open_doors)}: the written conf keeps listenPort open with "
                        "remotingAllowInsecure=true, as before; set aclEnable=true (plain_acl.yml) to require credentials")
    for n in nodes:
        own = confs.get(n.root)
        text = render_conf(n, own or mconf, own is not None, group, peers, file_size, broker_name, http_peers_of(nodes),
                           token)
        exposed = _exposed_doors(text, n.conf_out)
        if exposed:  # issue 23.10: the plan says which doors its confs leave open to the network
            warnings.append(f"the conf written for {n.self_id} leaves open: {'; '.join(exposed)}")
        b.add("write_conf", n.self_id, f"DLedger conf of {n.self_id}: same dLegerPeers and mappedFileSizeCommitLog="
              f"{file_size} on every node, dLegerSelfId={n.self_id}, storePathRootDir={n.root}, listenPort={n.listen_port}",
              path=n.conf_out, content=text)
    # 5. freeze, 6. verify
    for n in nodes:
        b.add("freeze", n.self_id, f"write the tail blank at {m.max_offset} exactly as the first DLedger start "
              f"would; dividedCommitlogOffset = {divided}", optional="freeze",
              root=n.root, commit_log_dir=n.commit_log_dir, file_size=file_size, expect_max_offset=m.max_offset,
              divided_commitlog_offset=divided)
    b.add("verify", master_node.self_id, "every node ends at the master's offset with the same tail bytes",
          roots=[n.root for n in nodes], settings={n.root: n.store_settings for n in nodes}, expect_max_offset=m.max_offset)
    # disk: what each file system must take (+ the first DLedger data and index files per node)
    per_dev: dict[int, tuple[int, int, list[str]]] = {}
    for n in nodes:
        s = insp.store(n.root)
        dev = _device(Path(n.root))
        want = need.get(n.root, 0) + file_size + DLEDGER_INDEX_FILE_SIZE + min_free
        have, _free, ids = per_dev.get(dev, (0, s.free_bytes, []))
        per_dev[dev] = (have + want, s.free_bytes, ids + [n.self_id])
    for want, free, ids in per_dev.values():
        if want > free:
            refusals.append(f"not enough disk for {', '.join(ids)}: needs {want} bytes (copies + the first DLedger "
                            f"data and index files{' + --min-free' if min_free else ''}), {free} free")
    if not m.clean_shutdown:
        warnings.append(f"the master {m.root} did not shut down cleanly; its recovered end may differ from "
                        f"{m.max_offset}: apply stops if it does (then plan again)")
    return Plan(group, peers, file_size, insp.master, m.max_offset, divided, nodes,
                [] if refusals else b.actions, refusals, warnings, insp.to_dict())


def _device(path: Path) -> int:
    while not path.exists() and path != path.parent:
        path = path.parent
    return os.stat(path).st_dev


def render(plan: Plan) -> str:
    """Readable plan: nodes, then actions with reasons, or the refusals."""
    lines = [f"DLedger group {plan.group}: peers {plan.peers}"]
    for n in plan.nodes:
        lines.append(f"  {n.self_id}  {n.state:<6}  {n.root}  listenPort={n.listen_port}  conf -> {n.conf_out}")
    if plan.refusals:
        lines.append("REFUSED:")
        lines.extend(f"  - {r}" for r in plan.refusals)
        return "\n".join(lines)
    lines.append(f"master end {plan.master_max_offset}; dividedCommitlogOffset will be {plan.divided_commitlog_offset}")
    for a in plan.actions:
        opt = " (only with apply --freeze)" if a.optional else ""
        lines.append(f"  {a.id}{opt}: {a.reason}")
    lines.extend(f"warning: {w}" for w in plan.warnings)
    return "\n".join(lines)


# ---- command line -------------------------------------------------------------------------------
HELP = "plan the upgrade of master/slave stores into one DLedger group (writes a plan JSON)"


def parse_size(text: str) -> int:
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    num, unit = (t[:-1], t[-1]) if t and t[-1] in units else (t, "")
    try:
        return int(float(num) * units[unit])
    except ValueError:
        raise PlanError(f"--min-free: {text!r} is not a size (e.g. 500M, 2G)") from None


def add_arguments(p: "argparse.ArgumentParser") -> None:
    p.add_argument("roots", nargs="*", metavar="STORE_ROOT", help="existing stores (each must be in --self-ids)")
    p.add_argument("--group", required=True, help="dLegerGroup (usually the brokerName)")
    p.add_argument("--peers", required=True, help='dLegerPeers, e.g. "n0-127.0.0.1:40911;n1-127.0.0.1:40912;..."')
    p.add_argument("--self-ids", required=True, metavar="ID=ROOT,...",
                   help="store root of every peer, e.g. n0=/data/master,n1=/data/slave,n2=/data/new")
    p.add_argument("--conf", action="append", default=[], metavar="FILE",
                   help="a node's current broker .conf (matched by storePathRootDir); its ports and keys are kept")
    p.add_argument("--master", metavar="STORE_ROOT", help="the master (default: the *_MASTER conf, else most data)")
    p.add_argument("--out", default="mqupgrade-plan.json", help="plan file to write (default %(default)s)")
    p.add_argument("--conf-dir", help="where broker-<id>.conf files go (default: <dir of --out>/dledger-conf)")
    p.add_argument("--seed-consumequeue", choices=("copy", "rebuild"), default="copy",
                   help="new nodes: copy the master's consumequeue/index (default) or rebuild them by dispatch")
    p.add_argument("--no-sync-config", action="store_true", help="leave the slaves' config/ as it is")
    p.add_argument("--compare-last", type=int, metavar="N", help="compare only the last N shared commitlog files")
    p.add_argument("--min-free", default="0", metavar="SIZE", help="free space to keep on every disk (e.g. 5G)")
    p.add_argument("--json", action="store_true", help="print the plan JSON instead of the summary")
    p.add_argument("--auth-token", metavar="SECRET",
                   help="dLegerAuthToken of the group (default: the one in --conf files, else a fresh random secret)")


def run(args: "argparse.Namespace") -> int:
    import sys

    from upgrade.inspect import InspectError

    try:
        out = Path(args.out).expanduser().resolve()
        plan = make_plan(
            args.group, args.peers, parse_self_ids(args.self_ids), confs=load_confs(args.conf), master=args.master,
            conf_dir=args.conf_dir or out.parent / "dledger-conf", seed_consumequeue=args.seed_consumequeue,
            sync_slave_config=not args.no_sync_config, compare_last=args.compare_last,
            min_free=parse_size(args.min_free), roots=args.roots, auth_token=args.auth_token)
        plan.save(out)
    except (PlanError, InspectError) as exc:
        print(f"mqupgrade plan: {exc}", file=sys.stderr)
        return 1
    except ConfigError as exc:
        print(f"mqupgrade plan: cannot write a valid conf: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(plan.to_dict(), indent=2) if args.json else render(plan))
    print(f"plan written to {out}" + ("" if plan.ok else " (refused: apply will not run it)"), file=sys.stderr)
    return 0 if plan.ok else 2
