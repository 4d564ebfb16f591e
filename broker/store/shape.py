"""The store's shape: what a broker store is, recorded in it, and checked at every start (issue 24.1).

Rules:
- ``<storePathRootDir>/storeshape`` is a Java-properties file (written safely: ``.tmp`` + ``.bak``,
  fsynced) with ``mode`` (``classic`` or ``dledger``), ``brokerName``, for DLedger mode
  ``dLegerGroup``/``dLegerSelfId`` and ``dividedCommitlogOffset``, and
  ``minCommitlogOffset``: the lowest commitlog offset the store must hold (in DLedger mode, of
  the old region: the divide when the old region is empty). Apache ignores the file.
- Before anything is opened (:func:`check_mode`), a classic start is refused on a store that
  was run in DLedger mode (recorded, or DLedger data files under the root when nothing is
  recorded yet): classic recovery would zero the old commitlog's tail blank, drop the
  post-upgrade messages from the ConsumeQueues and write into the frozen region. The error
  names the conf to use. (A DLedger start on a classic store is the in-place upgrade itself:
  allowed; a DLedger start under another group or self id is refused by the member's own
  ``identity`` file, which names the key to fix.)
- After recovery (:func:`check_held`), a store whose commitlog now starts above the recorded
  ``minCommitlogOffset`` is missing data it held: refused, naming the missing range and
  ``mqupgrade reseed``. Such a node must not serve (consumers would be told OFFSET_TOO_SMALL
  and skip the messages) nor lead.
- Retention raises ``minCommitlogOffset`` *before* it deletes a file
  (``MappedFileQueue.before_delete``), so a crash between the two leaves a record that is lower
  than the files, never higher. The record is then rewritten after every successful start.
- Only brokers record shapes (``StoreSettings.record_shape``); tools that open a store to read
  it leave no file behind.

Theory of operation: small pure comparisons around one file; :class:`DefaultMessageStore`
calls :func:`check_mode` in ``load`` before the commitlog is made, :func:`check_held` and
:func:`write_shape` after recovery, and installs :func:`raise_min` as the retention hook.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

from broker.store.errors import StoreError
from dledger.store.properties import PropertiesError, read_properties_file, write_properties_file

log = logging.getLogger(__name__)

SHAPE_FILE = "storeshape"
CLASSIC, DLEDGER = "classic", "dledger"


class StoreShapeError(StoreError):
    """The store is not what this start's configuration says it is, or misses data it held."""


@dataclass(frozen=True)
class StoreShape:
    mode: str
    broker_name: str = ""
    group: str = ""
    self_id: str = ""
    divided: int = -1
    min_offset: int = -1

    def items(self) -> list[tuple[str, object]]:
        out: list[tuple[str, object]] = [("mode", self.mode), ("brokerName", self.broker_name)]
        if self.mode == DLEDGER:
            out += [("dLegerGroup", self.group), ("dLegerSelfId", self.self_id),
                    ("dividedCommitlogOffset", self.divided)]
        out.append(("minCommitlogOffset", self.min_offset))
        return out


def shape_path(root: str | Path) -> Path:
    return Path(root) / SHAPE_FILE


def read_shape(root: str | Path) -> Optional[StoreShape]:
    path = shape_path(root)
    try:
        have = read_properties_file(path)
    except PropertiesError as exc:
        raise StoreShapeError(f"{exc} (restore {path} from its .bak, or delete it: the next start records the "
                              "store as it finds it)") from None
    if have is None:
        return None

    def num(key: str) -> int:
        try:
            return int(have.get(key, "-1").strip() or -1)
        except ValueError:
            raise StoreShapeError(f"{path}: {key} is not a number ({have.get(key)!r}); restore the file from its "
                                  ".bak, or delete it") from None

    return StoreShape(have.get("mode", "").strip(), have.get("brokerName", "").strip(),
                      have.get("dLegerGroup", "").strip(), have.get("dLegerSelfId", "").strip(),
                      num("dividedCommitlogOffset"), num("minCommitlogOffset"))


def write_shape(root: str | Path, shape: StoreShape) -> None:
    write_properties_file(shape_path(root), shape.items())


def _dledger_dirs_with_data(root: Path) -> list[Path]:
    out = []
    for d in sorted(root.glob("dledger-*")):
        data = d / "data"
        if data.is_dir() and any(p.is_file() and p.stat().st_size > 0 for p in data.iterdir()):
            out.append(d)
    return out


def check_mode(root: str | Path, dledger: Optional[Mapping[str, object]], broker_name: str = "") -> Optional[StoreShape]:
    """Refuse a start whose mode (or DLedger group/self id) is not the store's; returns the record."""
    rootp = Path(root)
    shape = read_shape(rootp)
    if dledger is None:  # a classic start
        if shape is not None and shape.mode == DLEDGER:
            raise StoreShapeError(
                f"{rootp} is a DLedger-mode store (group {shape.group}, member {shape.self_id}, recorded in "
                f"{shape_path(rootp)}), and this conf starts it in master/slave mode, which would overwrite the "
                f"frozen old commitlog and lose every message written since the upgrade. Start it with its DLedger "
                f"conf (enableDLegerCommitLog=true, dLegerGroup={shape.group}, dLegerSelfId={shape.self_id})")
        if shape is None:
            found = _dledger_dirs_with_data(rootp)
            if found:
                raise StoreShapeError(
                    f"{rootp} holds DLedger data ({found[0]}): it was upgraded to DLedger mode, and this conf starts "
                    f"it in master/slave mode, which would lose every message written since the upgrade. Start it "
                    f"with its DLedger conf (enableDLegerCommitLog=true, dLegerSelfId={found[0].name[len('dledger-'):]})")
        return shape
    # a DLedger start: group, self id and file sizes are the member's own ``identity`` file's to
    # check (dledger.store.identity, before any data file opens); classic -> DLedger is the upgrade
    return shape


def check_held(root: str | Path, shape: Optional[StoreShape], actual_min: int) -> None:
    """Refuse a store whose commitlog starts above what it recorded holding (data moved away)."""
    if shape is None or shape.min_offset < 0 or 0 <= actual_min <= shape.min_offset:
        return
    now = f"now starts at {actual_min} ([{shape.min_offset}, {actual_min}) is gone" if actual_min >= 0 else \
        "now has no files (everything is gone"
    raise StoreShapeError(
        f"{root} is missing commitlog data it held: it recorded holding offsets from {shape.min_offset}, but its "
        f"commitlog {now}; was the commitlog "
        f"directory moved or files deleted by hand?). It will not serve or lead without them: copy them back with "
        f"`mqupgrade reseed --from <a healthy replica's storePathRootDir> --to {root}`, or restore the files, "
        f"then start again")


class ShapeRecorder:
    """Keeps ``storeshape`` of one open store; :meth:`raise_min` is the retention hook."""

    def __init__(self, root: str | Path, shape: StoreShape) -> None:
        self.root = Path(root)
        self.shape = shape
        write_shape(self.root, shape)

    def raise_min(self, new_min: int) -> None:
        """Called before retention deletes files below ``new_min``."""
        if new_min > self.shape.min_offset:
            self.shape = StoreShape(self.shape.mode, self.shape.broker_name, self.shape.group, self.shape.self_id,
                                    self.shape.divided, new_min)
            write_shape(self.root, self.shape)
