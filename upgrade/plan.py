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

Theory of operation: :func:`make_plan` runs the argument checks, inspects the roots
(:mod:`upgrade.inspect`), builds the nodes, runs the refusal checks, then the action steps and the
disk checks: each a table of named functions (:mod:`upgrade.plan_checks`,
:mod:`upgrade.plan_actions`), read top to bottom as what the planner verifies and does. The plan
is JSON (:meth:`Plan.to_dict`) that ``apply`` executes step by step under its journal. The plan's data
model and file are :mod:`upgrade.plan_model`; each node's DLedger conf is :mod:`upgrade.node_conf`.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from broker.config.conf_file import ConfigError, ParsedConf
from broker.config.broker_config import parse_dleger_peers
from upgrade.inspect import Inspection, StoreInspection, inspect_stores
from upgrade.node_conf import assign_ports, load_confs  # noqa: F401 - load_confs: the plan's API
from upgrade.plan_actions import emit_actions
from upgrade.plan_checks import Build, Draft, PlanRequest, check_arguments, disk_refusals, refusals_of
from upgrade.plan_model import Action, Node, Plan, PlanError  # noqa: F401 - the plan's API (apply, tests)

if TYPE_CHECKING:  # pragma: no cover
    import argparse

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
def _settings(s: StoreInspection) -> dict[str, Any]:
    return {"store_path_commit_log": s.commit_log_dir, "mapped_file_size_commit_log": s.file_size,
            "mapped_file_size_consume_queue": s.cq_file_size, **{k: v for k, v in s.index_settings.items()
                                                                   if k != "source"}}


def _nodes(r: PlanRequest, insp: Inspection, m: Optional[StoreInspection], conf_dir: Path) -> list[Node]:
    """One :class:`Node` per peer, in ``--peers`` order, with its ports assigned."""
    nodes: list[Node] = []
    for sid, addr in parse_dleger_peers(r.peers).items():
        s = insp.store(r.self_ids[sid])
        host, _, port = addr.rpartition(":")
        own = r.confs.get(s.root)
        state = "master" if s.role == "master" else "slave" if s.role == "slave" else "new"
        cl_dir = s.commit_log_dir if s.has_data or own else str(Path(s.root) / "commitlog")
        settings = _settings(s) if s.has_data else (_settings(m) if m else {})
        settings["store_path_commit_log"] = cl_dir
        nodes.append(Node(sid, s.root, state, host, int(port),
                          own.broker.listen_port if own else 0, own.broker.http_listen_port if own else 0,
                          cl_dir, own.source if own else None, str(conf_dir / f"broker-{sid}.conf"), settings))
    mconf = r.confs.get(m.root) if m else None
    assign_ports(nodes, mconf.broker.listen_port if mconf else DEFAULT_LISTEN_PORT,
                 mconf.broker.http_listen_port if mconf else 0)
    return nodes


def _build(draft: Draft, m: StoreInspection) -> Build:
    mfiles = [f for f in m.files if f.name not in m.files_after_end]
    return Build(draft, m, draft.request.confs.get(m.root), mfiles, m.file_size,
                 mfiles[-1].from_offset + m.file_size)


def make_plan(group: str, peers: str, self_ids: dict[str, str], *, confs: Optional[dict[str, ParsedConf]] = None,
              master: Optional[str] = None, conf_dir: str | os.PathLike[str] = "dledger-conf",
              seed_consumequeue: str = "copy", sync_slave_config: bool = True, compare_last: Optional[int] = None,
              min_free: int = 0, roots: Optional[list[str]] = None, auth_token: Optional[str] = None) -> Plan:
    """Inspect the stores of ``self_ids`` and plan their upgrade into one DLedger group: the
    argument checks, the refusal checks, the actions, the disk checks (:mod:`upgrade.plan_checks`,
    :mod:`upgrade.plan_actions`)."""
    r = PlanRequest(group, peers, self_ids, confs or {}, master, seed_consumequeue, sync_slave_config,
                    compare_last, min_free, tuple(roots or ()), auth_token)
    check_arguments(r)
    order = [self_ids[sid] for sid in parse_dleger_peers(peers)]
    insp = inspect_stores(order, r.confs, master, compare_last)
    m = insp.store(insp.master) if insp.master else None
    draft = Draft(r, insp, m, [])
    draft.nodes = _nodes(r, insp, m, Path(conf_dir).expanduser().resolve())
    refusals = refusals_of(draft)
    if m is None or refusals:
        return Plan(group, peers, m.file_size if m else 0, insp.master, m.max_offset if m else 0, -1, draft.nodes, [],
                    refusals, [], insp.to_dict())
    b = _build(draft, m)
    actions = emit_actions(b)
    refusals = disk_refusals(b)
    if not m.clean_shutdown:
        b.warnings.append(f"the master {m.root} did not shut down cleanly; its recovered end may differ from "
                          f"{m.max_offset}: apply stops if it does (then plan again)")
    return Plan(group, peers, b.file_size, insp.master, m.max_offset, b.divided, draft.nodes,
                [] if refusals else actions, refusals, b.warnings, insp.to_dict())


def render(plan: Plan) -> str:
    """Readable plan: nodes, then actions with reasons, or the refusals."""
    if plan.target == "controller":
        from upgrade.controller_plan import render_controller

        return render_controller(plan)
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
HELP = ("plan the upgrade of master/slave stores into one DLedger group, or (--to controller) of master/slave or "
        "DLedger-mode stores into Controller mode (writes a plan JSON)")


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
    p.add_argument("--to", choices=("dledger", "controller"), default="dledger",
                   help="the target mode (default %(default)s); controller: STORE_ROOT of every replica, --controllers")
    p.add_argument("--controllers", metavar="HOST:PORT;...",
                   help="--to controller: controllerAddr, e.g. 10.0.0.1:9878;10.0.0.2:9878;10.0.0.3:9878")
    p.add_argument("--group", help="dLegerGroup (usually the brokerName); --to controller: the brokerName when no "
                   "--conf gives it")
    p.add_argument("--peers", help='dLegerPeers, e.g. "n0-127.0.0.1:40911;n1-127.0.0.1:40912;..."')
    p.add_argument("--self-ids", metavar="ID=ROOT,...",
                   help="store root of every peer, e.g. n0=/data/master,n1=/data/slave,n2=/data/new")
    p.add_argument("--conf", action="append", default=[], metavar="FILE",
                   help="a node's current broker .conf (matched by storePathRootDir); its ports and keys are kept")
    p.add_argument("--master", metavar="STORE_ROOT", help="the master (default: the *_MASTER conf, else most data)")
    p.add_argument("--out", default="mqupgrade-plan.json", help="plan file to write (default %(default)s)")
    p.add_argument("--conf-dir", help="where broker-<id>.conf files go (default: <dir of --out>/dledger-conf, "
                   "--to controller: controller-conf)")
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

    if args.to == "dledger":
        absent = [f for f, v in (("--group", args.group), ("--peers", args.peers), ("--self-ids", args.self_ids))
                  if v is None]
        if absent:
            print(f"mqupgrade plan: error: the following arguments are required: {', '.join(absent)}",
                  file=sys.stderr)
            return 2
    try:
        out = Path(args.out).expanduser().resolve()
        if args.to == "controller":
            from upgrade.controller_plan import make_controller_plan

            plan = make_controller_plan(args.roots, args.controllers, confs=load_confs(args.conf), group=args.group,
                                        master=args.master, conf_dir=args.conf_dir or out.parent / "controller-conf",
                                        compare_last=args.compare_last)
            plan.save(out)
            print(json.dumps(plan.to_dict(), indent=2) if args.json else render(plan))
            print(f"plan written to {out}" + ("" if plan.ok else " (refused: apply will not run it)"), file=sys.stderr)
            return 0 if plan.ok else 2
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
