"""Java-properties text files with DLedger's safe write (``IOUtils.string2File``).

Rules
-----
* Written as ``key=value\\n`` per entry, no escaping, in the order given: exactly what
  ``IOUtils.properties2String`` produces (callers pass Java's hash order to stay identical).
* Read with ``java.util.Properties.load`` rules: ``#``/``!`` comments, ``=``, ``:`` or
  whitespace separators, backslash escapes (``\\t \\n \\r \\f \\uXXXX``) and line continuations.
* Safe write (:func:`~dledger.store.safefile.write_file_safely`): the text goes to ``<f>.tmp``
  (fsynced), the previous content of ``<f>`` is copied to ``<f>.bak``, then ``<f>.tmp`` replaces
  ``<f>`` and the directory is fsynced. DLedger deletes ``<f>`` before the rename; we use an
  atomic ``os.replace`` so there is never a moment without ``<f>``. The end state (``<f>`` new,
  ``<f>.bak`` previous) is the same.
* Load falls back to ``<f>.bak`` when ``<f>`` is missing or unreadable (a Java writer may
  have crashed between its delete and its rename).

These files hold Raft's persistent state (``currterm``: the vote), so the fsyncs are part of
the contract, not an optimisation to drop.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Mapping

from dledger.store.safefile import write_file_safely

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


class PropertiesError(ValueError):
    """A properties file could not be parsed (names the file)."""


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java-properties text (``java.util.Properties.load`` semantics)."""
    out: dict[str, str] = {}
    for logical in _logical_lines(text):
        key, value = _split_key_value(logical)
        out[_unescape(key)] = _unescape(value)
    return out


def format_properties(items: Mapping[str, object] | Iterable[tuple[str, object]]) -> str:
    """``IOUtils.properties2String``: ``key=value\\n`` in the given order; ``None`` values skipped."""
    pairs = items.items() if isinstance(items, Mapping) else items
    return "".join(f"{k}={v}\n" for k, v in pairs if v is not None)


def read_properties_file(path: str | os.PathLike[str]) -> dict[str, str] | None:
    """Parse ``<f>``, falling back to ``<f>.bak``; ``None`` when neither exists."""
    path = Path(path)
    errors: list[str] = []
    for candidate in (path, path.with_name(path.name + ".bak")):
        try:
            text = candidate.read_bytes().decode("utf-8")
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as exc:
            errors.append(f"{candidate}: {exc}")
            continue
        return parse_properties(text)
    if errors:
        raise PropertiesError("; ".join(errors))
    return None


def write_properties_file(path: str | os.PathLike[str],
                          items: Mapping[str, object] | Iterable[tuple[str, object]]) -> None:
    write_file_safely(path, format_properties(items))


# ---------------------------------------------------------------------------------------------


def _logical_lines(text: str) -> Iterable[str]:
    """Natural lines -> logical lines: skip blanks/comments, join backslash continuations."""
    pending: str | None = None
    for raw in text.splitlines():
        line = raw.lstrip(" \t\f")
        if pending is None:
            if not line or line[0] in "#!":
                continue
            pending = ""
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:  # odd number of backslashes: continuation
            pending += line[:-1]
            continue
        yield pending + line
        pending = None
    if pending is not None:
        yield pending


def _split_key_value(line: str) -> tuple[str, str]:
    i, n = 0, len(line)
    while i < n:
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=: \t\f":
            break
        i += 1
    key = line[:i]
    j = i
    while j < n and line[j] in " \t\f":
        j += 1
    if j < n and line[j] in "=:":
        j += 1
        while j < n and line[j] in " \t\f":
            j += 1
    return key, line[j:]


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s
    out: list[str] = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        nxt = s[i + 1]
        if nxt == "u":
            digits = s[i + 2:i + 6]
            if len(digits) != 4 or any(ch not in "0123456789abcdefABCDEF" for ch in digits):
                raise PropertiesError(f"malformed \\uxxxx encoding: {s[i:i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)
