"""Exceptions of the message store, each naming the file and offset it is about.

Rules:
- Bad bytes are never silently skipped: the reader raises (or returns a failed DispatchRequest
  that the caller turns into one of these) with enough context to find the bytes with ``xxd``.
- ``MessageFormatError`` is the codec's complaint about one record (pure, no file known);
  ``StoreCorruptionError`` is the store's verdict that a *committed* region is damaged, which
  stops the store rather than truncating acknowledged data.
"""
from __future__ import annotations


class StoreError(Exception):
    """Base class of every store error."""


class MessageFormatError(StoreError, ValueError):
    """A commitlog record (or a message to encode) violates the RocketMQ format."""

    def __init__(self, message: str, offset: int | None = None) -> None:
        self.offset = offset
        super().__init__(message if offset is None else f"{message} (at offset {offset})")


class StoreCorruptionError(StoreError):
    """Committed data is damaged: names the file and the offset inside it."""

    def __init__(self, path: str, file_offset: int, physical_offset: int, reason: str) -> None:
        self.path = path
        self.file_offset = file_offset
        self.physical_offset = physical_offset
        self.reason = reason
        super().__init__(
            f"corrupt record in {path} at file offset {file_offset} "
            f"(physical offset {physical_offset}): {reason}"
        )


class StoreLayoutError(StoreError):
    """Files on disk do not form a valid MappedFileQueue (wrong size, gap, bad name)."""
