"""``mqupgrade validate <store-root>... [--master URL] [--json out] [--png out] [--range-size B]``.

Rules: exit 0 only when every check holds, 2 when violations were found, 1 with a single line
on stderr for unusable input (missing directory, not a store, bad option value). The readable
summary goes to stdout, progress to stderr, the full report to ``--json`` and the picture to
``--png``.

Theory of operation: argparse -> ``job.run_validation`` (which builds its own Spark session
for ``--master``) -> report/picture writers.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

HELP = ("prove an upgraded store intact with a PySpark job (continuity across every divide, CQs, replicas, "
        "the epoch file of a Controller-mode store)")


def _size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    mult = units.get(t[-1:], 1)
    if t[-1:] in units:
        t = t[:-1]
    try:
        value = int(t) * mult
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a byte size: {text!r}") from None
    if value < 4096:
        raise argparse.ArgumentTypeError("range size must be at least 4096 bytes")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("roots", nargs="+", metavar="STORE_ROOT", help="store root of each replica (storePathRootDir)")
    p.add_argument("--master", default="local[*]", help="Spark master URL (default local[*]; e.g. spark://host:7077)")
    p.add_argument("--json", dest="json_out", metavar="FILE", help="write the full JSON report here")
    p.add_argument("--png", dest="png_out", metavar="FILE", help="write a picture of the offset space here")
    p.add_argument("--range-size", type=_size, default=64 << 20, metavar="BYTES",
                   help="bytes per scan task (default 64MiB; accepts k/m/g suffixes)")
    p.add_argument("--no-crc", action="store_true", help="skip body CRC verification (faster)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


MISSING_EXTRA = ("mqupgrade validate: error: the validator needs PySpark, NumPy (and Matplotlib for --png), "
                 "which are not all installed; "
                 "install them with: pip install 'rocketmq-dledger-py[validate]'")


def run(args: argparse.Namespace, spark: Any = None) -> int:
    try:  # the validate extra (pyproject): a broker-only install has none of it
        import numpy  # noqa: F401
        import pyspark  # noqa: F401

        if args.png_out:
            import matplotlib  # noqa: F401
    except ImportError as exc:
        print(f"{MISSING_EXTRA} ({exc})", file=sys.stderr)
        return 1
    from upgrade.validate.job import run_validation
    from upgrade.validate.layout import UnusableInput
    from upgrade.validate.report import exit_code, summary_text

    try:
        report = run_validation(args.roots, spark=spark, master=args.master, range_size=args.range_size,
                                progress=not args.quiet, check_crc=not args.no_crc)
    except UnusableInput as exc:
        print(f"mqupgrade validate: error: {exc}", file=sys.stderr)
        return 1
    print(summary_text(report))
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=1, default=str)
    if args.png_out:
        from upgrade.validate.picture import render_png

        render_png(report, args.png_out)
    return exit_code(report)


def main(argv: Sequence[str] | None = None, spark: Any = None) -> int:
    parser = argparse.ArgumentParser(prog="mqupgrade validate", description=HELP)
    add_arguments(parser)
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:  # argparse: usage errors exit 2; we promise 1 for unusable input
        return 1 if exc.code else 0
    return run(args, spark=spark)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
