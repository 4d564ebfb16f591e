"""Errors raised by the DLedger file store.

Every error about bytes on disk names the file and the offset, so an operator can find the
damage with ``xxd -s``. ``EntryCorruptionError`` (from :mod:`dledger.entry`) is re-exported:
the store raises it for corrupt committed data found during recovery or reads.
"""
from __future__ import annotations

from dledger.entry import EntryCorruptionError

__all__ = [
    "DLedgerStoreError", "StoreLayoutError", "DiskFullError", "EntryCorruptionError",
    "IndexOutOfRangeError", "AppendMismatchError", "CommittedTruncationError",
]


class DLedgerStoreError(Exception):
    """Base class of the store's own errors."""


class StoreLayoutError(DLedgerStoreError):
    """The directory does not hold a well-formed file list (sizes, names, gaps)."""


class DiskFullError(DLedgerStoreError):
    """A write failed with ENOSPC (or the store was marked full); nothing was appended."""


class IndexOutOfRangeError(DLedgerStoreError, IndexError):
    """An entry index outside ``[ledger_begin_index, ledger_end_index]``."""


class AppendMismatchError(DLedgerStoreError):
    """A follower entry would not land at its own index/pos, or the lists disagree."""


class CommittedTruncationError(DLedgerStoreError):
    """Refused: the operation would drop committed entries."""
