"""`deepcontext export FILE --format F [-o OUT]`: the profile in another tool's format."""

from __future__ import annotations

import os
import sys

from ..errors import UserError

FORMATS = ("hatchet", "pprof", "speedscope", "collapsed", "chrome", "csv")


# formats whose tools add values up the tree (flat -> cumulative): by default they leave out the
# merge statistics that do not add up (a merged profile's M:min, M:max, M:std, M:imbalance)
SUMMED = ("pprof", "speedscope", "collapsed")


def _not_additive(name: str, metrics) -> bool:
    base, _, stat = name.rpartition(":")
    return stat in ("min", "max", "std", "imbalance") and base in metrics


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
        "collapsed all but a merged profile's min/max/std/imbalance statistics)",
    )
    p.set_defaults(func=main)


def main(args) -> int:
    from ..exporters import exporter, suffix
    from ..render import load_tree

    wanted = [m.strip() for v in args.metric for m in v.split(",") if m.strip()]

    def choose(info):
        for m in wanted:
            if m not in info.metrics:
                known = ", ".join(info.metrics) or "none"
                raise UserError(f"unknown metric {m!r} (this profile has: {known})")
        if wanted:
            return list(dict.fromkeys(wanted))
        if not info.metrics:
            raise UserError(f"{info.path}: the profile has no metrics")
        main_metric = info.default_metric()
        names = [main_metric] + [m for m in info.metrics if m != main_metric]
        if args.format in SUMMED:
            names = [m for m in names if not _not_additive(m, info.metrics)]
        return names

    tree = load_tree(args.file, choose)
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
