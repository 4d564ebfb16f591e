"""The ``identity`` file of a DLedger store: whose store this is and how its files are cut.

Rules
-----
* ``<store_base_dir>/dledger-<selfId>/identity`` is a Java-properties file (same safe write as
  ``currterm``: ``.tmp`` + ``.bak``, fsynced) with ``group``, ``selfId``,
  ``mappedFileSizeForEntryData``, ``mappedFileSizeForEntryIndex`` and, for a broker-hosted
  member, ``brokerName``. Apache DLedger writes no such file and ignores it.
* It is written once, on the first start that opens the store successfully. A store that
  already holds data but no identity (an Apache store, a store upgraded in place by
  ``mqupgrade apply``, or one written by an older version) *adopts* the configuration of that
  start once, with one log line saying so.
* Every later start compares the configuration with it (:meth:`StoreIdentityFile.verify`): a
  different group, self id, broker name or file size is refused with
  :class:`StoreIdentityError` naming the file, both values and the configuration key to fix,
  before any data file is opened. Serving another group's entries under a new name, or
  cutting files at a new size (the first roll then kills the member), is never what an
  operator meant; the message says how to proceed if it really was.
* A key absent from the file (written by a version that did not know it) is not compared.

Theory of operation
-------------------
The check is a pure comparison of two small records. ``dledger.storelog.open_store`` calls
:meth:`StoreIdentityFile.verify` before the store loads and :meth:`StoreIdentityFile.save`
after it started, so a store that fails to open for another reason records nothing.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from dledger.store.errors import DLedgerStoreError
from dledger.store.properties import PropertiesError, read_properties_file, write_properties_file

log = logging.getLogger(__name__)

IDENTITY_FILE = "identity"

# field -> (properties key, what it is)
_KEYS = {
    "group": ("group", "group"),
    "self_id": ("selfId", "self id"),
    "broker_name": ("brokerName", "broker name"),
    "data_file_size": ("mappedFileSizeForEntryData", "data file size"),
    "index_file_size": ("mappedFileSizeForEntryIndex", "index file size"),
}


class StoreIdentityError(DLedgerStoreError):
    """The store belongs to another group/member or was cut at another file size."""


@dataclass(frozen=True)
class StoreIdentity:
    group: str
    self_id: str
    data_file_size: int
    index_file_size: int
    broker_name: Optional[str] = None

    def items(self) -> list[tuple[str, object]]:
        out: list[tuple[str, object]] = []
        for name, (key, _what) in _KEYS.items():
            value = getattr(self, name)
            if value is not None:
                out.append((key, value))
        return out


class StoreIdentityFile:
    """``identity`` of one member's store directory (``dledger-<selfId>``)."""

    def __init__(self, default_path: str | Path, data_dir: str | Path | None = None) -> None:
        self.default_path = Path(default_path)
        self.data_dir = Path(data_dir) if data_dir is not None else self.default_path / "data"

    @property
    def path(self) -> Path:
        return self.default_path / IDENTITY_FILE

    def load(self) -> Optional[dict[str, str]]:
        return read_properties_file(self.path)

    def holds_data(self) -> bool:
        """True if the store was used before (term file or any data file)."""
        if (self.default_path / "currterm").exists():
            return True
        try:
            return any(self.data_dir.iterdir())
        except FileNotFoundError:
            return False

    def verify(self, want: StoreIdentity, conf_key: Callable[[str], str]) -> bool:
        """Raise :class:`StoreIdentityError` on a mismatch; True when the file must be written
        (first start, or an existing store adopting this configuration)."""
        try:
            have = self.load()
        except PropertiesError as exc:
            raise StoreIdentityError(f"{exc} (restore {self.path} from its .bak, or delete it to adopt the "
                                     "current configuration)") from None
        if have is None:
            return True
        for name, (key, what) in _KEYS.items():
            recorded = have.get(key)
            configured = getattr(want, name)
            if recorded is None or configured is None or str(configured) == recorded.strip():
                continue
            hint = ("this store holds another member's or group's log: point the member at its own store "
                    f"({conf_key('store')})" if name in ("group", "self_id", "broker_name") else
                    "the existing files were cut at the recorded size: configure the same size "
                    "(a new size needs a new, empty store)")
            raise StoreIdentityError(
                f"{self.path} records {what} {key}={recorded.strip()} but this member is configured with "
                f"{configured} ({conf_key(name)}); set {conf_key(name)}={recorded.strip()}, or {hint}")
        return False

    def save(self, want: StoreIdentity) -> None:
        adopted = self.holds_data()
        write_properties_file(self.path, want.items())
        if adopted:
            log.warning("%s: existing store had no identity; adopted %s", self.path,
                        ", ".join(f"{k}={v}" for k, v in want.items()))
