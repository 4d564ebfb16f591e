"""``mqupgrade``: the upgrade tool's command line (subcommands dispatch to their modules).

Rules: one argparse subparser per subcommand; each subcommand module exposes
``add_arguments(parser)`` and ``run(args) -> int`` so this file stays a thin dispatcher that the
upgrade-tool work can extend (``inspect``, ``plan``, ``apply``) without touching the others.
"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mqupgrade", description="RocketMQ master/slave -> DLedger upgrade tool")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    from upgrade import apply as apply_cli, inspect as inspect_cli, plan as plan_cli, reseed as reseed_cli
    from upgrade.validate import cli as validate_cli

    for name, mod in (("inspect", inspect_cli), ("plan", plan_cli), ("apply", apply_cli), ("reseed", reseed_cli)):
        mod.add_arguments(sub.add_parser(name, help=mod.HELP, description=mod.HELP))
    validate_cli.add_arguments(sub.add_parser("validate", help=validate_cli.HELP, description=validate_cli.HELP))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.command == "validate":
        from upgrade.validate import cli as validate_cli

        return validate_cli.run(args)
    if args.command in ("inspect", "plan", "apply", "reseed"):
        import importlib

        return importlib.import_module(f"upgrade.{args.command}").run(args)
    return 1  # pragma: no cover (argparse rejects unknown commands)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
