"""``mqupgrade``: the upgrade tool's command line (subcommands dispatch to their modules).

Rules: one argparse subparser per subcommand; each subcommand module exposes
``add_arguments(parser)`` and ``run(args) -> int`` so this file stays a thin dispatcher that the
upgrade-tool work can extend (``inspect``, ``plan``, ``apply``, ``rollback``) without touching the others.

Ctrl-C (issue 24.8) prints one line and exits 130, never a traceback, at any moment: from the
first line of this module when it is the program (the ``mqupgrade`` console script, or
``python -m upgrade.cli``) until the subcommand runs, SIGINT ends the process at once with that
line (nothing has been changed yet); the subcommand runs under Python's usual KeyboardInterrupt,
which a subcommand may handle itself (``apply`` says "run it again to resume") and :func:`main`
turns into the same one line otherwise. The handler is installed by this module's first lines
with the C ``_signal`` module (``signal``'s enums take milliseconds to import: a SIGINT landing
there was a traceback, seen once in CI). Left: a SIGINT during the interpreter's own start-up,
before any line of ours runs (tens of ms), is Python's.
"""
from __future__ import annotations

import _signal  # the C module: no Python code runs to import it, so the handler below is in place at once
import os
import sys

INTERRUPTED = "mqupgrade: interrupted"


def _exit_now(_signum: int, _frame: object) -> None:
    """SIGINT before a subcommand runs: nothing has been changed; one line, exit 130."""
    os.write(2, f"{INTERRUPTED} before it started; nothing was changed\n".encode())
    os._exit(130)


def _is_program() -> bool:
    return __name__ == "__main__" or os.path.basename(sys.argv[0] if sys.argv else "").startswith("mqupgrade")


if _is_program() and _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
    _signal.signal(_signal.SIGINT, _exit_now)  # until main() hands over to the subcommand

import argparse  # noqa: E402 - after the handler: Ctrl-C during these imports is one line too
import signal  # noqa: E402 - its enums take milliseconds to build: after the handler
from typing import Any, Callable, Sequence  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mqupgrade", description="RocketMQ upgrade tool: master/slave -> DLedger "
                                     "mode; master/slave or DLedger mode -> Controller mode")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    from upgrade import apply as apply_cli, inspect as inspect_cli, plan as plan_cli, reseed as reseed_cli
    from upgrade import rollback as rollback_cli
    from upgrade.validate import cli as validate_cli

    for name, mod in (("inspect", inspect_cli), ("plan", plan_cli), ("apply", apply_cli), ("rollback", rollback_cli),
                      ("reseed", reseed_cli)):
        mod.add_arguments(sub.add_parser(name, help=mod.HELP, description=mod.HELP))
    validate_cli.add_arguments(sub.add_parser("validate", help=validate_cli.HELP, description=validate_cli.HELP))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    previous = signal.getsignal(signal.SIGINT)
    if _is_program() and previous in (signal.default_int_handler, _exit_now):
        signal.signal(signal.SIGINT, _exit_now)  # imports and parsing: nothing is changed yet
    try:
        args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
        if args.command == "validate":
            from upgrade.validate import cli as validate_cli

            return _run(validate_cli.run, args, previous)
        if args.command in ("inspect", "plan", "apply", "rollback", "reseed"):
            import importlib

            return _run(importlib.import_module(f"upgrade.{args.command}").run, args, previous)
        return 1  # pragma: no cover (argparse rejects unknown commands)
    except KeyboardInterrupt:
        print(f"{INTERRUPTED}; run it again (apply resumes from its journal)", file=sys.stderr)
        return 130


def _run(run: Callable[[argparse.Namespace], int], args: argparse.Namespace, previous: Any) -> int:
    """Run a subcommand under Python's KeyboardInterrupt (it may clean up or explain itself)."""
    if signal.getsignal(signal.SIGINT) is _exit_now:
        signal.signal(signal.SIGINT, previous if previous is not _exit_now else signal.default_int_handler)
    return run(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
