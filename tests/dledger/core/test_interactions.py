"""Runs every interaction script in ``testdata/`` (see ``interaction.py`` for the format).

Rules
-----
- One test per script; a mismatch prints the command, the expected and the actual output.
- ``REWRITE=1 .venv/bin/python -m pytest tests/dledger/core/test_interactions.py`` rewrites the
  expectations; review the diff against the paper before committing it.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.dledger.core.interaction import run_script

TESTDATA = Path(__file__).parent / "testdata"
SCRIPTS = sorted(TESTDATA.glob("*.txt"))


def test_there_are_scripts() -> None:
    assert len(SCRIPTS) >= 5


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_interaction(path: Path) -> None:
    errors = run_script(path)
    assert not errors, "\n\n".join(errors)
