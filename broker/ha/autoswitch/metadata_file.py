"""Apache RocketMQ 5.x broker-id metadata files of Controller mode (``BrokerMetadata``,
``TempBrokerMetadata``, ``MetadataFile`` in store/ha/autoswitch).

A broker in Controller mode gets its brokerId from the controller once and keeps it in
``<storePathRootDir>/brokerIdentity`` (``storePathBrokerIdentity``); while it is applying for one
it keeps the candidate in ``brokerIdentity-temp`` (``ReplicasManager``), so a crash between the
controller's answer and the final file is recovered by applying again with the same id and
check code (docs/en/controller/persistent_unique_broker_id.md).

Format (byte-compatible with 5.3.3), one line, no line terminator, fields joined by ``#``:

- ``brokerIdentity``:      ``<clusterName>#<brokerName>#<brokerId>``
- ``brokerIdentity-temp``: ``<clusterName>#<brokerName>#<brokerId>#<registerCheckCode>``

where ``registerCheckCode`` is ``<brokerAddress>;<timestamp ms>`` (the controller takes the
address from it: ``registerCheckCode.split(";")[0]``).

Rules:
- Writing replaces the file atomically (``.tmp``, fsync, rename, directory fsync). Apache
  deletes the file and then writes it in place, so a crash can leave it missing or torn; the
  ``.bak`` that ``MixAll.string2File`` would make is never made there (the file was deleted
  first), and none is made here.
- Reading a missing file leaves the metadata unloaded (``None``), as Apache's ``readFromFile``
  does. A file that is present but not exactly the fields above (Java's ``split("#")`` drops
  trailing empty pieces; a missing field is an ``ArrayIndexOutOfBoundsException`` there) is a
  :class:`MetadataFileError` naming the file and the fix; never a silently unloaded broker.
- A field may not contain ``#`` (it could not be read back); writing one is refused.
- Reads are bounded (:data:`MAX_METADATA_BYTES`).

Theory of operation: :class:`BrokerMetadata` / :class:`TempBrokerMetadata` are values with
``encode``/``decode``; :class:`MetadataFile` is the one place that touches the disk.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Optional, TypeVar

from broker.ha.autoswitch.checkpoint_file import LONG_MAX, LONG_MIN, parse_java_int
from dledger.store.safefile import fsync_dir, write_fsync

BROKER_IDENTITY_FILE_NAME = "brokerIdentity"
TEMP_SUFFIX = "-temp"
MAX_METADATA_BYTES = 64 * 1024


class MetadataFileError(ValueError):
    """A broker-id metadata file that is present but unreadable; the message names it."""


def _check_fields(*values: str) -> None:
    for v in values:
        if "#" in v or not v:
            raise ValueError(f"a broker metadata field may not be empty or contain '#': {v!r}")


def _split_java(text: str) -> list[str]:
    parts = text.split("#")
    while parts and parts[-1] == "":
        parts.pop()
    return parts


@dataclass(frozen=True)
class BrokerMetadata:
    """``BrokerMetadata``: the broker's controller-assigned identity."""

    cluster_name: str
    broker_name: str
    broker_id: int

    def encode(self) -> str:
        _check_fields(self.cluster_name, self.broker_name)
        return f"{self.cluster_name}#{self.broker_name}#{self.broker_id}"

    @classmethod
    def decode(cls, text: str) -> "BrokerMetadata":
        parts = _split_java(text)
        if len(parts) != 3:
            raise ValueError(f"expected clusterName#brokerName#brokerId, found {len(parts)} field(s)")
        return cls(parts[0], parts[1], parse_java_int(parts[2], LONG_MIN, LONG_MAX))


@dataclass(frozen=True)
class TempBrokerMetadata:
    """``TempBrokerMetadata``: an id being applied for, with its register check code."""

    cluster_name: str
    broker_name: str
    broker_id: int
    register_check_code: str

    def encode(self) -> str:
        _check_fields(self.cluster_name, self.broker_name, self.register_check_code)
        return f"{self.cluster_name}#{self.broker_name}#{self.broker_id}#{self.register_check_code}"

    @classmethod
    def decode(cls, text: str) -> "TempBrokerMetadata":
        parts = _split_java(text)
        if len(parts) != 4:
            raise ValueError(
                f"expected clusterName#brokerName#brokerId#registerCheckCode, found {len(parts)} field(s)")
        return cls(parts[0], parts[1], parse_java_int(parts[2], LONG_MIN, LONG_MAX), parts[3])

    @property
    def broker_address(self) -> str:
        """The address part of the check code, as the controller reads it."""
        return self.register_check_code.split(";")[0]


M = TypeVar("M", BrokerMetadata, TempBrokerMetadata)


class MetadataFile(Generic[M]):
    """One metadata file: :meth:`read` (None when absent), :meth:`write`, :meth:`clear`."""

    def __init__(self, path: str | os.PathLike[str], kind: type[M]) -> None:
        self.path = Path(path)
        self.kind: type[M] = kind

    def exists(self) -> bool:
        return self.path.exists()

    def read(self) -> Optional[M]:
        try:
            with open(self.path, "rb") as f:
                data = f.read(MAX_METADATA_BYTES + 1)
        except FileNotFoundError:
            return None
        try:
            if len(data) > MAX_METADATA_BYTES:
                raise ValueError(f"more than {MAX_METADATA_BYTES} bytes")
            return self.kind.decode(data.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise MetadataFileError(
                f"{self.path}: not a broker metadata file ({e}). If the broker's id is known, "
                f"rewrite it as {self._layout()}; otherwise delete {self.path.name} (and "
                f"{BROKER_IDENTITY_FILE_NAME}{TEMP_SUFFIX}) so the broker applies to the controller "
                f"for a new id (the old id stays registered there until cleanBrokerData)") from None

    def _layout(self) -> str:
        if self.kind is TempBrokerMetadata:
            return "clusterName#brokerName#brokerId#registerCheckCode"
        return "clusterName#brokerName#brokerId"

    def write(self, value: M) -> None:
        text = value.encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        write_fsync(tmp, text.encode("utf-8"))
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)

    def clear(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            return
        fsync_dir(self.path.parent)


def broker_metadata_file(store_root: str | os.PathLike[str]) -> MetadataFile[BrokerMetadata]:
    """``<storePathRootDir>/brokerIdentity``."""
    return MetadataFile(Path(store_root) / BROKER_IDENTITY_FILE_NAME, BrokerMetadata)


def temp_broker_metadata_file(store_root: str | os.PathLike[str]) -> MetadataFile[TempBrokerMetadata]:
    """``<storePathRootDir>/brokerIdentity-temp``."""
    return MetadataFile(Path(store_root) / (BROKER_IDENTITY_FILE_NAME + TEMP_SUFFIX), TempBrokerMetadata)
