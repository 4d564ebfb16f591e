"""The operator's "yes" before a journaled command changes stores (``mqupgrade apply``, ``rollback``).

Rules: without ``--yes`` the command asks on the terminal and goes on only on ``yes`` (any case,
surrounding blanks ignored); without a terminal (stdin not a tty) it does not ask and does not go
on. Each refusal is one line on stderr naming the command, and the command exits 1.

Theory of operation: one function, so both commands ask and refuse in the same words.
"""
from __future__ import annotations

import sys


def confirmed(command: str, verb: str) -> bool:
    """Ask ``<verb> this plan? type yes:``; False (after one line on stderr) unless the answer is yes."""
    if not sys.stdin.isatty():
        print(f"mqupgrade {command}: not confirmed (pass --yes to {verb} without a terminal)", file=sys.stderr)
        return False
    if input(f"{verb} this plan? type yes: ").strip().lower() != "yes":
        print(f"mqupgrade {command}: not confirmed", file=sys.stderr)
        return False
    return True
