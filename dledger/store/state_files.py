"""The two small state files of a DLedger member: ``currterm`` and ``checkpoint``.

Rules (DLedger 0.3.1.2 ``MemberState`` / ``DLedgerMmapFileStore.persistCheckPoint``)
------------------------------------------------------------------------------------
* ``<store_base_dir>/dledger-<selfId>/currterm``: ``currTerm=<long>``, ``voteLeader=<id or
  empty>``. Written whenever the term or the vote changes; it is Raft's persistent state, so
  a vote must be durable before it is granted (the safe write fsyncs).
* ``<store_base_dir>/dledger-<selfId>/checkpoint``: ``endIndex``, ``committedIndex``; only
  ``committedIndex`` is read back, at the end of recovery.
* ``currTerm`` is a Java long in ``0..2**63-1``: :meth:`MemberStateFile.save` refuses to write
  anything else (``ValueError``) and :meth:`MemberStateFile.load` refuses to return it
  (:class:`PropertiesError` naming the file), so a term DLedger could not read is never
  persisted and a damaged file is reported, not acted upon.
* Both are Java-properties files written with the safe write of :mod:`.properties`; keys are
  written in the order Java's ``Hashtable`` iterates them (``voteLeader`` before ``currTerm``,
  ``committedIndex`` before ``endIndex``) so our files are byte-identical to Apache's.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from dledger.store.properties import PropertiesError, read_properties_file, write_properties_file

TERM_PERSIST_FILE = "currterm"
TERM_PERSIST_KEY_TERM = "currTerm"
TERM_PERSIST_KEY_VOTE_FOR = "voteLeader"
CHECK_POINT_FILE = "checkpoint"
END_INDEX_KEY = "endIndex"
COMMITTED_INDEX_KEY = "committedIndex"
MAX_LONG = 2**63 - 1  # Java's Long.MAX_VALUE


def _long(path: Path, key: str, value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise PropertiesError(f"{path}: {key}={value!r} is not a long") from None


@dataclass
class MemberStateFile:
    """Persistent (term, vote) of one member: the ``currterm`` file."""

    default_path: Path  # <store_base_dir>/dledger-<selfId>

    def __post_init__(self) -> None:
        self.default_path = Path(self.default_path)

    @property
    def path(self) -> Path:
        return self.default_path / TERM_PERSIST_FILE

    def load(self) -> tuple[int, str | None]:
        """``(curr_term, vote_for)``; ``(0, None)`` when the file does not exist yet."""
        props = read_properties_file(self.path)
        if props is None:
            return 0, None
        term = _long(self.path, TERM_PERSIST_KEY_TERM, props[TERM_PERSIST_KEY_TERM]) \
            if TERM_PERSIST_KEY_TERM in props else 0
        if not 0 <= term <= MAX_LONG:
            raise PropertiesError(f"{self.path}: {TERM_PERSIST_KEY_TERM}={term} is outside 0..{MAX_LONG} "
                                  "(not a DLedger term; restore the file from a healthy member's term or its .bak)")
        vote = props.get(TERM_PERSIST_KEY_VOTE_FOR) or None
        return term, vote

    def save(self, curr_term: int, vote_for: str | None) -> None:
        """Durably record the term and vote (fsync of the file and its directory)."""
        if type(curr_term) is not int or not 0 <= curr_term <= MAX_LONG:
            raise ValueError(f"{self.path}: refusing to persist term {curr_term!r} (outside 0..{MAX_LONG})")
        os.makedirs(self.default_path, exist_ok=True)
        write_properties_file(self.path, [(TERM_PERSIST_KEY_VOTE_FOR, vote_for or ""),
                                          (TERM_PERSIST_KEY_TERM, curr_term)])


@dataclass
class CheckpointFile:
    """``endIndex`` / ``committedIndex`` of the file store: the ``checkpoint`` file."""

    default_path: Path

    def __post_init__(self) -> None:
        self.default_path = Path(self.default_path)

    @property
    def path(self) -> Path:
        return self.default_path / CHECK_POINT_FILE

    def load_committed_index(self) -> int | None:
        """The persisted committed index, or ``None`` (no file / no key / empty value)."""
        props = read_properties_file(self.path)
        if props is None:
            return None
        value = props.get(COMMITTED_INDEX_KEY, "").strip()
        return _long(self.path, COMMITTED_INDEX_KEY, value) if value else None

    def save(self, end_index: int, committed_index: int) -> None:
        write_properties_file(self.path, [(COMMITTED_INDEX_KEY, committed_index),
                                          (END_INDEX_KEY, end_index)])
