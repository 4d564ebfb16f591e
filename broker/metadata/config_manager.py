"""ConfigManager: one JSON metadata file under ``<storePathRootDir>/config/``, loaded and
persisted the way RocketMQ 4.9.8 does it, but crash-safe.

Rules (``common/ConfigManager.java``, ``MixAll.string2File``; reference §2.5):
- load: read ``<f>``; if it is missing, empty or does not decode, fall back to ``<f>.bak``. Both
  missing is a fresh store (empty tables). A present but undecodable ``.bak`` after a bad main
  file is a :class:`MetadataError` naming both files: starting with empty metadata would
  silently forget topics and offsets.
- persist: write ``<f>.tmp`` (fsynced), copy the current ``<f>`` to ``<f>.bak`` (fsynced), then
  atomically rename ``.tmp`` over ``<f>`` and fsync the directory. 4.9.8 deletes ``<f>`` before
  the rename; ``os.replace`` closes that window, so there is always a complete ``<f>``.
- encode()/decode() are the *whole file content*: the slave metadata sync copies a file by
  calling ``decode(master_text)`` then ``persist()`` when the master's DataVersion differs.
- Output is strict pretty JSON (broker.metadata.fastjson.dumps); input may be fastjson's.

Theory of operation: subclasses implement ``to_json()``/``from_json(obj)`` over plain dicts; this
base class owns the file, the lock, the DataVersion and the JSON dialect.
"""
from __future__ import annotations

import logging
import os
import threading
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from broker.metadata import fastjson
from broker.metadata.data_version import DataVersion
from dledger.store.safefile import write_file_safely

log = logging.getLogger(__name__)


class MetadataError(Exception):
    """A metadata file cannot be read (names the file and why)."""


def string_to_file(text: str, path: str | os.PathLike[str]) -> None:
    """MixAll.string2File, crash-safe: tmp, copy old to .bak, atomic replace (DLedger's same write)."""
    write_file_safely(path, text)


class ConfigManager(ABC):
    """Base of the JSON metadata managers."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.data_version = DataVersion()
        self._lock = threading.RLock()

    # ---- subclass hooks ---------------------------------------------------------------------
    @abstractmethod
    def to_json(self) -> dict[str, Any]:
        """The file content as plain JSON values."""

    @abstractmethod
    def from_json(self, obj: dict[str, Any]) -> None:
        """Replace the in-memory tables with ``obj`` (ValueError on a bad shape)."""

    # ---- whole-file content -----------------------------------------------------------------
    def encode(self) -> str:
        with self._lock:
            return fastjson.dumps(self.to_json())

    def decode(self, text: str, source: str = "<string>") -> None:
        """Replace everything with the content of a file's text (fastjson or strict JSON)."""
        try:
            obj = fastjson.loads(text)
            if not isinstance(obj, dict):
                raise ValueError(f"top level must be an object, got {type(obj).__name__}")
            with self._lock:
                self.from_json(obj)
        except ValueError as exc:
            raise MetadataError(f"{source}: {exc}") from None

    # ---- files ------------------------------------------------------------------------------
    def load(self) -> bool:
        """Load ``path`` or its ``.bak``; True if either existed."""
        bak = self.path.with_name(self.path.name + ".bak")
        main_error = None
        text = self._read(self.path)
        if text:
            try:
                self.decode(text, str(self.path))
                return True
            except MetadataError as exc:
                main_error = exc
                log.error("%s; trying %s", exc, bak)
        text = self._read(bak)
        if not text:
            if main_error is not None:
                raise MetadataError(f"{main_error} and no usable backup {bak}")
            return False
        try:
            self.decode(text, str(bak))
        except MetadataError as exc:
            raise MetadataError(f"{main_error or self.path}: unusable, and so is the backup: {exc}") from None
        log.warning("loaded %s from its backup %s", self.path, bak)
        return True

    @staticmethod
    def _read(path: Path) -> str:
        try:
            return path.read_bytes().decode("utf-8")
        except FileNotFoundError:
            return ""
        except UnicodeDecodeError as exc:
            return "\x00invalid utf-8 at byte %d" % exc.start  # decode() reports it as not JSON

    def persist(self) -> None:
        with self._lock:
            string_to_file(self.encode(), self.path)

    def changed(self, persist: bool = True) -> None:
        """Bump the DataVersion after a change and, by default, persist."""
        with self._lock:
            self.data_version.next_version()
            if persist:
                self.persist()


# ---- fastjson "beans": dataclasses whose fields carry their JSON (getter) names --------------
def bean_to_json(bean: Any) -> dict[str, Any]:
    """Fields under their JSON names, then any unknown keys read earlier (kept for round trips)."""
    from dataclasses import fields

    out: dict[str, Any] = dict(getattr(bean, "extra", {}) or {})
    for f in fields(bean):
        name = f.metadata.get("json")
        if name is not None:
            out[name] = getattr(bean, f.name)
    return out


def bean_from_json(cls: Any, obj: Any, where: str) -> Any:
    """Build a bean, type-checking known fields; unknown keys go to ``extra``."""
    from dataclasses import fields

    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected an object, got {obj!r}")
    kwargs: dict[str, Any] = {}
    known: set[str] = set()
    for f in fields(cls):
        name = f.metadata.get("json")
        if name is None:
            continue
        known.add(name)
        if name not in obj:
            continue
        value = obj[name]
        kind = f.metadata.get("type", str)
        if kind is bool:
            ok = isinstance(value, bool)
        elif kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, kind)
        if not ok:
            raise ValueError(f"{where}.{name}: expected {kind.__name__}, got {value!r}")
        kwargs[f.name] = value
    kwargs["extra"] = {k: v for k, v in obj.items() if k not in known}
    return cls(**kwargs)


def json_field(name: str, default: Any, kind: type) -> Any:
    from dataclasses import field

    if isinstance(default, dict):
        return field(default_factory=dict, metadata={"json": name, "type": kind})
    return field(default=default, metadata={"json": name, "type": kind})


def int_keyed(obj: Any, where: str) -> dict[int, int]:
    """``{"0": 42}`` (normalised fastjson ``{0:42}``) -> ``{0: 42}``, strictly."""
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected an object, got {obj!r}")
    out: dict[int, int] = {}
    for k, v in obj.items():
        try:
            key = int(k)
        except ValueError:
            raise ValueError(f"{where}: key {k!r} is not an integer") from None
        if not isinstance(v, int) or isinstance(v, bool):
            raise ValueError(f"{where}[{k}]: expected an integer offset, got {v!r}")
        out[key] = v
    return out
