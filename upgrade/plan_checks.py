"""What ``mqupgrade plan`` verifies, as tables of named checks (python-hyper/h11's
transitions-as-data style): read a table top to bottom and you have the list.

Rules:
- Three tables, evaluated in this order by :func:`check_arguments` and :func:`refusals_of`:
  :data:`ARGUMENT_CHECKS` (a user mistake in the arguments: the first failing row raises
  :class:`PlanError`, nothing is inspected), :data:`REFUSAL_CHECKS` (the inspected stores and the
  group's nodes: every failing row adds refusals, nothing is planned) and :data:`DISK_CHECKS`
  (run once the actions are known, since the copies decide what each disk must take).
- A check is a small function with one job; an argument check returns its message or ``None``,
  a refusal check yields its messages (one per offending store, replica, port or disk). The
  messages are the operator's text: they change only together with the tests that assert them.
- A check reads the plan being made and never changes it: the order of the rows is the order of
  the refusals in the plan.

Theory of operation: :func:`upgrade.plan.make_plan` builds a :class:`PlanRequest` from its
arguments, runs :data:`ARGUMENT_CHECKS`, inspects the stores into a :class:`Draft` (inspection,
chosen master, nodes) and runs :data:`REFUSAL_CHECKS` over it; when nothing is refused it emits
the actions (:mod:`upgrade.plan_actions`) into a :class:`Build` and runs :data:`DISK_CHECKS`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, NamedTuple, Optional

from broker.config.broker_config import parse_dleger_peers
from broker.config.conf_file import ParsedConf
from upgrade.inspect_model import Inspection, StoreInspection
from upgrade.node_conf import ports_of
from upgrade.plan_model import Node, PlanError
from upgrade.store_files import CommitLogFile

DLEDGER_INDEX_FILE_SIZE = 32 * 5 * 1024 * 1024


@dataclass(frozen=True)
class PlanRequest:
    """The arguments of one ``make_plan`` call (``roots``: the STORE_ROOT arguments, if any)."""

    group: str
    peers: str
    self_ids: dict[str, str]
    confs: dict[str, ParsedConf]
    master: Optional[str] = None
    seed_consumequeue: str = "copy"
    sync_slave_config: bool = True
    compare_last: Optional[int] = None
    min_free: int = 0
    roots: tuple[str, ...] = ()
    auth_token: Optional[str] = None


@dataclass
class Draft:
    """The plan being made, before any action: the inspection, its master and the group's nodes."""

    request: PlanRequest
    inspection: Inspection
    master: Optional[StoreInspection]
    nodes: list[Node]


@dataclass
class Build:
    """A plan that is not refused: the master's data and what the actions have emitted so far."""

    draft: Draft
    master: StoreInspection
    master_conf: Optional[ParsedConf]
    master_files: list[CommitLogFile]  # the master's commitlog files up to its end
    file_size: int
    divided: int  # dividedCommitlogOffset: the first offset of the DLedger region
    need: dict[str, int] = field(default_factory=dict)  # root -> bytes the actions write there
    warnings: list[str] = field(default_factory=list)

    @property
    def request(self) -> PlanRequest:
        return self.draft.request

    @property
    def nodes(self) -> list[Node]:
        return self.draft.nodes

    def master_file(self, name: str) -> CommitLogFile:
        return next(f for f in self.master_files if f.name == name)

    def needs(self, root: str, size: int) -> None:
        self.need[root] = self.need.get(root, 0) + size


class ArgumentCheck(NamedTuple):
    name: str
    problem: Callable[[PlanRequest], Optional[str]]


class RefusalCheck(NamedTuple):
    name: str
    refusals: Callable[[Draft], Iterable[str]]


class DiskCheck(NamedTuple):
    name: str
    refusals: Callable[[Build], Iterable[str]]


# ---- the arguments ------------------------------------------------------------------------------
def _group_named(r: PlanRequest) -> Optional[str]:
    return "--group is empty" if not r.group or not r.group.strip() else None


def _peers_parse(r: PlanRequest) -> Optional[str]:
    try:
        parse_dleger_peers(r.peers)
    except ValueError as exc:
        return f"--peers: {exc}"
    return None


def _one_root_per_peer(r: PlanRequest) -> Optional[str]:
    peer_map = parse_dleger_peers(r.peers)
    if set(peer_map) != set(r.self_ids):
        return f"--self-ids names {sorted(r.self_ids)} but --peers names {sorted(peer_map)}; they must match"
    return None


def _seed_mode_known(r: PlanRequest) -> Optional[str]:
    return None if r.seed_consumequeue in ("copy", "rebuild") else "--seed-consumequeue must be copy or rebuild"


def _roots_have_self_ids(r: PlanRequest) -> Optional[str]:
    ids = set(r.self_ids.values())
    return next((f"{root}: store root has no self id in --self-ids" for root in r.roots
                 if str(Path(root).resolve()) not in ids), None)


def _confs_have_self_ids(r: PlanRequest) -> Optional[str]:
    ids = set(r.self_ids.values())
    return next((f"--conf {conf.source}: its storePathRootDir {root} is not in --self-ids"
                 for root, conf in r.confs.items() if root not in ids), None)


ARGUMENT_CHECKS: tuple[ArgumentCheck, ...] = (
    ArgumentCheck("--group names the group", _group_named),
    ArgumentCheck("--peers parses as dLegerPeers", _peers_parse),
    ArgumentCheck("--self-ids gives every peer one store root", _one_root_per_peer),
    ArgumentCheck("--seed-consumequeue is copy or rebuild", _seed_mode_known),
    ArgumentCheck("every STORE_ROOT argument has a self id", _roots_have_self_ids),
    ArgumentCheck("every --conf's storePathRootDir has a self id", _confs_have_self_ids),
)


def check_arguments(request: PlanRequest, table: tuple[ArgumentCheck, ...] = ARGUMENT_CHECKS) -> None:
    """Raise :class:`PlanError` with the message of the first failing row."""
    for check in table:
        problem = check.problem(request)
        if problem is not None:
            raise PlanError(problem)


# ---- the stores and the group -------------------------------------------------------------------
def _master_with_data(d: Draft) -> Optional[StoreInspection]:
    return d.master if d.master is not None and d.master.has_data else None


def _stores_usable(d: Draft) -> Iterator[str]:
    for s in d.inspection.stores:
        if s.lock_holder:
            yield f"{s.root}: in use: {s.lock_holder} Stop the broker first."
        yield from (f"{s.root}: {p}" for p in s.problems)


def _some_store_has_data(d: Draft) -> Iterator[str]:
    if _master_with_data(d) is None:
        yield "no store holds commitlog data: nothing to upgrade (check the store roots)"


def _file_sizes_agree(d: Draft) -> Iterator[str]:
    m = _master_with_data(d)
    if m is None:
        return
    for s in d.inspection.stores:
        if s.has_data and s.file_size != m.file_size and not s.problems:
            yield (f"{s.root}: mismatched file sizes: mappedFileSizeCommitLog {s.file_size} "
                   f"but the master's is {m.file_size}")


def _replicas_agree(d: Draft) -> Iterator[str]:
    """Per replica: not ahead of its master, and the bytes both hold are the same."""
    m = _master_with_data(d)
    if m is None:
        return
    for c in d.inspection.comparisons:
        if c.behind_bytes < 0:
            r = d.inspection.store(c.replica)
            yield (f"{c.replica}: slave is ahead of its master {c.master} ({r.max_offset} > {m.max_offset}); "
                   "the master must hold the most data (choose it with --master, or investigate)")
        if not c.identical and c.first_difference:
            diff = c.first_difference
            yield (f"{c.replica}: bytes diverge from the master {c.master} in commitlog file {diff['file']} "
                   f"at file offset {diff['file_offset']} (physical offset {diff['offset']})")


def _ports_distinct(d: Draft) -> Iterator[str]:
    for host in {n.host for n in d.nodes}:
        seen: dict[int, str] = {}
        for n in (x for x in d.nodes if x.host == host):
            for p in ports_of(n):
                if p in seen and seen[p] != n.self_id:
                    yield (f"port {p} on {host} is used by both {seen[p]} and {n.self_id} (listenPort, "
                           "listenPort+1 for HA, httpListenPort and the dLegerPeers port must all differ)")
                seen[p] = n.self_id


REFUSAL_CHECKS: tuple[RefusalCheck, ...] = (
    RefusalCheck("no store in use (lock held), none with a problem of its own", _stores_usable),
    RefusalCheck("a store holds commitlog data (the master)", _some_store_has_data),
    RefusalCheck("every store's mappedFileSizeCommitLog is the master's", _file_sizes_agree),
    RefusalCheck("no replica ahead of its master, none whose bytes diverge", _replicas_agree),
    RefusalCheck("no two nodes on one host share a port", _ports_distinct),
)


# ---- the disks, once the actions are known ------------------------------------------------------
def _device(path: Path) -> int:
    while not path.exists() and path != path.parent:
        path = path.parent
    return os.stat(path).st_dev


def _enough_disk(b: Build) -> Iterator[str]:
    """What each file system must take: the copies + the first DLedger data and index files per node."""
    min_free = b.request.min_free
    per_dev: dict[int, tuple[int, int, list[str]]] = {}
    for n in b.nodes:
        s = b.draft.inspection.store(n.root)
        dev = _device(Path(n.root))
        want = b.need.get(n.root, 0) + b.file_size + DLEDGER_INDEX_FILE_SIZE + min_free
        have, _free, ids = per_dev.get(dev, (0, s.free_bytes, []))
        per_dev[dev] = (have + want, s.free_bytes, ids + [n.self_id])
    for want, free, ids in per_dev.values():
        if want > free:
            yield (f"not enough disk for {', '.join(ids)}: needs {want} bytes (copies + the first DLedger "
                   f"data and index files{' + --min-free' if min_free else ''}), {free} free")


DISK_CHECKS: tuple[DiskCheck, ...] = (
    DiskCheck("every file system takes its copies and the first DLedger files", _enough_disk),
)


def refusals_of(subject: Draft, table: tuple[RefusalCheck, ...] = REFUSAL_CHECKS) -> list[str]:
    """Every refusal of every row, in table order."""
    return [msg for check in table for msg in check.refusals(subject)]


def disk_refusals(build: Build, table: tuple[DiskCheck, ...] = DISK_CHECKS) -> list[str]:
    return [msg for check in table for msg in check.refusals(build)]
