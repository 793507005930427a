"""`deepcontext export FILE --format F [-o OUT]`: the profile in another tool's format."""

from __future__ import annotations

import os
import sys

from ..errors import UserError
from ..reader import Combine, combine_rule

FORMATS = ("hatchet", "pprof", "speedscope", "collapsed", "chrome", "csv")


# formats whose tools add values up the tree (flat -> cumulative): they cannot hold the merge
# statistics that do not add up (a merged profile's M:min, M:max, M:std, M:imbalance), and those
# that add up everything they hold cannot show wall time as a part of the elapsed time either
# (speedscope can: it has a profile per thread)
SUMMED = ("pprof", "speedscope", "collapsed")
SUMMED_ACROSS_THREADS = ("pprof", "collapsed")


def _unfit(fmt: str, name: str, metrics) -> str | None:
    """Why `fmt` cannot carry metric `name` right (reader.combine_rule), or None."""
    rule = combine_rule(name, metrics)
    if fmt in SUMMED and rule is Combine.STORED:
        return f"{name} is a statistic across merged inputs that does not add up"
    if fmt in SUMMED_ACROSS_THREADS and rule is Combine.PER_THREAD:
        return f"{name} of all threads would add up to more than the elapsed time"
    return None


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "export",
        help="convert a profile to hatchet, pprof, speedscope, collapsed stacks, chrome or csv",
        description="Write a .dctx profile in another tool's format, frames named as in the "
        "report, every metric carried where the format allows (collapsed stacks: the first "
        "metric only).",
    )
    p.add_argument("file", help="a .dctx profile")
    p.add_argument("--format", "-f", choices=FORMATS, required=True)
    p.add_argument(
        "-o", "--output", metavar="OUT", help="output file (default: FILE with the format's suffix)"
    )
    p.add_argument(
        "--metric",
        "-m",
        action="append",
        default=[],
        metavar="M",
        help="metrics to carry (repeat or comma-separate; default: all, for pprof, speedscope and "
        "collapsed all but a merged profile's min/max/std/imbalance statistics, for pprof and "
        "collapsed also all but wall_time)",
    )
    p.add_argument(
        "--import-frames",
        action="store_true",
        help="keep the frames of Python's import system (<frozen importlib._bootstrap>), which "
        "are spliced out by default as in `deepcontext report`",
    )
    p.set_defaults(func=main)


def main(args) -> int:
    from ..exporters import exporter, suffix
    from ..render import load_tree, view

    wanted = [m.strip() for v in args.metric for m in v.split(",") if m.strip()]

    def choose(info):
        for m in wanted:
            if m not in info.metrics:
                known = ", ".join(info.metrics) or "none"
                raise UserError(f"unknown metric {m!r} (this profile has: {known})")
        if wanted:
            for m in wanted:
                why = _unfit(args.format, m, info.metrics)
                if why and combine_rule(m, info.metrics) is Combine.STORED:
                    raise UserError(
                        f"{why}: {args.format} adds values up; export it with hatchet or csv"
                    )
                if why:  # asked for: exported, with what its total means
                    print(f"deepcontext: note: {why} ({args.format} adds them up)", file=sys.stderr)
            return list(dict.fromkeys(wanted))
        if not info.metrics:
            raise UserError(f"{info.path}: the profile has no metrics")
        main_metric = info.default_metric()
        names = [main_metric] + [m for m in info.metrics if m != main_metric]
        return [m for m in names if not _unfit(args.format, m, info.metrics)]

    tree = view(load_tree(args.file, choose), import_frames=args.import_frames)
    metrics = list(tree.metrics)
    out = args.output
    if out is None:
        base = args.file[:-5] if args.file.endswith(".dctx") else args.file
        out = base + suffix(args.format)
    mod = exporter(args.format)
    if out == "-":
        mod.export(tree, metrics, sys.stdout.buffer)
        return 0
    tmp = f"{out}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            mod.export(tree, metrics, f)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    print(f"deepcontext: wrote {out}", file=sys.stderr)
    return 0
