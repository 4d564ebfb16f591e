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
import re
from pathlib import Path
from typing import Iterable, Iterator, Mapping

from dledger.store.safefile import write_file_safely

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


class PropertiesError(ValueError):
    """A properties file could not be parsed (names the file)."""


def parse_properties(text: str, source: str = "<string>") -> dict[str, str]:
    """Parse Java-properties text (``java.util.Properties.load`` semantics; later keys win)."""
    return {k: v for k, v, _ in parse_properties_lines(text, source)}


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
        return parse_properties(text, str(candidate))
    if errors:
        raise PropertiesError("; ".join(errors))
    return None


def write_properties_file(path: str | os.PathLike[str],
                          items: Mapping[str, object] | Iterable[tuple[str, object]]) -> None:
    write_file_safely(path, format_properties(items))


# ---------------------------------------------------------------------------------------------
# The one Java-properties parser of the project (broker confs and upgrade tools use it too,
# through broker.config.java_properties, which adds the conf-error type and Properties.store escaping).

_WS = " \t\f"


def parse_properties_lines(text: str, source: str = "<string>") -> list[tuple[str, str, int]]:
    """``(key, value, first line number)`` for every property in ``text``, in order (later
    ones win in a dict). Errors are :class:`PropertiesError` naming ``source:line``."""
    result: list[tuple[str, str, int]] = []
    for lineno, line in _logical_lines(text):
        key_raw, rest = _split_key_value(line)
        where = f"{source}:{lineno}"
        result.append((_unescape(key_raw, where), _unescape(rest, where), lineno))
    return result


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """Join continuation lines; yields (first line number, logical line) without comments.
    Only CR, LF and CRLF end a line (``str.splitlines`` would also split on VT, FS, U+2028...)."""
    lines = re.split(r"\r\n|\r|\n", text)
    i = 0
    while i < len(lines):
        start, line = i + 1, lines[i].lstrip(_WS)
        i += 1
        if not line or line[0] in "#!":
            continue
        while _ends_with_continuation(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip(_WS)
            i += 1
        if _ends_with_continuation(line):  # continuation at end of file: Java drops the backslash
            line = line[:-1]
        yield start, line


def _ends_with_continuation(line: str) -> bool:
    n = len(line) - len(line.rstrip("\\"))
    return n % 2 == 1


def _split_key_value(line: str) -> tuple[str, str]:
    """The key ends at the first unescaped ``=``, ``:`` or whitespace; one ``=``/``:`` may follow
    whitespace; whitespace before the value is dropped."""
    i, n = 0, len(line)
    while i < n:
        c = line[i]
        if c == "\\":
            i += 2
            continue
        if c in "=:" or c in _WS:
            break
        i += 1
    key = line[:i]
    j = i
    while j < n and line[j] in _WS:
        j += 1
    if j < n and line[j] in "=:" and (j == i or line[i] in _WS):
        j += 1
        while j < n and line[j] in _WS:
            j += 1
    return key, line[j:]


def _unescape(s: str, where: str) -> str:
    if "\\" not in s:
        return s
    out: list[str] = []
    i = 0
    while i < len(s):
        c = s[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        if i + 1 >= len(s):
            i += 1
            continue
        n = s[i + 1]
        if n == "u":
            digits = s[i + 2:i + 6]
            if len(digits) != 4 or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise PropertiesError(f"{where}: malformed \\uxxxx escape {s[i:i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(n, n))
            i += 2
    # \uXXXX pairs may spell a surrogate pair (Java strings are UTF-16)
    return "".join(out).encode("utf-16", "surrogatepass").decode("utf-16")
