"""No shipped module calls ``asyncio.wait_for`` (issue 21): it loses cancellations on 3.10/3.11.

Every bounded wait in ``broker/``, ``dledger/`` and ``upgrade/`` goes through ``dledger.aio.wait_for``
(re-exported as ``broker.tasks.wait_for``); see ``dledger/aio.py`` for the race and
``tests/dledger/test_aio.py`` for the test that shows it.
"""
from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("broker", "dledger", "namesrv", "upgrade")
ALLOWED = {REPO / "dledger" / "aio.py"}  # the helper itself delegates to it on 3.12+


def _calls(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "wait_for" and \
                isinstance(node.value, ast.Name) and node.value.id == "asyncio":
            lines.append(node.lineno)
        if isinstance(node, ast.ImportFrom) and node.module == "asyncio" and \
                any(a.name == "wait_for" for a in node.names):
            lines.append(node.lineno)
    return lines


def test_no_shipped_module_uses_asyncio_wait_for() -> None:
    found = [f"{p.relative_to(REPO)}:{n}" for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))
             if p not in ALLOWED for n in _calls(p)]
    assert not found, ("asyncio.wait_for can swallow a cancellation on Python 3.10/3.11 and hang a shutdown; "
                       f"use broker.tasks.wait_for / dledger.aio.wait_for instead: {found}")
    assert _calls(REPO / "dledger" / "aio.py"), "the scan finds nothing at all: it is broken"
