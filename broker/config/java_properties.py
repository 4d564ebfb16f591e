"""Java ``Properties`` text: ``java.util.Properties.load`` parsing and ``store`` escaping.

Rules:
- Syntax is ``java.util.Properties.load``: ``key=value``, ``key:value`` or ``key value``;
  ``#``/``!`` comment lines; a line ending in an odd number of backslashes continues on the next
  (whose leading whitespace is dropped); escapes ``\\t \\n \\r \\f \\uXXXX`` and ``\\<c>`` -> ``c``;
  whitespace around keys and before values is dropped.
- :func:`nearest_key_hint` is how every conf reader of the project (broker, name server,
  controller) says which known key a typo meant: the same key in another case first, else the
  closest by ``difflib`` (cutoff 0.6), else nothing.
- :func:`escape_property` is ``Properties.store``'s escaping with non-ASCII as ``\\uXXXX``, so a
  file we write reads back equal in Java (ISO-8859-1) and here (UTF-8).

Theory of operation: parsing is ``dledger.store.properties.parse_properties_lines`` (one parser for
the project: it joins logical lines, splits key from value at the first unescaped separator and
unescapes both); here errors become :class:`ConfigError` naming file and line.
"""
from __future__ import annotations

import difflib
import os
from typing import Iterable

from dledger.store.properties import PropertiesError, parse_properties_lines


class ConfigError(ValueError):
    """A conf key or value is wrong; the message names key, file and line."""


def parse_properties(text: str, source: str = "<string>") -> list[tuple[str, str, int]]:
    """``(key, value, line)`` for every property in ``text``, in order (later ones win).

    The parser is the project's one (``dledger.store.properties``: DLedger's own state files use
    it too); here a malformed escape becomes a :class:`ConfigError` naming file and line."""
    try:
        return parse_properties_lines(text, source)
    except PropertiesError as exc:
        raise ConfigError(str(exc)) from None


def read_properties_file(path: str | os.PathLike[str], encoding: str = "utf-8") -> dict[str, str]:
    """A conf file as a dict (later keys win). ``encoding``: what wrote it (RocketMQ's
    ``Properties.load(InputStream)`` reads ISO-8859-1; our confs escape non-ASCII, so both agree)."""
    with open(path, encoding=encoding) as fh:
        return {k: v for k, v, _ in parse_properties(fh.read(), str(path))}


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


def nearest_key_hint(key: str, known: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the known key a typo most likely meant, or ``""``."""
    keys = sorted(known)
    lower = {k.lower(): k for k in keys}
    if key.lower() in lower:
        return f"; did you mean {lower[key.lower()]!r}?"
    close = difflib.get_close_matches(key, keys, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""
