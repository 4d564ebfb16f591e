"""The data of ``mqupgrade inspect``: one :class:`StoreInspection` per store, the
:class:`Comparison` of each replica with the master, the :class:`Inspection` of the group.

Rules:
- Plain dataclasses with ``to_dict`` (for ``--json`` and the plan file): what a store holds,
  never how it was read (that is :mod:`upgrade.inspect` and :mod:`upgrade.inspect_tail`).
- ``problems`` are reasons a store cannot be upgraded as is; ``plan`` refuses them word for word.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from upgrade.store_files import CommitLogFile

DEFAULT_FILE_SIZE = 1024 * 1024 * 1024
DEFAULT_CQ_FILE_SIZE = 300_000 * 20


class InspectError(Exception):
    """A user mistake (bad path, conflicting options): one line, no traceback."""


@dataclass
class StoreInspection:
    root: str
    exists: bool
    commit_log_dir: str
    conf: Optional[str] = None
    conf_role: Optional[str] = None
    file_size: int = DEFAULT_FILE_SIZE
    file_size_source: str = "default"
    cq_file_size: int = DEFAULT_CQ_FILE_SIZE
    files: list[CommitLogFile] = field(default_factory=list)
    min_offset: int = -1
    max_offset: int = 0
    max_offset_method: str = "no commitlog"
    walked_bytes: int = 0
    tail_file: Optional[str] = None
    tail_position: int = 0  # wrote position in the tail file
    frozen: bool = False  # the end-of-file blank is already at the end (DLedger first start ran)
    stop_reason: str = ""  # why the walk stopped (zeros = clean end)
    files_after_end: list[str] = field(default_factory=list)
    clean_shutdown: bool = True
    lock_holder: Optional[str] = None
    cq_max_physical_offset: int = -1
    cq_state: str = "none"  # agrees | behind | ahead | none
    cq_detail: str = ""
    config_files: list[str] = field(default_factory=list)
    dledger_dirs: list[str] = field(default_factory=list)
    # an upgraded store (issue 13.8): its DLedger log continues the offset space above the divide
    dledger: Optional[dict[str, Any]] = None  # dir, divided_offset, committed_index, max_offset, how
    messages: Optional[int] = None  # messages the ConsumeQueues hold (sum of max - min over queues)
    free_bytes: int = 0
    index_settings: dict[str, Any] = field(default_factory=lambda: {
        "max_hash_slot_num": 5_000_000, "max_index_num": 20_000_000, "message_index_enable": True,
        "source": "defaults"})
    problems: list[str] = field(default_factory=list)  # reasons it cannot be upgraded as is
    role: str = "?"  # master | slave | empty (set by inspect_stores)
    kind: str = ""  # classic | dledger | controller | empty (upgrade.inspect_kind)
    kind_detail: str = ""
    next_step: str = ""

    @property
    def has_data(self) -> bool:
        return bool(self.files)

    @property
    def needs_recovery(self) -> bool:
        return not self.clean_shutdown or bool(self.files_after_end) or self.cq_state == "ahead" or (
            bool(self.stop_reason) and self.stop_reason != "zeros" and not self.frozen)

    @property
    def data_bytes(self) -> int:
        return sum(f.allocated for f in self.files)

    def file_path(self, name: str) -> Path:
        return Path(self.commit_log_dir) / name

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["needs_recovery"] = self.needs_recovery
        return d


@dataclass
class Comparison:
    master: str
    replica: str
    behind_bytes: int  # master max - replica max (negative: the replica is ahead)
    compared_files: list[str] = field(default_factory=list)
    compared_bytes: int = 0
    read_bytes: int = 0
    identical: bool = True
    first_difference: Optional[dict[str, Any]] = None  # file, file_offset, offset
    missing_files: list[str] = field(default_factory=list)  # master files after the replica's last
    head_missing: list[str] = field(default_factory=list)  # master files before the replica's first
    skipped_files: int = 0  # shared files not compared (compare_last)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Inspection:
    stores: list[StoreInspection]
    master: Optional[str]
    master_reason: str
    comparisons: list[Comparison]
    compare_last: Optional[int] = None

    def store(self, root: str) -> StoreInspection:
        for s in self.stores:
            if s.root == root:
                return s
        raise KeyError(root)

    def comparison(self, root: str) -> Optional[Comparison]:
        return next((c for c in self.comparisons if c.replica == root), None)

    def to_dict(self) -> dict[str, Any]:
        return {"master": self.master, "master_reason": self.master_reason, "compare_last": self.compare_last,
                "stores": [s.to_dict() for s in self.stores], "comparisons": [c.to_dict() for c in self.comparisons]}
