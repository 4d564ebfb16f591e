"""The actions of an upgrade plan, as tables of named steps (h11's transitions-as-data style).

Rules:
- :data:`ACTION_STEPS` is the order of the plan, top to bottom: ``recover`` dirty stores (the
  master first), align each slave and seed each new node (per node, in ``--peers`` order),
  ``write_conf`` for every node, ``freeze`` every node, ``verify``. :data:`SLAVE_STEPS` and
  :data:`NEW_NODE_STEPS` are what one slave and one new node get, in that order.
- A step is a small function with one job: it reads the :class:`~upgrade.plan_checks.Build`
  and emits its actions into the :class:`ActionList` (and the bytes it copies into
  ``Build.need``, for the disk check); the action reasons are the operator's text.
- Nothing is planned on the master's commitlog except ``recover`` and ``freeze``.

Theory of operation: :func:`emit_actions` runs every row of :data:`ACTION_STEPS` over one
:class:`ActionList`; the per-node rows dispatch on the node's state to the slave or new-node
table. Action ids are numbered in emission order (``NNN-kind-node[-name]``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional

from broker.config.broker_config import BrokerConfig, MessageStoreConfig
from broker.config.conf_file import ConfigError, ParsedConf
from upgrade.inspect_model import Comparison, StoreInspection
from upgrade.node_conf import group_auth_token, http_peers_of, render_conf
from upgrade.plan_checks import Build
from upgrade.plan_model import Action, Node

_NO_CONF = ParsedConf(BrokerConfig(), MessageStoreConfig())


class ActionList:
    """The plan's actions in order, each with an id that says its place, kind, node and file."""

    def __init__(self) -> None:
        self.actions: list[Action] = []

    def add(self, kind: str, node: str, reason: str, optional: Optional[str] = None, **params: Any) -> None:
        label = params.get("name") or params.get("tree") or ""
        aid = f"{len(self.actions) + 1:03d}-{kind}-{node}" + (f"-{label}" if label else "")
        self.actions.append(Action(aid, kind, node, reason, params, optional))


class Step(NamedTuple):
    name: str
    emit: Callable[[Build, ActionList], None]


class NodeStep(NamedTuple):
    name: str
    emit: Callable[["NodeWork"], None]


class NodeWork(NamedTuple):
    """One node's part of the plan: the build, its action list, the node and its inspection."""

    build: Build
    out: ActionList
    node: Node
    store: StoreInspection

    @property
    def master(self) -> StoreInspection:
        return self.build.master

    @property
    def comparison(self) -> Comparison:
        c = self.build.draft.inspection.comparison(self.node.root)
        assert c is not None
        return c

    def master_copy(self, kind: str, reason: str, name: str, size: int, allocated: int) -> None:
        """``copy_file`` of the master's commitlog file ``name`` into this node's commitlog dir."""
        n = self.node
        self.out.add(kind, n.self_id, reason, name=name, src=str(self.master.file_path(name)),
                     dst=str(Path(n.commit_log_dir) / name), size=size)
        self.build.needs(n.root, allocated)


# ---- 1. recover ---------------------------------------------------------------------------------
def _recovery_reasons(s: StoreInspection) -> list[str]:
    why = [] if s.clean_shutdown else ["not shut down cleanly (abort file present)"]
    if s.stop_reason not in ("zeros", "blank"):
        why.append(f"invalid record at {s.max_offset}: {s.stop_reason}")
    if s.files_after_end:
        why.append(f"files after the end: {', '.join(s.files_after_end)}")
    if s.cq_state == "ahead":
        why.append(s.cq_detail)
    return why


def _recover_dirty_stores(b: Build, out: ActionList) -> None:
    """The master first: the others are aligned to its recovered end."""
    for n in sorted(b.nodes, key=lambda x: x.state != "master"):
        s = b.draft.inspection.store(n.root)
        if s.has_data and s.needs_recovery:
            out.add("recover", n.self_id, "; ".join(_recovery_reasons(s)) + "; the store's own recovery truncates "
                    "the torn tail (or stops on real corruption) before anything is compared or copied",
                    root=n.root, settings=n.store_settings, expect_max_offset=s.max_offset)


# ---- 2. a slave ---------------------------------------------------------------------------------
def _copy_head_missing(w: NodeWork) -> None:
    for name in w.comparison.head_missing:
        f = w.build.master_file(name)
        w.master_copy("copy_file", "the slave lacks this older file the master still has", name, f.size, f.allocated)


def _patch_tail(w: NodeWork) -> None:
    c, s, b = w.comparison, w.store, w.build
    if c.behind_bytes <= 0 or s.tail_file is None or s.tail_file not in {x.name for x in b.master_files}:
        return
    tail = b.master_file(s.tail_file)
    end = w.master.max_offset - tail.from_offset if tail.name == b.master_files[-1].name else b.file_size
    w.out.add("patch_file", w.node.self_id,
              f"the slave is {c.behind_bytes} bytes behind: copy the master's bytes [{s.tail_position}, {end}) "
              f"of {tail.name} after the slave's end",
              name=tail.name, src=str(w.master.file_path(tail.name)), dst=str(Path(w.node.commit_log_dir) / tail.name),
              start=s.tail_position, end=end)
    b.needs(w.node.root, end - s.tail_position)


def _copy_missing_files(w: NodeWork) -> None:
    if w.comparison.behind_bytes <= 0:
        return
    for name in w.comparison.missing_files:
        f = w.build.master_file(name)
        w.master_copy("copy_file", "a whole commitlog file the slave is missing", name, f.size, f.allocated)


def _dispatch_copied(w: NodeWork) -> None:
    c = w.comparison
    if c.head_missing or c.behind_bytes > 0 or w.store.cq_state == "behind":
        w.out.add("dispatch", w.node.self_id, "build ConsumeQueue and IndexFile units for records the slave's "
                  "ConsumeQueues do not cover yet (the store's ReputMessageService, O(copied bytes))",
                  root=w.node.root, settings=w.node.store_settings, expect_max_offset=w.master.max_offset)


def _sync_slave_config(w: NodeWork) -> None:
    m, n = w.master, w.node
    if w.build.request.sync_slave_config and m.config_files:
        w.out.add("copy_tree", n.self_id, "config/ of a slave comes from SlaveSynchronize and may be stale; "
                  "the master's is authoritative (the slave's files are kept as .bak-<time>)",
                  tree="config", src=str(Path(m.root) / "config"), dst=str(Path(n.root) / "config"), backup=True)


SLAVE_STEPS: tuple[NodeStep, ...] = (
    NodeStep("copy the older files the slave lacks", _copy_head_missing),
    NodeStep("patch the missing tail of the slave's last file", _patch_tail),
    NodeStep("copy the whole files after the slave's last", _copy_missing_files),
    NodeStep("dispatch what was copied (or what its ConsumeQueues miss)", _dispatch_copied),
    NodeStep("copy the master's config/ over the slave's", _sync_slave_config),
)


# ---- 3. a new node ------------------------------------------------------------------------------
def _seed_commitlog(w: NodeWork) -> None:
    for f in w.build.master_files:
        w.master_copy("copy_file", "seed the new node with the master's old commitlog (Raft replicates only new "
                      "entries, so every node needs the old bytes)", f.name, f.size, f.allocated)


def _seed_config(w: NodeWork) -> None:
    m, n = w.master, w.node
    if m.config_files:
        w.out.add("copy_tree", n.self_id, "topics, offsets and subscription groups live in config/, which Raft "
                  "does not replicate", tree="config", src=str(Path(m.root) / "config"),
                  dst=str(Path(n.root) / "config"), backup=True)


def _seed_consume_queues(w: NodeWork) -> None:
    if w.build.request.seed_consumequeue != "copy":
        return
    m, n = Path(w.master.root), w.node
    for tree in ("consumequeue", "index"):
        if (m / tree).is_dir():
            w.out.add("copy_tree", n.self_id, f"{tree}/ is derived from the commitlog; copying is O(its size) "
                      "where rebuilding replays every record (--seed-consumequeue rebuild)",
                      tree=tree, src=str(m / tree), dst=str(Path(n.root) / tree), backup=False)
    if (m / "checkpoint").is_file():
        w.out.add("copy_file", n.self_id, "the checkpoint goes with the copied ConsumeQueues and IndexFiles",
                  name="checkpoint", src=str(m / "checkpoint"), dst=str(Path(n.root) / "checkpoint"),
                  overwrite=True, size=(m / "checkpoint").stat().st_size)


def _rebuild_consume_queues(w: NodeWork) -> None:
    if w.build.request.seed_consumequeue == "copy":
        return
    w.out.add("dispatch", w.node.self_id, "rebuild ConsumeQueues and IndexFiles by replaying the copied commitlog",
              root=w.node.root, settings=w.node.store_settings, expect_max_offset=w.master.max_offset)


NEW_NODE_STEPS: tuple[NodeStep, ...] = (
    NodeStep("copy every commitlog file of the master", _seed_commitlog),
    NodeStep("copy the master's config/", _seed_config),
    NodeStep("copy the master's consumequeue/, index/ and checkpoint (--seed-consumequeue copy)",
             _seed_consume_queues),
    NodeStep("or rebuild them by dispatch (--seed-consumequeue rebuild)", _rebuild_consume_queues),
)

_STEPS_BY_STATE: dict[str, tuple[NodeStep, ...]] = {"slave": SLAVE_STEPS, "new": NEW_NODE_STEPS}


def _align_and_seed(b: Build, out: ActionList) -> None:
    """Per node in ``--peers`` order: a slave's steps or a new node's (nothing for the master)."""
    for n in b.nodes:
        work = NodeWork(b, out, n, b.draft.inspection.store(n.root))
        for step in _STEPS_BY_STATE.get(n.state, ()):
            step.emit(work)


# ---- 4. conf files ------------------------------------------------------------------------------
def _exposed_doors(conf_text: str, source: str) -> list[str]:
    """The unauthenticated doors reachable off loopback of a conf this plan writes."""
    from broker.config.conf_file import parse_conf
    from broker.security_policy import open_doors

    try:
        parsed = parse_conf(conf_text, source, validate=False)
    except ConfigError:
        return []
    return [d.describe() for d in open_doors(parsed.broker, parsed.store) if d.exposed]


def _write_confs(b: Build, out: ActionList) -> None:
    r, mconf = b.request, b.master_conf
    broker_name = mconf.broker.broker_name if mconf else r.group
    token, note = group_auth_token(r.confs, r.auth_token)
    if note:
        b.warnings.append(note)
    open_doors = [n.self_id for n in b.nodes if not (r.confs.get(n.root) or mconf or _NO_CONF).broker.acl_enable]
    if open_doors:
        b.warnings.append(f"no aclEnable in the conf of {', '.join(open_doors)}: the written conf keeps listenPort "
                          "open with remotingAllowInsecure=true, as before; set aclEnable=true (plain_acl.yml) to "
                          "require credentials")
    for n in b.nodes:
        own = r.confs.get(n.root)
        text = render_conf(n, own or mconf, own is not None, r.group, r.peers, b.file_size, broker_name,
                           http_peers_of(b.nodes), token)
        exposed = _exposed_doors(text, n.conf_out)
        if exposed:  # issue 23.10: the plan says which doors its confs leave open to the network
            b.warnings.append(f"the conf written for {n.self_id} leaves open: {'; '.join(exposed)}")
        out.add("write_conf", n.self_id, f"DLedger conf of {n.self_id}: same dLegerPeers and mappedFileSizeCommitLog="
                f"{b.file_size} on every node, dLegerSelfId={n.self_id}, storePathRootDir={n.root}, "
                f"listenPort={n.listen_port}", path=n.conf_out, content=text)


# ---- 5. freeze, 6. verify -----------------------------------------------------------------------
def _freeze_every_node(b: Build, out: ActionList) -> None:
    m = b.master
    for n in b.nodes:
        out.add("freeze", n.self_id, f"write the tail blank at {m.max_offset} exactly as the first DLedger start "
                f"would; dividedCommitlogOffset = {b.divided}", optional="freeze",
                root=n.root, commit_log_dir=n.commit_log_dir, file_size=b.file_size, expect_max_offset=m.max_offset,
                divided_commitlog_offset=b.divided)


def _verify_group(b: Build, out: ActionList) -> None:
    master_node = next(n for n in b.nodes if n.state == "master")
    out.add("verify", master_node.self_id, "every node ends at the master's offset with the same tail bytes",
            roots=[n.root for n in b.nodes], settings={n.root: n.store_settings for n in b.nodes},
            expect_max_offset=b.master.max_offset)


ACTION_STEPS: tuple[Step, ...] = (
    Step("recover every store that needs it", _recover_dirty_stores),
    Step("align every slave, seed every new node", _align_and_seed),
    Step("write every node's DLedger conf", _write_confs),
    Step("freeze every node (only with apply --freeze)", _freeze_every_node),
    Step("verify the group", _verify_group),
)


def emit_actions(build: Build, table: tuple[Step, ...] = ACTION_STEPS) -> list[Action]:
    """Run every step of ``table`` in order; the actions they emitted."""
    out = ActionList()
    for step in table:
        step.emit(build, out)
    return out.actions
