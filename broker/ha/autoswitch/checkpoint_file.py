"""Apache RocketMQ 5.x ``CheckpointFile``: a small text file of entries, one a line, with a count
and a CRC, written with a ``.bak`` of the previous content.

Format (byte-compatible with ``org.apache.rocketmq.common.utils.CheckpointFile`` of 5.3.3)::

    <number of entries>\\n
    <crc32>\\n
    <entry line>\\n
    <entry line>\\n
    ...

- ``crc32`` is ``java.util.zip.CRC32`` of the UTF-8 entry lines, each followed by ``\\n``, masked
  with ``0x7FFFFFFF`` (``UtilAll.crc32``), written in decimal. A CRC of ``0`` is not checked.
- Lines end with ``\\n`` (``System.lineSeparator()`` on Linux). The reader, like Java's
  ``BufferedReader.readLine``, also accepts ``\\r\\n`` and ``\\r`` and checks the CRC over the lines
  re-joined with ``\\n``; a last line without a terminator is a line.
- Every entry line is counted; a line the entry parser returns ``None`` for (Apache's
  serializers do that for a line that is not an entry) still counts in the CRC but not as an
  entry, so the count check fails, as in Apache.

Rules:
- :func:`encode_checkpoint` / :func:`decode_checkpoint` are pure (bytes in, bytes/lines out).
  Decoding is bounded: at most :data:`MAX_CHECKPOINT_BYTES` are read and a line longer than
  :data:`MAX_LINE_CHARS` is corrupt, so a hostile file cannot make us allocate without limit.
  Numbers are parsed as Java's ``Integer.parseInt`` would (an optional sign and ASCII digits in
  the int range; Python's ``int()`` would also take spaces and underscores).
- :class:`CheckpointFile` is the only I/O. ``write`` is :func:`dledger.store.safefile.write_file_safely`
  (``<f>.tmp`` fsynced, previous ``<f>`` copied to ``<f>.bak`` and fsynced, then an atomic rename
  and a directory fsync): Apache's ``MixAll.string2File`` writes ``<f>.bak`` then overwrites
  ``<f>`` in place, so a crash could tear ``<f>``; ours never does, and the end state (``<f>``
  new, ``<f>.bak`` previous) is Apache's.
- ``read`` is Apache's fallback: the main file, and the ``.bak`` when the main file is missing,
  holds no entries, or is corrupt. Apache falls back only on ``IOException`` (count or CRC
  mismatch, undecodable UTF-8); a torn number line raises ``NumberFormatException`` there and
  stops the broker without naming the file. We treat every malformed main file as Apache treats
  an ``IOException`` (fall back to the ``.bak``) and say so in the result (``source``). If the
  ``.bak`` is corrupt too, or missing (Apache then returns no entries: silent loss),
  :class:`CheckpointFileError` names the files and the fix.
- Writing no entries: Apache's ``write`` returns without touching the files, so an emptied
  cache comes back from disk at the next start. Ours removes ``<f>`` and ``<f>.bak`` (and fsyncs
  the directory): both readers then see an empty cache, and emptied entries never return.

Theory of operation: the entry type is the caller's (a :class:`LineCodec` turns an entry into a
line and back); this module only knows lines, counts and the CRC.
"""
from __future__ import annotations

import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, Optional, Protocol, Sequence, TypeVar

from dledger.store.safefile import fsync_dir, write_file_safely

MAX_CHECKPOINT_BYTES = 16 * 1024 * 1024
MAX_LINE_CHARS = 4096
NOT_CHECK_CRC_MAGIC_CODE = 0
INT_MIN, INT_MAX = -(2 ** 31), 2 ** 31 - 1
LONG_MIN, LONG_MAX = -(2 ** 63), 2 ** 63 - 1

_JAVA_INT = re.compile(r"[+-]?[0-9]+\Z")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")

T = TypeVar("T")


class CheckpointFileError(ValueError):
    """A checkpoint file (and its ``.bak``) that cannot be read; the message names the files."""


class CorruptCheckpoint(ValueError):
    """One file's content is not a valid checkpoint (the reason, without the path)."""


def parse_java_int(text: str, lo: int = INT_MIN, hi: int = INT_MAX) -> int:
    """``Integer.parseInt`` / ``Long.parseLong`` (with the matching bounds); ValueError otherwise."""
    if len(text) > 21 or not _JAVA_INT.match(text):
        raise ValueError(f"not a number: {text[:40]!r}")
    value = int(text)
    if not lo <= value <= hi:
        raise ValueError(f"out of range: {text!r}")
    return value


def java_crc32(data: bytes) -> int:
    """``UtilAll.crc32``: CRC-32 masked to a non-negative Java int."""
    return zlib.crc32(data) & 0x7FFFFFFF


class LineCodec(Protocol[T]):
    """Apache's ``CheckpointSerializer``: an entry to one line and back (None: not an entry)."""

    def to_line(self, entry: T) -> str: ...

    def from_line(self, line: str) -> Optional[T]: ...


def encode_checkpoint(lines: Sequence[str]) -> bytes:
    """The file content for these entry lines (empty lines are left out, as Apache does)."""
    body = "".join(line + "\n" for line in lines if line)
    crc = java_crc32(body.encode("utf-8"))
    return f"{len(lines)}\n{crc}\n{body}".encode("utf-8")


def split_java_lines(text: str) -> list[str]:
    """``BufferedReader.readLine`` until EOF: ``\\n``, ``\\r\\n`` or ``\\r`` end a line."""
    if not text:
        return []
    parts = _LINE_BREAK.split(text)
    if parts and parts[-1] == "":
        parts.pop()
    return parts


def decode_checkpoint(data: bytes, codec: LineCodec[T]) -> list[T]:
    """The entries of one file's content; :class:`CorruptCheckpoint` says why it is not valid."""
    if len(data) > MAX_CHECKPOINT_BYTES:
        raise CorruptCheckpoint(f"{len(data)} bytes, more than the {MAX_CHECKPOINT_BYTES} a checkpoint may hold")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorruptCheckpoint(f"not UTF-8 ({e.reason} at byte {e.start})") from None
    lines = split_java_lines(text)
    if len(lines) < 2:
        raise CorruptCheckpoint("no count and CRC lines (empty or torn file)")
    for line in lines:
        if len(line) > MAX_LINE_CHARS:
            raise CorruptCheckpoint(f"a line of {len(line)} characters (at most {MAX_LINE_CHARS})")
    try:
        expected_lines = parse_java_int(lines[0])
        expected_crc = parse_java_int(lines[1])
    except ValueError as e:
        raise CorruptCheckpoint(f"bad count or CRC line: {e}") from None
    entries: list[T] = []
    for line in lines[2:]:
        try:
            entry = codec.from_line(line)
        except ValueError as e:
            raise CorruptCheckpoint(f"bad entry line {line[:40]!r}: {e}") from None
        if entry is not None:
            entries.append(entry)
    truth_crc = java_crc32("".join(line + "\n" for line in lines[2:]).encode("utf-8"))
    if len(entries) != expected_lines:
        raise CorruptCheckpoint(f"Expect {expected_lines} entries, only found {len(entries)} entries")
    if expected_crc != NOT_CHECK_CRC_MAGIC_CODE and truth_crc != expected_crc:
        raise CorruptCheckpoint(f"Entries crc32 not match, file={expected_crc}, truth={truth_crc}")
    return entries


@dataclass(frozen=True)
class CheckpointRead(Generic[T]):
    """What :meth:`CheckpointFile.read` found: the entries and which file they came from
    (``"main"``, ``"bak"`` or ``"none"``); ``main_error`` is why the main file was passed over."""

    entries: list[T]
    source: str
    main_error: Optional[str] = None


def _read_bounded(path: Path) -> Optional[bytes]:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CHECKPOINT_BYTES + 1)
    except FileNotFoundError:
        return None
    return data


class CheckpointFile(Generic[T]):
    """One checkpoint file on disk and its ``.bak`` (see the module rules)."""

    def __init__(self, path: str | os.PathLike[str], codec: LineCodec[T]) -> None:
        self.path = Path(path)
        self.codec = codec

    @property
    def bak_path(self) -> Path:
        return self.path.with_name(self.path.name + ".bak")

    def _read_one(self, path: Path) -> Optional[list[T]]:
        data = _read_bounded(path)
        if data is None:
            return None
        return decode_checkpoint(data, self.codec)

    def read(self) -> CheckpointRead[T]:
        main_error: Optional[str] = None
        try:
            entries = self._read_one(self.path)
            if entries:
                return CheckpointRead(entries, "main")
        except CorruptCheckpoint as e:
            main_error = str(e)
        try:
            bak = self._read_one(self.bak_path)
        except CorruptCheckpoint as e:
            first = f"{self.path}: {main_error}; " if main_error else f"{self.path}: no entries; "
            raise CheckpointFileError(
                f"cannot read the checkpoint: {first}{self.bak_path}: {e}. Both copies are unusable: "
                f"restore {self.path.name} from a backup, or, if this replica's log may be rebuilt "
                f"from its master, delete both files (the broker then starts with no epochs)"
            ) from None
        if bak is None:
            if main_error is not None:
                raise CheckpointFileError(
                    f"cannot read the checkpoint {self.path}: {main_error}, and there is no "
                    f"{self.bak_path.name} to fall back to. Restore it from a backup, or, if this "
                    f"replica's log may be rebuilt from its master, delete it"
                )
            return CheckpointRead([], "none")
        return CheckpointRead(bak, "bak" if bak or main_error else "none", main_error)

    def write(self, entries: Sequence[T]) -> None:
        if not entries:
            self.clear()
            return
        text = encode_checkpoint([self.codec.to_line(e) for e in entries]).decode("utf-8")
        write_file_safely(self.path, text)

    def clear(self) -> None:
        """Remove ``<f>`` then ``<f>.bak`` (an empty checkpoint, see the module rules)."""
        removed = False
        for p in (self.path, self.bak_path):
            try:
                p.unlink()
                removed = True
            except FileNotFoundError:
                pass
        if removed:
            fsync_dir(self.path.parent)
