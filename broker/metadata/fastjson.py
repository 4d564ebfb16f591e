"""Reading what fastjson 1.x writes, writing what both fastjson and strict JSON readers accept.

Rules (reference §2.5):
- fastjson writes non-String map keys unquoted: ``{"offsetTable":{"T@G":{0:42}}}`` or, pretty,
  ``{\n\t"offsetTable":{2:3\n\t}\n}``. :func:`loads` quotes every bare object key (a run of
  ``[A-Za-z0-9_$.+-]``) before handing the text to :func:`json.loads`; strings are copied
  verbatim, so a ``{1:2}`` inside a string value is never touched. Keys therefore always come
  back as ``str``; the managers convert them to int where RocketMQ's map is keyed by int.
- :func:`dumps` writes strict JSON, pretty like fastjson's ``prettyFormat`` (tab indent,
  ``"key":value``), keys sorted as fastjson sorts bean properties.
- Anything else malformed raises :class:`ValueError` with line and column.
"""
from __future__ import annotations

import json
from typing import Any

_BARE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$.+-")


def normalise(text: str) -> str:
    """Quote bare object keys; everything else is copied unchanged."""
    out: list[str] = []
    stack: list[str] = []  # "{" or "["
    expect_key = False
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
            expect_key = False
            continue
        if c in " \t\r\n":
            out.append(c)
            i += 1
            continue
        if c in "{[":
            stack.append(c)
            expect_key = c == "{"
        elif c in "}]":
            if stack:
                stack.pop()
            expect_key = False
        elif c == ",":
            expect_key = bool(stack) and stack[-1] == "{"
        elif expect_key and c in _BARE:
            j = i
            while j < n and text[j] in _BARE:
                j += 1
            out.append(json.dumps(text[i:j]))
            i = j
            expect_key = False
            continue
        else:
            expect_key = False
        out.append(c)
        i += 1
    return "".join(out)


def loads(text: str) -> Any:
    """Parse fastjson output (or strict JSON)."""
    try:
        return json.loads(normalise(text))
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON even after quoting bare keys: {exc.msg} at line {exc.lineno} column {exc.colno}") from None


def dumps(obj: Any) -> str:
    """Strict, pretty JSON in fastjson's layout."""
    return json.dumps(obj, indent="\t", sort_keys=True, ensure_ascii=False, separators=(",", ":"))
