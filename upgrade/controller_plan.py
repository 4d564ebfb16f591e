"""``mqupgrade plan --to controller``: master/slave stores, or a DLedger group's stores, into
Controller mode (issue 27.3), as tables of named checks and steps like :mod:`upgrade.plan_checks`.

Rules:
- The stores are the STORE_ROOT arguments (every replica of one group); ``--controllers`` is
  ``controllerAddr``; ``--conf`` gives a node's current conf (matched by storePathRootDir: its
  brokerName, ports and keys are kept); without one, ``--group`` names the brokerName.
- Which migration: stores holding ``dledger-*/data`` are DLedger-mode stores, the others
  master/slave; a mix is refused.
- master/slave -> Controller (Apache's own in-place upgrade): refused as ``--to dledger`` refuses
  (a store in use or with a problem, no data, file sizes that differ, a replica ahead of its
  master or whose bytes diverge); a dirty store is recovered by the store's own recovery; each
  node's end is recorded in the journal (``record_end``: rollback is allowed while it has not
  moved); a node whose consumer offsets or schedule progress lag the group's is aligned as in a
  DLedger group (below); each node's Controller-mode conf is written. Nothing else in the stores changes: no
  epoch or identity file (the first elected master appends ``<1, maxPhyOffset>``; each broker
  applies for its id). O(1), apart from the replica comparison.
- DLedger -> Controller (layout A of the shared spec): every member's DLedger store is read
  (:mod:`upgrade.dledger_member`); refused: a store in use, not shut down cleanly, with a problem
  of its own, already migrated (its regions file is there), two members with one self id, a member that lacks an entry the group committed,
  committed bytes that differ (member, entry index and first differing offset named),
  ConsumeQueues ahead of the committed end ("start it once in DLedger mode and stop it cleanly,
  then plan again"), old classic files of another size than ``mappedFileSizeCommitLog``.
  ConsumeQueues behind it (a kill -9 in DLedger mode) are a note, not a refusal: the store
  re-dispatches the gap at its first start in Controller mode (``broker.store.commitlog_regions``). Each member gets
  ``write_regions`` (``commitlogRegions.json``, exactly the spec: its old classic region if any,
  its DLedger region up to the group's committed end, ``classicFrom``) and ``write_conf``; a
  member whose consumer offsets or schedule progress lag the group's gets ``align_offsets`` /
  ``align_delay_offsets`` (the largest per entry, :mod:`upgrade.controller_offsets`). The
  uncommitted tail stays in the DLedger files and is never read: the plan says so. O(1) in the
  store size, apart from the member comparison (``--compare-last`` bounds it).

Theory of operation: :func:`make_controller_plan` sorts the stores into one migration, runs its
refusal table, and, when nothing is refused, its step table; the result is an ordinary
:class:`~upgrade.plan_model.Plan` with ``target="controller"`` that ``apply`` journals and
``rollback`` undoes.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterator, NamedTuple, Optional

from broker.config.conf_file import ParsedConf
from upgrade import regions_file
from upgrade.controller_conf import durable_acks, group_ha_token, render_controller_conf
from upgrade.controller_offsets import Align, align_actions, sources
from upgrade.dledger_member import Member, first_difference, inspect_member, is_dledger_store
from upgrade.inspect import Inspection, inspect_stores
from upgrade.inspect_model import DEFAULT_CQ_FILE_SIZE, StoreInspection
from upgrade.plan_checks import REFUSAL_CHECKS, Draft, PlanRequest
from upgrade.plan_model import Action, Node, Plan, PlanError

TARGET = "controller"
_CLASSIC_REFUSALS = tuple(c for c in REFUSAL_CHECKS if "port" not in c.name)  # ports are the nodes' own


def parse_controllers(text: Optional[str]) -> str:
    """``h:p;h:p`` (``,`` accepted too) -> the normalised ``controllerAddr``."""
    parts = [p.strip() for p in (text or "").replace(",", ";").split(";") if p.strip()]
    if not parts:
        raise PlanError("--controllers is required with --to controller (e.g. 10.0.0.1:9878;10.0.0.2:9878;"
                        "10.0.0.3:9878)")
    for p in parts:
        host, _, port = p.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise PlanError(f"--controllers: {p!r} is not host:port")
    return ";".join(parts)


class _Work:
    """The plan being made: request, nodes, actions, refusals, warnings."""

    def __init__(self, roots: list[str], controllers: str, confs: dict[str, ParsedConf], group: Optional[str],
                 conf_dir: Path, compare_last: Optional[int]) -> None:
        self.roots, self.controllers, self.confs, self.group = roots, controllers, confs, group
        self.conf_dir, self.compare_last = conf_dir, compare_last
        self.nodes: list[Node] = []
        self.actions: list[Action] = []
        self.warnings: list[str] = []

    def add(self, kind: str, node: str, reason: str, *, label: Optional[str] = None, **params: object) -> None:
        aid = f"{len(self.actions) + 1:03d}-{label or kind}-{node}"
        self.actions.append(Action(aid, kind, node, reason, dict(params)))

    def broker_name(self) -> str:
        names = sorted({c.broker.broker_name for c in self.confs.values()})
        if len(names) > 1:
            raise PlanError(f"the --conf files name different brokerNames ({', '.join(names)}); one group at a time")
        if names:
            return names[0]
        if not self.group:
            raise PlanError("no --conf gives the brokerName: pass --conf for each store or --group BROKER_NAME")
        return self.group

    def node(self, sid: str, root: str, state: str, cl_dir: str, settings: dict[str, object]) -> Node:
        own = self.confs.get(root)
        return Node(sid, root, state, own.broker.broker_ip1 if own else "", 0, own.broker.listen_port if own else 0,
                    own.broker.http_listen_port if own else 0, cl_dir, own.source if own else None,
                    str(self.conf_dir / f"broker-{sid}.conf"), dict(settings))

    def write_confs(self, file_size: int, what: str, *, from_dledger: bool = False) -> None:
        name = self.broker_name()
        token, note = group_ha_token(self.confs)
        if note:
            self.warnings.append(note)
        durable = durable_acks(self.confs, from_dledger)
        for n in self.nodes:
            text = render_controller_conf(n, self.confs.get(n.root), name, self.controllers, file_size, token, what,
                                          durable_acks=durable)
            self.add("write_conf", n.self_id, f"Controller-mode conf of {n.self_id}: enableControllerMode=true, "
                     f"controllerAddr={self.controllers}, brokerName={name}, brokerId=-1 (assigned by the controller)",
                     path=n.conf_out, content=text)


# ---- master/slave -> Controller -----------------------------------------------------------------
def _classic_nodes(w: _Work, insp: Inspection) -> None:
    slaves = 0
    for root in w.roots:
        s = insp.store(root)
        if s.role == "master":
            sid = "master"
        else:
            slaves += 1
            sid = f"slave{slaves}"
        settings = {"store_path_commit_log": s.commit_log_dir, "mapped_file_size_commit_log": s.file_size,
                    "mapped_file_size_consume_queue": s.cq_file_size,
                    **{k: v for k, v in s.index_settings.items() if k != "source"}}
        w.nodes.append(w.node(sid, root, s.role if s.role != "empty" else "new", s.commit_log_dir, settings))


def _classic_steps(w: _Work, insp: Inspection, m: StoreInspection) -> list[str]:
    aligns, refusals, notes = align_actions([(n.root, n.self_id) for n in w.nodes])
    if refusals:
        return refusals
    w.warnings.extend(notes)
    for n in sorted(w.nodes, key=lambda x: x.state != "master"):
        s = insp.store(n.root)
        if s.has_data and s.needs_recovery:
            w.add("recover", n.self_id, "not shut down cleanly or its tail/ConsumeQueues disagree: the store's own "
                  "recovery first (as the broker's next start would do)", root=n.root, settings=n.store_settings,
                  expect_max_offset=s.max_offset)
    for n in w.nodes:
        s = insp.store(n.root)
        w.add("record_end", n.self_id, f"record the commitlog end {s.max_offset} in the journal: rollback is allowed "
              "while it has not moved (no write in Controller mode yet)", root=n.root, settings=n.store_settings,
              expect_max_offset=s.max_offset, offset_sources=sources(a for a in aligns if a.root == n.root))
    _add_aligns(w, aligns)
    for c in insp.comparisons:
        if c.behind_bytes > 0:
            w.warnings.append(f"{c.replica} is {c.behind_bytes} bytes behind the master: start the master first "
                              "(Apache's upgrade guide: otherwise messages may be truncated); HA then catches it up")
    w.write_confs(m.file_size, f"master/slave group {w.broker_name()}")
    return []


def _add_aligns(w: _Work, aligns: list[Align]) -> None:
    for al, n in ((al, n) for al in aligns for n in w.nodes if n.root == al.root):
        # apply's align_offsets: the whole file atomically, the original kept for rollback
        w.add("align_offsets", n.self_id, al.reason, label=al.label, path=al.path, content=al.content,
              source_sha256=al.source_sha256)


def _plan_classic(w: _Work, master: Optional[str]) -> Plan:
    insp = inspect_stores(w.roots, w.confs, master, w.compare_last)
    m = insp.store(insp.master) if insp.master else None
    _classic_nodes(w, insp)
    req = PlanRequest(w.group or "", "", {}, w.confs)
    refusals = [msg for check in _CLASSIC_REFUSALS for msg in check.refusals(Draft(req, insp, m, w.nodes))]
    if m is not None and not refusals:
        refusals = _classic_steps(w, insp, m)
    return Plan(w.broker_name(), w.controllers, m.file_size if m else 0, insp.master, m.max_offset if m else 0, -1,
                w.nodes, [] if refusals else w.actions, refusals, w.warnings, insp.to_dict(), target=TARGET)


# ---- DLedger -> Controller ----------------------------------------------------------------------
class _Group(NamedTuple):
    members: list[Member]
    ref: Member  # the member with the highest committed index
    committed_index: int
    end: int  # the group's committed end: every region's end


class MemberCheck(NamedTuple):
    name: str
    refusals: Callable[[list[Member]], Iterator[str]]


def _usable(ms: list[Member]) -> Iterator[str]:
    for m in ms:
        if m.lock_holder:
            yield f"{m.root}: in use: {m.lock_holder} Stop the broker first."
        if not m.clean_shutdown:
            yield (f"{m.root}: not shut down cleanly (abort file present): start it once in DLedger mode and stop it "
                   "cleanly, then plan again")
        yield from (f"{m.root}: {p}" for p in m.problems)


def _not_migrated(ms: list[Member]) -> Iterator[str]:
    for m in ms:
        if regions_file.path_of(m.root).exists():
            yield (f"{m.root}: already migrated to Controller mode ({regions_file.REGIONS_FILE} is there): nothing to "
                   "plan; `mqupgrade rollback PLAN` undoes it until the first write in Controller mode")


def _distinct_ids(ms: list[Member]) -> Iterator[str]:
    seen: dict[str, str] = {}
    for m in ms:
        if m.self_id and m.self_id in seen:
            yield f"{m.root} and {seen[m.self_id]} are both DLedger member {m.self_id}: give each member's store once"
        seen[m.self_id] = m.root


def _sizes_agree(ms: list[Member]) -> Iterator[str]:
    sizes = {m.data_file_size for m in ms}
    if len(sizes) > 1:
        yield "the members' DLedger data files differ in size: " + ", ".join(f"{m.self_id} {m.data_file_size}"
                                                                             for m in ms)


MEMBER_CHECKS: tuple[MemberCheck, ...] = (
    MemberCheck("no store in use, shut down cleanly, no problem of its own", _usable),
    MemberCheck("not migrated already", _not_migrated),
    MemberCheck("one store per member", _distinct_ids),
    MemberCheck("every member's data files have one size", _sizes_agree),
)


def _group_of(ms: list[Member]) -> _Group:
    ref = max(ms, key=lambda m: m.committed_index if m.committed_index is not None else -1)
    assert ref.committed_index is not None
    return _Group(ms, ref, ref.committed_index, ref.committed_end)


def _committed_agree(g: _Group, compare_last: Optional[int]) -> Iterator[str]:
    for m in g.members:
        if m is g.ref:
            continue
        if m.last_index < g.committed_index:
            yield (f"{m.root} ({m.self_id}): holds entries up to {m.last_index} but {g.ref.self_id} committed "
                   f"{g.committed_index}: start the group once in DLedger mode so it catches up, stop it cleanly, "
                   "then plan again")
            continue
        start = max(m.region_start, g.ref.region_start)
        if compare_last is not None:
            files = [f for f in g.ref.data_files if f.from_offset < g.end][-compare_last:]
            start = max(start, files[0].from_offset) if files else start
        diff = first_difference(g.ref, m, start, g.end)
        if diff is not None:
            at, idx = diff
            yield (f"{m.root} ({m.self_id}): committed entries differ from {g.ref.self_id}'s at entry {idx}, first "
                   f"differing offset {at}: the members disagree on committed data; investigate (or `mqupgrade "
                   "reseed` the wrong member in DLedger mode) before migrating")
        if m.classic_end != g.ref.classic_end:
            yield (f"{m.root} ({m.self_id}): its old classic region ends at {m.classic_end}, {g.ref.self_id}'s at "
                   f"{g.ref.classic_end}")


def _cq_ready(g: _Group) -> Iterator[str]:
    """ConsumeQueues ahead of the committed end point at bytes the region will not hold: refused.
    Behind is fine: the store re-dispatches a frozen region's gap at its first start in Controller
    mode (``broker.store.commitlog_regions``); the plan says so (:func:`_cq_notes`)."""
    for m in g.members:
        if m.cq_state == "ahead":
            yield (f"{m.root} ({m.self_id}): {m.cq_detail}: start it once in DLedger mode and stop it cleanly, then "
                   "plan again")


def _cq_notes(g: _Group) -> list[str]:
    return [f"{m.self_id}: the ConsumeQueues lag the region end ({m.cq_detail}); the store dispatches them at its "
            "first start in Controller mode" for m in g.members if m.cq_state == "behind"]


def _regions_of(m: Member, end: int, file_size: int) -> regions_file.Regions:
    rs: list[regions_file.Region] = []
    if m.classic_files:
        cl = Path(m.commit_log_dir)
        path = os.path.relpath(cl, m.root) if cl.is_relative_to(m.root) else str(cl)
        rs.append(regions_file.Region("classic", path, m.classic_start, m.classic_end))
    rs.append(regions_file.Region("dledger", m.dir, m.region_start, end))
    return regions_file.Regions.of(rs, file_size)


def _dledger_steps(w: _Work, g: _Group, file_size: int) -> list[str]:
    refusals: list[str] = []
    for m in g.members:
        odd = [f.name for f in m.classic_files if f.size != file_size]
        if odd:
            refusals.append(f"{m.root}: old classic files {', '.join(odd)} are not mappedFileSizeCommitLog "
                            f"({file_size}) bytes")
    if refusals:
        return refusals
    for m, n in zip(g.members, w.nodes):
        r = _regions_of(m, g.end, file_size)
        w.add("write_regions", n.self_id, f"commitlogRegions.json: {r.describe()}; new writes go to classic files "
              f"from {r.classic_from}", root=m.root, commit_log_dir=m.commit_log_dir, content=r.to_text(),
              classic_from=r.classic_from, file_size=file_size)
        if m.last_index > g.committed_index:
            w.warnings.append(f"{m.self_id}: {m.last_index - g.committed_index} uncommitted entr"
                              f"{'y' if m.last_index - g.committed_index == 1 else 'ies'} after index "
                              f"{g.committed_index} (bytes [{g.end}, {m.last_end})) stay in the DLedger files and are "
                              "never read in Controller mode (never committed, so never acknowledged)")
    w.warnings.extend(_cq_notes(g))
    aligns, refusals, notes = align_actions([(m.root, n.self_id) for m, n in zip(g.members, w.nodes)])
    if refusals:
        return refusals
    w.warnings.extend(notes)
    _add_aligns(w, aligns)
    w.write_confs(file_size, f"DLedger group of {w.broker_name()} (members {', '.join(m.self_id for m in g.members)})",
                  from_dledger=True)
    return []


def _plan_dledger(w: _Work) -> Plan:
    ms = []
    for root in w.roots:
        own = w.confs.get(root)
        ms.append(inspect_member(root, str(own.store.commit_log_dir) if own else None,
                                 own.store.mapped_file_size_consume_queue if own else DEFAULT_CQ_FILE_SIZE))
    refusals = [msg for check in MEMBER_CHECKS for msg in check.refusals(ms)]
    g: Optional[_Group] = None
    if not refusals:
        g = _group_of(ms)
        ms = [inspect_member(m.root, m.commit_log_dir, _cq_size(w, m.root), committed_override=g.committed_index)
              if m.committed_index != g.committed_index and m.last_index >= g.committed_index else m for m in ms]
        g = _group_of(ms)
        refusals = list(_committed_agree(g, w.compare_last))
        refusals = refusals or list(_cq_ready(g))  # a member that lacks entries has its CQs at its own end
    file_size = 0
    for m in ms:
        own = w.confs.get(m.root)
        w.nodes.append(w.node(m.self_id or Path(m.root).name, m.root, "member", m.commit_log_dir,
                              {"store_path_commit_log": m.commit_log_dir,
                               "mapped_file_size_commit_log": own.store.mapped_file_size_commit_log if own
                               else m.data_file_size, "mapped_file_size_consume_queue": _cq_size(w, m.root)}))
    if g is not None and not refusals:
        file_size = int(w.nodes[0].store_settings["mapped_file_size_commit_log"])
        refusals = _dledger_steps(w, g, file_size)
    classic_from = regions_file.class_from(g.end, file_size) if g is not None and file_size else -1
    return Plan(w.broker_name(), w.controllers, file_size, g.ref.root if g else None, g.end if g else 0, classic_from,
                w.nodes, [] if refusals else w.actions, refusals, w.warnings,
                {"stores": [], "members": [m.to_dict() for m in ms],
                 "committed_index": g.committed_index if g else None}, target=TARGET)


def _cq_size(w: _Work, root: str) -> int:
    own = w.confs.get(root)
    return own.store.mapped_file_size_consume_queue if own else DEFAULT_CQ_FILE_SIZE


# ---- the plan -----------------------------------------------------------------------------------
def make_controller_plan(roots: list[str], controllers: str, *, confs: Optional[dict[str, ParsedConf]] = None,
                         group: Optional[str] = None, master: Optional[str] = None,
                         conf_dir: str | os.PathLike[str] = "controller-conf",
                         compare_last: Optional[int] = None) -> Plan:
    """Plan the migration of one group's stores into Controller mode (see the module rules)."""
    addr = parse_controllers(controllers)
    resolved = [str(Path(r).expanduser().resolve()) for r in roots]
    if not resolved:
        raise PlanError("give the store root of every replica of the group (STORE_ROOT ...)")
    if len(set(resolved)) != len(resolved):
        raise PlanError("the same store root is given twice")
    missing = [r for r in resolved if not Path(r).is_dir()]
    if missing:
        raise PlanError(f"{missing[0]}: no such store directory")
    confs = confs or {}
    stray = next((c.source for root, c in confs.items() if root not in resolved), None)
    if stray is not None:
        raise PlanError(f"--conf {stray}: its storePathRootDir is not one of the store roots")
    w = _Work(resolved, addr, confs, group, Path(conf_dir).expanduser().resolve(), compare_last)
    w.broker_name()  # a conf or --group must name it, before anything is inspected
    kinds = {r: is_dledger_store(Path(r)) for r in resolved}
    if len(set(kinds.values())) > 1:
        dl = [r for r, k in kinds.items() if k]
        return Plan(group or "", addr, 0, None, 0, -1, [], [], [
            f"the stores mix DLedger mode ({', '.join(dl)}) and master/slave "
            f"({', '.join(r for r, k in kinds.items() if not k)}): plan one group at a time"], [], {}, target=TARGET)
    return _plan_dledger(w) if all(kinds.values()) else _plan_classic(w, master)


def render_controller(plan: Plan) -> str:
    """Readable plan of ``--to controller``."""
    dledger = bool(plan.inspection.get("members"))
    lines = [f"Controller mode ({'from DLedger mode' if dledger else 'from master/slave'}): controllerAddr "
             f"{plan.peers}"]
    for n in plan.nodes:
        lines.append(f"  {n.self_id}  {n.state:<6}  {n.root}  conf -> {n.conf_out}")
    if plan.refusals:
        lines.append("REFUSED:")
        lines.extend(f"  - {r}" for r in plan.refusals)
        return "\n".join(lines)
    if dledger:
        lines.append(f"committed end {plan.master_max_offset} (entry {plan.inspection.get('committed_index')}); "
                     f"classicFrom {plan.divided_commitlog_offset}")
    else:
        lines.append(f"master end {plan.master_max_offset}; no store byte changes (no epoch file: the first elected "
                     "master writes it)")
    lines.extend(f"  {a.id}: {a.reason}" for a in plan.actions)
    lines.extend(f"warning: {w}" for w in plan.warnings)
    return "\n".join(lines)
