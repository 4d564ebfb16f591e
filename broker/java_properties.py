"""Java ``Properties`` text: ``java.util.Properties.load`` parsing and ``store`` escaping.

Rules:
- Syntax is ``java.util.Properties.load``: ``key=value``, ``key:value`` or ``key value``;
  ``#``/``!`` comment lines; a line ending in an odd number of backslashes continues on the next
  (whose leading whitespace is dropped); escapes ``\\t \\n \\r \\f \\uXXXX`` and ``\\<c>`` -> ``c``;
  whitespace around keys and before values is dropped.
- :func:`escape_property` is ``Properties.store``'s escaping with non-ASCII as ``\\uXXXX``, so a
  file we write reads back equal in Java (ISO-8859-1) and here (UTF-8).

Theory of operation: :func:`parse_properties` joins logical lines, splits key from value at the
first unescaped separator and unescapes both; errors are :class:`ConfigError` naming file and line.
"""
from __future__ import annotations

import re
from typing import Iterator


class ConfigError(ValueError):
    """A conf key or value is wrong; the message names key, file and line."""


_WS = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """Join continuation lines; yields (first line number, logical line) without comments."""
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


def _unescape(s: str, where: str) -> str:
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
                raise ConfigError(f"{where}: malformed \\uxxxx escape {s[i:i + 6]!r}")
            out.append(chr(int(digits, 16)))
            i += 6
        else:
            out.append(_ESCAPES.get(n, n))
            i += 2
    # \uXXXX pairs may spell a surrogate pair (Java strings are UTF-16)
    return "".join(out).encode("utf-16", "surrogatepass").decode("utf-16")


def parse_properties(text: str, source: str = "<string>") -> list[tuple[str, str, int]]:
    """``(key, value, line)`` for every property in ``text``, in order (later ones win)."""
    result: list[tuple[str, str, int]] = []
    for lineno, line in _logical_lines(text):
        i, key_end = 0, None
        while i < len(line):
            c = line[i]
            if c == "\\":
                i += 2
                continue
            if c in "=:" or c in _WS:
                key_end = i
                break
            i += 1
        if key_end is None:
            key_raw, rest = line, ""
        elif line[key_end] in "=:":
            key_raw, rest = line[:key_end], line[key_end + 1:].lstrip(_WS)
        else:  # whitespace ends the key; one '=' or ':' may still follow
            key_raw, rest = line[:key_end], line[key_end:].lstrip(_WS)
            if rest[:1] in ("=", ":"):
                rest = rest[1:].lstrip(_WS)
        where = f"{source}:{lineno}"
        result.append((_unescape(key_raw, where), _unescape(rest, where), lineno))
    return result


def escape_property(s: str, is_key: bool) -> str:
    """Properties.store's escaping, non-ASCII as \\uXXXX (UTF-16 units).

    Separators and comment characters only need escaping in keys; values keep ``host:port``
    readable (Java reads both forms the same).
    """
    out: list[str] = []
    for i, ch in enumerate(s):
        if ch == " " and (is_key or i == 0):
            out.append("\\ ")
        elif ch == "\\" or (is_key and ch in "=:#!"):
            out.append("\\" + ch)
        elif ch in "\t\n\r\f":
            out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[ch])
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            units = ch.encode("utf-16-be", "surrogatepass")
            out.extend(f"\\u{int.from_bytes(units[j:j + 2], 'big'):04X}" for j in range(0, len(units), 2))
    return "".join(out)


