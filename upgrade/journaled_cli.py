"""The command line of the journaled commands (``mqupgrade apply``, ``rollback``): the operator's
"yes" before they change stores, and what stopped them as one line and an exit code.

Rules:
- Without ``--yes`` the command asks on the terminal and goes on only on ``yes`` (any case,
  surrounding blanks ignored); without a terminal (stdin not a tty) it does not ask and does not
  go on. Each refusal is one line on stderr naming the command, and the command exits 1.
- What stops a command is one line on stderr, never a traceback: its own refusal exits 2, a plan
  or journal error 1, Ctrl-C 130 with the hint that a rerun resumes (the journal keeps what was
  done).

Theory of operation: two functions, so both commands ask, refuse and stop in the same words.
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


def stopped(command: str, exc: BaseException, refusal: type[Exception]) -> int:
    """One line on stderr for what stopped ``command`` (a ``refusal`` of its own, a plan or journal
    error, or Ctrl-C); returns the exit code (module rules)."""
    if isinstance(exc, KeyboardInterrupt):
        print(f"mqupgrade {command}: interrupted; run it again to resume", file=sys.stderr)
        return 130
    print(f"mqupgrade {command}: {exc}", file=sys.stderr)
    return 2 if isinstance(exc, refusal) else 1
